/* fence.c - a holder's fencing token raised past a larger one that a store
 * refused it for (dlock_fence_raise). Fences are max(counter + 1, Redis's
 * clock): after that clock stepped forward and back, or the counter was
 * lost (a restart without persistence, an eviction, its expiry while the
 * key was idle), new fences fall below the one a row carries, and the row
 * refuses every live holder until the clock catches up. The raise script
 * (scripts.c) gives the holder a fence above the row's, only while its lease
 * is ours: a holder whose lock moved on stays refused. */
#include <stdint.h>

#include "client.h"
#include "err.h"
#include "sync.h"

/* The raise's arguments for lease l, above floor. */
static dlock_node_raise_args raise_args(const struct dlock_lease *l, int64_t floor)
{
    return (dlock_node_raise_args){.key = l->key,
                                   .target = l->target,
                                   .token = l->token,
                                   .floor = floor,
                                   .keep_ms = dlock_keep_ms(l->lease_ms),
                                   .member = l->kind == DLOCK_LEASE_PERMIT ||
                                             l->kind == DLOCK_LEASE_READ};
}

int dlock_fence_raise_at(dlock_handle *h, int i, int64_t floor)
{
    if (h == NULL || i < 0 || i >= dlock_key_count(h))
        return dlock_fail(DLOCK_ERR_INVALID, "the handle has no key %d", i);
    if (floor >= INT64_MAX) /* the counter can't go past it */
        return dlock_fail(DLOCK_ERR_INVALID, "no fence is above %lld", (long long)floor);
    dlock_client *c = h->client;
    pthread_mutex_lock(&c->mu);
    struct dlock_lease *l = dlock_holder_at(h, i)->lease;
    int st = dlock_holder_state(h, dlock_now_ms());
    int64_t fence = l->fence;
    pthread_mutex_unlock(&c->mu);
    if (st != DLOCK_OK)
        return dlock_fail(st, "lock %s: %s, its fence stays", l->key, dlock_strerror(st));
    if (fence > floor)
        return DLOCK_OK; /* nothing to raise */
    dlock_node_raise_args a = raise_args(l, floor);
    int rc = dlock_quorum_raise(c->nodes, &a, &fence);
    if (rc == DLOCK_OK && fence <= floor) /* never a fence the store would refuse again */
        rc = dlock_fail(DLOCK_ERR_REDIS, "lock %s: the fence raise answered %lld, not above "
                        "%lld", l->key, (long long)fence, (long long)floor);
    pthread_mutex_lock(&c->mu);
    if (rc == DLOCK_OK && fence > l->fence) /* hand-offs of this lease share it from now on */
        l->fence = fence;
    else if (rc == DLOCK_ERR_LOST)
        dlock_wd_lost(c->wd, l);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int dlock_fence_raise(dlock_handle *h, int64_t floor) { return dlock_fence_raise_at(h, 0, floor); }
