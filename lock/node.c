/* node.c - one Redis server and everything the lock says to it: the Lua
 * scripts, run by SHA (EVAL as fallback), PING, and pub/sub requests. */
#include "node.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "pool.h"

/* Shared Lua pieces. KEYS: lock, fence counter, queue (ZSET of waiting tokens
 * by arrival: each newcomer scores one more than the last, so two that
 * arrive within one millisecond keep their order), alive (HASH token ->
 * deadline in Redis ms), gone (ZSET of given-up tokens -> until when, in
 * Redis ms, they may not take the key).
 *
 * A fence is max(INCR of the counter, Redis's clock in microseconds), and the
 * counter is moved up to it: tokens keep growing when Redis loses the counter
 * (a restart without persistence, or its expiry) or brings back an older one
 * (from an RDB or AOF file), as long as the key sees fewer than a million
 * acquisitions a second on average and Redis's clock does not go back.
 *
 * No key lives forever: the lock has its lease, the counter and the gone set
 * keep_ms (DLOCK_KEEP_LEASES leases) after their last write, the queue and
 * alive keys until the last waiter's deadline.
 *
 * Waiters that registered in the queue get the lock in arrival order: a
 * release grants it to the first one whose deadline has not passed (a waiter
 * refreshes it on every try, so a crashed one drops out quickly). */
#define LUA_HELPERS                                                                \
    "local function now_ms()\n"                                                    \
    "  local t = redis.call('time')\n"                                             \
    "  return t[1] * 1000 + math.floor(t[2] / 1000)\n"                             \
    "end\n"                                                                        \
    "local function keep(key, ms)\n"                                                \
    "  if redis.call('pttl', key) < tonumber(ms) then\n"                           \
    "    redis.call('pexpire', key, ms)\n"                                         \
    "  end\n"                                                                      \
    "end\n"                                                                        \
    "local function next_fence(keep_ms)\n"                                         \
    "  local t = redis.call('time')\n"                                             \
    "  local now_us = t[1] .. string.format('%06d', tonumber(t[2]))\n"             \
    "  local fence = redis.call('incr', KEYS[2])\n"                                \
    "  if fence < tonumber(now_us) then\n"                                         \
    "    redis.call('set', KEYS[2], now_us)\n"                                     \
    "    fence = tonumber(now_us)\n"                                               \
    "  end\n"                                                                      \
    "  redis.call('pexpire', KEYS[2], keep_ms)\n"                                  \
    "  return fence\n"                                                             \
    "end\n"                                                                        \
    "local function dequeue(token)\n"                                              \
    "  redis.call('zrem', KEYS[3], token)\n"                                       \
    "  redis.call('hdel', KEYS[4], token)\n"                                       \
    "end\n"                                                                        \
    "local function first_live()\n"                                                \
    "  local now = nil\n"                                                          \
    "  while true do\n"                                                            \
    "    local first = redis.call('zrange', KEYS[3], 0, 0)[1]\n"                   \
    "    if not first then return false end\n"                                     \
    "    now = now or now_ms()\n"                                                  \
    "    local deadline = tonumber(redis.call('hget', KEYS[4], first))\n"          \
    "    if deadline and deadline > now then return first end\n"                   \
    "    dequeue(first)\n"                                                         \
    "  end\n"                                                                      \
    "end\n"

/* Acquire. ARGV: token, lease_ms, queue_ms (0: don't queue), keep_ms.
 * Returns {1, fence} when the key is ours (taken now, or granted to us by a
 * release: then the lease is restarted), or {0, pttl} (pttl -1: free, but
 * another waiter is first in line; -2: the token was given up, see release).
 * Never SETNX then EXPIRE: one atomic step. */
static const char acquire_lua[] =
    LUA_HELPERS
    "local gone = redis.call('zscore', KEYS[5], ARGV[1])\n"
    "if gone and tonumber(gone) > now_ms() then return {0, -2} end\n"
    "local holder = redis.call('get', KEYS[1])\n"
    "if holder == ARGV[1] then\n" /* the release that granted it dequeued us */
    "  redis.call('pexpire', KEYS[1], ARGV[2])\n"
    "  local fence = tonumber(redis.call('get', KEYS[2]))\n"
    "  return {1, fence or next_fence(ARGV[4])}\n" /* the counter expired or was evicted */
    "end\n"
    "if not holder then\n"
    "  local first = first_live()\n"
    "  if not first or first == ARGV[1] then\n"
    "    redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])\n"
    "    if first then dequeue(ARGV[1]) end\n"
    "    return {1, next_fence(ARGV[4])}\n"
    "  end\n"
    "end\n"
    "if tonumber(ARGV[3]) > 0 then\n"
    "  if not redis.call('zscore', KEYS[3], ARGV[1]) then\n"
    "    local last = redis.call('zrange', KEYS[3], -1, -1, 'WITHSCORES')[2]\n"
    "    redis.call('zadd', KEYS[3], last and tonumber(last) + 1 or 0, ARGV[1])\n"
    "  end\n"
    "  redis.call('hset', KEYS[4], ARGV[1], now_ms() + tonumber(ARGV[3]))\n"
    "  keep(KEYS[3], ARGV[3])\n"
    "  keep(KEYS[4], ARGV[3])\n"
    "end\n"
    "if not holder then return {0, -1} end\n"
    "return {0, redis.call('pttl', KEYS[1])}\n";

