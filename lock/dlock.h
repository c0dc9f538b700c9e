/* dlock.h - a Redis distributed lock: leases, waiting, watchdog renewal,
 * interruption after max renewals, fencing tokens.
 *
 * One dlock_client per process is the intended use: it owns a pool of Redis
 * connections and one watchdog thread that renews every lock held through it.
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
 * Thread safety: every function may be called from any number of threads at
 * once on one client. A handle belongs to the thread that acquired it; only
 * dlock_release() ends its life.
 *
 * Errors: functions return DLOCK_OK (0) or a negative DLOCK_ERR_* code;
 * dlock_errstr() gives the details of the calling thread's last failure.
 *
 * Several Redis servers (dlock_config_nodes, "Redlock"): N independent
 * servers, no replication between them; the lock is held when a majority
 * holds the key for our token. Every call goes to all N at once (sent to
 * each, the replies awaited together), so it costs the slowest round trip
 * of those that answer, not N round trips. A server that stops answering is
 * left out of calls for a moment (25 ms, doubling up to 1 s) instead of
 * making each call wait out its timeout, unless the others alone could not
 * make a majority.
 * - Acquire: held when a majority granted the key and the time left,
 *   lease - elapsed - drift (1% + 2 ms), is positive; otherwise the keys
 *   taken are released at once and acquire tries again until wait_ms
 *   (DLOCK_ERR_TIMEOUT), or fails with DLOCK_ERR_REDIS at once when too many
 *   servers failed for a majority to be possible.
 * - Fencing: each server keeps its own counter. The token is the largest
 *   fence the majority answered, written back (raised, never lowered) to the
 *   servers of the majority that answered less, by a script that does so only
 *   while the key there is still ours; the holder gets the lock only once a
 *   majority holds the token. Any later holder's majority shares a server
 *   with that one and draws its fence there after ours was written, so its
 *   token is larger. lock/README.md gives the whole argument and its limits
 *   (servers that come back empty, clocks).
 * - Renewal: a majority must renew, else the holder is lost; the local
 *   deadline runs from when the renewal was sent, so it never outlasts the
 *   slowest server of the majority. Release goes to every server; its
 *   result is a majority's.
 * - Notify mode: each waiter queues on every server with the same score (the
 *   wall clock when it began to wait, in us), so every server has the
 *   waiters in the same order, and a release grants the key on every server
 *   to the same first live waiter. The client subscribes on every server; a
 *   release heard from any of them wakes the waiter. Local hand-off is as
 *   with one server. Across hosts the order is as good as their clocks
 *   agree (NTP: a few ms). dlock_node_count / dlock_node_info_read /
 *   dlock_ping_each show each server's state. */
#ifndef DLOCK_H
#define DLOCK_H

#include <stddef.h>
#include <stdint.h>

/* The library's version; the shared library's soname carries the major
 * (libdlock.so.1), which changes only when a program built against an older
 * dlock.h would break. */
#define DLOCK_VERSION "1.0.0"

/* Everything declared here is libdlock.so's interface; the rest of the
 * library is built hidden (-fvisibility=hidden), so programs can't come to
 * depend on it. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif
#ifdef __cplusplus
extern "C" {
#endif

#define DLOCK_KEY_MAX 512  /* longest key accepted, in bytes */
#define DLOCK_TOKEN_LEN 32 /* owner token: 128 random bits as lower-case hex */
#define DLOCK_MULTI_MAX 64 /* keys one multi-lock may hold */
#define DLOCK_LEASE_MIN_MS 10                  /* shortest lease_ms accepted */
#define DLOCK_LEASE_MAX_MS (24 * 3600 * 1000)  /* longest lease_ms accepted: a day */
#define DLOCK_NODES_MAX 7   /* independent Redis servers one client may use as a quorum */
#define DLOCK_HOST_MAX 255  /* longest host name, in bytes */
/* The largest floor dlock_fence_raise takes, 2^53 - 2: fences are exact below
 * 2^53 only (Redis's Lua numbers are doubles), and a raised fence is at most
 * one more. Fences are max(counter + 1, Redis's clock in us): 2^53 us is some
 * 285 years of that clock, so only a record's token from a broken clock or
 * written by hand gets there. */
#define DLOCK_FENCE_MAX ((INT64_C(1) << 53) - 2)

