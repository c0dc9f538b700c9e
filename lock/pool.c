/* pool.c - connections to one Redis server: a thread-safe free list that
 * grows on demand, authentication, host names resolved within the connect
 * timeout, and the checking of replies. With Sentinel, the server is the
 * primary the Sentinels name (sentinel.c): each new connection's ROLE is
 * checked, and connections to an earlier primary are dropped. */
#include "lock/pool.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lock/err.h"
#include "lock/sentinel.h"
#include "lock/sync.h"

#define POOL_IDLE_MAX 256 /* idle connections kept; more are closed on return */
#define STALE_CHECK_MS 50 /* idle longer than this: check it was not closed meanwhile */

/* Host names are looked up on a thread of the pool's own, so a request
 * waits at most the connect timeout for one: getaddrinfo waits out its
 * resolver's own timeouts (5 s for a name server that does not answer, as
 * Docker's does for the IPv6 address of a stopped container). A lookup
 * that takes longer leaves the last address found in use. */
struct resolver {
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t ask, done;
    uint64_t asked, answered; /* lookups asked for, and the last one finished */
    int found;                /* the last finished lookup found an address */
    char addr[INET6_ADDRSTRLEN];
    char why[160];            /* why the last lookup failed */
    int stop;
};

struct dlock_pool {
    char *host;
    int port;
    int numeric;           /* host is an address: no lookup */
    struct resolver names; /* otherwise */
    char *username, *password; /* NULL: no AUTH */
    struct timeval connect_tv, command_tv;
    pthread_mutex_t mu; /* guards idle and nidle */
    redisContext *idle[POOL_IDLE_MAX];
    int64_t idle_since[POOL_IDLE_MAX]; /* CLOCK_MONOTONIC ms */
    int nidle;
    dlock_counters *counters;
    dlock_sentinel *sentinel; /* NULL: host:port; else the primary it names ... */
    uint64_t gen;             /* ... of the generation the idle connections are of (mu) */
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

static void *resolve_loop(void *arg)
{
    dlock_pool *p = arg;
    struct resolver *r = &p->names;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!r->stop && r->answered == r->asked)
            pthread_cond_wait(&r->ask, &r->mu);
        if (r->stop)
            break;
        uint64_t serving = r->asked;
        pthread_mutex_unlock(&r->mu);
        struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
        int rc = getaddrinfo(p->host, NULL, &hints, &res);
        char addr[INET6_ADDRSTRLEN] = "";
        if (rc == 0) {
            void *in = res->ai_family == AF_INET6
                           ? (void *)&((struct sockaddr_in6 *)res->ai_addr)->sin6_addr
                           : (void *)&((struct sockaddr_in *)res->ai_addr)->sin_addr;
            inet_ntop(res->ai_family, in, addr, sizeof(addr));
            freeaddrinfo(res);
        }
        pthread_mutex_lock(&r->mu);
        r->found = rc == 0;
        if (rc == 0)
            memcpy(r->addr, addr, sizeof(addr));
        else
            snprintf(r->why, sizeof(r->why), "%s", gai_strerror(rc));
        r->answered = serving;
        pthread_cond_broadcast(&r->done);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* The address to connect to, into addr: p->host itself when it is one,
 * else a fresh lookup that finished within timeout_ms, or the last address
 * found when it did not finish in time. 0, or -1 with the error set. */
static int resolve(dlock_pool *p, int timeout_ms, char *addr, size_t size)
{
    if (p->numeric) {
        snprintf(addr, size, "%s", p->host);
        return 0;
    }
    struct resolver *r = &p->names;
    int64_t until = dlock__now_ms() + timeout_ms;
    pthread_mutex_lock(&r->mu);
    uint64_t mine = ++r->asked;
    pthread_cond_signal(&r->ask);
    while (r->answered < mine && dlock__now_ms() < until)
        dlock__cond_wait_until(&r->done, &r->mu, until);
    int ok = r->answered >= mine ? r->found : r->addr[0] != '\0';
    if (ok)
        snprintf(addr, size, "%s", r->addr);
    else if (r->answered >= mine)
        dlock__fail(DLOCK_ERR_REDIS, "cannot resolve Redis host %s: %s", p->host, r->why);
    else
        dlock__fail(DLOCK_ERR_REDIS, "cannot resolve Redis host %s within %d ms", p->host,
                    timeout_ms);
    pthread_mutex_unlock(&r->mu);
    return ok ? 0 : -1;
}

void dlock__pool_free(dlock_pool *p)
{
    if (p == NULL)
        return;
    if (p->names.started) {
        pthread_mutex_lock(&p->names.mu);
        p->names.stop = 1;
        pthread_cond_signal(&p->names.ask);
        pthread_mutex_unlock(&p->names.mu);
        pthread_join(p->names.thread, NULL);
    }
    pthread_mutex_destroy(&p->names.mu);
    pthread_cond_destroy(&p->names.ask);
    pthread_cond_destroy(&p->names.done);
    dlock__sentinel_free(p->sentinel);
    for (int i = 0; i < p->nidle; i++)
        redisFree(p->idle[i]);
    pthread_mutex_destroy(&p->mu);
    free(p->host);
    free(p->username);
    free_secret(p->password);
    free(p);
}

dlock_pool *dlock__pool_new(const dlock_config *cfg, const char *host, int port,
                            dlock_counters *counters)
{
    dlock_pool *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    pthread_mutex_init(&p->mu, NULL);
    pthread_mutex_init(&p->names.mu, NULL);
    dlock__cond_init(&p->names.ask);
    dlock__cond_init(&p->names.done);
    p->host = strdup(host);
    p->username = cfg->username ? strdup(cfg->username) : NULL;
    p->password = cfg->password ? strdup(cfg->password) : NULL;
    if (p->host == NULL || (cfg->username && !p->username) || (cfg->password && !p->password)) {
        dlock__pool_free(p);
        return NULL;
    }
    p->port = port;
    p->counters = counters;
    p->connect_tv = ms_to_tv(cfg->connect_timeout_ms);
    p->command_tv = ms_to_tv(cfg->command_timeout_ms);
    struct in6_addr ignored;
    p->numeric = inet_pton(AF_INET, host, &ignored) == 1 || inet_pton(AF_INET6, host, &ignored) == 1;
    if (cfg->sentinels > 0 && (p->sentinel = dlock__sentinel_new(cfg)) == NULL) {
        dlock__pool_free(p);
        return NULL;
    }
    if (!p->numeric && p->sentinel == NULL) {
        if (pthread_create(&p->names.thread, NULL, resolve_loop, p) != 0) {
            dlock__pool_free(p);
            return NULL;
        }
        p->names.started = 1;
    }
    return p;
}

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
    redisReply *r = dlock__pool_checked(ctx, redisCommandArgv(ctx, n, argv, lens));
    if (r == NULL)
        return -1;
    freeReplyObject(r);
    return 0;
}

