/* sentinel.c - the primary's address from Redis Sentinel: asked of the
 * Sentinels in turn, asked again (rate-limited) when the primary fails us,
 * and followed on +switch-master by one thread per client, subscribed on
 * one Sentinel at a time and moving to the next when that one goes. */
#include "lock/sentinel.h"

#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lock/err.h"
#include "lock/sync.h"

#define RECONNECT_MS 250 /* the watcher's pause before it tries the next Sentinel */
#define PING_MS 5000     /* the watcher's Sentinel is pinged when quiet this long */
#define SWITCH_CHANNEL "+switch-master"

struct dlock_sentinel {
    dlock_endpoint at[DLOCK_SENTINELS_MAX];
    int n;
    char master[DLOCK_MASTER_NAME_MAX + 1];
    char *username, *password; /* NULL: no AUTH to the Sentinels */
    struct timeval connect_tv, command_tv;
    pthread_mutex_t ask_mu; /* one caller asks the Sentinels at a time */
    pthread_mutex_t mu;     /* guards what follows */
    char host[DLOCK_HOST_MAX + 1];
    int port;
    int known, suspect;
    int64_t asked_ms;  /* when the Sentinels were last asked */
    int next;          /* the Sentinel to ask first: the last that answered */
    int code;          /* why the last ask failed: its code and text */
    char why[200];
    _Atomic uint64_t gen;
    pthread_t thread;
    int wake[2]; /* pipe: stop */
    _Atomic int stop;
};

static struct timeval ms_to_tv(int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    return tv;
}

/* Takes host:port as the primary (mu held); a new one bumps the generation. */
static void adopt(dlock_sentinel *s, const char *host, int port)
{
    if (!s->known || s->port != port || strcmp(s->host, host) != 0) {
        snprintf(s->host, sizeof(s->host), "%s", host);
        s->port = port;
        atomic_fetch_add(&s->gen, 1);
    }
    s->known = 1;
    s->suspect = 0;
}

/* A connection to Sentinel i, authenticated when a password is set; NULL
 * with why (and *code) filled when it can't be had. */
static redisContext *open_sentinel(dlock_sentinel *s, int i, int *code, char *why, size_t len)
{
    const dlock_endpoint *e = &s->at[i];
    redisContext *ctx = redisConnectWithTimeout(e->host, e->port, s->connect_tv);
    *code = DLOCK_ERR_REDIS;
    if (ctx == NULL || ctx->err || redisSetTimeout(ctx, s->command_tv) != REDIS_OK) {
        snprintf(why, len, "Sentinel %s:%d: %s", e->host, e->port,
                 ctx ? ctx->errstr : "out of memory");
        redisFree(ctx);
        return NULL;
    }
    if (s->password == NULL)
        return ctx;
    const char *argv[3] = {"AUTH", s->username, s->password};
    size_t lens[3] = {4, s->username ? strlen(s->username) : 0, strlen(s->password)};
    int skip = s->username == NULL; /* AUTH password alone: argv[1] dropped */
    if (skip)
        argv[1] = argv[2], lens[1] = lens[2];
    redisReply *r = redisCommandArgv(ctx, 3 - skip, argv, lens);
    if (r && r->type != REDIS_REPLY_ERROR) {
        freeReplyObject(r);
        return ctx;
    }
    if (r)
        *code = DLOCK_ERR_AUTH;
    snprintf(why, len, "Sentinel %s:%d refused AUTH: %s", e->host, e->port,
             r ? r->str : ctx->errstr);
    freeReplyObject(r);
    redisFree(ctx);
    return NULL;
}

/* Asks Sentinel i for the primary: 0 with host and *port set, 1 when it
 * knows no such master, -1 when it can't be asked (why, *code filled). */
static int ask_one(dlock_sentinel *s, int i, char host[DLOCK_HOST_MAX + 1], int *port,
                   int *code, char *why, size_t len)
{
    redisContext *ctx = open_sentinel(s, i, code, why, len);
    if (ctx == NULL)
        return -1;
    const char *argv[3] = {"SENTINEL", "get-master-addr-by-name", s->master};
    size_t lens[3] = {8, 23, strlen(s->master)};
    redisReply *r = redisCommandArgv(ctx, 3, argv, lens);
    int rc = -1;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[0]->type == REDIS_REPLY_STRING && r->element[1]->type == REDIS_REPLY_STRING &&
        r->element[0]->len <= DLOCK_HOST_MAX && (*port = atoi(r->element[1]->str)) > 0) {
        memcpy(host, r->element[0]->str, r->element[0]->len + 1);
        rc = 0;
    } else if (r && r->type == REDIS_REPLY_NIL) {
        snprintf(why, len, "Sentinel %s:%d knows no master named \"%s\"", s->at[i].host,
                 s->at[i].port, s->master);
        rc = 1;
    } else {
        snprintf(why, len, "Sentinel %s:%d: %s", s->at[i].host, s->at[i].port,
                 r == NULL ? ctx->errstr : r->type == REDIS_REPLY_ERROR ? r->str
                                                                        : "unexpected reply");
    }
    freeReplyObject(r);
    redisFree(ctx);
    return rc;
}

