/* pool.c - Redis connections for the lock library: a thread-safe free list that
 * grows on demand, and the lock's Lua scripts run by SHA (EVAL as fallback). */
#include <stdio.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define POOL_IDLE_MAX 256 /* idle connections kept; more are closed on return */
#define STALE_CHECK_MS 50 /* idle longer than this: check it was not closed meanwhile */

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

static const char *const script_body[DLOCK_SCRIPT_COUNT] = {acquire_lua, release_lua, renew_lua};

struct dlock_pool {
    char *host;
    int port;
    char *username, *password; /* NULL: no AUTH */
    struct timeval connect_tv, command_tv;
    pthread_mutex_t mu; /* guards idle, nidle and sha */
    redisContext *idle[POOL_IDLE_MAX];
    int64_t idle_since[POOL_IDLE_MAX]; /* CLOCK_MONOTONIC ms */
    int nidle;
    char sha[DLOCK_SCRIPT_COUNT][41]; /* "" until SCRIPT LOAD answered */
    _Atomic uint64_t connects;        /* connections opened or attempted */
};

static struct timeval ms_to_tv(int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    return tv;
}

/* Frees a secret after overwriting it, so it does not linger in freed memory. */
static void free_secret(char *s)
{
    if (s)
        explicit_bzero(s, strlen(s));
    free(s);
}

void dlock_pool_free(dlock_pool *p)
{
    if (p == NULL)
        return;
    for (int i = 0; i < p->nidle; i++)
        redisFree(p->idle[i]);
    pthread_mutex_destroy(&p->mu);
    free(p->host);
    free(p->username);
    free_secret(p->password);
    free(p);
}

dlock_pool *dlock_pool_new(const dlock_config *cfg)
{
    dlock_pool *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    pthread_mutex_init(&p->mu, NULL);
    p->host = strdup(cfg->host);
    p->username = cfg->username ? strdup(cfg->username) : NULL;
    p->password = cfg->password ? strdup(cfg->password) : NULL;
    if (p->host == NULL || (cfg->username && !p->username) || (cfg->password && !p->password)) {
        dlock_pool_free(p);
        return NULL;
    }
    p->port = cfg->port;
    p->connect_tv = ms_to_tv(cfg->connect_timeout_ms);
    p->command_tv = ms_to_tv(cfg->command_timeout_ms);
    return p;
}

static redisReply *checked(redisContext *ctx, redisReply *r);

/* AUTH [username] password on a new connection. 0, or -1 with the error set. */
static int authenticate(dlock_pool *p, redisContext *ctx)
{
    const char *argv[3];
    size_t lens[3];
    int n = 0;
    argv[n] = "AUTH", lens[n++] = 4;
    if (p->username)
        argv[n] = p->username, lens[n++] = strlen(p->username);
    argv[n] = p->password, lens[n++] = strlen(p->password);
    redisReply *r = checked(ctx, redisCommandArgv(ctx, n, argv, lens));
    if (r == NULL)
        return -1;
    freeReplyObject(r);
    return 0;
}

uint64_t dlock_pool_connects(dlock_pool *p) { return atomic_load(&p->connects); }

redisContext *dlock_pool_connect(dlock_pool *p)
{
    atomic_fetch_add(&p->connects, 1);
    redisContext *ctx = redisConnectWithTimeout(p->host, p->port, p->connect_tv);
    if (ctx == NULL) {
        dlock_fail(DLOCK_ERR_NOMEM, "out of memory connecting to Redis");
        return NULL;
    }
    if (ctx->err) {
        dlock_fail(DLOCK_ERR_REDIS, "cannot connect to Redis at %s:%d: %s", p->host, p->port,
                   ctx->errstr);
        redisFree(ctx);
        return NULL;
    }
    if (redisSetTimeout(ctx, p->command_tv) != REDIS_OK) {
        dlock_fail(DLOCK_ERR_REDIS, "cannot set Redis command timeout: %s", ctx->errstr);
        redisFree(ctx);
        return NULL;
    }
    redisEnableKeepAlive(ctx);
    if (p->password && authenticate(p, ctx) != 0) {
        redisFree(ctx);
        return NULL;
    }
    return ctx;
}

/* An idle connection has nothing to read; if its socket is readable, the
 * server closed it (restart, timeout) and a command on it would fail. Only
 * worth a syscall after a pause: a Redis restart takes far longer than
 * STALE_CHECK_MS, and the free list is LIFO, so under load the connection
 * handed out was given back microseconds ago. */
static int looks_closed(const redisContext *ctx, int64_t idle_since)
{
    if (dlock_now_ms() - idle_since < STALE_CHECK_MS)
        return 0;
    struct pollfd pfd = {.fd = ctx->fd, .events = POLLIN};
    return poll(&pfd, 1, 0) != 0;
}

