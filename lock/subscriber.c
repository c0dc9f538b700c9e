/* subscriber.c - one Redis pub/sub connection per server, on its own
 * thread, that turns release notifications into condition-variable signals
 * for the local waiters of that key. Waiters never depend on it alone: they also wake
 * at their retry interval, so a lost message costs at most one interval.
 *
 * A channel stays subscribed for UNUSED_MS after the last waiter for its key
 * has gone: a hot key's entry comes and goes between acquisitions, and
 * unsubscribing each time would cost two commands and open a window in which
 * a release goes unheard. */
#include "lock/subscriber.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lock/node.h"
#include "lock/sync.h"

#define RECONNECT_MS 250
#define SWEEP_MS 1000
#define UNUSED_MS 5000
#define CHANNEL_BUCKETS 256

/* A channel we asked Redis for. */
struct channel {
    struct channel *next;
    int state;            /* DLOCK_SUB_PENDING or DLOCK_SUB_ACTIVE */
    int64_t unused_since; /* 0 while a key entry uses it */
    char key[];
};

struct op {
    char *key;     /* whose release channel */
    int subscribe; /* 1 SUBSCRIBE, 0 UNSUBSCRIBE */
};

struct dlock_subscriber {
    pthread_mutex_t *mu; /* the client's */
    dlock_keytab *keys;
    dlock_node *node;
    int idx; /* the server's index: which of an entry's sub_state is ours */
    dlock_counters *counters;
    pthread_t thread;
    int wake[2];        /* pipe: new ops, or stop */
    redisContext *conn; /* the thread's alone */
    int64_t swept_ms;
    /* mu */
    struct op *ops;
    size_t nops, cap;
    struct channel *channels[CHANNEL_BUCKETS];
    int connected;
    int stop;
};

static struct channel **channel_slot(dlock_subscriber *s, const char *key, size_t len)
{
    struct channel **p = &s->channels[dlock__hash(key, len) % CHANNEL_BUCKETS];
    while (*p && !(strncmp((*p)->key, key, len) == 0 && (*p)->key[len] == '\0'))
        p = &(*p)->next;
    return p;
}

static void drop_channels(dlock_subscriber *s)
{
    for (int b = 0; b < CHANNEL_BUCKETS; b++)
        while (s->channels[b]) {
            struct channel *ch = s->channels[b];
            s->channels[b] = ch->next;
            free(ch);
        }
}

static void poke(dlock_subscriber *s)
{
    ssize_t ignored = write(s->wake[1], "x", 1); /* a full pipe already means "wake up" */
    (void)ignored;
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
    if ((s->ops[s->nops].key = strdup(key)) == NULL)
        return -1;
    s->ops[s->nops++].subscribe = subscribe;
    poke(s);
    return 0;
}

void dlock__sub_subscribe(dlock_subscriber *s, struct dlock_entry *e)
{
    size_t len = strlen(e->key);
    struct channel **p = channel_slot(s, e->key, len), *ch = *p;
    if (ch) { /* still subscribed from an earlier wait */
        ch->unused_since = 0;
        e->sub_state[s->idx] = ch->state;
        return;
    }
    if (s->connected && (ch = calloc(1, sizeof(*ch) + len + 1)) != NULL) {
        if (push_op(s, e->key, 1) == 0) {
            memcpy(ch->key, e->key, len + 1);
            ch->state = e->sub_state[s->idx] = DLOCK_SUB_PENDING;
            *p = ch;
            return;
        }
        free(ch);
    }
    e->sub_state[s->idx] = DLOCK_SUB_FAILED;
    poke(s); /* reconnect now rather than at the next back-off tick */
}

void dlock__sub_unsubscribe(dlock_subscriber *s, const char *key)
{
    struct channel *ch = *channel_slot(s, key, strlen(key));
    if (ch)
        ch->unused_since = dlock__now_ms(); /* the sweep unsubscribes it if it stays unused */
}

/* Unsubscribes channels nobody has waited on for UNUSED_MS (mutex held). */
static void sweep(dlock_subscriber *s, int64_t now)
{
    for (int b = 0; b < CHANNEL_BUCKETS; b++)
        for (struct channel **p = &s->channels[b]; *p;) {
            struct channel *ch = *p;
            if (ch->unused_since && now - ch->unused_since > UNUSED_MS &&
                push_op(s, ch->key, 0) == 0) {
                *p = ch->next;
                free(ch);
            } else {
                p = &ch->next;
            }
        }
}