/* A connection to addr:port (shown as host:port in errors), its command
 * timeout set, authenticated. NULL with the error set. */
static redisContext *open_at(dlock_pool *p, const char *addr, const char *host, int port)
{
    dlock__count(&p->counters->connects);
    redisContext *ctx = redisConnectWithTimeout(addr, port, p->connect_tv);
    if (ctx == NULL) {
        dlock__fail(DLOCK_ERR_NOMEM, "out of memory connecting to Redis");
        return NULL;
    }
    if (ctx->err) {
        dlock__fail(DLOCK_ERR_REDIS, "cannot connect to Redis at %s:%d: %s", host, port,
                    ctx->errstr);
        redisFree(ctx);
        return NULL;
    }
    if (redisSetTimeout(ctx, p->command_tv) != REDIS_OK) {
        dlock__fail(DLOCK_ERR_REDIS, "cannot set Redis command timeout: %s", ctx->errstr);
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

/* Whether ctx is to a primary, by ROLE: a replica (the Sentinels' answer
 * was stale, or a failover is under way) would refuse every write. 1, or 0
 * with the error set. */
static int is_master(redisContext *ctx, const char *host, int port)
{
    redisReply *r = dlock__pool_checked(ctx, redisCommand(ctx, "ROLE"));
    if (r == NULL)
        return 0;
    const char *role = r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
                               r->element[0]->type == REDIS_REPLY_STRING
                           ? r->element[0]->str : "unknown";
    int yes = strcmp(role, "master") == 0;
    if (!yes)
        dlock__fail(DLOCK_ERR_REDIS, "Redis at %s:%d is not the primary (ROLE %s)", host, port,
                    role);
    freeReplyObject(r);
    return yes;
}

/* A connection to the primary the Sentinels name; when it can't be had or
 * is a replica, the Sentinels are asked again (rate-limited) and the new
 * answer tried once. NULL with the error set. */
static redisContext *connect_primary(dlock_pool *p)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        char host[DLOCK_HOST_MAX + 1];
        int port;
        if (dlock__sentinel_primary(p->sentinel, host, &port) != 0)
            return NULL;
        redisContext *ctx = open_at(p, host, host, port);
        if (ctx && is_master(ctx, host, port))
            return ctx;
        redisFree(ctx);
        if (dlock__redis_failure() == DLOCK_ERR_AUTH) /* our credentials, not a failover */
            return NULL;
        dlock__sentinel_suspect(p->sentinel, host, port);
    }
    return NULL;
}