enum dlock_code {
    DLOCK_OK = 0,
    DLOCK_ERR_TIMEOUT = -1,     /* waited wait_ms; the lock is still held by another owner */
    DLOCK_ERR_REDIS = -2,       /* Redis unreachable, too slow, or it answered an error */
    DLOCK_ERR_LOST = -3,        /* the lease expired or another owner holds the key */
    DLOCK_ERR_INTERRUPTED = -4, /* the watchdog stopped renewing after max_renewals */
    DLOCK_ERR_INVALID = -5,     /* bad key, config or options; nothing was sent */
    DLOCK_ERR_NOMEM = -6,       /* out of memory or threads */
    DLOCK_ERR_AUTH = -7,        /* Redis refused our credentials (AUTH failed, NOAUTH, or the
                                 * ACL user lacks a command, key or channel): nothing was done */
};

/* How a waiter learns that the lock it wants was released. */
enum dlock_wait_mode {
    DLOCK_WAIT_NOTIFY = 0, /* local FIFO per key, whose head queues in Redis: a release grants
                            * the key to the first live waiter and PUBLISHes it (retry_ms stays
                            * a safety net); hand-offs between local holders */
    DLOCK_WAIT_SPIN = 1,   /* every thread retries every retry_ms (jittered) on its own; it
                            * never queues (don't mix the modes on one key: it would starve) */
};

/* One Redis server of a quorum. */
typedef struct dlock_endpoint {
    char host[DLOCK_HOST_MAX + 1];
    int port;
} dlock_endpoint;

/* Where Redis is, how long to wait for it, and who we are to it. Strings are
 * copied by dlock_client_new. One server (host, port) or several independent
 * ones (node[], a quorum: see "Several Redis servers" below); the same
 * credentials and timeouts for each. */
typedef struct dlock_config {
    const char *host;       /* default "127.0.0.1"; used when nodes is 0 */
    int port;               /* default 6379 */
    int nodes;              /* default 0: host:port alone; else node[0..nodes-1] */
    dlock_endpoint node[DLOCK_NODES_MAX];
    int connect_timeout_ms; /* default 500: bound on opening a connection */
    int command_timeout_ms; /* default 1000: bound on one command's round trip */
    const char *username;   /* default NULL: Redis's default user; else an ACL user */
    const char *password;   /* default NULL: no AUTH. Every connection (the pool's, the
                             * watchdog's, the subscriber's) sends AUTH when it opens. The
                             * password never appears in an error text. */
} dlock_config;

/* What an ACL user needs (ACL SETUSER name on >password ~<prefix>* &<prefix>*
 * DLOCK_ACL_COMMANDS): the commands the client sends and those its Lua
 * scripts call, for keys and channels under the lock keys' prefix. */
#define DLOCK_ACL_COMMANDS                                                                \
    "-@all +ping +evalsha +eval +script|load +subscribe +unsubscribe +get +set +del "    \
    "+exists +pexpire +pttl +incr +time +zadd +zrange +zrem +zscore +zremrangebyscore "  \
    "+zpopmin +zcard +hset +hget +hdel +publish"

/* Per-acquisition behaviour. dlock_opts_defaults() gives the values below;
 * passing NULL where options are expected means exactly those defaults. */
typedef struct dlock_opts {
    int lease_ms;     /* 30000: the key's TTL (PX); renewed at lease_ms/3 while held */
    int wait_ms;      /* 10000: how long acquire keeps trying; 0 = try exactly once */
    int retry_ms;     /* 100 (1..lease_ms): pause between tries, randomised to
                       * 0.5x..1.5x. Notify mode: a waiter's grace is 2 retry_ms
                       * + 100; it stays in line that long after each try, and a
                       * release's grant to it lasts the longer of its grace and
                       * the releaser's (each at most lease_ms), or it would lose
                       * its place sooner than a silent waiter does. So a waiter
                       * that died holds the key up for its grace (its place until
                       * it drops out) plus that grant, which lapses */
    int max_renewals; /* 30: renewals before the holder is interrupted; 0 = never */
    int watchdog;     /* 1: renew while held; 0: the lease simply runs out */
    int wait_mode;    /* DLOCK_WAIT_NOTIFY (default) or DLOCK_WAIT_SPIN */
    int handoff_max;  /* 8: notify mode: consecutive hand-offs of one lease to local
                       * waiters before it goes back through Redis; 0 = never. Fewer
                       * when other processes take turns with the key: a lease taken
                       * from Redis while q other processes took turns since this
                       * one's last (the grants to their waiters it heard of) and n
                       * local waiters queue behind its holder makes at most
                       * max(1, 1.5 (q+1)(n+1)/q - 1) hand-offs, so that the others
                       * wait about 1.5x what strict FIFO over the (q+1)(n+1) holders
                       * would make them: 3 for 2 workers in each of 4 processes,
                       * handoff_max for 8 in each of 4 */
    int handoff_ms;   /* 100: ... and no hand-off once the lease is this old, so other
                       * processes get their turn */
    int reentrant;    /* 0: a thread asking for a key it holds is refused at once;
                       * 1: it gets a nested hold at once. See "Reentrancy" below */
} dlock_opts;

