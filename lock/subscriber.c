/* subscriber.c - one Redis pub/sub connection per client, on its own thread,
 * that turns release notifications into condition-variable signals for the
 * local waiters of that key. Waiters never depend on it alone: they also wake
 * at their retry interval, so a lost message costs at most one interval. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

#define RECONNECT_MS 250

struct op {
    char *channel;
    int subscribe; /* 1 SUBSCRIBE, 0 UNSUBSCRIBE */
};

struct dlock_subscriber {
    dlock_client *c;
    pthread_t thread;
    int wake[2];        /* pipe: new ops, or stop */
    redisContext *conn; /* the thread's alone */
    /* c->mu */
    struct op *ops;
    size_t nops, cap;
    int connected;
    int stop;
};

size_t dlock_channel(const char *key, char *buf)
{
    size_t len = strlen(key);
    memcpy(buf, key, len);
    memcpy(buf + len, DLOCK_CHANNEL_SUFFIX, sizeof(DLOCK_CHANNEL_SUFFIX));
    return len + sizeof(DLOCK_CHANNEL_SUFFIX) - 1;
}

static void poke(dlock_subscriber *s)
{
    ssize_t ignored = write(s->wake[1], "x", 1); /* a full pipe already means "wake up" */
    (void)ignored;
}

static void signal_head(struct dlock_entry *e)
{
    if (e->head)
        pthread_cond_signal(&e->head->cv);
}

static int push_op(dlock_subscriber *s, const char *key, int subscribe)
{
    if (s->nops == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        struct op *grown = realloc(s->ops, cap * sizeof(*grown));
        if (grown == NULL)
            return -1;
        s->ops = grown, s->cap = cap;
    }
    char channel[DLOCK_CHANNEL_MAX];
    dlock_channel(key, channel);
    if ((s->ops[s->nops].channel = strdup(channel)) == NULL)
        return -1;
    s->ops[s->nops++].subscribe = subscribe;
    poke(s);
    return 0;
}

void dlock_sub_subscribe(dlock_subscriber *s, struct dlock_entry *e)
{
    if (s->connected && push_op(s, e->key, 1) == 0) {
        e->sub_state = DLOCK_SUB_PENDING;
    } else {
        e->sub_state = DLOCK_SUB_FAILED;
        poke(s); /* reconnect now rather than at the next back-off tick */
    }
}

void dlock_sub_unsubscribe(dlock_subscriber *s, const char *key)
{
    if (s->connected)
        push_op(s, key, 0); /* out of memory: the channel stays subscribed, harmlessly */
}

static void fail_entry(struct dlock_entry *e, void *arg)
{
    (void)arg;
    if (e->sub_state == DLOCK_SUB_PENDING || e->sub_state == DLOCK_SUB_ACTIVE) {
        e->sub_state = DLOCK_SUB_FAILED;
        signal_head(e);
    }
}

/* The connection broke: every subscription is gone; waiters fall back to polling. */
static void disconnect(dlock_subscriber *s)
{
    redisFree(s->conn);
    s->conn = NULL;
    pthread_mutex_lock(&s->c->mu);
    s->connected = 0;
    dlock_keytab_each(s->c->keys, fail_entry, NULL);
    pthread_mutex_unlock(&s->c->mu);
}

/* Sends the queued ops (taken under the mutex, written without it). */
static int send_ops(dlock_subscriber *s)
{
    pthread_mutex_lock(&s->c->mu);
    struct op *ops = s->ops;
    size_t n = s->nops;
    s->ops = NULL, s->nops = s->cap = 0;
    pthread_mutex_unlock(&s->c->mu);
    int rc = REDIS_OK, done = 0;
    for (size_t i = 0; i < n; i++) {
        if (rc == REDIS_OK)
            rc = redisAppendCommand(s->conn, ops[i].subscribe ? "SUBSCRIBE %s" : "UNSUBSCRIBE %s",
                                    ops[i].channel);
        free(ops[i].channel);
    }
    free(ops);
    while (rc == REDIS_OK && !done)
        rc = redisBufferWrite(s->conn, &done);
    return rc;
}

/* A pub/sub reply: ["message", channel, payload] or ["subscribe", channel, n]. */
static void handle_reply(dlock_subscriber *s, redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_STRING)
        return;
    const char *kind = r->element[0]->str, *channel = r->element[1]->str;
    size_t len = r->element[1]->len, suffix = sizeof(DLOCK_CHANNEL_SUFFIX) - 1;
    if (len <= suffix)
        return;
    struct dlock_entry *e = dlock_keytab_find(s->c->keys, channel, len - suffix);
    if (e == NULL)
        return;
    if (strcmp(kind, "subscribe") == 0 && e->sub_state == DLOCK_SUB_PENDING)
        e->sub_state = DLOCK_SUB_ACTIVE;
    if (strcmp(kind, "subscribe") == 0 || strcmp(kind, "message") == 0)
        signal_head(e);
}

static int read_replies(dlock_subscriber *s)
{
    if (redisBufferRead(s->conn) != REDIS_OK)
        return REDIS_ERR;
    void *reply;
    int rc;
    pthread_mutex_lock(&s->c->mu);
    while ((rc = redisGetReplyFromReader(s->conn, &reply)) == REDIS_OK && reply != NULL) {
        handle_reply(s, reply);
        freeReplyObject(reply);
    }
    pthread_mutex_unlock(&s->c->mu);
    return rc;
}

static void drain(int fd)
{
    char buf[64];
    while (read(fd, buf, sizeof(buf)) > 0) {
    }
}

/* One turn of the loop: connect if needed, send ops, wait for input. */
static void turn(dlock_subscriber *s)
{
    struct pollfd p[2] = {{.fd = s->wake[0], .events = POLLIN}, {.fd = -1, .events = POLLIN}};
    if (s->conn == NULL && (s->conn = dlock_pool_connect(s->c->pool)) != NULL) {
        pthread_mutex_lock(&s->c->mu);
        s->connected = 1;
        pthread_mutex_unlock(&s->c->mu);
    }
    if (s->conn && send_ops(s) != REDIS_OK)
        disconnect(s);
    if (s->conn)
        p[1].fd = s->conn->fd;
    if (poll(p, 2, s->conn ? -1 : RECONNECT_MS) < 0 && errno != EINTR)
        return;
    if (p[0].revents)
        drain(s->wake[0]);
    if (s->conn && p[1].revents && read_replies(s) != REDIS_OK)
        disconnect(s);
}

static void *run(void *arg)
{
    dlock_subscriber *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->c->mu);
        int stop = s->stop;
        pthread_mutex_unlock(&s->c->mu);
        if (stop)
            return NULL;
        turn(s);
    }
}

dlock_subscriber *dlock_sub_start(dlock_client *c)
{
    dlock_subscriber *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->c = c;
    if (pipe2(s->wake, O_NONBLOCK | O_CLOEXEC) != 0) {
        free(s);
        return NULL;
    }
    if (pthread_create(&s->thread, NULL, run, s) != 0) {
        close(s->wake[0]);
        close(s->wake[1]);
        free(s);
        return NULL;
    }
    return s;
}

void dlock_sub_stop(dlock_subscriber *s)
{
    pthread_mutex_lock(&s->c->mu);
    s->stop = 1;
    pthread_mutex_unlock(&s->c->mu);
    poke(s);
    pthread_join(s->thread, NULL);
    if (s->conn)
        redisFree(s->conn);
    for (size_t i = 0; i < s->nops; i++)
        free(s->ops[i].channel);
    free(s->ops);
    close(s->wake[0]);
    close(s->wake[1]);
    free(s);
}
