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

#include <stddef.h>
#include <stdint.h>

/* The library's version; the shared library's soname carries the major
 * (libdlock.so.3), which changes only when a program built against an older
 * dlock.h would break: 2 when dlock_config grew (Sentinel, a cluster) and
 * dlock_stats with it, both allocated by the caller; 3 when dlock_config
 * grew again (async_threads, post) and the asynchronous acquires took a
 * request (dlock_async.h). */
#define DLOCK_VERSION "3.0.0"

/* Everything the public headers declare between these two is libdlock.so's
 * interface; the rest of the library is built hidden (-fvisibility=hidden),
 * so programs can't come to depend on it. Both also make the declarations
 * C's for a C++ program. */
#if defined(__GNUC__)
#define DLOCK_VISIBLE_ _Pragma("GCC visibility push(default)")
#define DLOCK_HIDDEN_ _Pragma("GCC visibility pop")
#else
#define DLOCK_VISIBLE_
#define DLOCK_HIDDEN_
#endif
#ifdef __cplusplus
#define DLOCK_BEGIN_DECLS DLOCK_VISIBLE_ extern "C" {
#define DLOCK_END_DECLS } DLOCK_HIDDEN_
#else
#define DLOCK_BEGIN_DECLS DLOCK_VISIBLE_
#define DLOCK_END_DECLS DLOCK_HIDDEN_
#endif

DLOCK_BEGIN_DECLS

#define DLOCK_KEY_MAX 512  /* longest key accepted, in bytes */
#define DLOCK_TOKEN_LEN 32 /* owner token: 128 random bits as lower-case hex */
#define DLOCK_MULTI_MAX 64 /* keys one multi-lock may hold */
#define DLOCK_LEASE_MIN_MS 10                  /* shortest lease_ms accepted */
#define DLOCK_LEASE_MAX_MS (24 * 3600 * 1000)  /* longest lease_ms accepted: a day */
#define DLOCK_NODES_MAX 7   /* independent Redis servers one client may use as a quorum */
#define DLOCK_HOST_MAX 255  /* longest host name, in bytes */
#define DLOCK_SENTINELS_MAX 7 /* Sentinels one client may ask for the primary */
#define DLOCK_MASTER_NAME_MAX 128 /* longest Sentinel master name, in bytes */
#define DLOCK_ASYNC_THREADS_DEFAULT 2 /* cfg.async_threads's default */
#define DLOCK_ASYNC_THREADS_MAX 64    /* ... and its largest */
/* The largest floor dlock_fence_raise takes, 2^53 - 2: fences are exact below
 * 2^53 only (Redis's Lua numbers are doubles), and a raised fence is at most
 * one more (lock/README.md, "Exact below 2^53"). */
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
    DLOCK_ERR_CLOSED = -8,      /* the client was freed while an asynchronous call was
                                 * pending: it holds nothing */
    DLOCK_ERR_CANCELLED = -9,   /* the asynchronous call was withdrawn (dlock_cancel): it
                                 * holds nothing */
};

/* How a waiter learns that the lock it wants was released. */
enum dlock_wait_mode {
    DLOCK_WAIT_NOTIFY = 0, /* local FIFO per key, whose head queues in Redis: a release grants
                            * the key to the first live waiter and PUBLISHes it (retry_ms stays
                            * a safety net); hand-offs between local holders */
    DLOCK_WAIT_SPIN = 1,   /* every thread retries every retry_ms (jittered) on its own; it
                            * never queues (don't mix the modes on one key: it would starve) */
};

struct dlock_req; /* an asynchronous call (dlock_async.h) */

/* One Redis server of a quorum. */
typedef struct dlock_endpoint {
    char host[DLOCK_HOST_MAX + 1];
    int port;
} dlock_endpoint;

/* Where Redis is, how long to wait for it, and who we are to it. Strings are
 * copied by dlock_client_new. One server (host, port) or several independent
 * ones (node[], a quorum: dlock_config_nodes); the same credentials and
 * timeouts for each. */
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
    int cluster;            /* default 0; 1: node[] are seeds of a Redis Cluster, each key
                             * goes to the primary owning its slot and needs a hash tag
                             * ({...}; dlock_config_cluster, lock/README.md "Redis Cluster") */
    /* Sentinel (lock/README.md, "Sentinel"): with sentinels > 0 the lock's one server
     * is the primary that the Sentinels sentinel[0..sentinels-1] name for master_name
     * (dlock_config_sentinels), followed across failovers; host and port are then
     * unused, and nodes must be 0 (a quorum of Sentinel-watched primaries is not
     * supported). username and password above are the data servers'. */
    int sentinels;                  /* default 0: no Sentinel */
    dlock_endpoint sentinel[DLOCK_SENTINELS_MAX];
    const char *master_name;        /* default NULL; required with sentinels */
    const char *sentinel_username;  /* default NULL: Sentinel's default user */
    const char *sentinel_password;  /* default NULL: no AUTH to the Sentinels; never in an
                                     * error text */
    int async_threads;   /* default 2 (1..64): libdlock's threads that run asynchronous calls'
                          * Redis steps and timers, however many wait */
    /* default NULL: an asynchronous call's done runs on one of those threads. Set: libdlock
     * calls post(post_ctx, req) once the call has ended, and the caller's executor then
     * calls req->done(req) on a thread of the caller's (dlock_async.h, "Where done runs") */
    void (*post)(void *ctx, struct dlock_req *req);
    void *post_ctx;
} dlock_config;

