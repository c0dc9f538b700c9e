/* dlock.h - a Redis distributed lock: leases, waiting, watchdog renewal,
 * interruption after max renewals, fencing tokens; multi-locks, and several
 * Redis servers as a quorum. The blocking core; beside it, each including
 * this one: dlock_async.h (asynchronous calls: acquires, cancel, sleep,
 * release), dlock_sem.h (semaphores), dlock_rw.h (read-write locks).
 *
 *     dlock_client *c;
 *     dlock_config cfg; dlock_config_defaults(&cfg);
 *     if (dlock_client_new(&cfg, &c) != DLOCK_OK) die(dlock_errstr());
 *     dlock_handle *h;
 *     if (dlock_acquire(c, "stock:lock:{42}", NULL, &h) == DLOCK_OK) {
 *         ... work, calling dlock_check(h) before anything irreversible ...
 *         dlock_release(h);
 *     }
 *
 * One client per process: it owns the Redis connections, a watchdog thread
 * that renews every lease held through it, a pub/sub connection, and
 * cfg.async_threads threads for asynchronous calls. Every function may be
 * called from any number of threads at once on one client. A handle
 * belongs to the thread that acquired it (an asynchronous acquire's, to no
 * thread); only dlock_release (or dlock_release_async) ends its life.
 * Functions return DLOCK_OK (0) or a negative DLOCK_ERR_* code;
 * dlock_errstr() gives the calling thread's last failure in words.
 *
 * How it behaves, what it sends to Redis and why it is safe (fencing,
 * reentrancy, semaphores, read-write locks, Redlock over several servers):
 * lock/README.md. */
#ifndef DLOCK_H
#define DLOCK_H

#include "dlock_base.h"

/* The library's version; the shared library's soname carries the major
 * (libdlock.so.3), which changes only when a program built against an older
 * dlock.h would break: 2 when dlock_config grew (Sentinel, a cluster) and
 * dlock_stats with it, both allocated by the caller; 3 when dlock_config
 * grew again (async_threads, post) and the asynchronous acquires took a
 * request (dlock_async.h). */
#define DLOCK_VERSION "3.0.0"

DLOCK_BEGIN_DECLS

/* The largest floor dlock_fence_raise takes, 2^53 - 2: fences are exact below
 * 2^53 only (Redis's Lua numbers are doubles), and a raised fence is at most
 * one more (lock/README.md, "Exact below 2^53"). */
#define DLOCK_FENCE_MAX ((INT64_C(1) << 53) - 2)

/* What an ACL user needs (ACL SETUSER name on >password ~<prefix>* &<prefix>*
 * DLOCK_ACL_COMMANDS): the commands the client sends and those its Lua
 * scripts call, for keys and channels under the lock keys' prefix. */
#define DLOCK_ACL_COMMANDS                                                                \
    "-@all +ping +evalsha +eval +script|load +subscribe +unsubscribe +get +set +del "    \
    "+exists +pexpire +pttl +incr +time +zadd +zrange +zrem +zscore +zremrangebyscore "  \
    "+zpopmin +zcard +hset +hget +hdel +publish +role"

/* Creates a client and starts its watchdog thread. Redis is contacted lazily,
 * so this succeeds while Redis is down. Returns DLOCK_OK with *out set, or
 * DLOCK_ERR_INVALID / DLOCK_ERR_NOMEM with *out NULL. Free with dlock_client_free. */
int dlock_client_new(const dlock_config *cfg, dlock_client **out);

/* Ends the asynchronous calls still pending (DLOCK_ERR_CLOSED, their done
 * called before it returns, directly: not through cfg.post), stops the
 * client's threads and closes every connection. All handles must have been
 * released; NULL is a no-op. */
void dlock_client_free(dlock_client *c);

/* Returns DLOCK_OK when Redis (with several servers: a majority of them)
 * answers PING within the command timeout, else DLOCK_ERR_AUTH when it
 * refused our credentials, or DLOCK_ERR_REDIS. */
