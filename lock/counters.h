/* counters.h - the lock client's counters (see dlock_stats in dlock_base.h),
 * bumped with atomics by whichever part of the library sees the event; the
 * waits' and holds' histograms recorded by counters.c. */
#ifndef DLOCK_COUNTERS_H
#define DLOCK_COUNTERS_H

#include <stdatomic.h>
#include <stdint.h>

#include "lock/internal.h"

typedef struct dlock_counters {
    _Atomic uint64_t acquired, handoffs, timeouts, renewals, interrupts, lost;
    _Atomic uint64_t redis_errors, connects, orphaned, orphans_dropped;
    _Atomic uint64_t moved, asked, tryagain; /* Redis Cluster redirects (cluster.c) */
    _Atomic uint64_t wait_count, wait_sum_ms, wait_buckets[DLOCK_WAIT_BUCKETS];
    _Atomic uint64_t hold_count, hold_sum_us, hold_buckets[DLOCK_HOLD_BUCKETS];
} dlock_counters;

static inline void dlock__count(_Atomic uint64_t *counter) { atomic_fetch_add(counter, 1); }

/* The first of n histogram bucket bounds (the last, -1, is +Inf) that holds v. */
static inline int dlock__bucket_of(const int *bounds, int n, int64_t v)
{
    int b = 0;
    while (b < n - 1 && v > bounds[b])
        b++;
    return b;
}

/* Counts how an acquisition that began at start_ms ended (its wait, a
 * timeout). Returns rc. */
int dlock__count_wait(dlock_counters *k, int rc, int64_t start_ms);

/* Counts a hold that began at held_since_us (dlock__now_us) and ends now;
 * nothing for 0 (never held, or a multi-lock's part: its hold is the set's). */
void dlock__count_hold(dlock_counters *k, int64_t held_since_us);

/* A snapshot of k for dlock_stats_read. */
void dlock__counters_read(const dlock_counters *k, dlock_stats *s);

#endif
