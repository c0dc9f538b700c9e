/* counters.c - the lock client's counters (counters.h): the histograms of
 * waits and holds, recorded where an acquisition or a hold ends, and read
 * for dlock_stats_read. */
#include "lock/counters.h"

#include "lock/sync.h"

const int dlock_wait_bucket_ms[DLOCK_WAIT_BUCKETS] = {1,   5,    10,   25,   50,    100,
                                                      250, 500, 1000, 2500, 10000, -1};
const int dlock_hold_bucket_us[DLOCK_HOLD_BUCKETS] = {
    100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000,
    1000000, 5000000, 30000000, -1};

static void record_wait(dlock_counters *k, int64_t waited_ms)
{
    int b = dlock__bucket_of(dlock_wait_bucket_ms, DLOCK_WAIT_BUCKETS, waited_ms);
    dlock__count(&k->wait_buckets[b]);
    dlock__count(&k->wait_count);
    atomic_fetch_add(&k->wait_sum_ms, (uint64_t)waited_ms);
}

int dlock__count_wait(dlock_counters *k, int rc, int64_t start_ms)
{
    if (rc == DLOCK_OK || rc == DLOCK_ERR_TIMEOUT)
        record_wait(k, dlock__now_ms() - start_ms);
    if (rc == DLOCK_ERR_TIMEOUT)
        dlock__count(&k->timeouts);
    return rc;
}

void dlock__count_hold(dlock_counters *k, int64_t held_since_us)
{
    if (held_since_us == 0)
        return;
    int64_t us = dlock__now_us() - held_since_us;
    dlock__count(&k->hold_buckets[dlock__bucket_of(dlock_hold_bucket_us, DLOCK_HOLD_BUCKETS,
                                                   us)]);
    dlock__count(&k->hold_count);
    atomic_fetch_add(&k->hold_sum_us, (uint64_t)us);
}

void dlock__counters_read(const dlock_counters *k, dlock_stats *s)
{
    s->acquired = atomic_load(&k->acquired);
    s->handoffs = atomic_load(&k->handoffs);
    s->timeouts = atomic_load(&k->timeouts);
    s->renewals = atomic_load(&k->renewals);
    s->interrupts = atomic_load(&k->interrupts);
    s->lost = atomic_load(&k->lost);
    s->redis_errors = atomic_load(&k->redis_errors);
    s->moved = atomic_load(&k->moved);
    s->asked = atomic_load(&k->asked);
    s->tryagain = atomic_load(&k->tryagain);
    s->connects = atomic_load(&k->connects);
    s->orphaned = atomic_load(&k->orphaned);
    s->orphans_dropped = atomic_load(&k->orphans_dropped);
    s->wait_count = atomic_load(&k->wait_count);
    s->wait_sum_ms = atomic_load(&k->wait_sum_ms);
    for (int i = 0; i < DLOCK_WAIT_BUCKETS; i++)
        s->wait_buckets[i] = atomic_load(&k->wait_buckets[i]);
    s->hold_count = atomic_load(&k->hold_count);
    s->hold_sum_us = atomic_load(&k->hold_sum_us);
    for (int i = 0; i < DLOCK_HOLD_BUCKETS; i++)
        s->hold_buckets[i] = atomic_load(&k->hold_buckets[i]);
}
