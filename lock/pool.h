/* pool.h - connections to one Redis server: a thread-safe free list that
 * grows on demand, authenticated when a password is configured, and the
 * checking of replies (an error reply becomes an error code and text).
 * With Sentinel (cfg->sentinels > 0) the server is the primary the
 * Sentinels name, followed across failovers (lock/README.md, "Sentinel"). */
#ifndef DLOCK_POOL_H
#define DLOCK_POOL_H

#include <hiredis/hiredis.h>

#include "lock/counters.h"
#include "lock/internal.h"

typedef struct dlock_pool dlock_pool;

/* A pool (no connection opened yet) for the Redis at host:port, with cfg's
 * timeouts and credentials, counting connection attempts in
 * counters->connects. With cfg->sentinels > 0, host:port is ignored: the
 * pool asks the Sentinels (a thread of its own follows them). Strings are
 * copied. NULL when out of memory or threads. */
dlock_pool *dlock__pool_new(const dlock_config *cfg, const char *host, int port,
                            dlock_counters *counters);
void dlock__pool_free(dlock_pool *p);

/* Takes an idle connection or opens one. Returns NULL (dlock_errstr set, its
 * code DLOCK_ERR_AUTH when Redis refused our credentials) when Redis can't be
 * used. Give it back with dlock__pool_put. */
redisContext *dlock__pool_get(dlock_pool *p);

/* Returns ctx to the pool. A broken ctx (ctx->err, or broken set: say a
 * reply is still owed on it) is closed instead, together with every idle
 * connection: they most likely broke the same way (with Sentinel, the
 * Sentinels are asked again). So is one to an earlier primary. */
void dlock__pool_put(dlock_pool *p, redisContext *ctx, int broken);

/* Opens a connection outside the pool (a thread's own), authenticated when a
 * password is configured. NULL on failure, as dlock__pool_get. */
redisContext *dlock__pool_connect(dlock_pool *p);

/* 1 when ctx, a connection from this pool, is to a primary the Sentinels
 * no longer name (close it and open another), else 0 (always without
 * Sentinel). */
int dlock__pool_stale(dlock_pool *p, const redisContext *ctx);

/* Passes r, the reply of a command on ctx, through; or frees it and returns
 * NULL with the error set when the connection failed (ctx->err is then set)
 * or Redis answered an error: DLOCK_ERR_AUTH for a refused password or ACL
 * permission (WRONGPASS, NOAUTH, NOPERM, also from inside a script),
 * DLOCK_ERR_REDIS otherwise. READONLY and MASTERDOWN (the server is no
 * longer a primary) also set ctx->err, so that ctx is closed, not reused. */
redisReply *dlock__pool_checked(redisContext *ctx, redisReply *r);

#endif