/* Asks the Sentinels in turn, from the last that answered (ask_mu held). */
static void ask(dlock_sentinel *s)
{
    char host[DLOCK_HOST_MAX + 1], why[200] = "", unknown[200] = "";
    int port = 0, code = DLOCK_ERR_REDIS, found = -1;
    pthread_mutex_lock(&s->mu);
    int first = s->next;
    pthread_mutex_unlock(&s->mu);
    for (int k = 0; k < s->n && found < 0; k++) {
        int i = (first + k) % s->n, c = DLOCK_ERR_REDIS;
        char w[200];
        int rc = ask_one(s, i, host, &port, &c, w, sizeof(w));
        if (rc == 0)
            found = i;
        else if (rc == 1 && unknown[0] == '\0')
            memcpy(unknown, w, sizeof(w));
        else if (rc < 0)
            memcpy(why, w, sizeof(w)), code = c;
    }
    pthread_mutex_lock(&s->mu);
    s->asked_ms = dlock__now_ms();
    if (found >= 0) {
        s->next = found;
        adopt(s, host, port);
    } else { /* a Sentinel that does not know the name says more than one that is down */
        s->code = unknown[0] ? DLOCK_ERR_REDIS : code;
        snprintf(s->why, sizeof(s->why), "no Sentinel named the primary of \"%s\": %s",
                 s->master, unknown[0] ? unknown : why);
    }
    pthread_mutex_unlock(&s->mu);
}

int dlock__sentinel_primary(dlock_sentinel *s, char host[DLOCK_HOST_MAX + 1], int *port)
{
    pthread_mutex_lock(&s->ask_mu);
    pthread_mutex_lock(&s->mu);
    int due = (!s->known || s->suspect) &&
              (s->asked_ms == 0 || dlock__now_ms() - s->asked_ms >= DLOCK_SENTINEL_REASK_MS);
    pthread_mutex_unlock(&s->mu);
    if (due)
        ask(s);
    pthread_mutex_lock(&s->mu);
    int rc = s->known ? 0 : -1;
    if (s->known) {
        memcpy(host, s->host, sizeof(s->host));
        *port = s->port;
    } else {
        dlock__fail(s->code, "%s", s->why[0] ? s->why : "the Sentinels were not asked yet");
    }
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_unlock(&s->ask_mu);
    return rc;
}

/* mu held */
static int is_known(const dlock_sentinel *s, const char *host, int port)
{
    return s->known && s->port == port && host && strcmp(s->host, host) == 0;
}

void dlock__sentinel_suspect(dlock_sentinel *s, const char *host, int port)
{
    pthread_mutex_lock(&s->mu);
    if (is_known(s, host, port))
        s->suspect = 1;
    pthread_mutex_unlock(&s->mu);
}

int dlock__sentinel_is_primary(dlock_sentinel *s, const char *host, int port)
{
    pthread_mutex_lock(&s->mu);
    int yes = is_known(s, host, port);
    pthread_mutex_unlock(&s->mu);
    return yes;
}

uint64_t dlock__sentinel_gen(dlock_sentinel *s) { return atomic_load(&s->gen); }

/* ---- the watcher: +switch-master ---- */

/* "<name> <old-ip> <old-port> <new-ip> <new-port>": adopts the new address
 * when name is ours. */
static void switched(dlock_sentinel *s, const char *msg)
{
    char name[DLOCK_MASTER_NAME_MAX + 1], host[DLOCK_HOST_MAX + 1];
    int port = 0;
    if (sscanf(msg, "%128s %*s %*d %255s %d", name, host, &port) != 3 ||
        strcmp(name, s->master) != 0 || port < 1 || port > 65535)
        return;
    pthread_mutex_lock(&s->mu);
    adopt(s, host, port);
    pthread_mutex_unlock(&s->mu);
}