redisContext *dlock__pool_connect(dlock_pool *p)
{
    if (p->sentinel)
        return connect_primary(p);
    char addr[INET6_ADDRSTRLEN];
    int timeout_ms = (int)(p->connect_tv.tv_sec * 1000 + p->connect_tv.tv_usec / 1000);
    if (resolve(p, timeout_ms, addr, sizeof(addr)) != 0)
        return NULL;
    return open_at(p, addr, p->host, p->port);
}

int dlock__pool_stale(dlock_pool *p, const redisContext *ctx)
{
    return p->sentinel && !dlock__sentinel_is_primary(p->sentinel, ctx->tcp.host, ctx->tcp.port);
}

/* An idle connection has nothing to read; if its socket is readable, the
 * server closed it (restart, timeout) and a command on it would fail. Only
 * worth a syscall after a pause: a Redis restart takes far longer than
 * STALE_CHECK_MS, and the free list is LIFO, so under load the connection
 * handed out was given back microseconds ago. */
static int looks_closed(const redisContext *ctx, int64_t idle_since)
{
    if (dlock__now_ms() - idle_since < STALE_CHECK_MS)
        return 0;
    struct pollfd pfd = {.fd = ctx->fd, .events = POLLIN};
    return poll(&pfd, 1, 0) != 0;
}

/* With Sentinel, after a change of primary: the idle connections (all of
 * the earlier generation) into drop (POOL_IDLE_MAX); their count. mu held. */
static int take_old(dlock_pool *p, redisContext **drop)
{
    int n = 0;
    uint64_t gen = p->sentinel ? dlock__sentinel_gen(p->sentinel) : 0;
    if (gen != p->gen)
        while (p->nidle > 0)
            drop[n++] = p->idle[--p->nidle];
    p->gen = gen;
    return n;
}

redisContext *dlock__pool_get(dlock_pool *p)
{
    redisContext *drop[POOL_IDLE_MAX];
    for (;;) {
        redisContext *ctx = NULL;
        int64_t since = 0;
        pthread_mutex_lock(&p->mu);
        int ndrop = take_old(p, drop);
        if (p->nidle > 0) {
            ctx = p->idle[--p->nidle];
            since = p->idle_since[p->nidle];
        }
        pthread_mutex_unlock(&p->mu);
        for (int i = 0; i < ndrop; i++)
            redisFree(drop[i]);
        if (ctx == NULL)
            return dlock__pool_connect(p);
        if (!looks_closed(ctx, since))
            return ctx;
        redisFree(ctx);
    }
}

void dlock__pool_put(dlock_pool *p, redisContext *ctx, int broken)
{
    redisContext *drop[POOL_IDLE_MAX + 1];
    int ndrop = 0;

    /* with Sentinel: a failure on the primary asks the Sentinels again; a
     * connection to an earlier primary is not kept */
    int failed = ctx->err || broken, stale = 0;
    if (p->sentinel && failed)
        dlock__sentinel_suspect(p->sentinel, ctx->tcp.host, ctx->tcp.port);
    else if (p->sentinel)
        stale = dlock__pool_stale(p, ctx);
    pthread_mutex_lock(&p->mu);
    if (failed) {
        drop[ndrop++] = ctx;
        while (p->nidle > 0)
            drop[ndrop++] = p->idle[--p->nidle];
    } else if (p->nidle < POOL_IDLE_MAX && !stale) {
        p->idle_since[p->nidle] = dlock__now_ms();
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

/* Whether an error reply says the server is no longer a writable primary:
 * READONLY (a replica now, also from inside a script) or MASTERDOWN (a
 * replica cut off from its primary). */
static int is_demoted(const redisReply *r)
{
    return strncmp(r->str, "READONLY", 8) == 0 || strncmp(r->str, "MASTERDOWN", 10) == 0 ||
           strstr(r->str, "READONLY You can't write") != NULL;
}

/* Passes r through, or frees it and returns NULL with the error recorded when
 * the connection failed (ctx->err set) or Redis answered an error (ctx usable). */
redisReply *dlock__pool_checked(redisContext *ctx, redisReply *r)
{
    if (r == NULL) {
        dlock__fail(DLOCK_ERR_REDIS, "Redis connection failed: %s",
                    ctx->err ? ctx->errstr : "no reply");
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        int len = (int)r->len - (r->len > 0 && r->str[r->len - 1] == '.');
        if (is_demoted(r)) { /* closed, not reused: with Sentinel, the primary is asked for */
            ctx->err = REDIS_ERR_OTHER;
            snprintf(ctx->errstr, sizeof(ctx->errstr), "the server is no longer a primary");
        }
        if (is_auth_error(r))
            dlock__fail(DLOCK_ERR_AUTH, "Redis authentication failed: %.*s", len, r->str);
        else
            dlock__fail(DLOCK_ERR_REDIS, "Redis error: %.*s", len, r->str);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}