static void fail_entry(struct dlock_entry *e, void *arg)
{
    const dlock_subscriber *s = arg;
    if (e->sub_state[s->idx] == DLOCK_SUB_PENDING || e->sub_state[s->idx] == DLOCK_SUB_ACTIVE) {
        e->sub_state[s->idx] = DLOCK_SUB_FAILED;
        dlock__entry_wake_head(e);
    }
}

/* The connection broke: every subscription is gone; waiters fall back to polling. */
static void disconnect(dlock_subscriber *s)
{
    redisFree(s->conn);
    s->conn = NULL;
    pthread_mutex_lock(s->mu);
    s->connected = 0;
    drop_channels(s);
    for (size_t i = 0; i < s->nops; i++) /* meant for the connection that is gone */
        free(s->ops[i].key);
    s->nops = 0;
    dlock__keytab_each(s->keys, fail_entry, s);
    pthread_mutex_unlock(s->mu);
}

/* Sends the queued ops (taken under the mutex, written without it). */
static int send_ops(dlock_subscriber *s)
{
    pthread_mutex_lock(s->mu);
    struct op *ops = s->ops;
    size_t n = s->nops;
    s->ops = NULL, s->nops = s->cap = 0;
    pthread_mutex_unlock(s->mu);
    int rc = REDIS_OK, done = 0;
    for (size_t i = 0; i < n; i++) {
        if (rc == REDIS_OK)
            rc = dlock__node_sub_request(s->node, s->conn, ops[i].key, ops[i].subscribe);
        free(ops[i].key);
    }
    free(ops);
    while (rc == REDIS_OK && !done)
        rc = redisBufferWrite(s->conn, &done);
    return rc;
}

static void fail_pending_entry(struct dlock_entry *e, void *arg)
{
    const dlock_subscriber *s = arg;
    if (e->sub_state[s->idx] == DLOCK_SUB_PENDING) {
        e->sub_state[s->idx] = DLOCK_SUB_FAILED;
        dlock__entry_wake_head(e);
    }
}

/* Redis refused a SUBSCRIBE (an ACL user without the channel, say). The
 * error does not name the channel: every pending one is given up, and their
 * waiters poll every retry_ms. Counted as a Redis error. */
static void refused(dlock_subscriber *s)
{
    dlock__count(&s->counters->redis_errors);
    for (int b = 0; b < CHANNEL_BUCKETS; b++)
        for (struct channel **p = &s->channels[b]; *p;) {
            struct channel *ch = *p;
            if (ch->state == DLOCK_SUB_PENDING) {
                *p = ch->next;
                free(ch);
            } else {
                p = &ch->next;
            }
        }
    dlock__keytab_each(s->keys, fail_pending_entry, s);
}

/* Whether a release's message ("token:fence:grant_ms:sent", or a bare
 * token) grants the key to e's head; if so, what it says is kept for the
 * head (queue.c). */
static int granted_to_head(struct dlock_entry *e, const char *msg, size_t len)
{
    if (len < DLOCK_TOKEN_LEN || (len > DLOCK_TOKEN_LEN && msg[DLOCK_TOKEN_LEN] != ':') ||
        memcmp(msg, e->wait_token, DLOCK_TOKEN_LEN) != 0)
        return 0;
    long long v[3] = {0, 0, 0}; /* fence, grant_ms, sent */
    const char *p = msg + DLOCK_TOKEN_LEN; /* msg is NUL-terminated (hiredis) */
    for (int i = 0; i < 3 && *p == ':'; i++) {
        char *end;
        v[i] = strtoll(p + 1, &end, 10);
        p = end;
    }
    int whole = *p == '\0' && v[0] > 0 && v[1] > 0 && v[1] <= INT32_MAX && v[2] > 0;
    memcpy(e->granted, msg, DLOCK_TOKEN_LEN);
    e->granted_fence = whole ? v[0] : 0;
    e->granted_ms = (int)v[1];
    e->granted_after = v[2];
    return 1;
}

/* A channel the server dropped ("unsubscribe" while ACTIVE: a cluster node
 * whose slot migrated away; ours come only after the channel is forgotten,
 * or while its new subscription is PENDING): forgotten, and e's head
 * subscribes again, at the slot's new owner. */
static void dropped(dlock_subscriber *s, struct channel *ch, struct dlock_entry *e)
{
    if (ch == NULL || ch->state != DLOCK_SUB_ACTIVE)
        return;
    *channel_slot(s, ch->key, strlen(ch->key)) = ch->next;
    free(ch);
    if (e && e->sub_state[s->idx] == DLOCK_SUB_ACTIVE) {
        e->sub_state[s->idx] = DLOCK_SUB_FAILED;
        dlock__entry_wake_head(e);
    }
}