/* Release. ARGV: token, channel, grant_ms, leaving, keep_ms. leaving is 1
 * for a token given up (a waiter that stopped waiting, an acquire or release
 * whose reply was lost): it leaves the queue and is marked gone for keep_ms,
 * so that an acquire of it still on its way (a connection that timed out
 * may deliver it later) can never take the key. Only our own key is touched:
 * it goes to the first live waiter for grant_ms (it restarts the lease when
 * it claims it) or is deleted; the channel gets the new holder's token, or
 * "" for nobody. */
static const char release_lua[] =
    LUA_HELPERS
    "if ARGV[4] == '1' then\n"
    "  dequeue(ARGV[1])\n"
    "  local now = now_ms()\n"
    "  redis.call('zremrangebyscore', KEYS[5], '-inf', now)\n"
    "  redis.call('zadd', KEYS[5], now + tonumber(ARGV[5]), ARGV[1])\n"
    "  keep(KEYS[5], ARGV[5])\n"
    "end\n"
    "if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end\n"
    "local next = first_live()\n"
    "if next then\n"
    "  redis.call('set', KEYS[1], next, 'PX', ARGV[3])\n"
    "  next_fence(ARGV[5])\n"
    "  dequeue(next)\n"
    "  redis.call('publish', ARGV[2], next)\n"
    "else\n"
    "  redis.call('del', KEYS[1])\n"
    "  redis.call('publish', ARGV[2], '')\n"
    "end\n"
    "return 1\n";

