/* dlock.h - a Redis distributed lock, the blocking core: clients, leases,
 * watchdog renewal, interruption after max renewals, fencing tokens,
 * multi-locks, one server or a quorum. Beneath it dlock_base.h (codes,
 * config, options, counters); beside it, each including it: dlock_async.h
 * (asynchronous calls), dlock_sem.h (semaphores), dlock_rw.h (read-write
 * locks). How it behaves and why it is safe: lock/README.md.
 *
 *     dlock_config cfg; dlock_config_defaults(&cfg);
 *     dlock_client *c;
 *     if (dlock_client_new(&cfg, &c) != DLOCK_OK) die(dlock_errstr());
 *     dlock_handle *h;
 *     if (dlock_acquire(c, "stock:lock:{42}", NULL, &h) == DLOCK_OK) {
 *         ... work, dlock_check(h) before anything irreversible ...
 *         dlock_release(h);
 *     }
 *
 * Every call may be made from any number of threads at once on one client
 * (one a process: it owns the connections and the client's threads). A
 * handle is its acquirer's (an asynchronous acquire's: no thread's) until
 * dlock_release or dlock_release_async. Calls return DLOCK_OK (0) or a
 * negative DLOCK_ERR_*, the detail in dlock_errstr(). */
#ifndef DLOCK_H
#define DLOCK_H

#include "dlock_base.h"

/* The library's version; libdlock.so's soname carries the major, which
 * changes only when a program built against an older dlock.h would break
 * (lock/README.md, "Using libdlock in your own program"). */
#define DLOCK_VERSION "3.0.0"

DLOCK_BEGIN_DECLS

/* The largest floor dlock_fence_raise takes, 2^53 - 2 (lock/README.md,
 * "Exact below 2^53"). */
#define DLOCK_FENCE_MAX ((INT64_C(1) << 53) - 2)

/* What an ACL user needs besides its keys and channels (ACL SETUSER name on
 * >password ~<prefix>* &<prefix>* DLOCK_ACL_COMMANDS): what the client
 * sends and its scripts call. */
#define DLOCK_ACL_COMMANDS                                                                \
    "-@all +ping +evalsha +eval +script|load +subscribe +unsubscribe +get +set +del "    \
    "+exists +pexpire +pttl +incr +time +zadd +zrange +zrem +zscore +zremrangebyscore "  \
    "+zpopmin +zcard +hset +hget +hdel +publish +role"

/* Makes a client: its pool, watchdog, subscriber and runner threads. Redis is
 * contacted lazily, so it succeeds while Redis is down.
 * returns: DLOCK_OK with *out set; DLOCK_ERR_INVALID or _NOMEM, *out NULL.
 * owns:    cfg's strings are copied; *out is the caller's, for
 *          dlock_client_free. */
int dlock_client_new(const dlock_config *cfg, dlock_client **out);

/* Ends the asynchronous calls still pending (their done called here, with
 * DLOCK_ERR_CLOSED, not through cfg.post), stops the client's threads and
 * closes every connection. Every handle must be released first; NULL is a
 * no-op. */
void dlock_client_free(dlock_client *c);

/* PINGs Redis (every server, within the command timeout).
 * returns: DLOCK_OK when it (a majority) answered; DLOCK_ERR_AUTH when it
 *          refused our credentials; else DLOCK_ERR_REDIS. _each also sets
 *          up[i] to 1 for each server that answered, else 0. */
int dlock_ping(dlock_client *c);
int dlock_ping_each(dlock_client *c, int up[DLOCK_NODES_MAX]);

/* The servers the client uses (1 for host:port), and server i's state
 * (0 <= i < dlock_node_count) copied into *out. */
int dlock_node_count(dlock_client *c);
void dlock_node_info_read(dlock_client *c, int i, dlock_node_info *out);

/* Acquires key for a new random owner token and a fencing token, waiting up
 * to opts->wait_ms (plus one command timeout at most). In notify mode a
 * local holder may hand its lease over instead (same token and fence,
 * dlock_handoff_seq > 0). A thread that holds key gets a nested hold at
 * once with opts->reentrant (its other options unused; a hold past its
 * local deadline refused), else DLOCK_ERR_INVALID (lock/README.md,
 * "Reentrancy").
 * returns: DLOCK_OK, *out the holder.
 * owns:    *out is the caller's until dlock_release; key and opts are
 *          copied (opts NULL: the defaults).
 * errors:  DLOCK_ERR_TIMEOUT, _REDIS (also: no fence left above the key's
 *          counter, 2^63 - 1), _AUTH, _INVALID, _NOMEM; *out NULL. */
int dlock_acquire(dlock_client *c, const char *key, const dlock_opts *opts, dlock_handle **out);

/* Acquires n distinct keys (1..DLOCK_MULTI_MAX) as one lock, all or nothing:
 * each as dlock_acquire does, in byte order of their names (two multi-locks
 * never deadlock), under one wait_ms. Held, they are renewed, interrupted,
 * checked and released as one; key i's parts are dlock_*_at(h, i).
 * returns, owns, errors: as dlock_acquire (DLOCK_ERR_INVALID also when the
 *          thread holds one of the keys); on an error the keys taken went
 *          back. */
int dlock_acquire_multi(dlock_client *c, const char *const *keys, int n, const dlock_opts *opts,
                        dlock_handle **out);

