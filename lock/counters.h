/* counters.h - the lock client's counters (see dlock_stats in dlock.h),
 * bumped with atomics by whichever part of the library sees the event. */
#ifndef DLOCK_COUNTERS_H
#define DLOCK_COUNTERS_H

#include <stdatomic.h>
#include <stdint.h>

#include "dlock.h"

typedef struct dlock_counters {
    _Atomic uint64_t acquired, handoffs, timeouts, renewals, interrupts, lost;
    _Atomic uint64_t redis_errors, connects, orphaned, orphans_dropped;
    _Atomic uint64_t wait_count, wait_sum_ms, wait_buckets[DLOCK_WAIT_BUCKETS];
    _Atomic uint64_t hold_count, hold_sum_us, hold_buckets[DLOCK_HOLD_BUCKETS];
} dlock_counters;

static inline void dlock_count(_Atomic uint64_t *counter) { atomic_fetch_add(counter, 1); }

/* The first of n histogram bucket bounds (the last, -1, is +Inf) that holds v. */
static inline int dlock_bucket_of(const int *bounds, int n, int64_t v)
{
    int b = 0;
    while (b < n - 1 && v > bounds[b])
        b++;
    return b;
}

#endif