static const char renew_lua[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then\n"
    "  return redis.call('pexpire', KEYS[1], ARGV[2])\n"
    "end\n"
    "return 0\n";

enum script { SCRIPT_ACQUIRE, SCRIPT_RELEASE, SCRIPT_RENEW, SCRIPT_COUNT };

static const char *const script_body[SCRIPT_COUNT] = {acquire_lua, release_lua, renew_lua};

#define SCRIPT_ARGS_MAX 10

struct dlock_node {
    dlock_pool *pool;
    dlock_counters *counters;
    pthread_mutex_t mu;           /* guards sha */
    char sha[SCRIPT_COUNT][41];   /* "" until SCRIPT LOAD answered */
};

dlock_node *dlock_node_new(const dlock_config *cfg, dlock_counters *counters)
{
    dlock_node *n = calloc(1, sizeof(*n));
    if (n == NULL)
        return NULL;
    if ((n->pool = dlock_pool_new(cfg, counters)) == NULL) {
        free(n);
        return NULL;
    }
    n->counters = counters;
    pthread_mutex_init(&n->mu, NULL);
    return n;
}

void dlock_node_free(dlock_node *n)
{
    if (n == NULL)
        return;
    dlock_pool_free(n->pool);
    pthread_mutex_destroy(&n->mu);
    free(n);
}

void dlock_names_of(const char *key, dlock_names *out)
{
    snprintf(out->fence, sizeof(out->fence), "%s:fence", key);
    snprintf(out->queue, sizeof(out->queue), "%s:queue", key);
    snprintf(out->alive, sizeof(out->alive), "%s:alive", key);
    snprintf(out->gone, sizeof(out->gone), "%s:gone", key);
    snprintf(out->channel, sizeof(out->channel), "%s" DLOCK_CHANNEL_SUFFIX, key);
}

/* Loads the script once per node; the SHA stays valid for every connection. */
static int script_sha(dlock_node *n, redisContext *ctx, enum script s, char sha[41])
{
    pthread_mutex_lock(&n->mu);
    memcpy(sha, n->sha[s], 41);
    pthread_mutex_unlock(&n->mu);
    if (sha[0] != '\0')
        return 0;
    const char *argv[] = {"SCRIPT", "LOAD", script_body[s]};
    size_t lens[] = {6, 4, strlen(script_body[s])};
    redisReply *r = dlock_pool_checked(ctx, redisCommandArgv(ctx, 3, argv, lens));
    if (r == NULL)
        return -1;
    if (r->type != REDIS_REPLY_STRING || r->len != 40) {
        dlock_fail(DLOCK_ERR_REDIS, "unexpected SCRIPT LOAD reply");
        freeReplyObject(r);
        return -1;
    }
    memcpy(sha, r->str, 40);
    sha[40] = '\0';
    freeReplyObject(r);
    pthread_mutex_lock(&n->mu);
    memcpy(n->sha[s], sha, 41);
    pthread_mutex_unlock(&n->mu);
    return 0;
}

/* EVALSHA on ctx with nkeys keys then the script's arguments, nargs in all.
 * The checked reply (caller frees) or NULL with the error set. */
static redisReply *eval(dlock_node *n, redisContext *ctx, enum script s, int nkeys, int nargs,
                        const char **args, const size_t *arg_lens)
{
    const char *argv[3 + SCRIPT_ARGS_MAX];
    size_t lens[3 + SCRIPT_ARGS_MAX];
    char sha[41], nkeys_str[16];
    if (script_sha(n, ctx, s, sha) != 0)
        return NULL;
    int len = snprintf(nkeys_str, sizeof(nkeys_str), "%d", nkeys);
    argv[0] = "EVALSHA", lens[0] = 7;
    argv[1] = sha, lens[1] = 40;
    argv[2] = nkeys_str, lens[2] = (size_t)len;
    memcpy(argv + 3, args, (size_t)nargs * sizeof(*args));
    memcpy(lens + 3, arg_lens, (size_t)nargs * sizeof(*arg_lens));
    redisReply *r = redisCommandArgv(ctx, 3 + nargs, argv, lens);
    if (r != NULL && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0) {
        /* Redis restarted or flushed its script cache: send the body, which reloads it */
        freeReplyObject(r);
        argv[0] = "EVAL", lens[0] = 4;
        argv[1] = script_body[s], lens[1] = strlen(script_body[s]);
        r = redisCommandArgv(ctx, 3 + nargs, argv, lens);
    }
    return dlock_pool_checked(ctx, r);
}

/* Runs a script on a pooled connection; NULL (counted, errstr set) on
 * failure. *sent tells whether it may have run: not when no connection could
 * be had or Redis refused our credentials. */
static redisReply *run(dlock_node *n, enum script s, int nkeys, int nargs, const char **argv,
                       const size_t *lens, int *sent)
{
    redisContext *ctx = dlock_pool_get(n->pool);
    redisReply *r = ctx ? eval(n, ctx, s, nkeys, nargs, argv, lens) : NULL;
    *sent = r != NULL || (ctx != NULL && dlock_redis_failure() != DLOCK_ERR_AUTH);
    if (ctx)
        dlock_pool_put(n->pool, ctx);
    if (r == NULL)
        dlock_count(&n->counters->redis_errors);
    return r;
}

int dlock_node_ping(dlock_node *n)
{
    redisContext *ctx = dlock_pool_get(n->pool);
    redisReply *r = ctx ? dlock_pool_checked(ctx, redisCommand(ctx, "PING")) : NULL;
    if (ctx)
        dlock_pool_put(n->pool, ctx);
    freeReplyObject(r);
    return r ? DLOCK_OK : dlock_redis_failure();
}

/* A number as a script argument, into buf; its length. */
static size_t arg_int(char buf[16], int64_t v)
{
    return (size_t)snprintf(buf, 16, "%lld", (long long)v);
}

int dlock_node_acquire(dlock_node *n, const dlock_node_acquire_args *a, int64_t *fence,
                       int64_t *pttl, int *sent)
{
    dlock_names k;
    char lease[16], queue[16], keep[16];
    dlock_names_of(a->key, &k);
    const char *argv[] = {a->key, k.fence, k.queue, k.alive, k.gone, a->token, lease, queue,
                          keep};
    size_t lens[] = {strlen(a->key), strlen(k.fence), strlen(k.queue), strlen(k.alive),
                     strlen(k.gone), DLOCK_TOKEN_LEN, arg_int(lease, a->lease_ms),
                     arg_int(queue, a->queue_ms), arg_int(keep, a->keep_ms)};
    redisReply *r = run(n, SCRIPT_ACQUIRE, 5, 9, argv, lens, sent);
    if (r == NULL)
        return dlock_redis_failure();
    int rc = DLOCK_ERR_REDIS;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[0]->type == REDIS_REPLY_INTEGER && r->element[1]->type == REDIS_REPLY_INTEGER) {
        rc = r->element[0]->integer == 1 ? DLOCK_OK : DLOCK_ERR_TIMEOUT;
        *(rc == DLOCK_OK ? fence : pttl) = r->element[1]->integer;
    } else {
        dlock_fail(rc, "unexpected reply to the acquire script");
    }
    freeReplyObject(r);
    return rc;
}