/* What an ACL user needs (ACL SETUSER name on >password ~<prefix>* &<prefix>*
 * DLOCK_ACL_COMMANDS): the commands the client sends and those its Lua
 * scripts call, for keys and channels under the lock keys' prefix. */
#define DLOCK_ACL_COMMANDS                                                                \
    "-@all +ping +evalsha +eval +script|load +subscribe +unsubscribe +get +set +del "    \
    "+exists +pexpire +pttl +incr +time +zadd +zrange +zrem +zscore +zremrangebyscore "  \
    "+zpopmin +zcard +hset +hget +hdel +publish +role"

/* Per-acquisition behaviour. dlock_opts_defaults() gives the values below;
 * passing NULL where options are expected means exactly those defaults. */
typedef struct dlock_opts {
    int lease_ms;     /* 30000: the key's TTL (PX); renewed at lease_ms/3 while held */
    int wait_ms;      /* 10000: how long acquire keeps trying; 0 = try exactly once */
    int retry_ms;     /* 100 (1..lease_ms): pause between tries, randomised to 0.5x..1.5x;
                       * in notify mode also a waiter's grace in line, 2 retry_ms + 100,
                       * and so how long a grant to it lasts (lock/README.md, "A turn
                       * between processes") */
    int max_renewals; /* 30: renewals before the holder is interrupted; 0 = never */
    int watchdog;     /* 1: renew while held; 0: the lease simply runs out */
    int wait_mode;    /* DLOCK_WAIT_NOTIFY (default) or DLOCK_WAIT_SPIN */
    int handoff_max;  /* 8: notify mode: consecutive hand-offs of one lease to local
                       * waiters before it goes back through Redis; 0 = never. Fewer
                       * while other processes take turns with the key (lock/README.md,
                       * "How long a turn is") */
    int handoff_ms;   /* 100: ... and no hand-off once the lease is this old, so other
                       * processes get their turn */
    int reentrant;    /* 0: a thread asking for a key it holds is refused at once;
                       * 1: it gets a nested hold at once (lock/README.md, "Reentrancy") */
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
                             * multi-lock counts; its wait counts once; a nested hold
                             * does not count) */
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
    uint64_t moved, asked;  /* Redis Cluster: calls redirected by MOVED (the slot had
                             * moved: the map is fixed, the call redone) and by ASK
                             * (a slot in migration: redone once at the other node) */
} dlock_stats;

void dlock_config_defaults(dlock_config *cfg);

/* Sets cfg's servers from "host:port[,host:port...]" (1..DLOCK_NODES_MAX of
 * them, an odd number; "[v6addr]:port" for IPv6; a host without a port gets
 * 6379): a lock is then held when a majority holds it. One server is the
 * same as host and port. Returns DLOCK_OK, or DLOCK_ERR_INVALID with
 * dlock_errstr() naming the bad entry (cfg unchanged). */
int dlock_config_nodes(dlock_config *cfg, const char *list);

/* Sets cfg's servers from "host:port[,host:port...]" as seed nodes of a
 * Redis Cluster (1..DLOCK_NODES_MAX of them, any number; cfg->cluster = 1):
 * the client learns the primaries from them (CLUSTER SLOTS) and sends each
 * call to the primary that owns its key's hash slot. A lock's key must then
 * carry a hash tag ("name:{tag}"), or its acquire fails DLOCK_ERR_INVALID.
 * At most DLOCK_NODES_MAX primaries over the client's life, seeds included.
 * Returns DLOCK_OK, or DLOCK_ERR_INVALID as dlock_config_nodes does. */
int dlock_config_cluster(dlock_config *cfg, const char *seeds);
/* Sets cfg's Sentinels from "host:port[,host:port...]" (1..DLOCK_SENTINELS_MAX;
 * a host without a port gets 26379, Sentinel's): the lock's server is then
 * the primary they name for cfg->master_name (set it too). Returns DLOCK_OK,
 * or DLOCK_ERR_INVALID with dlock_errstr() naming the bad entry (cfg
 * unchanged). */
int dlock_config_sentinels(dlock_config *cfg, const char *list);
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

/* Ends the asynchronous calls still pending (DLOCK_ERR_CLOSED, their done
 * called before it returns, directly: not through cfg.post), stops the
 * client's threads and closes every connection. All handles must have been
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
    char name[DLOCK_HOST_MAX + 10]; /* "host:port", or "sentinel:<master name>" */
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

/* The Redis keys and channel one lock uses besides key itself (the lease),
 * all derived from key: for operators (ACLs, monitoring, clean-up) and
 * tests. Each expires on its own (lock/README.md, "How it behaves"). */
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

DLOCK_END_DECLS

#endif