/* Waits up to ms for the stop pipe or, when fd >= 0, input on fd: 1 when fd
 * is readable, 0 otherwise. */
static int wait_input(dlock_sentinel *s, int fd, int ms)
{
    struct pollfd p[2] = {{.fd = s->wake[0], .events = POLLIN}, {.fd = fd, .events = POLLIN}};
    if (poll(p, 2, ms) < 0)
        return 0;
    return fd >= 0 && p[1].revents != 0;
}

/* Subscribed on ctx until the connection goes or the client stops. A
 * Sentinel quiet for PING_MS is pinged; one that stays quiet for another
 * PING_MS is taken for gone (stopped, cut off) and the next one is tried. */
static void listen_on(dlock_sentinel *s, redisContext *ctx)
{
    int pinged = 0, done;
    while (!atomic_load(&s->stop)) {
        if (!wait_input(s, ctx->fd, PING_MS)) {
            if (atomic_load(&s->stop) || pinged++ ||
                redisAppendCommand(ctx, "PING") != REDIS_OK)
                return;
            while (redisBufferWrite(ctx, &done) == REDIS_OK && !done) {
            }
            continue;
        }
        pinged = 0;
        if (redisBufferRead(ctx) != REDIS_OK)
            return;
        void *reply;
        while (redisGetReplyFromReader(ctx, &reply) == REDIS_OK && reply != NULL) {
            redisReply *r = reply; /* a message, or PING's ["pong", ""] */
            if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
                r->element[0]->type == REDIS_REPLY_STRING &&
                strcmp(r->element[0]->str, "message") == 0 &&
                r->element[2]->type == REDIS_REPLY_STRING)
                switched(s, r->element[2]->str);
            freeReplyObject(r);
        }
        if (ctx->err)
            return;
    }
}

static void *watch(void *arg)
{
    dlock_sentinel *s = arg;
    for (int i = 0; !atomic_load(&s->stop); i = (i + 1) % s->n) {
        int code;
        char why[200];
        redisContext *ctx = open_sentinel(s, i, &code, why, sizeof(why));
        redisReply *r = ctx ? redisCommand(ctx, "SUBSCRIBE %s", SWITCH_CHANNEL) : NULL;
        if (r && r->type == REDIS_REPLY_ARRAY) {
            redisSetTimeout(ctx, (struct timeval){0, 0}); /* quiet for hours is fine */
            pthread_mutex_lock(&s->ask_mu); /* a switch while we were not listening */
            ask(s);
            pthread_mutex_unlock(&s->ask_mu);
            listen_on(s, ctx);
        }
        freeReplyObject(r);
        redisFree(ctx);
        wait_input(s, -1, RECONNECT_MS);
    }
    return NULL;
}

dlock_sentinel *dlock__sentinel_new(const dlock_config *cfg)
{
    dlock_sentinel *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    memcpy(s->at, cfg->sentinel, sizeof(s->at));
    s->n = cfg->sentinels;
    snprintf(s->master, sizeof(s->master), "%s", cfg->master_name);
    s->connect_tv = ms_to_tv(cfg->connect_timeout_ms);
    s->command_tv = ms_to_tv(cfg->command_timeout_ms);
    s->username = cfg->sentinel_username ? strdup(cfg->sentinel_username) : NULL;
    s->password = cfg->sentinel_password ? strdup(cfg->sentinel_password) : NULL;
    pthread_mutex_init(&s->ask_mu, NULL);
    pthread_mutex_init(&s->mu, NULL);
    s->wake[0] = s->wake[1] = -1;
    if ((cfg->sentinel_username && !s->username) || (cfg->sentinel_password && !s->password) ||
        pipe2(s->wake, O_NONBLOCK | O_CLOEXEC) != 0 ||
        pthread_create(&s->thread, NULL, watch, s) != 0) {
        s->n = 0; /* no thread to join */
        dlock__sentinel_free(s);
        return NULL;
    }
    return s;
}

void dlock__sentinel_free(dlock_sentinel *s)
{
    if (s == NULL)
        return;
    if (s->n > 0) {
        atomic_store(&s->stop, 1);
        ssize_t ignored = write(s->wake[1], "x", 1);
        (void)ignored;
        pthread_join(s->thread, NULL);
    }
    if (s->wake[0] >= 0)
        close(s->wake[0]), close(s->wake[1]);
    pthread_mutex_destroy(&s->ask_mu);
    pthread_mutex_destroy(&s->mu);
    free(s->username);
    if (s->password)
        explicit_bzero(s->password, strlen(s->password));
    free(s->password);
    free(s);
}
