/* sem.h - leases that are members of a shared set in Redis, claimed by a
 * script and waited for alike: the semaphore behind dlock_sem_acquire
 * (here) and the read-write lock (rw.c). The leases are renewed by the
 * client's watchdog and reported through an ordinary dlock_handle; their
 * waiters queue in a local FIFO per key whose head retries when a release
 * is heard. */
#ifndef DLOCK_SEM_H
#define DLOCK_SEM_H

#include <stdint.h>

#include "client.h"
#include "lease.h"

/* One kind of claim on a key. */
struct dlock_claim {
    const char *what;   /* "semaphore", "read lock", ...: for error texts */
    const char *busy;   /* why a timed-out wait got nothing, for its error text */
    int kind;           /* enum dlock_lease_kind of the leases it makes */
    const char *suffix; /* the lease lives in key + suffix in Redis; NULL: in key */
    int permits;        /* a semaphore's N */
    /* One attempt for l: DLOCK_OK (l->fence and l->acquired_ms set),
     * DLOCK_ERR_TIMEOUT (*pttl: ms until it is worth trying again, negative
     * when unknown), DLOCK_ERR_REDIS or DLOCK_ERR_AUTH. wait: 0 for a
     * fail-fast try (wait_ms 0), which only looks and leaves no mark. */
    int (*attempt)(dlock_client *c, struct dlock_lease *l, const struct dlock_claim *cl,
                   int wait, int64_t *pttl);
    /* NULL, or what a wait that got nothing undoes in Redis (l's attempts
     * may have left a mark there; a fail-fast try's leave none). */
    void (*give_up)(dlock_client *c, struct dlock_lease *l);
};

/* Whether c can hold such claims: DLOCK_OK, or DLOCK_ERR_INVALID when it
 * uses several Redis servers, with errstr naming what. */
int dlock_claim_single(dlock_client *c, const char *what);

/* An acquire script's {1, fence} or {0, pttl} (r freed) as an attempt's
 * result, for an attempt sent at sent. */
int dlock_claim_reply(redisReply *r, struct dlock_lease *l, int64_t sent, int64_t *pttl);

/* The public front of a claim, in dlock.c with the other acquisitions:
 * checks opts and key as dlock_acquire does, then dlock_claim_wait until
 * wait_ms, counted like any acquisition. Returns as dlock_acquire does. */
int dlock_claim_acquire(dlock_client *c, const char *key, const struct dlock_claim *cl,
                        const dlock_opts *opts, dlock_handle **out);

/* Waits until deadline for a claim on key (o checked, key valid). Returns
 * as dlock_acquire does; *out set on DLOCK_OK. */
int dlock_claim_wait(dlock_client *c, const char *key, const struct dlock_claim *cl,
                     const dlock_opts *o, int64_t deadline, dlock_handle **out);

/* Gives h's lease back (its kind's release script) and frees h; *local
 * gets the holder's own view at release. Returns what dlock_release
 * documents for a permit. */
int dlock_claim_release(dlock_handle *h, int *local);

#endif
