/* node.c - one Redis server and everything the lock says to it: the Lua
 * scripts (their text in scripts.c), run by SHA (EVAL as fallback), PING,
 * and pub/sub requests; each call split into begin (send), wait (read
 * replies, for several servers at once) and end (the result). */
#include "node.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "pool.h"
#include "scripts.h"
#include "sync.h"


const int dlock_latency_bucket_us[DLOCK_LATENCY_BUCKETS] = {100,  250,   500,   1000,   2500,
                                                            5000, 10000, 25000, 100000, -1};

struct dlock_node {
    dlock_pool *pool;
    dlock_counters *counters;
    int command_timeout_ms;
    char name[DLOCK_HOST_MAX + 8];
    pthread_mutex_t mu;           /* guards sha */
    char sha[DLOCK_SCRIPT_COUNT][41]; /* "" until SCRIPT LOAD answered */
    /* what dlock_node_info reports */
    _Atomic int up;
    _Atomic uint64_t calls, errors, latency_sum_us, latency[DLOCK_LATENCY_BUCKETS];
};

dlock_node *dlock_node_new(const dlock_config *cfg, const char *host, int port,
                           dlock_counters *counters)
{
    dlock_node *n = calloc(1, sizeof(*n));
    if (n == NULL)
        return NULL;
    if ((n->pool = dlock_pool_new(cfg, host, port, counters)) == NULL) {
        free(n);
        return NULL;
    }
    n->counters = counters;
    n->command_timeout_ms = cfg->command_timeout_ms;
    snprintf(n->name, sizeof(n->name), strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
    atomic_store(&n->up, 1);
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

const char *dlock_node_name(const dlock_node *n) { return n->name; }

int64_t dlock_node_deadline(const dlock_node *n) { return dlock_now_ms() + n->command_timeout_ms; }

void dlock_node_report(dlock_node *n, dlock_node_info *out)
{
    snprintf(out->name, sizeof(out->name), "%s", n->name);
    out->up = atomic_load(&n->up);
    out->calls = atomic_load(&n->calls);
    out->errors = atomic_load(&n->errors);
    out->latency_sum_us = atomic_load(&n->latency_sum_us);
    for (int i = 0; i < DLOCK_LATENCY_BUCKETS; i++)
        out->latency_buckets[i] = atomic_load(&n->latency[i]);
}

/* key (klen bytes) then suffix into out (size bytes), cut to fit as
 * snprintf would; memcpy, because every acquire and release derives these. */
static void suffixed(char *out, size_t size, const char *key, size_t klen, const char *suffix)
{
    size_t slen = strlen(suffix);
    klen = klen < size - 1 ? klen : size - 1;
    slen = slen < size - 1 - klen ? slen : size - 1 - klen;
    memcpy(out, key, klen);
    memcpy(out + klen, suffix, slen);
    out[klen + slen] = '\0';
}

void dlock_names_of(const char *key, dlock_names *out)
{
    size_t klen = strlen(key);
    suffixed(out->fence, sizeof(out->fence), key, klen, ":fence");
    suffixed(out->queue, sizeof(out->queue), key, klen, ":queue");
    suffixed(out->alive, sizeof(out->alive), key, klen, ":alive");
    suffixed(out->gone, sizeof(out->gone), key, klen, ":gone");
    suffixed(out->channel, sizeof(out->channel), key, klen, DLOCK_CHANNEL_SUFFIX);
}

/* Loads the script once per node; the SHA stays valid for every connection. */
static int script_sha(dlock_node *n, redisContext *ctx, enum dlock_script s, char sha[41])
{
    pthread_mutex_lock(&n->mu);
    memcpy(sha, n->sha[s], 41);
    pthread_mutex_unlock(&n->mu);
    if (sha[0] != '\0')
        return 0;
    const char *argv[] = {"SCRIPT", "LOAD", dlock_script_body[s]};
    size_t lens[] = {6, 4, strlen(dlock_script_body[s])};
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

/* EVAL of the script's body on ctx, synchronously: after a NOSCRIPT (Redis
 * restarted or flushed its script cache), which also reloads it. The
 * checked reply (caller frees) or NULL with the error set. */
static redisReply *eval_body(dlock_node *n, redisContext *ctx, enum dlock_script s, int nkeys,
                             int nargs, const char **args, const size_t *arg_lens)
{
    struct script_cmd c;
    forget_sha(n, s);
    script_cmd(&c, "EVAL", dlock_script_body[s], nkeys, nargs, args, arg_lens);
    return dlock_pool_checked(ctx, redisCommandArgv(ctx, c.argc, c.argv, c.lens));
}

/* ---- calls in flight ---- */

/* Marks the call failed with the calling thread's error (or the text
 * why, when given). */
static void call_fail(dlock_node_call *call, int code, const char *why)
{
    if (call->rc != DLOCK_OK)
        return;
    call->rc = code;
    snprintf(call->err, sizeof(call->err), "%s", why ? why : dlock_errstr());
}

/* Starts a call on a connection: the caller's own (opened when missing) or
 * a pooled one. 0, or -1 with the call failed (nothing sent). */
static int call_open(dlock_node *n, dlock_node_call *call, redisContext **own)
{
    call->node = n;
    call->own = own;
    call->ctx = NULL;
    call->expect = call->got = 0;
    call->rc = DLOCK_OK;
    call->sent = call->broken = 0;
    call->err[0] = '\0';
    call->began_us = dlock_now_us();
    if (own) {
        if (*own == NULL)
            *own = dlock_pool_connect(n->pool);
        call->ctx = *own;
    } else {
        call->ctx = dlock_pool_get(n->pool);
    }
    if (call->ctx == NULL) {
        call_fail(call, dlock_redis_failure(), NULL);
        return -1;
    }
    return 0;
}

/* Appends EVALSHA of script s with the call's arguments (or, when args is
 * NULL, the ones stored in the call) to its output. */
static void call_append_script(dlock_node_call *call, enum dlock_script s, int nkeys, int nargs,
                               const char **args, const size_t *arg_lens)
{
    struct script_cmd c;
    char sha[41];
    if (call->rc != DLOCK_OK)
        return;
    if (script_sha(call->node, call->ctx, s, sha) != 0) {
        int code = dlock_redis_failure();
        call->sent = code != DLOCK_ERR_AUTH;
        call->broken = call->ctx->err != 0;
        call_fail(call, code, NULL);
        return;
    }
    script_cmd(&c, "EVALSHA", sha, nkeys, nargs, args, arg_lens);
    if (redisAppendCommandArgv(call->ctx, c.argc, c.argv, c.lens) != REDIS_OK) {
        call_fail(call, DLOCK_ERR_NOMEM, "out of memory");
        return;
    }
    call->expect++;
}

/* A single script call with the arguments stored in the call (kept for a
 * NOSCRIPT redo at end). */
static void call_script(dlock_node_call *call, enum dlock_script s, int nkeys, int nargs)
{
    call->script = s, call->nkeys = nkeys, call->nargs = nargs;
    call_append_script(call, s, nkeys, nargs, call->argv, call->lens);
}

/* Writes what the call appended. */
static void call_send(dlock_node_call *call)
{
    int done = 0;
    if (call->rc != DLOCK_OK)
        return;
    call->sent = 1; /* a partial write may reach Redis */
    while (!done)
        if (redisBufferWrite(call->ctx, &done) != REDIS_OK) {
            call->broken = 1;
            call_fail(call, DLOCK_ERR_REDIS, call->ctx->errstr);
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
            call_fail(call, DLOCK_ERR_REDIS, "protocol error");
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
    call_fail(call, DLOCK_ERR_REDIS, why);
}

void dlock_node_wait(dlock_node_call *const *calls, int n, int64_t deadline_ms)
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
        int64_t left = deadline_ms - dlock_now_ms();
        if (left <= 0) {
            for (int i = 0; i < k; i++) {
                char why[96];
                snprintf(why, sizeof(why), "no answer within %d ms",
                         of[i]->node->command_timeout_ms);
                of[i]->broken = 1; /* its reply may still come */
                call_fail(of[i], DLOCK_ERR_REDIS, why);
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

/* Gives the call's connection back and counts the call: its round trip
 * when answered, an error when not. */
static void call_close(dlock_node_call *call)
{
    dlock_node *n = call->node;
    int answered = call->ctx && call->got == call->expect && call->rc == DLOCK_OK;
    if (call->ctx && call->own) {
        if (call->broken || call->ctx->err) {
            redisFree(call->ctx);
            *call->own = NULL;
        }
    } else if (call->ctx) {
        dlock_pool_put(n->pool, call->ctx, call->broken);
    }
    call->ctx = NULL;
    atomic_fetch_add(&n->calls, 1);
    atomic_store(&n->up, answered);
    if (answered) {
        int64_t us = dlock_now_us() - call->began_us;
        int b = dlock_bucket_of(dlock_latency_bucket_us, DLOCK_LATENCY_BUCKETS, us);
        atomic_fetch_add(&n->latency[b], 1);
        atomic_fetch_add(&n->latency_sum_us, (uint64_t)us);
    }
}

/* Counts a failed call (no answer, or an error reply) for the client and
 * the node. */
static void count_error(dlock_node *n)
{
    dlock_count(&n->counters->redis_errors);
    atomic_fetch_add(&n->errors, 1);
}

/* The result of a single script call: its checked reply (caller frees), or
 * NULL with the error set (the call's failure, or an error reply). A NOSCRIPT
 * reply is redone here with the script's body. Closes the call. */
static redisReply *call_result(dlock_node_call *call)
{
    redisReply *r = call->got ? call->reply[0] : NULL;
    if (call->rc == DLOCK_OK && is_noscript(r)) {
        freeReplyObject(r);
        r = eval_body(call->node, call->ctx, call->script, call->nkeys, call->nargs, call->argv,
                      call->lens);
        call->broken |= r == NULL && call->ctx->err;
    } else if (call->rc == DLOCK_OK) {
        r = dlock_pool_checked(call->ctx, r);
    } else {
        freeReplyObject(r);
        r = NULL;
        dlock_fail(call->rc, "%s", call->err);
    }
    call_close(call);
    if (r == NULL)
        count_error(call->node);
    return r;
}

/* A number as a script argument, into buf; its length. By hand: a call
 * formats five of them. */
static size_t arg_int(char buf[24], int64_t v)
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

/* ---- the calls ---- */

void dlock_node_ping_begin(dlock_node *n, dlock_node_call *call)
{
    if (call_open(n, call, NULL) != 0)
        return;
    if (redisAppendCommand(call->ctx, "PING") != REDIS_OK)
        call_fail(call, DLOCK_ERR_NOMEM, "out of memory");
    else
        call->expect = 1;
    call->script = -1;
    call_send(call);
}

int dlock_node_ping_end(dlock_node_call *call)
{
    redisReply *r = call_result(call); /* PING never gets NOSCRIPT */
    if (r == NULL)
        return dlock_redis_failure();
    freeReplyObject(r);
    return DLOCK_OK;
}

/* Stores a number argument of the call in its i-th buffer, as argv[at]. */
static void num_arg(dlock_node_call *call, int at, int i, int64_t v)
{
    call->argv[at] = call->num[i];
    call->lens[at] = arg_int(call->num[i], v);
}

/* Stores the lock's five keys (key and its derived names) as argv[0..4]. */
static void key_args(dlock_node_call *call, const char *key)
{
    dlock_names *k = &call->names;
    dlock_names_of(key, k);
    const char *argv[] = {key, k->fence, k->queue, k->alive, k->gone};
    for (int i = 0; i < 5; i++)
        call->argv[i] = argv[i], call->lens[i] = strlen(argv[i]);
}

void dlock_node_acquire_begin(dlock_node *n, const dlock_node_acquire_args *a,
                              dlock_node_call *call)
{
    if (call_open(n, call, NULL) != 0)
        return;
    key_args(call, a->key);
    call->argv[5] = a->token, call->lens[5] = DLOCK_TOKEN_LEN;
    num_arg(call, 6, 0, a->lease_ms);
    num_arg(call, 7, 1, a->queue_ms);
    num_arg(call, 8, 2, a->keep_ms);
    num_arg(call, 9, 3, a->queue_score);
    num_arg(call, 10, 4, a->seed_slack_us);
    num_arg(call, 11, 5, a->sent_ms);
    call_script(call, DLOCK_SCRIPT_ACQUIRE, 5, 12);
    call_send(call);
}

/* Whether r is an array of n integers. */
static int integers(const redisReply *r, size_t n)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != n)
        return 0;
    for (size_t i = 0; i < r->elements; i++)
        if (r->element[i]->type != REDIS_REPLY_INTEGER)
            return 0;
    return 1;
}

int dlock_node_acquire_end(dlock_node_call *call, dlock_acquired *out)
{
    out->sent = call->sent;
    out->pttl = -1;
    redisReply *r = call_result(call);
    if (r == NULL)
        return dlock_redis_failure();
    int rc = DLOCK_ERR_REDIS;
    if (integers(r, 2)) { /* {1, fence} or {0, pttl} */
        rc = r->element[0]->integer == 1 ? DLOCK_OK : DLOCK_ERR_TIMEOUT;
        *(rc == DLOCK_OK ? &out->fence : &out->pttl) = r->element[1]->integer;
    } else {
        dlock_fail(rc, "unexpected reply to the acquire script");
    }
    freeReplyObject(r);
    return rc;
}

void dlock_node_release_begin(dlock_node *n, const dlock_node_release_args *a,
                              dlock_node_call *call)
{
    if (call_open(n, call, NULL) != 0)
        return;
    key_args(call, a->key);
    call->argv[5] = a->token, call->lens[5] = DLOCK_TOKEN_LEN;
    call->argv[6] = call->names.channel, call->lens[6] = strlen(call->names.channel);
    num_arg(call, 7, 0, a->grant_ms);
    num_arg(call, 8, 1, a->leaving ? 1 : 0);
    num_arg(call, 9, 2, a->keep_ms);
    num_arg(call, 10, 3, a->seed_slack_us);
    call->argv[11] = call->text, call->lens[11] = 0;
    call->text[0] = '\0';
    if (a->next)
        call->lens[11] = (size_t)snprintf(call->text, sizeof(call->text), "%.*s:%d:%lld:%lld:%d",
                                          DLOCK_TOKEN_LEN, a->next, a->next_queue_ms,
                                          (long long)a->next_score, (long long)a->next_sent_ms,
                                          a->next_grant_ms);
    call_script(call, DLOCK_SCRIPT_RELEASE, 5, 12);
    call_send(call);
}

/* The answer of a script that returns 1 (done) or 0 (the key was not ours). */
/* A script that returns 1 or more (done; *more gets the rest, when not
 * NULL) or 0 (the key was not ours): its code. */
static int owned_result(dlock_node_call *call, const char *key, const char *what, int *more)
{
    redisReply *r = call_result(call);
    if (more)
        *more = 0;
    if (r == NULL)
        return dlock_redis_failure();
    int rc = (r->type == REDIS_REPLY_INTEGER && r->integer >= 1) ? DLOCK_OK : DLOCK_ERR_LOST;
    if (rc == DLOCK_ERR_LOST)
        dlock_fail(rc, "lock %s was no longer ours at %s on %s", key, what, call->node->name);
    else if (more)
        *more = (int)r->integer - 1;
    freeReplyObject(r);
    return rc;
}

int dlock_node_release_end(dlock_node_call *call, int *queued)
{
    return owned_result(call, call->argv[0], "release", queued);
}

void dlock_node_fence_begin(dlock_node *n, const char *key, const char *token, int64_t fence,
                            int keep_ms, dlock_node_call *call)
{
    if (call_open(n, call, NULL) != 0)
        return;
    key_args(call, key); /* the script uses the first two */
    call->argv[2] = token, call->lens[2] = DLOCK_TOKEN_LEN;
    num_arg(call, 3, 0, fence);
    num_arg(call, 4, 1, keep_ms);
    call_script(call, DLOCK_SCRIPT_FENCE, 2, 5);
    call_send(call);
}

int dlock_node_fence_end(dlock_node_call *call)
{
    return owned_result(call, call->argv[0], "fence write-back", NULL);
}

void dlock_node_raise_begin(dlock_node *n, const dlock_node_raise_args *a,
                            dlock_node_call *call)
{
    if (call_open(n, call, NULL) != 0)
        return;
    dlock_names_of(a->key, &call->names);
    call->argv[0] = a->target, call->lens[0] = strlen(a->target);
    call->argv[1] = call->names.fence, call->lens[1] = strlen(call->names.fence);
    call->argv[2] = a->token, call->lens[2] = DLOCK_TOKEN_LEN;
    num_arg(call, 3, 0, a->floor);
    num_arg(call, 4, 1, a->keep_ms);
    num_arg(call, 5, 2, a->member ? 1 : 0);
    call_script(call, DLOCK_SCRIPT_RAISE, 2, 6);
    call_send(call);
}

int dlock_node_raise_end(dlock_node_call *call, int64_t *fence)
{
    redisReply *r = call_result(call);
    if (r == NULL)
        return dlock_redis_failure();
    int rc = DLOCK_ERR_REDIS;
    if (r->type != REDIS_REPLY_INTEGER)
        dlock_fail(rc, "unexpected reply to the fence raise script");
    else if (r->integer < 0) /* INCR's answer near 2^63 came back through a Lua double */
        dlock_fail(rc, "the fence raise on %s answered %lld: its counter is near 2^63 (fences "
                   "are exact below 2^53 only)", call->node->name, (long long)r->integer);
    else if (r->integer > 0)
        *fence = r->integer, rc = DLOCK_OK;
    else /* 0, and only 0, is the script's "not ours" */
        rc = dlock_fail(DLOCK_ERR_LOST, "lock %s was no longer ours at fence raise on %s",
                        call->argv[0], call->node->name);
    freeReplyObject(r);
    return rc;
}

void dlock_node_renew_begin(dlock_node *n, redisContext **own, int count,
                            const dlock_node_renewal *r, dlock_node_call *call)
{
    if (call_open(n, call, own) != 0)
        return;
    call->script = DLOCK_SCRIPT_RENEW;
    for (int i = 0; i < count && call->rc == DLOCK_OK; i++) {
        char lease[24];
        const char *argv[] = {r[i].key, r[i].token, lease};
        size_t lens[] = {strlen(r[i].key), DLOCK_TOKEN_LEN, arg_int(lease, r[i].lease_ms)};
        call_append_script(call, r[i].script, 1, 3, argv, lens);
    }
    call_send(call);
}

/* A renew script's answer as a code (r freed): renewed, not ours, or the failure. */
static int renewed(dlock_node *n, redisReply *r)
{
    if (r == NULL) {
        count_error(n);
        return dlock_redis_failure();
    }
    int rc = (r->type == REDIS_REPLY_INTEGER && r->integer == 1) ? DLOCK_OK : DLOCK_ERR_LOST;
    freeReplyObject(r);
    return rc;
}

void dlock_node_renew_end(dlock_node_call *call, int count, const dlock_node_renewal *r,
                          int *rcs)
{
    dlock_node *n = call->node;
    for (int i = 0; i < count; i++) {
        redisReply *rp = i < call->got ? call->reply[i] : NULL;
        if (call->rc != DLOCK_OK || rp == NULL) {
            freeReplyObject(rp);
            dlock_fail(call->rc != DLOCK_OK ? call->rc : DLOCK_ERR_REDIS, "%s",
                       call->err[0] ? call->err : "no reply");
            rcs[i] = renewed(n, NULL);
        } else if (is_noscript(rp)) { /* Redis lost its scripts: send the body this once */
            freeReplyObject(rp);
            char lease[24];
            const char *argv[] = {r[i].key, r[i].token, lease};
            size_t lens[] = {strlen(r[i].key), DLOCK_TOKEN_LEN, arg_int(lease, r[i].lease_ms)};
            rp = eval_body(n, call->ctx, r[i].script, 1, 3, argv, lens);
            call->broken |= rp == NULL && call->ctx->err;
            rcs[i] = renewed(n, rp);
        } else {
            rcs[i] = renewed(n, dlock_pool_checked(call->ctx, rp));
        }
    }
    call_close(call);
}

void dlock_node_script_begin(dlock_node *n, enum dlock_script s, int nkeys, int nargs,
                             const char *const *argv, dlock_node_call *call)
{
    if (call_open(n, call, NULL) != 0)
        return;
    for (int i = 0; i < nargs; i++)
        call->argv[i] = argv[i], call->lens[i] = strlen(argv[i]);
    call_script(call, s, nkeys, nargs);
    call_send(call);
}

redisReply *dlock_node_script_end(dlock_node_call *call) { return call_result(call); }

redisContext *dlock_node_subscriber(dlock_node *n) { return dlock_pool_connect(n->pool); }

int dlock_node_sub_request(redisContext *ctx, const char *key, int subscribe)
{
    dlock_names k;
    dlock_names_of(key, &k);
    return redisAppendCommand(ctx, subscribe ? "SUBSCRIBE %s" : "UNSUBSCRIBE %s", k.channel);
}