typedef struct dlock_client dlock_client;
typedef struct dlock_handle dlock_handle;

/* Counters since dlock_client_new; a consistent-enough snapshot, not atomic as a whole. */
#define DLOCK_WAIT_BUCKETS 12
extern const int dlock_wait_bucket_ms[DLOCK_WAIT_BUCKETS]; /* upper bounds; last is +Inf */
/* Hold times, acquisition to release, are mostly sub-millisecond under
 * hand-off, so their bounds are microseconds. */
#define DLOCK_HOLD_BUCKETS 16
extern const int dlock_hold_bucket_us[DLOCK_HOLD_BUCKETS]; /* upper bounds; last is +Inf */

typedef struct dlock_stats {
    uint64_t acquired;      /* keys acquired, through Redis or hand-off (each key of a
                             * multi-lock counts; its wait counts once) */
    uint64_t handoffs;      /* of which handed over locally, without Redis */
    uint64_t timeouts;      /* acquisitions that gave up after wait_ms */
    uint64_t renewals;      /* successful lease renewals */
    uint64_t interrupts;    /* holders interrupted after max_renewals */
    uint64_t lost;          /* holders that found their lease gone */
    uint64_t redis_errors;  /* commands that failed on the Redis side or the wire */
    uint64_t connects;      /* connections opened or attempted */
    uint64_t orphaned;      /* tokens whose acquire or release may have run unanswered,
                             * handed to background clean-up */
    uint64_t orphans_dropped; /* of which dropped untried: too many in doubt at once */
    uint64_t wait_count;    /* acquisitions that ended (acquired or timed out) */
    uint64_t wait_sum_ms;   /* total time they spent waiting */
    uint64_t wait_buckets[DLOCK_WAIT_BUCKETS]; /* non-cumulative counts per bucket */
    uint64_t hold_count;    /* holds released: of a lock, a read or write lock, a
                             * permit (a multi-lock is one hold; a reentrant hold is
                             * one, from its first acquire to its last release) */
    uint64_t hold_sum_us;   /* their total time held */
    uint64_t hold_buckets[DLOCK_HOLD_BUCKETS]; /* non-cumulative counts per bucket */
} dlock_stats;

void dlock_config_defaults(dlock_config *cfg);

/* Sets cfg's servers from "host:port[,host:port...]" (1..DLOCK_NODES_MAX of
 * them; "[v6addr]:port" for IPv6; a host without a port gets 6379). One
 * server is the same as host and port. Returns DLOCK_OK, or DLOCK_ERR_INVALID
 * with dlock_errstr() naming the bad entry (cfg unchanged). */
int dlock_config_nodes(dlock_config *cfg, const char *list);
void dlock_opts_defaults(dlock_opts *opts);

/* Checks opts as every acquire does: DLOCK_OK, or DLOCK_ERR_INVALID with
 * dlock_errstr() naming the field (lease_ms DLOCK_LEASE_MIN_MS..MAX_MS,
 * retry_ms 1..lease_ms, the others >= 0, a known wait_mode). For a program
 * that takes the options from its user: refuse them at start, not at the
 * first acquire. Thread-safe. */
int dlock_opts_check(const dlock_opts *opts);

/* Creates a client and starts its watchdog thread. Redis is contacted lazily,
 * so this succeeds while Redis is down. Returns DLOCK_OK with *out set, or
 * DLOCK_ERR_INVALID / DLOCK_ERR_NOMEM with *out NULL. Free with dlock_client_free. */
int dlock_client_new(const dlock_config *cfg, dlock_client **out);

