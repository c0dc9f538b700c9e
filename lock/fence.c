/* fence.c - a holder's fencing token raised past a larger one that a store
 * refused it for (dlock_fence_raise), only while its lease is still its own:
 * for fences that went back (why and why it is safe: lock/README.md). */
#include <stdint.h>

#include "lock/client.h"
#include "lock/dlock.h"
#include "lock/err.h"
#include "lock/sync.h"

/* The raise's arguments for lease l, above floor. */
static dlock_node_raise_args raise_args(const struct dlock_lease *l, int64_t floor)
{
    return (dlock_node_raise_args){.key = l->key,
                                   .target = l->target,
                                   .token = l->token,
                                   .floor = floor,
                                   .keep_ms = dlock__keep_ms(l->lease_ms),
                                   .member = l->kind == DLOCK_LEASE_PERMIT ||
                                             l->kind == DLOCK_LEASE_READ};
}

int dlock_fence_raise_at(dlock_handle *h, int i, int64_t floor)
{
    if (h == NULL || i < 0 || i >= dlock_key_count(h))
        return dlock__fail(DLOCK_ERR_INVALID, "the handle has no key %d", i);
    if (floor > DLOCK_FENCE_MAX) /* past 2^53 the scripts' numbers are not exact */
        return dlock__fail(DLOCK_ERR_INVALID, "fence floor %lld is above DLOCK_FENCE_MAX (%lld): "
                           "fences are exact below 2^53 only", (long long)floor,
                           (long long)DLOCK_FENCE_MAX);
    dlock_client *c = h->client;
    pthread_mutex_lock(&c->mu);
    struct dlock_lease *l = dlock__holder_at(h, i)->lease;
    int st = dlock__holder_state(h, dlock__now_ms());
    int64_t fence = l->fence;
    pthread_mutex_unlock(&c->mu);
    if (st != DLOCK_OK)
        return dlock__fail(st, "lock %s: %s, its fence stays", l->key, dlock_strerror(st));
    if (fence > floor)
        return DLOCK_OK; /* nothing to raise */
    dlock_node_raise_args a = raise_args(l, floor);
    int rc = dlock__quorum_raise(c->nodes, &a, &fence);
    if (rc == DLOCK_OK && fence > DLOCK_FENCE_MAX + 1) /* the counter was past it already */
        rc = dlock__fail(DLOCK_ERR_REDIS, "lock %s: the fence raise answered %lld, past 2^53 - 1, "
                         "where fences are not exact", l->key, (long long)fence);
    else if (rc == DLOCK_OK && fence <= floor) /* never a fence the store would refuse again */
        rc = dlock__fail(DLOCK_ERR_REDIS, "lock %s: the fence raise answered %lld, not above "
                         "%lld", l->key, (long long)fence, (long long)floor);
    pthread_mutex_lock(&c->mu);
    if (rc == DLOCK_OK && fence > l->fence) /* hand-offs of this lease share it from now on */
        l->fence = fence;
    else if (rc == DLOCK_ERR_LOST)
        dlock__wd_lost(c->wd, l);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int dlock_fence_raise(dlock_handle *h, int64_t floor) { return dlock_fence_raise_at(h, 0, floor); }