/* A pub/sub reply: ["message", channel, payload] or ["subscribe", channel, n]
 * ("smessage", "ssubscribe" from a cluster node). */
static void handle_reply(dlock_subscriber *s, redisReply *r)
{
    if (r->type == REDIS_REPLY_ERROR) {
        refused(s);
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_STRING)
        return;
    const char *kind = r->element[0]->str, *channel = r->element[1]->str;
    if (dlock__node_sharded(s->node) && kind[0] == 's') /* ssubscribe, smessage, sunsubscribe */
        kind++;
    size_t len = r->element[1]->len, suffix = sizeof(DLOCK_CHANNEL_SUFFIX) - 1;
    if (len <= suffix)
        return;
    int subscribed = strcmp(kind, "subscribe") == 0;
    struct channel *ch = *channel_slot(s, channel, len - suffix);
    if (subscribed && ch)
        ch->state = DLOCK_SUB_ACTIVE;
    struct dlock_entry *e = dlock__keytab_find(s->keys, channel, len - suffix);
    if (strcmp(kind, "unsubscribe") == 0) {
        dropped(s, ch, e);
        return;
    }
    if (e == NULL)
        return;
    if (subscribed && ch && e->sub_state[s->idx] == DLOCK_SUB_PENDING)
        e->sub_state[s->idx] = DLOCK_SUB_ACTIVE;
    if (subscribed) {
        dlock__entry_wake_head(e);
        return;
    }
    const redisReply *to = r->element[2];
    if (strcmp(kind, "message") != 0 || to->type != REDIS_REPLY_STRING)
        return;
    if (to->len == 0 || granted_to_head(e, to->str, to->len)) {
        e->releases++; /* released to nobody, or granted to our head: try now */
        dlock__entry_wake_head(e);
    } else {
        e->others[s->idx]++; /* granted to another process's waiter (queue.c counts them) */
    }
}

static int read_replies(dlock_subscriber *s)
{
    if (redisBufferRead(s->conn) != REDIS_OK)
        return REDIS_ERR;
    void *reply;
    int rc;
    pthread_mutex_lock(s->mu);
    while ((rc = redisGetReplyFromReader(s->conn, &reply)) == REDIS_OK && reply != NULL) {
        handle_reply(s, reply);
        freeReplyObject(reply);
    }
    pthread_mutex_unlock(s->mu);
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
    if (s->conn && dlock__node_stale(s->node, s->conn)) /* Sentinel moved the primary */
        disconnect(s);
    if (s->conn == NULL && (s->conn = dlock__node_subscriber(s->node)) != NULL) {
        pthread_mutex_lock(s->mu);
        s->connected = 1;
        pthread_mutex_unlock(s->mu);
    }
    if (s->conn && send_ops(s) != REDIS_OK)
        disconnect(s);
    if (s->conn)
        p[1].fd = s->conn->fd;
    if (poll(p, 2, s->conn ? SWEEP_MS : RECONNECT_MS) < 0 && errno != EINTR)
        return;
    int64_t now = dlock__now_ms();
    if (s->conn && now - s->swept_ms >= SWEEP_MS) {
        pthread_mutex_lock(s->mu);
        sweep(s, now);
        pthread_mutex_unlock(s->mu);
        s->swept_ms = now;
    }
    if (p[0].revents)
        drain(s->wake[0]);
    if (s->conn && p[1].revents && read_replies(s) != REDIS_OK)
        disconnect(s);
}

static void *run(void *arg)
{
    dlock_subscriber *s = arg;
    for (;;) {
        pthread_mutex_lock(s->mu);
        int stop = s->stop;
        pthread_mutex_unlock(s->mu);
        if (stop)
            return NULL;
        turn(s);
    }
}

dlock_subscriber *dlock__sub_start(pthread_mutex_t *mu, dlock_keytab *keys, dlock_node *node,
                                   int idx, dlock_counters *counters)
{
    dlock_subscriber *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->mu = mu;
    s->keys = keys;
    s->node = node;
    s->idx = idx;
    s->counters = counters;
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

void dlock__sub_stop(dlock_subscriber *s)
{
    pthread_mutex_lock(s->mu);
    s->stop = 1;
    pthread_mutex_unlock(s->mu);
    poke(s);
    pthread_join(s->thread, NULL);
    if (s->conn)
        redisFree(s->conn);
    for (size_t i = 0; i < s->nops; i++)
        free(s->ops[i].key);
    free(s->ops);
    drop_channels(s);
    close(s->wake[0]);
    close(s->wake[1]);
    free(s);
}