/* Stops the watchdog and closes every connection. All handles must have been
 * released; NULL is a no-op. */
void dlock_client_free(dlock_client *c);

/* Returns DLOCK_OK when Redis (with several servers: a majority of them)
 * answers PING within the command timeout, else DLOCK_ERR_AUTH when it
 * refused our credentials, or DLOCK_ERR_REDIS. */
int dlock_ping(dlock_client *c);

/* One Redis server as seen from this client: for health checks and metrics. */
#define DLOCK_LATENCY_BUCKETS 10
extern const int dlock_latency_bucket_us[DLOCK_LATENCY_BUCKETS]; /* upper bounds; last +Inf */

typedef struct dlock_node_info {
    char name[DLOCK_HOST_MAX + 10]; /* "host:port" */
    int up;                         /* its last call was answered (1 before the first) */
    uint64_t calls, errors;         /* calls sent to it; of which failed (no answer in time,
                                     * no connection, or an error reply) */
    uint64_t latency_sum_us;        /* round trips of the answered calls */
    uint64_t latency_buckets[DLOCK_LATENCY_BUCKETS]; /* non-cumulative counts */
} dlock_node_info;

/* How many servers the client uses (1 for host:port). */
int dlock_node_count(dlock_client *c);

/* Server i's state (0 <= i < dlock_node_count). */
void dlock_node_info_read(dlock_client *c, int i, dlock_node_info *out);

/* dlock_ping, and which servers answered: up[i] is 1 for each that did. */
int dlock_ping_each(dlock_client *c, int up[DLOCK_NODES_MAX]);

/* Checks a key: 1..DLOCK_KEY_MAX bytes, no NUL or other control byte.
 * Returns DLOCK_OK or DLOCK_ERR_INVALID (with dlock_errstr() saying why). */
int dlock_key_check(const char *key, size_t len);

/* Reentrancy (dlock_opts.reentrant): the holder is the calling thread on
 * this client - the thread that acquired, until the release, wherever its
 * handle went: a thread that passes its handle to a worker and asks for the
 * key again is refused (off) or nested (on), not made to wait for the
 * worker; let the worker acquire, or use another dlock_client. Off by
 * default, unlike Redisson's RLock (reentrant because Java's locks are):
 * here a handle is the owner, with its own token and fence, passed to
 * whatever works under it (as stockd does), and a pool thread that leaked a
 * hold would otherwise re-enter it silently on its next task, the key never
 * leaving Redis. pthread mutexes make the same choice
 * (PTHREAD_MUTEX_RECURSIVE is asked for).
 * - Off: asking for a key the thread holds returns DLOCK_ERR_INVALID at once
 *   ("already held by this thread"; nothing sent), like an error-checking
 *   mutex's EDEADLK, instead of waiting wait_ms for itself.
 * - On: the thread gets a new handle at once, nested in its outermost hold
 *   of the key (no Redis call; the call's other options are not used).
 *   Every handle of the hold is released with dlock_release, in any order:
 *   only the last release hands the key over or releases it in Redis, so a
 *   waiting thread never gets it while the holder still has a handle of it.
 *   An earlier release sends nothing and returns the hold's dlock_check
 *   state; the handle released (the outermost one too) is not to be used
 *   again.
 * - Renewal, max_renewals, interruption and the fence are the outermost
 *   hold's: every handle reports them (dlock_check, dlock_sleep,
 *   dlock_fence, dlock_token, dlock_handoff_seq, dlock_renewals), and the
 *   last release returns DLOCK_ERR_INTERRUPTED or _LOST for the hold.
 * - Another thread, or this thread on another dlock_client, is another
 *   owner and waits as usual. A hold whose lease is lost holds nothing:
 *   asking again acquires anew, and its handles keep reporting LOST. A
 *   hold past its local deadline whose renewal has not yet come back (Redis
 *   slow or down) may or may not hold: asking again is refused at once,
 *   DLOCK_ERR_INVALID, until it is renewed or released. An interrupted hold
 *   still holds the key.
 * - dlock_acquire nests in the thread's multi-lock's part for the key (and
 *   sees the set's interruption). dlock_acquire_multi with a key the thread
 *   holds returns DLOCK_ERR_INVALID, reentrant or not, nothing sent: a set's
 *   renewal and max_renewals are its own, which they can't be for a key
 *   another hold rules.
 * - dlock_stats counts no nested acquisition (nothing was acquired). */

