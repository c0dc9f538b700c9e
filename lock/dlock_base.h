/* dlock_base.h - what every part of libdlock's API names, and none of it
 * needs a client: result codes, limits, the config and options with their
 * defaults and checks, keys and their Redis names, the counters' shape, the
 * opaque handles and the asynchronous request. A program includes dlock.h
 * (or a sibling), which includes this; the library's own files see only
 * this (lock/README.md, "The headers, by use"). */
#ifndef DLOCK_BASE_H
#define DLOCK_BASE_H

#include <stddef.h>
#include <stdint.h>

/* What the public headers declare between these two is libdlock.so's
 * interface (the rest is built hidden), and C's for a C++ program. */
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
    DLOCK_ERR_AUTH = -7,        /* Redis refused our credentials (AUTH, NOAUTH, or an ACL
                                 * user's command, key or channel): nothing was done */
    DLOCK_ERR_CLOSED = -8,      /* the client was freed while the asynchronous call waited:
                                 * it holds nothing */
    DLOCK_ERR_CANCELLED = -9,   /* the asynchronous call was withdrawn (dlock_cancel): it
                                 * holds nothing */
};

/* How a waiter learns that the lock it wants was released (lock/README.md,
 * "How it behaves"); never mix them on one key: spin starves notify. */
enum dlock_wait_mode {
    DLOCK_WAIT_NOTIFY = 0, /* a local FIFO per key, its head in Redis's line: granted in
                            * order, woken by the release; hand-offs between local holders */
    DLOCK_WAIT_SPIN = 1,   /* every waiter retries every retry_ms (jittered) on its own */
};

typedef struct dlock_client dlock_client; /* a process's connection to Redis (dlock.h) */
typedef struct dlock_handle dlock_handle; /* a holder of a lock, a permit or a read-write hold */
typedef struct dlock_req dlock_req;       /* an asynchronous call (dlock_async.h) */

/* One Redis server of a quorum. */
typedef struct dlock_endpoint {
    char host[DLOCK_HOST_MAX + 1];
    int port;
} dlock_endpoint;

/* Where Redis is, how long to wait for it, and who we are to it: one server
 * (host, port), several as a quorum or a cluster's seeds (node[]), or the
 * primary Sentinels name; the same credentials and timeouts for each.
 * dlock_config_defaults sets every field; dlock_client_new copies the
 * strings. Passwords never appear in an error text. */
typedef struct dlock_config {
    const char *host;       /* default "127.0.0.1"; used when nodes is 0 */
    int port;               /* default 6379 */
    int nodes;              /* default 0: host:port alone; else node[0..nodes-1] */
    dlock_endpoint node[DLOCK_NODES_MAX];
    int connect_timeout_ms; /* default 500: bound on opening a connection */
    int command_timeout_ms; /* default 1000: bound on one command's round trip */
    const char *username;   /* default NULL: Redis's default user; else an ACL user */
    const char *password;   /* default NULL: no AUTH; else every connection sends AUTH */
    int cluster;            /* default 0; 1: node[] are a Redis Cluster's seeds, and a key
                             * without a hash tag ({...}) is refused (lock/README.md,
                             * "Redis Cluster") */
    int sentinels;                  /* default 0; > 0: the server is the primary that
                                     * sentinel[] name for master_name, followed across
                                     * failovers (nodes 0; lock/README.md, "Sentinel") */
    dlock_endpoint sentinel[DLOCK_SENTINELS_MAX];
    const char *master_name;        /* default NULL; required with sentinels */
    const char *sentinel_username;  /* default NULL: the Sentinels' default user */
    const char *sentinel_password;  /* default NULL: no AUTH to the Sentinels */
    int async_threads;              /* default 2 (1..64): the threads that step
                                     * asynchronous calls */
    /* default NULL; where an asynchronous call's done runs (dlock_async.h) */
    void (*post)(void *ctx, struct dlock_req *req);
    void *post_ctx;
} dlock_config;

/* Per-acquisition behaviour: dlock_opts_defaults gives the values below, and
 * so does NULL where options are taken (lock/README.md, "Options"). */
typedef struct dlock_opts {
    int lease_ms;     /* 30000: the key's TTL (PX); renewed at lease_ms/3 while held */
    int wait_ms;      /* 10000: how long acquire keeps trying; 0 = try exactly once */
    int retry_ms;     /* 100 (1..lease_ms): pause between tries, jittered 0.5x..1.5x; also
                       * sizes a waiter's grace in line and its grants (lock/README.md,
                       * "How long a grant lasts") */
    int max_renewals; /* 30: renewals before the holder is interrupted; 0 = never */
    int watchdog;     /* 1: renew while held; 0: the lease simply runs out */
    int wait_mode;    /* DLOCK_WAIT_NOTIFY (default) or DLOCK_WAIT_SPIN */
    int handoff_max;  /* 8: notify mode: hand-offs of one lease to local waiters in a row,
                       * fewer while other processes take turns; 0 = never (lock/README.md,
                       * "How long a turn is") */
    int handoff_ms;   /* 100: ... and none once the lease is this old */
    int reentrant;    /* 0: a thread asking for a key it holds is refused; 1: it gets a
                       * nested hold at once (lock/README.md, "Reentrancy") */
} dlock_opts;

/* The histograms' upper bounds, the last +Inf: waits in ms, holds in us
 * (mostly sub-millisecond under hand-off), a server's round trips in us. */