redisContext *dlock_pool_get(dlock_pool *p)
{
    for (;;) {
        redisContext *ctx = NULL;
        int64_t since = 0;
        pthread_mutex_lock(&p->mu);
        if (p->nidle > 0) {
            ctx = p->idle[--p->nidle];
            since = p->idle_since[p->nidle];
        }
        pthread_mutex_unlock(&p->mu);
        if (ctx == NULL)
            return dlock_pool_connect(p);
        if (!looks_closed(ctx, since))
            return ctx;
        redisFree(ctx);
    }
}

void dlock_pool_put(dlock_pool *p, redisContext *ctx)
{
    redisContext *drop[POOL_IDLE_MAX + 1];
    int ndrop = 0;

    pthread_mutex_lock(&p->mu);
    if (ctx->err) {
        drop[ndrop++] = ctx;
        while (p->nidle > 0)
            drop[ndrop++] = p->idle[--p->nidle];
    } else if (p->nidle < POOL_IDLE_MAX) {
        p->idle_since[p->nidle] = dlock_now_ms();
        p->idle[p->nidle++] = ctx;
    } else {
        drop[ndrop++] = ctx;
    }
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < ndrop; i++)
        redisFree(drop[i]); /* outside the mutex: closing sockets can be slow */
}

/* Whether an error reply is about who we are: a wrong or missing password
 * (WRONGPASS, NOAUTH) or an ACL user that may not run a command or touch a
 * key or channel (NOPERM, also when a script's redis.call hits it). */
static int is_auth_error(const redisReply *r)
{
    return strncmp(r->str, "WRONGPASS", 9) == 0 || strncmp(r->str, "NOAUTH", 6) == 0 ||
           strstr(r->str, "NOPERM") != NULL ||
           strstr(r->str, "The user executing the script can't") != NULL;
}

/* Passes r through, or frees it and returns NULL with the error recorded when
 * the connection failed (ctx->err set) or Redis answered an error (ctx usable). */
static redisReply *checked(redisContext *ctx, redisReply *r)
{
    if (r == NULL) {
        dlock_fail(DLOCK_ERR_REDIS, "Redis connection failed: %s",
                   ctx->err ? ctx->errstr : "no reply");
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        int len = (int)r->len - (r->len > 0 && r->str[r->len - 1] == '.');
        if (is_auth_error(r))
            dlock_fail(DLOCK_ERR_AUTH, "Redis authentication failed: %.*s", len, r->str);
        else
            dlock_fail(DLOCK_ERR_REDIS, "Redis error: %.*s", len, r->str);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

int dlock_pool_ping(redisContext *ctx)
{
    redisReply *r = checked(ctx, redisCommand(ctx, "PING"));
    freeReplyObject(r);
    return r ? DLOCK_OK : dlock_redis_failure();
}

static redisReply *command(redisContext *ctx, int argc, const char **argv, const size_t *lens)
{
    return checked(ctx, redisCommandArgv(ctx, argc, argv, lens));
}

/* Loads the script once per pool; the SHA stays valid for every connection. */
static int script_sha(dlock_pool *p, redisContext *ctx, enum dlock_script s, char sha[41])
{
    pthread_mutex_lock(&p->mu);
    memcpy(sha, p->sha[s], 41);
    pthread_mutex_unlock(&p->mu);
    if (sha[0] != '\0')
        return 0;

    const char *argv[] = {"SCRIPT", "LOAD", script_body[s]};
    size_t lens[] = {6, 4, strlen(script_body[s])};
    redisReply *r = command(ctx, 3, argv, lens);
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
    pthread_mutex_lock(&p->mu);
    memcpy(p->sha[s], sha, 41);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

#define SCRIPT_ARGS_MAX 10

redisReply *dlock_pool_script(dlock_pool *p, redisContext *ctx, enum dlock_script s, int nkeys,
                              int nargs, const char **args, const size_t *arg_lens)
{
    const char *argv[3 + SCRIPT_ARGS_MAX];
    size_t lens[3 + SCRIPT_ARGS_MAX];
    char sha[41], nkeys_str[16];

    if (nargs > SCRIPT_ARGS_MAX) {
        dlock_fail(DLOCK_ERR_INVALID, "too many script arguments");
        return NULL;
    }
    if (script_sha(p, ctx, s, sha) != 0)
        return NULL;
    int n = snprintf(nkeys_str, sizeof(nkeys_str), "%d", nkeys);
    argv[0] = "EVALSHA", lens[0] = 7;
    argv[1] = sha, lens[1] = 40;
    argv[2] = nkeys_str, lens[2] = (size_t)n;
    memcpy(argv + 3, args, (size_t)nargs * sizeof(*args));
    memcpy(lens + 3, arg_lens, (size_t)nargs * sizeof(*arg_lens));

    redisReply *r = redisCommandArgv(ctx, 3 + nargs, argv, lens);
    if (r != NULL && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0) {
        /* Redis restarted or flushed its script cache: send the body, which reloads it. */
        freeReplyObject(r);
        argv[0] = "EVAL", lens[0] = 4;
        argv[1] = script_body[s], lens[1] = strlen(script_body[s]);
        r = redisCommandArgv(ctx, 3 + nargs, argv, lens);
    }
    return checked(ctx, r);
}