int dlock_ping(dlock_client *c);

/* How many servers the client uses (1 for host:port). */
int dlock_node_count(dlock_client *c);

/* Server i's state (0 <= i < dlock_node_count). */
void dlock_node_info_read(dlock_client *c, int i, dlock_node_info *out);

/* dlock_ping, and which servers answered: up[i] is 1 for each that did. */
int dlock_ping_each(dlock_client *c, int up[DLOCK_NODES_MAX]);

/* Acquires key for a new random owner token, with a fencing token, waiting
 * up to opts->wait_ms (never longer than that plus one command timeout). In
 * notify mode a local holder of the key may hand its lease over instead
 * (same token and fence, dlock_handoff_seq() > 0). A thread that holds key
 * gets a nested hold at once (opts->reentrant; the call's other options
 * are ignored, and a hold past its local deadline is refused with
 * DLOCK_ERR_INVALID) or DLOCK_ERR_INVALID.
 * Returns DLOCK_OK with *out a handle owned by the caller until
 * dlock_release(); or DLOCK_ERR_TIMEOUT, DLOCK_ERR_REDIS, DLOCK_ERR_AUTH,
 * DLOCK_ERR_INVALID, DLOCK_ERR_NOMEM with *out NULL. */
int dlock_acquire(dlock_client *c, const char *key, const dlock_opts *opts, dlock_handle **out);

/* Acquires the n keys (1..DLOCK_MULTI_MAX, distinct) as one lock, all or
 * nothing: one by one in byte order of their names (so no two multi-locks
 * deadlock), each as dlock_acquire does, under one wait_ms deadline; a
 * failure on any key releases those taken. Held, the keys are renewed,
 * interrupted, checked and released as one; dlock_fence_at(h, i) is the
 * i-th key's token. DLOCK_ERR_INVALID also when the thread holds one of
 * the keys. Returns as dlock_acquire does. */
int dlock_acquire_multi(dlock_client *c, const char *const *keys, int n, const dlock_opts *opts,
                        dlock_handle **out);

/* Releases the lock and frees h: hands the lease to a local waiter (notify
 * mode, within the hand-off bounds), or gives the key back in Redis only if
 * it still holds our token (granted to the next waiter in line, or
 * deleted). No renewal follows. Returns DLOCK_OK; DLOCK_ERR_LOST when the
 * lease had expired or another owner held the key (left untouched);
 * DLOCK_ERR_INTERRUPTED when h was interrupted (the key is still released
 * if ours); DLOCK_ERR_REDIS when Redis did not answer (retried in the
 * background; the lease expires on its own at the latest); DLOCK_ERR_AUTH
 * when Redis now refuses our credentials (the lease expires). A multi-lock
 * answers its worst key's (LOST, then INTERRUPTED, then a Redis failure).
 * A nested handle that is not its hold's last sends nothing and returns
 * dlock_check's answer. NULL is a no-op. */
int dlock_release(dlock_handle *h);

/* Whether the holder may still act: DLOCK_OK, DLOCK_ERR_INTERRUPTED, or
 * DLOCK_ERR_LOST (renewal found the key gone or taken, or the local lease
 * deadline - last renewal + lease - drift allowance - passed). Local only: no
 * Redis round trip. Call it just before committing anything. */
int dlock_check(dlock_handle *h);

/* Sleeps ms milliseconds while holding h, the interruptible way: returns
 * DLOCK_OK after the full time, or at once DLOCK_ERR_INTERRUPTED / DLOCK_ERR_LOST
 * when that happens to h. */
int dlock_sleep(dlock_handle *h, int ms);

/* The fencing token of this acquisition: strictly greater than every token
 * issued earlier for the same key, also across Redis restarts, as long as
 * Redis's clock does not go back (else dlock_fence_raise) and fences stay
 * below 2^53 (DLOCK_FENCE_MAX). Hand-offs of one lease share its fence and
 * differ in dlock_handoff_seq(). An acquire that finds no fence left above
 * the key's counter (2^63 - 1) fails with DLOCK_ERR_REDIS, taking nothing. */
