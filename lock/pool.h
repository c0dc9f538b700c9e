/* pool.h - Redis connections for the lock library: a thread-safe free list that
 * grows on demand, and the lock's Lua scripts run by SHA. */
#ifndef DLOCK_POOL_H
#define DLOCK_POOL_H

#include <hiredis/hiredis.h>

#include "dlock.h"

typedef struct dlock_pool dlock_pool;

/* The scripts (pool.c documents each). Acquire and release take KEYS lock,
 * fence, queue, alive, gone (keys_of in dlock.c derives them from the lock key). */
enum dlock_script {
    DLOCK_SCRIPT_ACQUIRE, /* ARGV: token, lease_ms, queue_ms, keep_ms -> {1,fence} | {0,pttl} */
    DLOCK_SCRIPT_RELEASE, /* ARGV: token, channel, grant_ms, leaving, keep_ms -> 1 released |
                           * 0 not ours */
    DLOCK_SCRIPT_RENEW,   /* KEYS: lock; ARGV: token, lease_ms -> 1 renewed | 0 not ours */
    DLOCK_SCRIPT_COUNT
};

/* Returns a pool (no connection opened yet) for cfg's Redis, or NULL when out
 * of memory. Strings are copied. */
dlock_pool *dlock_pool_new(const dlock_config *cfg);
void dlock_pool_free(dlock_pool *p);

/* Takes an idle connection or opens one. Returns NULL (dlock_errstr set) when
 * Redis can't be reached. Give it back with dlock_pool_put. */
redisContext *dlock_pool_get(dlock_pool *p);

/* Returns ctx to the pool. A broken ctx (ctx->err) is closed instead, together
 * with every idle connection: they most likely broke the same way. */
void dlock_pool_put(dlock_pool *p, redisContext *ctx);

/* Opens a connection outside the pool (the watchdog's own), authenticated
 * when a password is configured. NULL on failure (dlock_errstr set; the code
 * is DLOCK_ERR_AUTH when Redis refused the credentials). */
redisContext *dlock_pool_connect(dlock_pool *p);

/* Connections opened or attempted so far, for the client's stats. */
uint64_t dlock_pool_connects(dlock_pool *p);

/* PING on ctx: DLOCK_OK, DLOCK_ERR_AUTH or DLOCK_ERR_REDIS (errstr set). */
int dlock_pool_ping(redisContext *ctx);

/* Runs script with argv: nkeys keys then the script's arguments, nargs in all
 * (binary-safe, at most 10). Returns the reply,
 * owned by the caller (freeReplyObject), or NULL with dlock_errstr set when the
 * connection failed (ctx->err is then set) or Redis answered an error. */
redisReply *dlock_pool_script(dlock_pool *p, redisContext *ctx, enum dlock_script script,
                              int nkeys, int nargs, const char **argv, const size_t *lens);

#endif