/* Acquires key for a new random owner token (SET NX PX inside a Lua script that
 * also issues the fencing token), waiting up to opts->wait_ms. In notify mode
 * the lock may instead be handed over by a local holder of the same key: the
 * lease (token, fence, TTL) is then shared, and dlock_handoff_seq() > 0.
 * Returns DLOCK_OK with *out set to a handle owned by the caller until
 * dlock_release(); or DLOCK_ERR_TIMEOUT, DLOCK_ERR_REDIS, DLOCK_ERR_AUTH,
 * DLOCK_ERR_INVALID (also: the thread holds key and reentrant is 0), DLOCK_ERR_NOMEM
 * with *out NULL. Never waits longer than wait_ms plus one command timeout. */
int dlock_acquire(dlock_client *c, const char *key, const dlock_opts *opts, dlock_handle **out);

/* Acquires the n keys (1..DLOCK_MULTI_MAX, distinct) as one lock, like
 * Redisson's RedissonMultiLock, for work that must hold them all (an order
 * of several items):
 * - Canonical order: the keys are taken one by one in byte order of their
 *   names, whatever order they are given in, so two holders wanting {a, b}
 *   and {b, a} can never deadlock. A key taken stays held while the next is
 *   waited for; all share one deadline, opts->wait_ms from the call.
 * - All or nothing: a timeout or error on any key releases the keys already
 *   taken and returns that error (*out NULL).
 * - Each key is acquired exactly as dlock_acquire does it, so single-key
 *   holders and waiters of the same keys share one queue per key: in notify
 *   mode a multi-lock waits its turn in each key's FIFO (local, then Redis's
 *   queue by arrival) and may get a key by hand-off from a local holder.
 *   Hand-off is bounded (handoff_max, handoff_ms), so a stream of single-key
 *   requests or batches cannot starve it: its wait for each key is bounded
 *   by the holders queued before it. Spin mode gives no such bound.
 * - Held: one renewal schedule for the set (the watchdog renews all keys in
 *   one pipelined round trip), max_renewals counted for the set (reaching it
 *   interrupts every key), dlock_check / dlock_sleep report the worst state
 *   of any key, dlock_release releases them all (last key first; each may be
 *   handed to a local waiter), and each key's own fencing token is
 *   dlock_fence_at(h, i) for the i-th key in canonical order (dlock_key_at).
 * Returns as dlock_acquire does. */
int dlock_acquire_multi(dlock_client *c, const char *const *keys, int n, const dlock_opts *opts,
                        dlock_handle **out);

/* Semaphore with leases, like Redisson's RPermitExpirableSemaphore: at
 * most permits_total holders of key at once, over every process that uses
 * it. Each permit is a lease of opts->lease_ms, renewed by the watchdog at
 * lease/3 and interrupted after max_renewals, exactly as a lock's; a
 * crashed holder's permit comes back once its lease runs out.
 * - Redis: key is a ZSET of permit tokens scored by their deadline (Redis
 *   TIME, ms); key:fence its fencing counter; key:released the channel a
 *   release publishes on. All in Lua (lock/README.md), so processes share
 *   it. Don't use a semaphore's key as a lock's key (a ZSET is no lease).
 * - permits_total is each call's own limit: a call is granted when fewer
 *   than its permits_total permits are held, whatever others passed. Give
 *   every caller of a key the same N; a smaller N only makes that caller
 *   more patient, a larger one lets the holders exceed the smaller N.
 * - Waiting: as opts->wait_mode. Notify: threads of this client that want
 *   key queue locally, the head asks Redis, and a release (published, or
 *   made here) or retry_ms wakes it; it is FIFO within a process, not
 *   between processes (nor is any waiter's wait bounded). Spin: each
 *   thread retries every jittered retry_ms. handoff_* and reentrant are
 *   not used: permits are never handed over, and a thread asking again
 *   takes a second permit (or waits for one).
 * - The handle is a dlock_handle, so one API serves both: dlock_release
 *   (DLOCK_ERR_LOST when the permit had expired or was gone; a Redis
 *   failure leaves it to run out on its own), dlock_check, dlock_sleep,
 *   dlock_renewals, dlock_token, dlock_key, dlock_fence (strictly
 *   increasing over the key's permits), dlock_hold_count (1),
 *   dlock_handoff_seq (0). Not for dlock_run or multi-locks.
 * - Several Redis servers (a quorum): not supported yet, refused with
 *   DLOCK_ERR_INVALID: a permit count agreed by a majority needs more than
 *   the lock's per-key ownership checks.
 * Returns as dlock_acquire does (DLOCK_ERR_TIMEOUT: all permits still held
 * after wait_ms); DLOCK_ERR_INVALID also for permits_total < 1. */
