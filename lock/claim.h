/* claim.h - leases that are members of a shared set in Redis, or beside
 * it, claimed by a script of their own: the semaphore's permits (sem.c) and
 * the read-write lock's readers and writer (rw.c). claim.c waits for them,
 * hands them out in an ordinary dlock_handle (renewed by the client's
 * watchdog) and gives them back (for lock.c's release). Their waiters
 * queue in a local FIFO per key whose head retries when a release is heard. */
#ifndef DLOCK_CLAIM_H
#define DLOCK_CLAIM_H

#include <stdint.h>

#include "lock/client.h"
#include "lock/lease.h"

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

/* The public front of a claim (dlock_sem_acquire, dlock_acquire_read, ...):
 * checks opts and key as dlock_acquire does, then waits until wait_ms,
 * counted like any acquisition. Returns as dlock_acquire does; *out set on
 * DLOCK_OK. */
int dlock__claim_acquire(dlock_client *c, const char *key, const struct dlock_claim *cl,
                         const dlock_opts *opts, dlock_handle **out);

/* The same, asynchronously (dlock_sem_acquire_async, ...): cl is copied;
 * the wait's steps run on the client's runner, and req's done gets how it
 * ended. Returns as dlock_acquire_async does. */
int dlock__claim_acquire_async(dlock_client *c, const char *key, const struct dlock_claim *cl,
                               const dlock_opts *opts, dlock_req *req);

/* mu held (released around the give-back): gives h's lease back (its
 * kind's release script), h->at_release being the holder's own view at
 * release; a DLOCK_ERR_REDIS result leaves the token to the orphans thread.
 * h is the caller's to free. Returns what dlock_release documents for a
 * permit. */
int dlock__claim_give_back(dlock_client *c, dlock_handle *h);

#endif
