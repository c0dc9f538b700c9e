/* lease.h - leases and their holders. A *lease* is one successful acquire in
 * Redis: the key holding our token. A *handle* is one holder of a lease (or,
 * acquired again by a thread that holds it, nested in that hold). In
 * notify mode a lease can pass from holder to holder inside the process
 * (hand-off) before it goes back to Redis; in spin mode each handle has a
 * lease of its own. Fields marked "mu" are guarded by the client's mutex,
 * which nobody holds across I/O. */
#ifndef DLOCK_LEASE_H
#define DLOCK_LEASE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lock/internal.h"
#include "lock/quorum.h"
#include "lock/runner.h"
#include "lock/scripts.h"

/* The fence counter and the set of given-up tokens expire this many leases
 * after their last write: a token given up must stay refused longer than
 * its acquire can still be on its way (delayed on a connection we gave up
 * on), and the counter is seeded from Redis's clock when it is gone. */
#define DLOCK_KEEP_LEASES 10

/* What a lease is, which decides the scripts that renew and release it. */
enum dlock_lease_kind {
    DLOCK_LEASE_LOCK,   /* a lock's: key holds the token (PX) */
    DLOCK_LEASE_PERMIT, /* a semaphore's permit: a member of the ZSET key (sem.c) */
    DLOCK_LEASE_READ,   /* a read-write lock's reader: a member of the ZSET key (rw.c) */
    DLOCK_LEASE_WRITE,  /* its writer: key:writer holds the token (PX) (rw.c) */
};

struct dlock_lease {
    int lease_ms;
    int retry_ms;                /* sizes the queue deadline and a release's grant */
    int handoff_max, handoff_ms; /* from the options of the thread that took it from Redis */
    int handoff_bound;           /* hand-offs allowed: handoff_max, or fewer when other
                                  * processes wait (queue.c) */
    int queued;                  /* other processes that had the key since this process
                                  * last took it from Redis, when it took this lease */
    _Atomic int64_t fence; /* raised while held (dlock_fence_raise), perhaps from a
                            * thread the holder waits for: atomic */
    int64_t acquired_ms; /* when the acquire was sent */
    int granted_ms;      /* > 0: held on a grant's word alone, with that lease on the
                          * key, until the watchdog's first renewal (not counted) */
    int64_t queue_score; /* its place in the keys' Redis queues with several servers:
                          * the wall clock in us when it began to wait, the same on each */
    int sent;            /* an acquire with this token may have reached Redis */
    int kind;            /* enum dlock_lease_kind */
    int need;            /* with several servers, how many must hold it: 0 a majority,
                          * a semaphore's permit more (claim_quorum.h) */
    const char *target;  /* the Redis key renewal and release touch: key, or a writer's
                          * key:writer, stored after key */
    char token[DLOCK_TOKEN_LEN + 1];
    /* mu */
    struct dlock_lease *prev, *next; /* the watchdog's list, or the orphans' */
    int watched, renewing, lost;
    int renewals;           /* successful renewals of this lease */
    int handoffs;           /* local hand-offs so far */
    int64_t next_renew_ms;  /* when the watchdog renews next */
    int64_t valid_until_ms; /* local deadline: last renewal + lease - drift */
    struct dlock_handle *holder;
    char key[];
};

struct dlock_handle {
    dlock_client *client;
    pthread_t thread;          /* the thread that acquired it: holds are per thread */
    struct dlock_handle *outer; /* a nested hold (reentrant acquire): the thread's outermost
                                 * hold of the key, whose lease and state it reports, NULL
                                 * otherwise (reentry.c) */
    struct dlock_lease *lease; /* NULL for a multi-lock (its parts hold the leases) and for a
                                * nested hold */
    struct dlock_entry *entry; /* notify mode: the key's queue; NULL in spin mode */
    int max_renewals;
    struct dlock_handle **parts; /* a multi-lock: one holder per key, in key order */
    int nparts;
    struct dlock_handle *parent; /* mu; a part: the multi-lock it belongs to */
    int64_t held_since_us;  /* when acquired (dlock__now_us); 0 until then */
    /* mu */
    int seq;                /* hand-off number within the lease; 0 = from Redis */
    int renewals_at_start;  /* lease->renewals when this holder got it */
    int interrupted;
    int holds;              /* an outermost hold of a key: its handles not yet released */
    struct dlock_handle *held_next; /* the client's table of holds (reentry.c) ... */
    unsigned held_bucket;   /* ... and its bucket there: hashed once a hold */
    pthread_cond_t wake;    /* dlock_sleep waits here */
    struct dlock_task *sleeper; /* the asynchronous sleep of this hold (of a thread's
                                 * outermost hold, or of a multi-lock), woken with wake */
    int at_release;         /* its state when released: what its give-back reports when
                             * Redis says the key was ours (lock.c) */
    /* One asynchronous call on the handle at a time (dlock_async.h): its sleep, or its
     * release in Redis, a task of the client's runner that lives here */
    struct dlock_task task;
    dlock_req *req;         /* the call's request (a release's may be NULL) */
    int64_t sleep_end;      /* a sleep: when it is over */
    int async_rc;           /* how the call ended; a multi-lock's release: its worst part's */
};

/* size zeroed bytes, or NULL when out of memory: for what every acquire makes
 * (handles, leases, an asynchronous call's state), as calloc would, but
 * through malloc, whose per-thread cache glibc's calloc skips: in a chain
 * of hand-offs between asynchronous waiters, three callocs a turn cost a
 * fifth of its CPU in the allocator's slow path. (The empty asm keeps the
 * compiler from making the two calls one calloc again.) */
