/* sem.c - the semaphore (dlock_sem_acquire, and _async): each permit a
 * lease, a member of one Redis ZSET scored by its deadline (scripts.c),
 * renewed by the client's watchdog like a lock's lease and reported through
 * the same handle. Over a quorum a permit must be had on more servers than
 * a majority once there are two or more (claim_quorum.h). Only its attempt
 * is here: the waiting and the release are every claim's (claim.c). */
#include <stdio.h>

#include "lock/claim.h"
#include "lock/claim_quorum.h"
#include "lock/dlock_async.h"
#include "lock/dlock_sem.h"
#include "lock/err.h"
#include "lock/sync.h"

/* A semaphore's attempt: every permit held gives *pttl, when the first
 * one's lease runs out. */
static int sem_try(dlock_client *c, struct dlock_lease *l, const struct dlock_claim *cl,
                   int wait, int64_t *pttl)
{
    (void)wait; /* a waiting permit leaves no mark */
    dlock_names k;
    char lease[24], limit[24], keep[24], slack[24];
    dlock_names_of(l->key, &k);
    snprintf(lease, sizeof(lease), "%d", l->lease_ms);
    snprintf(limit, sizeof(limit), "%d", cl->permits);
    snprintf(keep, sizeof(keep), "%d", dlock__keep_ms(l->lease_ms));
    dlock__claim_quorum_slack(c->nodes, slack);
    const char *argv[] = {l->key, k.fence, l->token, lease, limit, keep, slack};
    return dlock__claim_quorum_try(c->nodes, l, DLOCK_SCRIPT_SEM_ACQUIRE, 2, 7, argv, pttl);
}

/* A semaphore of permits_total (>= 1, else DLOCK_ERR_INVALID) as a claim. */
static int sem_claim(int permits_total, struct dlock_claim *cl)
{
    if (permits_total < 1)
        return dlock__fail(DLOCK_ERR_INVALID, "a semaphore needs permits_total >= 1, got %d",
                           permits_total);
    *cl = (struct dlock_claim){"semaphore", "all permits still held", DLOCK_LEASE_PERMIT, NULL,
                               permits_total, sem_try, NULL};
    return DLOCK_OK;
}

int dlock_sem_acquire(dlock_client *c, const char *key, int permits_total,
                      const dlock_opts *opts, dlock_handle **out)
{
    struct dlock_claim cl;
    *out = NULL;
    if (sem_claim(permits_total, &cl) != DLOCK_OK)
        return DLOCK_ERR_INVALID;
    return dlock__claim_acquire(c, key, &cl, opts, out);
}

int dlock_sem_acquire_async(dlock_client *c, const char *key, int permits_total,
                            const dlock_opts *opts, dlock_req *req)
{
    struct dlock_claim cl;
    if (sem_claim(permits_total, &cl) != DLOCK_OK)
        return DLOCK_ERR_INVALID;
    return dlock__claim_acquire_async(c, key, &cl, opts, req);
}