int dlock_node_release(dlock_node *n, const char *key, const char *token, int grant_ms,
                       int leaving, int keep_ms)
{
    dlock_names k;
    char grant[16], keep[16];
    dlock_names_of(key, &k);
    const char *argv[] = {key, k.fence, k.queue, k.alive, k.gone, token, k.channel, grant,
                          leaving ? "1" : "0", keep};
    size_t lens[] = {strlen(key), strlen(k.fence), strlen(k.queue), strlen(k.alive),
                     strlen(k.gone), DLOCK_TOKEN_LEN, strlen(k.channel), arg_int(grant, grant_ms),
                     1, arg_int(keep, keep_ms)};
    int sent;
    redisReply *r = run(n, SCRIPT_RELEASE, 5, 10, argv, lens, &sent);
    if (r == NULL)
        return dlock_redis_failure();
    int rc = (r->type == REDIS_REPLY_INTEGER && r->integer == 1) ? DLOCK_OK : DLOCK_ERR_LOST;
    if (rc == DLOCK_ERR_LOST)
        dlock_fail(rc, "lock %s was no longer ours at release", key);
    freeReplyObject(r);
    return rc;
}

/* The renew script's answer as a code (r freed): renewed, not ours, or the failure. */
static int renewed(dlock_node *n, redisReply *r)
{
    if (r == NULL) {
        dlock_count(&n->counters->redis_errors);
        return dlock_redis_failure();
    }
    int rc = (r->type == REDIS_REPLY_INTEGER && r->integer == 1) ? DLOCK_OK : DLOCK_ERR_LOST;
    freeReplyObject(r);
    return rc;
}

/* Sends every renewal at once (one write), then reads their replies in turn:
 * one round trip for them all. A NOSCRIPT reply is redone with the body. */
static void renew_pipelined(dlock_node *n, redisContext *ctx, int count,
                            const dlock_node_renewal *r, int *rcs)
{
    char sha[41], lease[16];
    int sent = 0;
    if (script_sha(n, ctx, SCRIPT_RENEW, sha) == 0)
        for (; sent < count; sent++) {
            const char *argv[] = {"EVALSHA", sha, "1", r[sent].key, r[sent].token, lease};
            size_t lens[] = {7, 40, 1, strlen(r[sent].key), DLOCK_TOKEN_LEN,
                             arg_int(lease, r[sent].lease_ms)};
            if (redisAppendCommandArgv(ctx, 6, argv, lens) != REDIS_OK)
                break;
        }
    for (int i = 0; i < count; i++) {
        void *reply = NULL;
        if (i >= sent || redisGetReply(ctx, &reply) != REDIS_OK) {
            rcs[i] = renewed(n, dlock_pool_checked(ctx, NULL));
            continue;
        }
        redisReply *rp = reply;
        if (rp->type == REDIS_REPLY_ERROR && strncmp(rp->str, "NOSCRIPT", 8) == 0) {
            freeReplyObject(rp); /* Redis lost its scripts: send the body this once */
            const char *argv[] = {r[i].key, r[i].token, lease};
            size_t lens[] = {strlen(r[i].key), DLOCK_TOKEN_LEN, arg_int(lease, r[i].lease_ms)};
            pthread_mutex_lock(&n->mu);
            n->sha[SCRIPT_RENEW][0] = '\0';
            pthread_mutex_unlock(&n->mu);
            rp = eval(n, ctx, SCRIPT_RENEW, 1, 3, argv, lens);
        } else {
            rp = dlock_pool_checked(ctx, rp);
        }
        rcs[i] = renewed(n, rp);
    }
}

void dlock_node_renew(dlock_node *n, redisContext **own, int count,
                      const dlock_node_renewal *renewals, int *rcs)
{
    if (*own == NULL && (*own = dlock_pool_connect(n->pool)) == NULL) {
        for (int i = 0; i < count; i++)
            rcs[i] = renewed(n, NULL);
        return;
    }
    renew_pipelined(n, *own, count, renewals, rcs);
    if ((*own)->err) { /* reconnect on the next call */
        redisFree(*own);
        *own = NULL;
    }
}

redisContext *dlock_node_subscriber(dlock_node *n) { return dlock_pool_connect(n->pool); }

int dlock_node_sub_request(redisContext *ctx, const char *key, int subscribe)
{
    dlock_names k;
    dlock_names_of(key, &k);
    return redisAppendCommand(ctx, subscribe ? "SUBSCRIBE %s" : "UNSUBSCRIBE %s", k.channel);
}