int64_t dlock_fence(const dlock_handle *h);

/* Raises the fencing token of key i of h (0 for a lock, a permit or a
 * read-write hold) above floor, the token a store refused h for: when
 * fences went back (lock/README.md, "Fences that go back"). Only while
 * the key still holds h's token: the counter becomes max(counter, floor)
 * + 1, h's fence from now on (with several servers, written back to a
 * majority).
 * Take floor only from the store the fence guards; call it from the thread
 * that holds h, or one it waits for, never after h is released.
 * Returns DLOCK_OK (dlock_fence_at(h, i) > floor; nothing sent when it
 * already was); DLOCK_ERR_LOST (the key is no longer ours: h is lost from
 * now on); DLOCK_ERR_INTERRUPTED or DLOCK_ERR_LOST, nothing sent, when h
 * was already; DLOCK_ERR_REDIS or DLOCK_ERR_AUTH (h's fence unchanged;
 * also when the counter is past 2^53 - 1); DLOCK_ERR_INVALID, nothing
 * sent, for no key i or floor above DLOCK_FENCE_MAX. */
int dlock_fence_raise_at(dlock_handle *h, int i, int64_t floor);
int dlock_fence_raise(dlock_handle *h, int64_t floor); /* key 0 */

/* 0 when the lease came from Redis, n for the n-th local hand-off of it.
 * (fence, seq) pairs of one key strictly increase in the order of holding. */
int dlock_handoff_seq(const dlock_handle *h);

const char *dlock_token(const dlock_handle *h); /* owned by h */
const char *dlock_key(const dlock_handle *h);   /* owned by h */
int dlock_renewals(const dlock_handle *h);      /* renewals since this holder got the lock
                                                 * (a multi-lock: its most renewed key) */

/* How many handles of h's hold (its outermost one and those nested in it)
 * are not yet released: 1 when nothing nests in it, for a multi-lock, a
 * permit and a read-write hold. */
int dlock_hold_count(const dlock_handle *h);

/* A multi-lock's keys, in canonical order (a single lock has one, i = 0),
 * and each key's own token; dlock_fence / _handoff_seq / _key / _token give
 * the first key's. Strings are owned by h. */
int dlock_key_count(const dlock_handle *h);
const char *dlock_key_at(const dlock_handle *h, int i);
int64_t dlock_fence_at(const dlock_handle *h, int i);
int dlock_handoff_seq_at(const dlock_handle *h, int i);

/* Work done under a lock: gets the live handle (for dlock_check / dlock_sleep /
 * dlock_fence) and the caller's argument; its return value is passed back. */
typedef int (*dlock_fn)(dlock_handle *h, void *arg);

/* The C counterpart of a @DistributedLock annotation: acquires key, runs fn,
 * and always releases. Returns:
 *   DLOCK_ERR_TIMEOUT, DLOCK_ERR_REDIS, DLOCK_ERR_AUTH, DLOCK_ERR_INVALID,
 *   DLOCK_ERR_NOMEM: fn did not run; *fn_rc is left alone;
 *   DLOCK_OK: fn ran and the lock was still ours when released;
 *   DLOCK_ERR_INTERRUPTED, DLOCK_ERR_LOST: fn ran (*fn_rc is its result) but
 *       the holder was interrupted or lost the lock at some point: fn must have
 *       called dlock_check() before committing anything.
 * fn_rc may be NULL. */
int dlock_run(dlock_client *c, const char *key, const dlock_opts *opts, dlock_fn fn, void *arg,
              int *fn_rc);

/* dlock_run for a multi-lock (dlock_acquire_multi). */
int dlock_run_multi(dlock_client *c, const char *const *keys, int n, const dlock_opts *opts,
                    dlock_fn fn, void *arg, int *fn_rc);

void dlock_stats_read(dlock_client *c, dlock_stats *out);

DLOCK_END_DECLS

#endif