int dlock_sem_acquire(dlock_client *c, const char *key, int permits_total,
                      const dlock_opts *opts, dlock_handle **out);

/* Read-write lock on key: any number of readers at once, or one writer,
 * over every process that uses it (like Redisson's RReadWriteLock, with a
 * different fairness rule, below). Each hold is a lease of opts->lease_ms,
 * renewed by the watchdog at lease/3 and interrupted after max_renewals,
 * as a lock's; the handle is a dlock_handle, used as a semaphore's is
 * (dlock_release, dlock_check, dlock_sleep, dlock_renewals, dlock_token,
 * dlock_key, dlock_fence; not for dlock_run, multi-locks or reentrancy).
 * - Redis, all in Lua (lock/README.md): key is a ZSET of reader tokens
 *   scored by their lease deadline (Redis ms; a crashed reader's entry is
 *   dropped once it passed), key:writer the writer's token (PX lease),
 *   key:writers a ZSET of waiting writers, each entry standing for
 *   2 retry_ms + 100 ms unless that writer tries again; key:fence the
 *   counter; key:released the channel. Don't use the key for anything else.
 * - Fairness: writer preference. A reader gets in only while no writer
 *   holds and none waits, so the readers a waiting writer found drain and
 *   no new ones join them: a writer waits at most until the readers present
 *   when it arrived release (their lease, lease_ms, if they crashed; their
 *   max_renewals interruption, if they hang on) and the writers that get in
 *   before it. Writers among themselves are not ordered (FIFO within a
 *   process in notify mode only), and a steady stream of writers starves
 *   readers: the right rule when writes are rare and must not wait.
 * - Fencing: readers and writers draw from one counter, so every fence is
 *   larger than all earlier ones of the key, read or write.
 * - Waiting: as opts->wait_mode, as dlock_sem_acquire (local FIFO per
 *   key whose head retries on a published release, or every jittered
 *   retry_ms). A writer that times out withdraws its wish at once (after
 *   a Redis failure it runs out within 2 retry_ms + 100 ms). A thread
 *   that holds key and asks again waits like any other owner (a writer
 *   asking to read waits for itself until wait_ms).
 * - Several Redis servers (a quorum): refused with DLOCK_ERR_INVALID, as
 *   for the semaphore.
 * Returns as dlock_acquire does (DLOCK_ERR_TIMEOUT: a writer held or
 * waited, or for a writer: readers or a writer held, after wait_ms). */
int dlock_acquire_read(dlock_client *c, const char *key, const dlock_opts *opts,
                       dlock_handle **out);
int dlock_acquire_write(dlock_client *c, const char *key, const dlock_opts *opts,
                        dlock_handle **out);

/* Releases the lock and frees h. In notify mode, when a local thread waits for
 * the key and the hand-off bounds allow, the lease passes to it without a
 * Redis round trip. Otherwise the watchdog forgets the lease first, so no
 * renewal can follow, and a script, only if the key still holds our token,
 * grants it to the first live waiter in the key's Redis queue or deletes it,
 * then publishes on the key's release channel.
 * Returns DLOCK_OK; DLOCK_ERR_LOST when the lease had expired or another owner
 * held the key (which is left untouched); DLOCK_ERR_INTERRUPTED when h was
 * interrupted (the key is still deleted if ours); DLOCK_ERR_REDIS when Redis
 * did not answer (the watchdog then retries the release in the background, and
 * the lease expires on its own at the latest); DLOCK_ERR_AUTH when Redis now
 * refuses our credentials (the lease expires on its own). For a multi-lock,
 * the worst over its keys (LOST, then INTERRUPTED, then a Redis failure).
 * A handle of a reentrant hold that is not its last: see "Reentrancy".
 * NULL is a no-op. */
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
 * issued earlier for the same key, also across Redis restarts (the counter is
 * seeded from Redis's clock in microseconds when missing), as long as that
 * clock does not go back (else see dlock_fence_raise) and fences stay below
 * 2^53, where they are exact (DLOCK_FENCE_MAX). Holders that got the lease
 * by hand-off share its fence and differ in dlock_handoff_seq(). An acquire
 * that finds no fence above the key's counter (at its maximum, 2^63 - 1:
 * written by hand, or raised so far by a client older than DLOCK_FENCE_MAX)
 * fails with DLOCK_ERR_REDIS and takes nothing. */