/* Releases and frees h: hands the lease to a local waiter (notify mode,
 * within the hand-off bounds), or gives the key back in Redis only while it
 * holds our token (granted to the next waiter in line, or deleted). No
 * renewal follows. A nested handle not its hold's last sends nothing.
 * returns: DLOCK_OK; a nested handle's: dlock_check's answer. A multi-lock:
 *          its worst key's (LOST, then INTERRUPTED, then REDIS or AUTH).
 * owns:    h is freed; NULL is a no-op.
 * errors:  DLOCK_ERR_LOST (the lease expired, or another owner holds the
 *          key: left alone); _INTERRUPTED (released still, if ours); _REDIS
 *          (retried in the background; the lease runs out at the latest);
 *          _AUTH (the lease runs out); _INVALID for a hold that sleeps
 *          (dlock_sleep_async: nothing released). */
int dlock_release(dlock_handle *h);

/* Whether the holder may still act, locally (no round trip): call it just
 * before committing anything.
 * returns: DLOCK_OK; DLOCK_ERR_INTERRUPTED (after max_renewals); or
 *          DLOCK_ERR_LOST (a renewal found the key gone or taken, or the
 *          local deadline passed: last renewal + lease - drift allowance). */
int dlock_check(dlock_handle *h);

/* Sleeps ms milliseconds holding h, the interruptible way.
 * returns: DLOCK_OK after the full time; at once DLOCK_ERR_INTERRUPTED or
 *          _LOST when that happens to h. */
int dlock_sleep(dlock_handle *h, int ms);

/* This acquisition's fencing token (key 0's; _at: key i's): greater than
 * every token issued earlier for the key, across Redis restarts too, while
 * Redis's clock does not go back (else dlock_fence_raise) and below 2^53.
 * Hand-offs of one lease share it and differ in dlock_handoff_seq. */
int64_t dlock_fence(const dlock_handle *h);
int64_t dlock_fence_at(const dlock_handle *h, int i);

/* Raises key i's fencing token (key 0 for a lock, a permit or a read-write
 * hold) above floor, the token a store refused h for (lock/README.md,
 * "Fences that go back"): only while the key holds h's token, the counter
 * becomes max(counter, floor) + 1, h's fence from now on (over several
 * servers, written back to a majority). Take floor only from the store the
 * fence guards.
 * returns: DLOCK_OK, dlock_fence_at(h, i) > floor (nothing sent when it was).
 * runs on: h's holder's thread, or one it waits for; never after release.
 * errors:  DLOCK_ERR_LOST (the key is no longer ours: h is lost from now on);
 *          _INTERRUPTED or _LOST, nothing sent, when h was already; _REDIS
 *          or _AUTH, h's fence unchanged (also for a counter past 2^53 - 1);
 *          _INVALID, nothing sent: no key i, or floor > DLOCK_FENCE_MAX. */
int dlock_fence_raise_at(dlock_handle *h, int i, int64_t floor);
int dlock_fence_raise(dlock_handle *h, int64_t floor); /* key 0 */

/* 0 for a lease from Redis, n for its n-th local hand-off (key 0's; _at: key
 * i's). (fence, seq) pairs of one key strictly increase in holding order. */
int dlock_handoff_seq(const dlock_handle *h);
int dlock_handoff_seq_at(const dlock_handle *h, int i);

/* What h holds: its keys in canonical order (1 but for a multi-lock) and
 * their names, key 0's token, the renewals since it got the lock (a
 * multi-lock: its most renewed key's), and the handles of its hold not yet
 * released (nested ones too; 1 but for a reentrant hold). Strings are
 * owned by h. */
int dlock_key_count(const dlock_handle *h);
const char *dlock_key(const dlock_handle *h);
const char *dlock_key_at(const dlock_handle *h, int i);
const char *dlock_token(const dlock_handle *h);
int dlock_renewals(const dlock_handle *h);
int dlock_hold_count(const dlock_handle *h);

/* Work done under a lock: gets the live holder (for dlock_check, dlock_sleep,
 * dlock_fence) and the caller's argument; its result is passed back. */
typedef int (*dlock_fn)(dlock_handle *h, void *arg);

/* Acquires key (_multi: keys, as dlock_acquire_multi), runs fn, and always
 * releases: the C counterpart of a @DistributedLock annotation.
 * returns: DLOCK_OK, fn ran (*fn_rc its result) and the lock was ours to the
 *          end; DLOCK_ERR_INTERRUPTED or _LOST, fn ran but the holder was
 *          interrupted or lost the lock meanwhile (fn must dlock_check
 *          before it commits).
 * owns:    fn_rc may be NULL.
 * errors:  an acquire's (TIMEOUT, REDIS, AUTH, INVALID, NOMEM): fn did not
 *          run, *fn_rc left alone. */
int dlock_run(dlock_client *c, const char *key, const dlock_opts *opts, dlock_fn fn, void *arg,
              int *fn_rc);
int dlock_run_multi(dlock_client *c, const char *const *keys, int n, const dlock_opts *opts,
                    dlock_fn fn, void *arg, int *fn_rc);

/* The client's counters into *out, a snapshot (dlock_stats). */
void dlock_stats_read(dlock_client *c, dlock_stats *out);

DLOCK_END_DECLS

#endif
