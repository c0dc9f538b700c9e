/* node.h - one Redis server, and everything the lock says to it: the Lua
 * scripts (acquire, release, renew, fence write-back and raise), PING, and
 * the pub/sub requests, over that server's connection pool. Every function
 * is thread-safe; none holds a lock across I/O. quorum.h builds a lock over
 * several servers from these calls.
 *
 * Each call comes in two halves, so that a quorum can send a command to
 * every server before it waits for any: *_begin sends it, dlock__node_wait
 * waits for several calls together, *_end reads the result and gives the
 * connection back. One server's call is begin, wait, end.
 *
 * The scripts keep these keys per lock (dlock_names_of derives them): the
 * lease itself (key = owner token, PX lease), key:fence (the fencing
 * counter), key:queue (waiting tokens by arrival), key:alive (each waiter's
 * deadline), key:gone (tokens given up, refused if their acquire arrives
 * late), and the channel key:released. scripts.c documents each script. */
#ifndef DLOCK_NODE_H
#define DLOCK_NODE_H

#include <hiredis/hiredis.h>
#include <stdint.h>

#include "lock/counters.h"
#include "lock/internal.h"
#include "lock/scripts.h"

#define DLOCK_CHANNEL_SUFFIX ":released"
#define DLOCK_NODE_ARGS_MAX 12

typedef struct dlock_node dlock_node;

/* How a Redis Cluster node turned a call away (cluster.h): not at all, MOVED
 * (the slot lives elsewhere now), ASK (this key is being migrated: ask
 * there, once) or TRYAGAIN (a migration split the script's keys). */
enum dlock_redirect {
    DLOCK_REDIRECT_NONE,
    DLOCK_REDIRECT_MOVED,
    DLOCK_REDIRECT_ASK,
    DLOCK_REDIRECT_TRYAGAIN
};

/* A node for the Redis at host:port with cfg's timeouts and credentials (no
 * connection opened yet), counting failed calls in counters->redis_errors.
 * With cfg->cluster its scripts publish with SPUBLISH and its subscriber
 * uses SSUBSCRIBE (sharded pub/sub). NULL when out of memory. */
dlock_node *dlock__node_new(const dlock_config *cfg, const char *host, int port,
                            dlock_counters *counters);
void dlock__node_free(dlock_node *n);

/* "host:port". */
const char *dlock__node_name(const dlock_node *n);

/* Its state as seen from here (dlock_node_info in dlock_base.h). */
void dlock__node_report(dlock_node *n, dlock_node_info *out);

/* A call in flight on one node: begun (its commands sent), its replies read
 * by dlock__node_wait, ended by the *_end of the same kind. The caller owns
 * the storage; strings passed to *_begin must live until *_end. */
typedef struct dlock_node_call {
    dlock_node *node;
    redisContext *ctx;   /* the connection it runs on */
    redisContext **own;  /* the caller's own connection slot, or NULL: pooled */
    int script, nkeys, nargs; /* a single script call: what to redo on NOSCRIPT */
    const char *argv[DLOCK_NODE_ARGS_MAX];
    size_t lens[DLOCK_NODE_ARGS_MAX];
    char num[6][24];     /* the call's numeric arguments as text */
    char text[128];      /* and a composite one */
    dlock_names names;
    int expect, got;     /* replies */
    redisReply *reply[DLOCK_MULTI_MAX];
    int rc;              /* DLOCK_OK, or the failure: no connection, no answer in time */
    int sent;            /* the command may have reached Redis */
    int broken;          /* the connection can't be used again (a reply may be owed) */
    int64_t began_us;
    char err[200];       /* the failure's text */
    int asking;          /* send ASKING before its script (dlock__node_ask_next) */
    int asked;           /* it was sent: again before a NOSCRIPT's redo */
    int redirect;        /* enum dlock_redirect: how a cluster node turned it away */
    int redirect_slot;   /* MOVED, ASK: the slot, and the node it named */
    char redirect_to[DLOCK_HOST_MAX + 10];
} dlock_node_call;