int64_t dlock_fence(const dlock_handle *h);

/* Raises the fencing token of key i of h (dlock_key_at; 0 for a lock, a
 * permit or a read-write hold) above floor: for a holder that a store
 * refused because the record carries a larger token, floor. That happens
 * when fences went back: Redis's clock stepped forward and back (NTP
 * correcting a bad step), or the key's counter was lost (a restart without
 * persistence, an eviction, its expiry while the key was idle) while Redis's
 * clock was behind where it had been, and every holder is refused until the
 * clock catches up. One script (on every server of a quorum), only while the
 * key still holds h's token: the counter becomes max(counter, floor) + 1,
 * which is h's fence from now on (dlock_fence_at; later hand-offs of the
 * lease share it); with several servers, written back to a majority as an
 * acquisition's fence is (lock/README.md). Fencing stays safe: a holder
 * whose lease ran out, its key perhaps another's now, gets DLOCK_ERR_LOST
 * and stays refused; the raised fence is above every fence issued before it
 * and below every later one. Take floor only from the store the fence
 * guards. Call it from the thread that holds h, or one the holder waits for;
 * never while h is released.
 * Returns DLOCK_OK (dlock_fence_at(h, i) > floor; nothing sent when it
 * already was); DLOCK_ERR_LOST (the key is no longer ours: h is lost from
 * now on, as when a renewal finds that); DLOCK_ERR_INTERRUPTED or
 * DLOCK_ERR_LOST, nothing sent, when h was already; DLOCK_ERR_REDIS or
 * DLOCK_ERR_AUTH (not raised, h's fence unchanged: counters may be higher,
 * never lower; also when the counter is already past 2^53 - 1, where no exact
 * fence is left); DLOCK_ERR_INVALID, nothing sent, for no key i, or floor
 * above DLOCK_FENCE_MAX. */
int dlock_fence_raise_at(dlock_handle *h, int i, int64_t floor);
int dlock_fence_raise(dlock_handle *h, int64_t floor); /* key 0 */

/* 0 when the lease came from Redis, n for the n-th local hand-off of it.
 * (fence, seq) pairs of one key strictly increase in the order of holding. */
int dlock_handoff_seq(const dlock_handle *h);

const char *dlock_token(const dlock_handle *h); /* owned by h */
const char *dlock_key(const dlock_handle *h);   /* owned by h */
int dlock_renewals(const dlock_handle *h);      /* renewals since this holder got the lock
                                                 * (a multi-lock: its most renewed key) */

/* How many handles of h's hold (its outermost one and those nested in it,
 * see "Reentrancy") are not yet released: 1 when nothing nests in it, and
 * for a multi-lock, which never nests. */
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

/* The Redis keys and channel one lock uses besides key itself (the lease),
 * all derived from key: for operators (ACLs, monitoring, clean-up) and
 * tests. Each expires on its own (see the lock's README section). */
typedef struct dlock_names {
    char fence[DLOCK_KEY_MAX + 8];    /* key:fence, the fencing counter */
    char queue[DLOCK_KEY_MAX + 8];    /* key:queue, waiting tokens in arrival order */
    char alive[DLOCK_KEY_MAX + 8];    /* key:alive, each waiting token's deadline */
    char gone[DLOCK_KEY_MAX + 8];     /* key:gone, tokens given up */
    char channel[DLOCK_KEY_MAX + 16]; /* key:released, where releases are published */
} dlock_names;

/* Fills out for key (at most DLOCK_KEY_MAX bytes). */
void dlock_names_of(const char *key, dlock_names *out);

/* Static text for a code ("lock wait timed out", ...). */
const char *dlock_strerror(int code);

/* Details of the calling thread's last failure; valid until its next dlock call. */
const char *dlock_errstr(void);

#ifdef __cplusplus
}
#endif
#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
