/* node_ops.c - what the lock says to one Redis server (node.h): PING, each
 * Lua script's arguments (their text in scripts.c) and its answer read
 * back, pub/sub requests, and the names a lock's keys derive from. Each
 * call goes through node.c's calls in flight: begin, dlock__node_wait, end. */
#include <string.h>

#include "lock/err.h"
#include "lock/node_internal.h"

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

void dlock__node_ping_begin(dlock_node *n, dlock_node_call *call)
{
    if (dlock__call_open(n, call, NULL) != 0)
        return;
    if (redisAppendCommand(call->ctx, "PING") != REDIS_OK)
        dlock__call_fail(call, DLOCK_ERR_NOMEM, "out of memory");
    else
        call->expect = 1;
    dlock__call_send(call);
}

int dlock__node_ping_end(dlock_node_call *call)
{
    redisReply *r = dlock__call_result(call); /* PING never gets NOSCRIPT */
    if (r == NULL)
        return dlock__redis_failure();
    freeReplyObject(r);
    return DLOCK_OK;
}

/* Stores a number argument of the call in its i-th buffer, as argv[at]. */
static void num_arg(dlock_node_call *call, int at, int i, int64_t v)
{
    call->argv[at] = call->num[i];
    call->lens[at] = dlock__arg_int(call->num[i], v);
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

void dlock__node_acquire_begin(dlock_node *n, const dlock_node_acquire_args *a,
                               dlock_node_call *call)
{
    if (dlock__call_open(n, call, NULL) != 0)
        return;
    key_args(call, a->key);
    call->argv[5] = a->token, call->lens[5] = DLOCK_TOKEN_LEN;
    num_arg(call, 6, 0, a->lease_ms);
    num_arg(call, 7, 1, a->queue_ms);
    num_arg(call, 8, 2, a->keep_ms);
    num_arg(call, 9, 3, a->queue_score);
    num_arg(call, 10, 4, a->seed_slack_us);
    num_arg(call, 11, 5, a->sent_ms);
    dlock__call_script(call, DLOCK_SCRIPT_ACQUIRE, 5, 12);
    dlock__call_send(call);
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

int dlock__node_acquire_end(dlock_node_call *call, dlock_acquired *out)
{
    out->sent = call->sent;
    out->pttl = -1;
    redisReply *r = dlock__call_result(call);
    if (r == NULL)
        return dlock__redis_failure();
    int rc = DLOCK_ERR_REDIS;
    if (integers(r, 2)) { /* {1, fence} or {0, pttl} */
        rc = r->element[0]->integer == 1 ? DLOCK_OK : DLOCK_ERR_TIMEOUT;
        *(rc == DLOCK_OK ? &out->fence : &out->pttl) = r->element[1]->integer;
    } else {
        dlock__fail(rc, "unexpected reply to the acquire script");
    }
    freeReplyObject(r);
    return rc;
}

void dlock__node_release_begin(dlock_node *n, const dlock_node_release_args *a,
                               dlock_node_call *call)
{
    if (dlock__call_open(n, call, NULL) != 0)
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
    dlock__call_script(call, DLOCK_SCRIPT_RELEASE, 5, 12);
    dlock__call_send(call);
}

/* A script that returns 1 or more (done; *more gets the rest, when not
 * NULL) or 0 (the key was not ours): its code. */
static int owned_result(dlock_node_call *call, const char *key, const char *what, int *more)
{
    redisReply *r = dlock__call_result(call);
    if (more)
        *more = 0;
    if (r == NULL)
        return dlock__redis_failure();
    int rc = (r->type == REDIS_REPLY_INTEGER && r->integer >= 1) ? DLOCK_OK : DLOCK_ERR_LOST;
    if (rc == DLOCK_ERR_LOST)
        dlock__fail(rc, "lock %s was no longer ours at %s on %s", key, what,
                    dlock__node_name(call->node));
    else if (more)
        *more = (int)r->integer - 1;
    freeReplyObject(r);
    return rc;
}

int dlock__node_release_end(dlock_node_call *call, int *queued)
{
    return owned_result(call, call->argv[0], "release", queued);
}

void dlock__node_fence_begin(dlock_node *n, const char *key, const char *target,
                             const char *token, int64_t fence, int keep_ms,
                             dlock_node_call *call)
{
    if (dlock__call_open(n, call, NULL) != 0)
        return;
    key_args(call, key); /* the script uses the first two */
    call->argv[0] = target, call->lens[0] = strlen(target);
    call->argv[2] = token, call->lens[2] = DLOCK_TOKEN_LEN;
    num_arg(call, 3, 0, fence);
    num_arg(call, 4, 1, keep_ms);
    dlock__call_script(call, DLOCK_SCRIPT_FENCE, 2, 5);
    dlock__call_send(call);
}

int dlock__node_fence_end(dlock_node_call *call)
{
    return owned_result(call, call->argv[0], "fence write-back", NULL);
}

void dlock__node_raise_begin(dlock_node *n, const dlock_node_raise_args *a,
                             dlock_node_call *call)
{
    if (dlock__call_open(n, call, NULL) != 0)
        return;
    dlock_names_of(a->key, &call->names);
    call->argv[0] = a->target, call->lens[0] = strlen(a->target);
    call->argv[1] = call->names.fence, call->lens[1] = strlen(call->names.fence);
    call->argv[2] = a->token, call->lens[2] = DLOCK_TOKEN_LEN;
    num_arg(call, 3, 0, a->floor);
    num_arg(call, 4, 1, a->keep_ms);
    num_arg(call, 5, 2, a->member ? 1 : 0);
    dlock__call_script(call, DLOCK_SCRIPT_RAISE, 2, 6);
    dlock__call_send(call);
}

int dlock__node_raise_end(dlock_node_call *call, int64_t *fence)
{
    redisReply *r = dlock__call_result(call);
    if (r == NULL)
        return dlock__redis_failure();
    int rc = DLOCK_ERR_REDIS;
    if (r->type != REDIS_REPLY_INTEGER)
        dlock__fail(rc, "unexpected reply to the fence raise script");
    else if (r->integer < 0) /* INCR's answer near 2^63 came back through a Lua double */
        dlock__fail(rc, "the fence raise on %s answered %lld: its counter is near 2^63 (fences "
                    "are exact below 2^53 only)", dlock__node_name(call->node),
                    (long long)r->integer);
    else if (r->integer > 0)
        *fence = r->integer, rc = DLOCK_OK;
    else /* 0, and only 0, is the script's "not ours" */
        rc = dlock__fail(DLOCK_ERR_LOST, "lock %s was no longer ours at fence raise on %s",
                         call->argv[0], dlock__node_name(call->node));
    freeReplyObject(r);
    return rc;
}

void dlock__node_renew_begin(dlock_node *n, redisContext **own, int count,
                             const dlock_node_renewal *r, dlock_node_call *call)
{
    if (dlock__call_open(n, call, own) != 0)
        return;
    call->script = DLOCK_SCRIPT_RENEW;
    for (int i = 0; i < count && call->rc == DLOCK_OK; i++) {
        char lease[24];
        const char *argv[] = {r[i].key, r[i].token, lease};
        size_t lens[] = {strlen(r[i].key), DLOCK_TOKEN_LEN, dlock__arg_int(lease, r[i].lease_ms)};
        dlock__call_append_script(call, r[i].script, 1, 3, argv, lens);
    }
    dlock__call_send(call);
}

/* A renew script's answer as a code (r freed): renewed, not ours, or the
 * failure (counted by dlock__call_reply_at). */
static int renewed(redisReply *r)
{
    if (r == NULL)
        return dlock__redis_failure();
    int rc = (r->type == REDIS_REPLY_INTEGER && r->integer == 1) ? DLOCK_OK : DLOCK_ERR_LOST;
    freeReplyObject(r);
    return rc;
}

void dlock__node_renew_end(dlock_node_call *call, int count, const dlock_node_renewal *r,
                           int *rcs)
{
    for (int i = 0; i < count; i++) {
        char lease[24]; /* the arguments again, for a NOSCRIPT redo */
        const char *argv[] = {r[i].key, r[i].token, lease};
        size_t lens[] = {strlen(r[i].key), DLOCK_TOKEN_LEN, dlock__arg_int(lease, r[i].lease_ms)};
        rcs[i] = renewed(dlock__call_reply_at(call, i, r[i].script, 1, 3, argv, lens));
    }
    dlock__call_close(call);
}

void dlock__node_script_begin(dlock_node *n, enum dlock_script s, int nkeys, int nargs,
                              const char *const *argv, dlock_node_call *call)
{
    if (dlock__call_open(n, call, NULL) != 0)
        return;
    for (int i = 0; i < nargs; i++)
        call->argv[i] = argv[i], call->lens[i] = strlen(argv[i]);
    dlock__call_script(call, s, nkeys, nargs);
    dlock__call_send(call);
}

redisReply *dlock__node_script_end(dlock_node_call *call) { return dlock__call_result(call); }

redisReply *dlock__node_command(dlock_node *n, int argc, const char *const *argv)
{
    dlock_node_call call, *calls[] = {&call};
    if (dlock__call_open(n, &call, NULL) == 0) {
        for (int i = 0; i < argc && i < DLOCK_NODE_ARGS_MAX; i++)
            call.argv[i] = argv[i], call.lens[i] = strlen(argv[i]);
        if (redisAppendCommandArgv(call.ctx, argc, call.argv, call.lens) != REDIS_OK)
            dlock__call_fail(&call, DLOCK_ERR_NOMEM, "out of memory");
        else
            call.expect = 1;
        dlock__call_send(&call);
        dlock__node_wait(calls, 1, dlock__node_deadline(n));
    }
    return dlock__call_result(&call);
}

int dlock__node_sub_request(const dlock_node *n, redisContext *ctx, const char *key,
                            int subscribe)
{
    static const char *const verbs[2][2] = {{"UNSUBSCRIBE %s", "SUBSCRIBE %s"},
                                            {"SUNSUBSCRIBE %s", "SSUBSCRIBE %s"}};
    dlock_names k;
    dlock_names_of(key, &k);
    return redisAppendCommand(ctx, verbs[dlock__node_sharded(n)][subscribe != 0], k.channel);
}