#define DLOCK_WAIT_BUCKETS 12
#define DLOCK_HOLD_BUCKETS 16
#define DLOCK_LATENCY_BUCKETS 10
extern const int dlock_wait_bucket_ms[DLOCK_WAIT_BUCKETS];
extern const int dlock_hold_bucket_us[DLOCK_HOLD_BUCKETS];
extern const int dlock_latency_bucket_us[DLOCK_LATENCY_BUCKETS];

/* A client's counters since dlock_client_new (dlock_stats_read: a snapshot,
 * each counter read on its own). */
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
    uint64_t moved, asked;  /* Redis Cluster: calls redirected by MOVED (the map fixed, the
                             * call redone) and by ASK (redone once at the other node) */
    uint64_t tryagain;      /* Redis Cluster: calls answered TRYAGAIN (a migration split
                             * their keys), asked again after a pause */
} dlock_stats;

/* One Redis server as seen from this client (dlock_node_info_read). */
typedef struct dlock_node_info {
    char name[DLOCK_HOST_MAX + 10]; /* "host:port", or "sentinel:<master name>" */
    int up;                         /* its last call was answered (1 before the first) */
    uint64_t calls, errors;         /* calls sent to it; of which failed (no answer in time,
                                     * no connection, or an error reply) */
    uint64_t latency_sum_us;        /* round trips of the answered calls */
    uint64_t latency_buckets[DLOCK_LATENCY_BUCKETS]; /* non-cumulative counts */
} dlock_node_info;

/* The Redis keys and channel a lock of key uses besides key (dlock_names_of),
 * for ACLs, monitoring and clean-up; each expires on its own. */
typedef struct dlock_names {
    char fence[DLOCK_KEY_MAX + 8];    /* key:fence, the fencing counter */
    char queue[DLOCK_KEY_MAX + 8];    /* key:queue, waiting tokens in arrival order */
    char alive[DLOCK_KEY_MAX + 8];    /* key:alive, each waiting token's deadline */
    char gone[DLOCK_KEY_MAX + 8];     /* key:gone, tokens given up */
    char channel[DLOCK_KEY_MAX + 16]; /* key:released, where releases are published */
} dlock_names;

/* How an asynchronous call ends, req's rc, h and err filled.
 * runs on: where cfg.post says (dlock_async.h), once per call; must not block.
 * owns:    req again: reuse or free it, from inside too (libdlock touches it
 *          no more once it called done, or post).
 * (The parentheses make it a type the export checks don't take for a call.) */
typedef void(dlock_req_fn)(dlock_req *req);

/* One asynchronous call (dlock_async.h), the caller's: embed it in your own
 * request, as libuv's uv_work_t. Alive from the call that takes it until its
 * done ran; one call at a time. */
struct dlock_req {
    dlock_req_fn *done; /* caller's: how the call ends; runs exactly once */
    void *data;         /* caller's */
    int rc;             /* in done: DLOCK_OK or a DLOCK_ERR_* code */
    dlock_handle *h;    /* in done: the holder when an acquire got it (rc DLOCK_OK), else NULL */
    char err[200];      /* in done: rc's detail ("" for DLOCK_OK), as dlock_errstr() says it
                         * on the thread that saw the call end */
    dlock_req *next;    /* the executor's: a link of its own while it holds req */
    void *priv;         /* libdlock's */
};

/* Fill *cfg (one server, 127.0.0.1:6379; every default above) and *opts. */
void dlock_config_defaults(dlock_config *cfg);
void dlock_opts_defaults(dlock_opts *opts);

/* Set cfg's servers from "host:port[,host:port...]" ("[v6addr]:port" for
 * IPv6): _nodes, 1..DLOCK_NODES_MAX of them, an odd number, held by a
 * majority (a quorum; port 6379 by default); _cluster, seeds of a Redis
 * Cluster, any number (cluster = 1: a key needs a hash tag, at most
 * DLOCK_NODES_MAX primaries over the client's life); _sentinels,
 * 1..DLOCK_SENTINELS_MAX Sentinels (port 26379 by default) naming the
 * primary for cfg->master_name (set it too).
 * returns: DLOCK_OK.
 * errors:  DLOCK_ERR_INVALID, dlock_errstr() naming the bad entry; cfg
 *          unchanged. */
int dlock_config_nodes(dlock_config *cfg, const char *list);
int dlock_config_cluster(dlock_config *cfg, const char *seeds);
int dlock_config_sentinels(dlock_config *cfg, const char *list);

/* Checks opts as every acquire does, so that a program that takes them from
 * its user refuses them at start. Thread-safe.
 * returns: DLOCK_OK.
 * errors:  DLOCK_ERR_INVALID, dlock_errstr() naming the field (lease_ms
 *          DLOCK_LEASE_MIN_MS..MAX_MS, retry_ms 1..lease_ms, the others
 *          >= 0, a known wait_mode, reentrant 0 or 1). */
int dlock_opts_check(const dlock_opts *opts);

/* Checks a key as every acquire does: 1..DLOCK_KEY_MAX bytes, no control byte.
 * returns: DLOCK_OK.
 * errors:  DLOCK_ERR_INVALID, dlock_errstr() saying why. */
int dlock_key_check(const char *key, size_t len);

/* Fills *out with key's names (key at most DLOCK_KEY_MAX bytes). */
void dlock_names_of(const char *key, dlock_names *out);

/* A code's static text ("lock wait timed out", ...); and the calling thread's
 * last failure in detail, valid until its next call into libdlock. */
const char *dlock_strerror(int code);
const char *dlock_errstr(void);

DLOCK_END_DECLS

#endif
