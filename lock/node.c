/* node.c - one Redis server and its calls in flight: a connection from
 * its pool (or the caller's own), scripts run by SHA (EVAL after a
 * NOSCRIPT), commands sent, replies awaited for several servers at once,
 * the result checked, and the call counted for dlock_node_info. What each
 * call says to Redis is node_ops.c's. */
#include "lock/node.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lock/err.h"
#include "lock/node_internal.h"
#include "lock/pool.h"
#include "lock/scripts.h"
#include "lock/sync.h"

const int dlock_latency_bucket_us[DLOCK_LATENCY_BUCKETS] = {100,  250,   500,   1000,   2500,
                                                            5000, 10000, 25000, 100000, -1};

struct dlock_node {
    dlock_pool *pool;
    dlock_counters *counters;
    int command_timeout_ms;
    int sharded; /* a Redis Cluster node */
    char name[DLOCK_HOST_MAX + 8];
    pthread_mutex_t mu;           /* guards sha */
    char sha[DLOCK_SCRIPT_COUNT][41]; /* "" until SCRIPT LOAD answered */
    /* what dlock_node_info reports */
    _Atomic int up;
    _Atomic uint64_t calls, errors, latency_sum_us, latency[DLOCK_LATENCY_BUCKETS];
};

dlock_node *dlock__node_new(const dlock_config *cfg, const char *host, int port,
                            dlock_counters *counters)
{
    dlock_node *n = calloc(1, sizeof(*n));
    if (n == NULL)
        return NULL;
    if ((n->pool = dlock__pool_new(cfg, host, port, counters)) == NULL) {
        free(n);
        return NULL;
    }
    n->counters = counters;
    n->command_timeout_ms = cfg->command_timeout_ms;
    n->sharded = cfg->cluster;
    if (cfg->sentinels > 0) /* the primary changes; the name it is known by does not */
        snprintf(n->name, sizeof(n->name), "sentinel:%.*s", DLOCK_HOST_MAX - 2, cfg->master_name);
    else
        snprintf(n->name, sizeof(n->name), strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
    atomic_store(&n->up, 1);
    pthread_mutex_init(&n->mu, NULL);
    return n;
}

void dlock__node_free(dlock_node *n)
{
    if (n == NULL)
        return;
    dlock__pool_free(n->pool);
    pthread_mutex_destroy(&n->mu);
    free(n);
}

const char *dlock__node_name(const dlock_node *n) { return n->name; }
int dlock__node_sharded(const dlock_node *n) { return n->sharded; }

int64_t dlock__node_deadline(const dlock_node *n)
{
    return dlock__now_ms() + n->command_timeout_ms;
}

void dlock__node_report(dlock_node *n, dlock_node_info *out)
{
    snprintf(out->name, sizeof(out->name), "%s", n->name);
    out->up = atomic_load(&n->up);
    out->calls = atomic_load(&n->calls);
    out->errors = atomic_load(&n->errors);
    out->latency_sum_us = atomic_load(&n->latency_sum_us);
    for (int i = 0; i < DLOCK_LATENCY_BUCKETS; i++)
        out->latency_buckets[i] = atomic_load(&n->latency[i]);
}

/* Loads the script once per node; the SHA stays valid for every connection. */
static int script_sha(dlock_node *n, redisContext *ctx, enum dlock_script s, char sha[41])
{
    pthread_mutex_lock(&n->mu);
    memcpy(sha, n->sha[s], 41);
    pthread_mutex_unlock(&n->mu);
    if (sha[0] != '\0')
        return 0;
    const char *argv[] = {"SCRIPT", "LOAD", dlock__script_text(s, n->sharded)};
    size_t lens[] = {6, 4, strlen(argv[2])};
    redisReply *r = dlock__pool_checked(ctx, redisCommandArgv(ctx, 3, argv, lens));
    if (r == NULL)
        return -1;
    if (r->type != REDIS_REPLY_STRING || r->len != 40) {
        dlock__fail(DLOCK_ERR_REDIS, "unexpected SCRIPT LOAD reply");
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

static void forget_sha(dlock_node *n, enum dlock_script s)
{
    pthread_mutex_lock(&n->mu);
    n->sha[s][0] = '\0';
    pthread_mutex_unlock(&n->mu);
}

static int is_noscript(const redisReply *r)
{
    return r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

/* EVAL or EVALSHA of a script (its body or SHA) with nkeys keys, then the
 * script's arguments, nargs in all. */
struct script_cmd {
    int argc;
    const char *argv[3 + DLOCK_NODE_ARGS_MAX];
    size_t lens[3 + DLOCK_NODE_ARGS_MAX];
    char nkeys[16];
};

static void script_cmd(struct script_cmd *c, const char *verb, const char *script, int nkeys,
                       int nargs, const char **args, const size_t *arg_lens)
{
    c->argv[0] = verb, c->lens[0] = strlen(verb);
    c->argv[1] = script, c->lens[1] = strlen(script);
    c->argv[2] = c->nkeys, c->lens[2] = (size_t)snprintf(c->nkeys, sizeof(c->nkeys), "%d", nkeys);
    memcpy(c->argv + 3, args, (size_t)nargs * sizeof(*args));
    memcpy(c->lens + 3, arg_lens, (size_t)nargs * sizeof(*arg_lens));
    c->argc = 3 + nargs;
}

/* ---- calls in flight ---- */

/* Set by dlock__node_ask_next, taken by the thread's next dlock__call_open:
 * a thread-local flag rather than an argument of every *_begin, for a
 * redirect that only cluster.c makes. */
static _Thread_local int ask_next;

void dlock__node_ask_next(void) { ask_next = 1; }

/* ASKING on the call's connection, right before its script (a rare round
 * trip of its own); it holds for the next command only. */
static int send_asking(dlock_node_call *call)
{
    redisReply *r = dlock__pool_checked(call->ctx, redisCommand(call->ctx, "ASKING"));
    if (r == NULL) {
        call->broken = call->ctx->err != 0;
        dlock__call_fail(call, dlock__redis_failure(), NULL);
        return -1;
    }
    freeReplyObject(r);
    return 0;
}

/* The keys a call of script s with nkeys declares: after ASK (asked), at
 * the importing node, only its first when the script takes the others
 * from its arguments (scripts.c, LUA_ASKED), as there a command naming
 * several keys of which one is missing gets TRYAGAIN. */
static int declared(enum dlock_script s, int nkeys, int asked)
{
    return asked && nkeys > 1 && dlock__script_asked_form[s] ? 1 : nkeys;
}

/* EVAL of the script's body on the call's connection, synchronously, after
 * ASKING when the EVALSHA had it: after a NOSCRIPT (Redis restarted or
 * flushed its script cache), which also reloads it. The reply, unchecked
 * (caller frees), or NULL with the error set. */
static redisReply *eval_body(dlock_node_call *call, enum dlock_script s, int nkeys, int nargs,
                             const char **args, const size_t *arg_lens)
{
    struct script_cmd c;
    forget_sha(call->node, s);
    if (call->asked && send_asking(call) != 0)
        return NULL;
    script_cmd(&c, "EVAL", dlock__script_text(s, call->node->sharded),
               declared(s, nkeys, call->asked), nargs, args, arg_lens);
    redisReply *r = redisCommandArgv(call->ctx, c.argc, c.argv, c.lens);
    if (r == NULL)
        return dlock__pool_checked(call->ctx, NULL); /* sets the error */
    return r;
}

/* A cluster node's redirect in r (MOVED or ASK "<slot> <host:port>",
 * TRYAGAIN), kept in the call for cluster.c. 1 when r was one. */
static int note_redirect(dlock_node_call *call, const redisReply *r)
{
    static const char *const kinds[] = {"MOVED ", "ASK ", "TRYAGAIN"};
    if (r->type != REDIS_REPLY_ERROR)
        return 0;
    for (int k = 0; k < 3; k++) {
        size_t len = strlen(kinds[k]);
        if (strncmp(r->str, kinds[k], len) != 0)
            continue;
        int slot = -1;
        char to[sizeof(call->redirect_to)] = "";
        if (k < 2 && sscanf(r->str + len, "%d %264s", &slot, to) != 2)
            return 0;
        call->redirect = DLOCK_REDIRECT_MOVED + k;
        call->redirect_slot = slot;
        memcpy(call->redirect_to, to, sizeof(to));
        return 1;
    }
    return 0;
}

void dlock__call_fail(dlock_node_call *call, int code, const char *why)
{
    if (call->rc != DLOCK_OK)
        return;
    call->rc = code;
    snprintf(call->err, sizeof(call->err), "%s", why ? why : dlock_errstr());
}

int dlock__call_open(dlock_node *n, dlock_node_call *call, redisContext **own)
{
    call->node = n;
    call->own = own;
    call->ctx = NULL;
    call->script = -1, call->nkeys = call->nargs = 0; /* no script until one is appended */
    call->expect = call->got = 0;
    call->rc = DLOCK_OK;
    call->sent = call->broken = 0;
    call->err[0] = '\0';
    call->redirect = DLOCK_REDIRECT_NONE;
    call->asking = ask_next;
    call->asked = 0;
    ask_next = 0;
    call->began_us = dlock__now_us();
    if (own) {
        if (*own && dlock__pool_stale(n->pool, *own)) { /* Sentinel moved the primary */
            redisFree(*own);
            *own = NULL;
        }
        if (*own == NULL)
            *own = dlock__pool_connect(n->pool);
        call->ctx = *own;
    } else {
        call->ctx = dlock__pool_get(n->pool);
    }
    if (call->ctx == NULL) {
        dlock__call_fail(call, dlock__redis_failure(), NULL);
        return -1;
    }
    return 0;
}

void dlock__call_append_script(dlock_node_call *call, enum dlock_script s, int nkeys, int nargs,
                               const char **args, const size_t *arg_lens)
{
    struct script_cmd c;
    char sha[41];
    if (call->rc != DLOCK_OK)
        return;
    if (script_sha(call->node, call->ctx, s, sha) != 0) {
        int code = dlock__redis_failure();
        call->sent = code != DLOCK_ERR_AUTH;
        call->broken = call->ctx->err != 0;
        dlock__call_fail(call, code, NULL);
        return;
    }
    if (call->asking && send_asking(call) != 0) /* after SCRIPT LOAD: it goes just before */
        return;
    call->asked = call->asking;
    call->asking = 0;
    script_cmd(&c, "EVALSHA", sha, declared(s, nkeys, call->asked), nargs, args, arg_lens);
    if (redisAppendCommandArgv(call->ctx, c.argc, c.argv, c.lens) != REDIS_OK) {
        dlock__call_fail(call, DLOCK_ERR_NOMEM, "out of memory");
        return;
    }
    call->expect++;
}

void dlock__call_script(dlock_node_call *call, enum dlock_script s, int nkeys, int nargs)
{
    call->script = s, call->nkeys = nkeys, call->nargs = nargs;
    dlock__call_append_script(call, s, nkeys, nargs, call->argv, call->lens);
}

void dlock__call_send(dlock_node_call *call)
{
    int done = 0;
    if (call->rc != DLOCK_OK)
        return;
    call->sent = 1; /* a partial write may reach Redis */
    while (!done)
        if (redisBufferWrite(call->ctx, &done) != REDIS_OK) {
            call->broken = 1;
            dlock__call_fail(call, DLOCK_ERR_REDIS, call->ctx->errstr);
            return;
        }
}

/* Takes the replies already read from the call's socket. */
static void take_buffered(dlock_node_call *call)
{
    while (call->got < call->expect) {
        void *r = NULL;
        if (redisGetReplyFromReader(call->ctx, &r) != REDIS_OK) {
            call->broken = 1;
            dlock__call_fail(call, DLOCK_ERR_REDIS, "protocol error");
            return;
        }
        if (r == NULL)
            return;
        call->reply[call->got++] = r;
    }
}

static int pending(const dlock_node_call *call)
{
    return call->rc == DLOCK_OK && call->got < call->expect;
}

static void lost_connection(dlock_node_call *call)
{
    call->broken = 1;
    char why[160];
    snprintf(why, sizeof(why), "Redis connection failed: %s",
             call->ctx->err ? call->ctx->errstr : "closed");
    dlock__call_fail(call, DLOCK_ERR_REDIS, why);
}

void dlock__node_wait(dlock_node_call *const *calls, int n, int64_t deadline_ms)
{
    if (n == 1 && pending(calls[0])) { /* one server: a blocking read, bounded by the timeout */
        dlock_node_call *call = calls[0];
        while (call->got < call->expect) {
            void *r = NULL;
            if (redisGetReply(call->ctx, &r) != REDIS_OK || r == NULL) {
                lost_connection(call);
                return;
            }
            call->reply[call->got++] = r;
        }
        return;
    }
    for (;;) {
        struct pollfd fds[DLOCK_NODES_MAX];
        dlock_node_call *of[DLOCK_NODES_MAX];
        int k = 0;
        for (int i = 0; i < n; i++)
            if (pending(calls[i])) {
                fds[k] = (struct pollfd){.fd = calls[i]->ctx->fd, .events = POLLIN};
                of[k++] = calls[i];
            }
        if (k == 0)
            return;
        int64_t left = deadline_ms - dlock__now_ms();
        if (left <= 0) {
            for (int i = 0; i < k; i++) {
                char why[96];
                snprintf(why, sizeof(why), "no answer within %d ms",
                         of[i]->node->command_timeout_ms);
                of[i]->broken = 1; /* its reply may still come */
                dlock__call_fail(of[i], DLOCK_ERR_REDIS, why);
            }
            return;
        }
        if (poll(fds, (nfds_t)k, (int)left) < 0 && errno != EINTR)
            continue;
        for (int i = 0; i < k; i++) {
            if (fds[i].revents == 0)
                continue;
            if (redisBufferRead(of[i]->ctx) != REDIS_OK)
                lost_connection(of[i]);
            else
                take_buffered(of[i]);
        }
    }
}

void dlock__call_close(dlock_node_call *call)
{
    dlock_node *n = call->node;
    int answered = call->ctx && call->got == call->expect && call->rc == DLOCK_OK;
    if (call->ctx && call->own) {
        if (call->broken || call->ctx->err) {
            redisFree(call->ctx);
            *call->own = NULL;
        }
    } else if (call->ctx) {
        dlock__pool_put(n->pool, call->ctx, call->broken);
    }
    call->ctx = NULL;
    atomic_fetch_add(&n->calls, 1);
    atomic_store(&n->up, answered);
    if (answered) {
        int64_t us = dlock__now_us() - call->began_us;
        int b = dlock__bucket_of(dlock_latency_bucket_us, DLOCK_LATENCY_BUCKETS, us);
        atomic_fetch_add(&n->latency[b], 1);
        atomic_fetch_add(&n->latency_sum_us, (uint64_t)us);
    }
}

/* Counts a failed call (no answer, or an error reply) for the client and
 * the node. */
static void count_error(dlock_node *n)
{
    dlock__count(&n->counters->redis_errors);
    atomic_fetch_add(&n->errors, 1);
}

redisReply *dlock__call_reply_at(dlock_node_call *call, int i, enum dlock_script s, int nkeys,
                                 int nargs, const char **args, const size_t *arg_lens)
{
    redisReply *r = i < call->got ? call->reply[i] : NULL;
    if (call->rc != DLOCK_OK || r == NULL) {
        freeReplyObject(r);
        dlock__fail(call->rc != DLOCK_OK ? call->rc : DLOCK_ERR_REDIS, "%s",
                    call->err[0] ? call->err : "no reply");
        r = NULL;
    } else {
        if (is_noscript(r)) { /* Redis lost its scripts: send the body this once */
            freeReplyObject(r);
            r = eval_body(call, s, nkeys, nargs, args, arg_lens);
            call->broken |= r == NULL && call->ctx->err;
        }
        if (r != NULL) { /* a cluster node may turn the body away too: its slot moved */
            int redirected = note_redirect(call, r);
            r = dlock__pool_checked(call->ctx, r);
            if (redirected) /* not a failure: cluster.c counts it and redoes the call */
                return NULL;
        }
    }
    if (r == NULL)
        count_error(call->node);
    return r;
}

redisReply *dlock__call_result(dlock_node_call *call)
{
    redisReply *r = dlock__call_reply_at(call, 0, call->script, call->nkeys, call->nargs,
                                         call->argv, call->lens);
    dlock__call_close(call);
    return r;
}

size_t dlock__arg_int(char buf[24], int64_t v)
{
    char digits[24];
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    size_t n = 0, len = 0;
    do
        digits[n++] = (char)('0' + u % 10);
    while ((u /= 10) != 0);
    if (v < 0)
        buf[len++] = '-';
    while (n > 0)
        buf[len++] = digits[--n];
    buf[len] = '\0';
    return len;
}

redisContext *dlock__node_subscriber(dlock_node *n) { return dlock__pool_connect(n->pool); }

int dlock__node_stale(dlock_node *n, const redisContext *ctx)
{
    return dlock__pool_stale(n->pool, ctx);
}