/* The next call this thread begins sends ASKING first on its connection
 * (after an ASK redirect; cluster.c). */
void dlock__node_ask_next(void);

/* One command (argv[0..argc-1], NUL-terminated), blocking: the checked
 * reply (caller frees) or NULL with the error set. CLUSTER SLOTS, here. */
redisReply *dlock__node_command(dlock_node *n, int argc, const char *const *argv);

/* Waits until every call has all its replies, failed, or deadline_ms
 * (CLOCK_MONOTONIC) passed (then it fails as timed out), reading replies
 * in whatever order the servers answer. */
void dlock__node_wait(dlock_node_call *const *calls, int n, int64_t deadline_ms);

/* When a call begun now must have answered: now + the command timeout. */
int64_t dlock__node_deadline(const dlock_node *n);

/* PING. end: DLOCK_OK, DLOCK_ERR_AUTH or DLOCK_ERR_REDIS (errstr set). */
void dlock__node_ping_begin(dlock_node *n, dlock_node_call *call);
int dlock__node_ping_end(dlock_node_call *call);

/* What an acquire asks for. */
typedef struct dlock_node_acquire_args {
    const char *key, *token;
    int lease_ms;
    int queue_ms; /* > 0: when the key is taken, queue the token with this deadline */
    int keep_ms;  /* how long the fence counter outlives this write */
    int64_t queue_score; /* the token's place in the queue; 0: after the last one */
    int64_t seed_slack_us; /* reseed the counter from the clock only when it lags this much */
    int grant_ms;          /* a quorum that gives the key back grants it this long */
    int64_t sent_ms;       /* when this is sent (the caller's clock): a grant to the token
                            * queued now names it */
} dlock_node_acquire_args;

/* What an acquire found out. */
typedef struct dlock_acquired {
    int64_t fence; /* DLOCK_OK: the fencing token */
    int64_t pttl;  /* DLOCK_ERR_TIMEOUT: the key's TTL in ms, negative when unknown */
    int sent;      /* the script may have run (it has not when no connection could be
                    * had or Redis refused our credentials) */
} dlock_acquired;

/* The acquire script. end: DLOCK_OK (out->fence set: the key is ours,
 * taken now or granted to us by a release), DLOCK_ERR_TIMEOUT
 * (another owner holds the key or is first in line; out->pttl set),
 * DLOCK_ERR_REDIS or DLOCK_ERR_AUTH; out->sent in every case. */
void dlock__node_acquire_begin(dlock_node *n, const dlock_node_acquire_args *a,
                               dlock_node_call *call);
int dlock__node_acquire_end(dlock_node_call *call, dlock_acquired *out);

/* What a release asks for: if the key holds token, it goes to the first
 * live waiter for grant_ms or is deleted, and the channel is told. leaving
 * gives the token up (out of the queue, marked gone for keep_ms). When the
 * key went to another waiter, next (when not NULL: the token of this
 * process's next local waiter) takes its place in line behind the others,
 * as its own acquire would have, with a deadline of next_queue_ms,
 * next_score as its place (0: by the server's clock), next_sent_ms as
 * its acquire's sent_ms and next_grant_ms as the least a grant to it lasts
 * (its own acquire's min(queue_ms, lease_ms)). A grant lasts the longer of
 * grant_ms and the waiter's own. */
typedef struct dlock_node_release_args {
    const char *key, *token;
    int grant_ms, leaving, keep_ms;
    int64_t seed_slack_us; /* as for acquire, for the fence a grant issues */
    const char *next;
    int next_queue_ms, next_grant_ms;
    int64_t next_score, next_sent_ms;
} dlock_node_release_args;

/* The release script. end: DLOCK_OK, DLOCK_ERR_LOST (the key was not ours),
 * DLOCK_ERR_REDIS or DLOCK_ERR_AUTH; *queued (may be NULL) is 1 when DLOCK_OK
 * and next was put in line. */
void dlock__node_release_begin(dlock_node *n, const dlock_node_release_args *a,
                               dlock_node_call *call);
int dlock__node_release_end(dlock_node_call *call, int *queued);

