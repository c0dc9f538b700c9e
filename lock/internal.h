/* internal.h - what the lock library's files share: the client, lease, handle
 * and per-key structs, the error buffer, the clock. Not installed; see dlock.h.
 *
 * A *lease* is one successful SET NX PX: a Redis key holding our token. A
 * *handle* is one holder of a lease. In notify mode a lease can pass from
 * holder to holder inside the process (hand-off) before it goes back to Redis;
 * in spin mode each handle has a lease of its own.
 *
 * One mutex per client (c->mu) guards every field marked "mu" below: the key
 * table, waiter queues, lease and handle state. Nobody holds it across I/O. */
#ifndef DLOCK_INTERNAL_H
#define DLOCK_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "dlock.h"
#include "keytab.h"
#include "orphans.h"
#include "pool.h"
#include "subscriber.h"
#include "watchdog.h"

struct dlock_client {
    dlock_pool *pool;
    pthread_mutex_t mu;
    dlock_keytab *keys;    /* mu: per-key queues (notify mode) */
    dlock_watchdog *wd;
    dlock_subscriber *sub; /* release notifications */
    dlock_orphans *orphans; /* clean-up of tokens whose state in Redis is unknown */
    struct {
        _Atomic uint64_t acquired, handoffs, timeouts, renewals, interrupts, lost, redis_errors;
        _Atomic uint64_t orphaned, orphans_dropped;
        _Atomic uint64_t wait_count, wait_sum_ms, wait_buckets[DLOCK_WAIT_BUCKETS];
    } stats;
};

struct dlock_lease {
    dlock_client *client;
    int lease_ms;
    int retry_ms;                /* sizes the queue deadline and a release's grant */
    int handoff_max, handoff_ms; /* from the options of the thread that took it from Redis */
    int64_t fence;
    int64_t acquired_ms;  /* when the SET NX was sent */
    int sent;             /* an acquire with this token may have reached Redis */
    char token[DLOCK_TOKEN_LEN + 1];
    /* mu */
    struct dlock_lease *prev, *next; /* watchdog list, while watched */
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
    struct dlock_lease *lease;
    struct dlock_entry *entry; /* notify mode: the key's queue; NULL in spin mode */
    int max_renewals;
    /* mu */
    int seq;                /* hand-off number within the lease; 0 = from Redis */
    int renewals_at_start;  /* lease->renewals when this holder got it */
    int interrupted;
    pthread_cond_t wake;    /* dlock_sleep waits here */
};

/* Sets the calling thread's error text (printf-style) and code; returns code. */
int dlock_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* After a Redis call failed: DLOCK_ERR_AUTH when the calling thread's last
 * failure was one of credentials (nothing ran), else DLOCK_ERR_REDIS. */
int dlock_redis_failure(void);

/* How much earlier than Redis the holder considers its lease over: clock drift
 * between this host and Redis, as the Redlock paper budgets it (1% + 2 ms). */
static inline int dlock_drift_ms(int lease_ms) { return lease_ms / 100 + 2; }

static inline int64_t dlock_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A condition variable that times out on CLOCK_MONOTONIC (wall-clock jumps
 * must not stretch or cut lock waits). */
int dlock_cond_init(pthread_cond_t *cv);

/* Waits on cv (with c->mu held) until woken or until the monotonic at_ms. */
void dlock_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t at_ms);

/* The holder's state (mu held): DLOCK_OK, DLOCK_ERR_INTERRUPTED or DLOCK_ERR_LOST. */
int dlock_holder_state(const struct dlock_handle *h, int64_t now);

/* dlock.c, for queue.c */

/* A new lease for key with a fresh token, not yet acquired. NULL when out of memory. */
struct dlock_lease *dlock_lease_new(dlock_client *c, const char *key, const dlock_opts *o);

/* The fence counter and the set of given-up tokens expire this many leases
 * after their last write: a token given up must stay refused longer than
 * its acquire can still be on its way (delayed on a connection we gave up
 * on), and the counter is seeded from Redis's clock when it is gone. */
#define DLOCK_KEEP_LEASES 10

/* How long a queued waiter stays in line without trying again, and how long a
 * release's grant waits to be claimed: two jittered retry intervals and some. */
static inline int dlock_grace_ms(int retry_ms) { return 2 * retry_ms + 100; }

/* One acquisition attempt for l (SET NX PX, or claiming a grant). When queue
 * is set, a failed attempt also takes (or keeps) a place in the key's Redis
 * queue. Returns DLOCK_OK (l->fence and l->acquired_ms set),
 * DLOCK_ERR_TIMEOUT when another owner holds the key or comes first (*pttl:
 * the key's TTL in ms, negative when unknown), or DLOCK_ERR_REDIS. */
int dlock_try_acquire(dlock_client *c, struct dlock_lease *l, int queue, int64_t *pttl);

/* The release script for l's token: the key, if ours, goes to the first live
 * waiter or is deleted. leaving also takes l's token out of the queue (a
 * waiter giving up). DLOCK_OK, DLOCK_ERR_LOST (not ours) or DLOCK_ERR_REDIS. */
int dlock_release_in_redis(dlock_client *c, const struct dlock_lease *l, int leaving);

/* Makes h the holder of the lease it just took from Redis (mu held). */
void dlock_hold(dlock_client *c, struct dlock_handle *h, struct dlock_lease *l, int renew);

/* A pause of 0.5x..1.5x retry_ms, so waiters drift apart instead of retrying in step. */
int dlock_jitter_ms(int retry_ms);

/* queue.c */

/* Notify mode: waits in key's local FIFO until h holds the lock (from Redis,
 * or handed over) or deadline passes. Returns as dlock_acquire does. */
int dlock_queue_acquire(dlock_client *c, struct dlock_handle *h, const char *key,
                        const dlock_opts *o, int64_t deadline);

/* mu held, h's state OK: hands h's lease to the key's next local waiter when
 * the hand-off bounds allow. Returns 1 when handed over (h no longer holds). */
int dlock_queue_handoff(dlock_client *c, struct dlock_handle *h);

/* mu held: drops the reference a holder or waiter had on e. */
void dlock_queue_leave(dlock_client *c, struct dlock_entry *e);

#endif
