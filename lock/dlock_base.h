/* dlock_base.h - what every part of libdlock's API names: result codes,
 * limits, the configuration and options (their defaults and checks), keys
 * and the Redis names derived from them, the counters' shape, the opaque
 * handles and the asynchronous request; none of it needs a client. Included
 * by dlock.h, which a program includes (or a sibling of it), and by the
 * library's own files (lock/internal.h), which include no other public
 * header. */
#ifndef DLOCK_BASE_H
#define DLOCK_BASE_H

#include <stddef.h>
#include <stdint.h>

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

typedef struct dlock_client dlock_client; /* a process's connection to Redis (dlock.h) */
typedef struct dlock_handle dlock_handle; /* a holder of a lock, a permit or a read-write hold */
typedef struct dlock_req dlock_req;       /* an asynchronous call (dlock_async.h) */

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

/* How a call ends, with req's rc, h and err filled.
 * runs on: where cfg.post says (dlock_async.h), exactly once per call; must not
 *          block (without post, every waiter of the client shares its threads).
 * owns:    req again: it may be reused, or freed, from inside (libdlock
 *          touches req no more once it called done, or post).
 * (In parentheses: a type, which the checks of what libdlock.so exports must
 * not take for a function.) */
typedef void(dlock_req_fn)(dlock_req *req);

/* One asynchronous call, owned by the caller: embed it in your own request,
 * as libuv's uv_work_t. Alive from the call that takes it until its done has
 * run; serves one call at a time, reusable once done has run. */
struct dlock_req {
    dlock_req_fn *done; /* caller's: how the call ends; runs exactly once */
    void *data;         /* caller's */
    int rc;             /* in done: DLOCK_OK or a DLOCK_ERR_* code */
    dlock_handle *h;    /* in done: the holder when an acquire got it (rc DLOCK_OK), else NULL */
    char err[200];      /* in done: rc's detail in words ("" for DLOCK_OK): dlock_errstr() is
                         * per thread and done may run on another */
    dlock_req *next;    /* the executor's: a link of its own while it holds req */
    void *priv;         /* libdlock's */
};

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

/* Checks a key: 1..DLOCK_KEY_MAX bytes, no NUL or other control byte.
 * Returns DLOCK_OK or DLOCK_ERR_INVALID (with dlock_errstr() saying why). */
int dlock_key_check(const char *key, size_t len);

/* Fills out for key (at most DLOCK_KEY_MAX bytes). */
void dlock_names_of(const char *key, dlock_names *out);

/* Static text for a code ("lock wait timed out", ...). */
const char *dlock_strerror(int code);

/* Details of the calling thread's last failure; valid until its next dlock call. */
const char *dlock_errstr(void);

DLOCK_END_DECLS

#endif
