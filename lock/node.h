/* node.h - one Redis server, and everything the lock says to it: the Lua
 * scripts (acquire, release, renew), PING, and the pub/sub requests, over
 * that server's connection pool. Every function is thread-safe; none holds a
 * lock across I/O. A quorum over several servers is built from these calls.
 *
 * The scripts keep these keys per lock (dlock_names_of derives them): the
 * lease itself (key = owner token, PX lease), key:fence (the fencing
 * counter), key:queue (waiting tokens by arrival), key:alive (each waiter's
 * deadline), key:gone (tokens given up, refused if their acquire arrives
 * late), and the channel key:released. node.c documents each script. */
#ifndef DLOCK_NODE_H
#define DLOCK_NODE_H

#include <hiredis/hiredis.h>
#include <stdint.h>

#include "counters.h"
#include "dlock.h"

#define DLOCK_CHANNEL_SUFFIX ":released"

typedef struct dlock_node dlock_node;

/* A node for cfg's Redis (no connection opened yet), counting failed calls
 * in counters->redis_errors. NULL when out of memory. */
dlock_node *dlock_node_new(const dlock_config *cfg, dlock_counters *counters);
void dlock_node_free(dlock_node *n);

/* DLOCK_OK when Redis answers PING within the command timeout, else
 * DLOCK_ERR_AUTH or DLOCK_ERR_REDIS (errstr set). */
int dlock_node_ping(dlock_node *n);

/* What an acquire asks for. */
typedef struct dlock_node_acquire_args {
    const char *key, *token;
    int lease_ms;
    int queue_ms; /* > 0: when the key is taken, queue the token with this deadline */
    int keep_ms;  /* how long the fence counter outlives this write */
} dlock_node_acquire_args;

/* Runs the acquire script. Returns DLOCK_OK (*fence set: the key is ours,
 * taken now or granted to us by a release), DLOCK_ERR_TIMEOUT (another owner
 * holds the key or is first in line; *pttl is the key's TTL in ms, negative
 * when unknown), DLOCK_ERR_REDIS or DLOCK_ERR_AUTH. *sent tells whether the
 * script may have run (it has not when no connection could be had or Redis
 * refused our credentials). */
int dlock_node_acquire(dlock_node *n, const dlock_node_acquire_args *a, int64_t *fence,
                       int64_t *pttl, int *sent);

/* Runs the release script for token: if the key holds it, the key goes to
 * the first live waiter for grant_ms or is deleted, and the channel is told.
 * leaving gives the token up (out of the queue, marked gone for keep_ms).
 * Returns DLOCK_OK, DLOCK_ERR_LOST (the key was not ours), DLOCK_ERR_REDIS
 * or DLOCK_ERR_AUTH. */
int dlock_node_release(dlock_node *n, const char *key, const char *token, int grant_ms,
                       int leaving, int keep_ms);

/* One lease to renew. */
typedef struct dlock_node_renewal {
    const char *key, *token;
    int lease_ms;
} dlock_node_renewal;

/* Runs the renew script (PEXPIRE lease_ms if the key holds token) for count
 * leases at once, pipelined in one round trip, on *own, a connection of the
 * caller's, opened or replaced here as needed. rcs[i] gets DLOCK_OK
 * (renewed), DLOCK_ERR_LOST (not ours), DLOCK_ERR_REDIS or DLOCK_ERR_AUTH. */
void dlock_node_renew(dlock_node *n, redisContext **own, int count,
                      const dlock_node_renewal *renewals, int *rcs);

/* A connection of the caller's own for pub/sub (authenticated), or NULL. */
redisContext *dlock_node_subscriber(dlock_node *n);

/* Appends SUBSCRIBE (subscribe = 1) or UNSUBSCRIBE of key's release channel
 * to ctx's output buffer. REDIS_OK or REDIS_ERR. */
int dlock_node_sub_request(redisContext *ctx, const char *key, int subscribe);

#endif