/* The fence write-back script: raises key's fence counter to at least
 * fence, only while target (the lease's: the key itself, a writer's
 * key:writer, or a ZSET of permits or readers) holds token. end: DLOCK_OK
 * (raised, or already as high), DLOCK_ERR_LOST (the lease is not ours
 * there), DLOCK_ERR_REDIS or DLOCK_ERR_AUTH. */
void dlock__node_fence_begin(dlock_node *n, const char *key, const char *target,
                             const char *token, int64_t fence, int keep_ms,
                             dlock_node_call *call);
int dlock__node_fence_end(dlock_node_call *call);

/* What a fence raise asks for: while target holds token (member: while
 * token is a live member of the ZSET target), key's fence counter becomes
 * max(counter, floor) + 1, the holder's new fence (scripts.c). */
typedef struct dlock_node_raise_args {
    const char *key;    /* the lock's key, whose counter is key:fence */
    const char *target; /* the Redis key the lease lives in (lease.h) */
    const char *token;
    int64_t floor;
    int keep_ms; /* how long the counter outlives this write */
    int member;  /* 1: a permit's or reader's lease, a ZSET member */
} dlock_node_raise_args;

/* The fence raise script. end: DLOCK_OK (*fence set), DLOCK_ERR_LOST (the
 * lease is not ours there), DLOCK_ERR_REDIS or DLOCK_ERR_AUTH. */
void dlock__node_raise_begin(dlock_node *n, const dlock_node_raise_args *a,
                             dlock_node_call *call);
int dlock__node_raise_end(dlock_node_call *call, int64_t *fence);

/* One lease to renew. */
typedef struct dlock_node_renewal {
    const char *key, *token;
    int lease_ms;
    enum dlock_script script; /* its renew script: the lock's, or a ZSET member's (lease.h) */
    int need; /* with several servers, how many must renew it; 0: a majority */
} dlock_node_renewal;

/* The renew script (PEXPIRE lease_ms if the key holds token) for count
 * leases at once, pipelined in one round trip, on *own, a connection of the
 * caller's, opened or replaced here as needed. end: rcs[i] gets DLOCK_OK
 * (renewed), DLOCK_ERR_LOST (not ours), DLOCK_ERR_REDIS or DLOCK_ERR_AUTH. */
void dlock__node_renew_begin(dlock_node *n, redisContext **own, int count,
                             const dlock_node_renewal *renewals, dlock_node_call *call);
void dlock__node_renew_end(dlock_node_call *call, int count, const dlock_node_renewal *renewals,
                           int *rcs);

/* Script s with argv[0..nkeys-1] its keys and the rest its arguments,
 * nargs (<= DLOCK_NODE_ARGS_MAX) in all, NUL-terminated and living until
 * end: for scripts whose calls need no more than that (the semaphore's).
 * end: the checked reply (the caller frees it), or NULL with the error set
 * (dlock__redis_failure() tells which). */
void dlock__node_script_begin(dlock_node *n, enum dlock_script s, int nkeys, int nargs,
                              const char *const *argv, dlock_node_call *call);
redisReply *dlock__node_script_end(dlock_node_call *call);

/* A connection of the caller's own for pub/sub (authenticated), or NULL. */
redisContext *dlock__node_subscriber(dlock_node *n);

/* 1 when n is a Redis Cluster node: sharded pub/sub (SSUBSCRIBE, SPUBLISH). */
int dlock__node_sharded(const dlock_node *n);

/* 1 when ctx, a connection of the caller's own, is to a primary Sentinel no
 * longer names: close it and ask for another. 0 without Sentinel. */
int dlock__node_stale(dlock_node *n, const redisContext *ctx);

/* Appends SUBSCRIBE (subscribe = 1) or UNSUBSCRIBE of key's release channel
 * to ctx's output buffer (SSUBSCRIBE, SUNSUBSCRIBE on a cluster node n).
 * REDIS_OK or REDIS_ERR. */
int dlock__node_sub_request(const dlock_node *n, redisContext *ctx, const char *key,
                            int subscribe);

#endif