static inline void *dlock__zalloc(size_t size)
{
    void *p = malloc(size);
#if defined(__GNUC__)
    __asm__("" : "+r"(p));
#endif
    return p ? memset(p, 0, size) : NULL;
}

/* How long a queued waiter stays in line without trying again, and how long a
 * release's grant waits to be claimed: two jittered retry intervals and some. */
static inline int dlock__grace_ms(int retry_ms) { return 2 * retry_ms + 100; }

/* How long a grant of l's lasts at least, to be claimed: l's grace, at most
 * its lease. A release by l grants this long; a grant to l's token, when it
 * waits in line, at least this long too (the script keeps it with the
 * token's deadline), so that a waiter never loses its grant sooner than it
 * would lose its place in line. */
int dlock__lease_grant_ms(const struct dlock_lease *l);

/* A new lease for key (copied) with a fresh random token, not yet acquired.
 * NULL when out of memory. Freed with free(). */
struct dlock_lease *dlock__lease_new(const char *key, const dlock_opts *o);

/* The same, made beforehand (an asynchronous acquire's, at its call) with no
 * token nor place in line yet: dlock__lease_ready draws them at its first
 * use, so a wait that never asks Redis (it got a hand-off) never draws them
 * (a getrandom call, a clock read). */
struct dlock_lease *dlock__lease_reserve(const char *key, const dlock_opts *o);

/* Draws l's token, and stamps its place in the keys' Redis queues (the wall
 * clock, for several servers), if it has none yet: before anything sends
 * or copies them. */
void dlock__lease_ready(struct dlock_lease *l);

/* The same, for a lease of the given kind held in key + suffix (suffix
 * NULL: in key itself). */
struct dlock_lease *dlock__lease_new_in(const char *key, const char *suffix, int kind,
                                        const dlock_opts *o);

/* The script that renews l: a lock's and a writer's (PEXPIRE while the key
 * holds the token), or a permit's and a reader's (ZADD XX while the member
 * is live); both take key, token, lease_ms. */
enum dlock_script dlock__lease_renew_script(const struct dlock_lease *l);

/* How long the fence counter and the gone set outlive their last write
 * with leases of lease_ms: DLOCK_KEEP_LEASES leases, at most INT32_MAX. */
int dlock__keep_ms(int lease_ms);

/* A handle with no lease yet, or NULL when out of memory. */
dlock_handle *dlock__handle_new(dlock_client *c, const dlock_opts *o);
void dlock__handle_free(dlock_handle *h);

/* The holder's state (mu held): DLOCK_OK, DLOCK_ERR_INTERRUPTED or
 * DLOCK_ERR_LOST. A multi-lock's is the worst of its parts' (interrupted
 * first); a nested hold's is its outermost hold's. */
int dlock__holder_state(const dlock_handle *h, int64_t now);

/* The holder of key i of h: a part of a multi-lock, or h itself (i = 0),
 * or for a nested hold its outermost hold (which may be a part). */
const dlock_handle *dlock__holder_at(const dlock_handle *h, int i);

/* When the holder counts as lost unless renewed (mu held): for a multi-lock,
 * the earliest of its parts; for a nested hold, its outermost hold's. */
int64_t dlock__holder_valid_until(const dlock_handle *h);

/* One acquisition attempt for l on q's servers. When queue is set, a failed
 * attempt also takes (or keeps) a place in the key's Redis queue. Returns
 * DLOCK_OK (l->fence and l->acquired_ms set), DLOCK_ERR_TIMEOUT when another
 * owner holds the key or comes first (*pttl: the key's TTL in ms, negative
 * when unknown), DLOCK_ERR_REDIS or DLOCK_ERR_AUTH. Sets l->sent when the
 * attempt may have reached Redis. */
int dlock__lease_try(dlock_quorum *q, struct dlock_lease *l, int queue, int64_t *pttl);

/* A local waiter's place in Redis's line, for a release to take: a copy,
 * as the waiter may leave while the release is on its way. */
struct dlock_next {
    char token[DLOCK_TOKEN_LEN + 1];
    int queue_ms, grant_ms;
    int64_t queue_score;
};

/* The release script for l's token (leaving: given up, see node.h), which
 * also puts next (may be NULL) in line when the key goes to another
 * process's waiter: *queued (may be NULL) tells whether it did. Returns
 * DLOCK_OK, DLOCK_ERR_LOST (not ours), DLOCK_ERR_REDIS or DLOCK_ERR_AUTH. */
int dlock__lease_release(dlock_quorum *q, const struct dlock_lease *l, int leaving,
                         const struct dlock_next *next, int *queued);

/* Script s on the one server a semaphore or read-write lock lives on (they
 * refuse a quorum); NULL (dlock_errstr says why) when it could not be asked.
 * sent (may be NULL) is set when the script may have reached Redis. */
redisReply *dlock__lease_call(dlock_quorum *q, enum dlock_script s, int nkeys, int nargs,
                              const char *const *argv, int *sent);

/* Gives l back to Redis for good, whatever its kind: a lock's token as
 * given up (dlock__lease_release, leaving), a permit's, reader's or writer's
 * by its release script. Returns DLOCK_OK, DLOCK_ERR_LOST (not held by l's
 * token), DLOCK_ERR_REDIS or DLOCK_ERR_AUTH. */
int dlock__lease_give_back(dlock_quorum *q, const struct dlock_lease *l);

#endif
