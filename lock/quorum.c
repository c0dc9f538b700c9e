/* quorum.c - one call on every server at once, and the majority rules of
 * Redlock over their answers (see quorum.h and lock/README.md). */
#include "lock/quorum.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lock/cluster.h"
#include "lock/err.h"
#include "lock/sync.h"

#define SKIP_FIRST_MS 25
#define SKIP_MAX_MS 1000

struct dlock_quorum {
    int n;
    dlock_cluster *cluster; /* a Redis Cluster: it holds the nodes, and n is 0 */
    dlock_node *node[DLOCK_NODES_MAX];
    /* a server that stopped answering is skipped until skip_until */
    _Atomic int64_t skip_until[DLOCK_NODES_MAX];
    _Atomic int failures[DLOCK_NODES_MAX]; /* in a row */
};

dlock_quorum *dlock__quorum_new(const dlock_config *cfg, dlock_counters *counters)
{
    dlock_quorum *q = calloc(1, sizeof(*q));
    if (q == NULL)
        return NULL;
    if (cfg->cluster) {
        if ((q->cluster = dlock__cluster_new(cfg, counters)) == NULL) {
            free(q);
            return NULL;
        }
        return q;
    }
    q->n = cfg->nodes > 0 ? cfg->nodes : 1;
    for (int i = 0; i < q->n; i++) {
        const char *host = cfg->nodes > 0 ? cfg->node[i].host : cfg->host;
        int port = cfg->nodes > 0 ? cfg->node[i].port : cfg->port;
        if ((q->node[i] = dlock__node_new(cfg, host, port, counters)) == NULL) {
            dlock__quorum_free(q);
            return NULL;
        }
    }
    return q;
}

void dlock__quorum_free(dlock_quorum *q)
{
    if (q == NULL)
        return;
    for (int i = 0; i < q->n; i++)
        dlock__node_free(q->node[i]);
    dlock__cluster_free(q->cluster);
    free(q);
}

int dlock__quorum_size(const dlock_quorum *q)
{
    return q->cluster ? dlock__cluster_size(q->cluster) : q->n;
}

dlock_node *dlock__quorum_node(dlock_quorum *q, int i)
{
    return q->cluster ? dlock__cluster_node(q->cluster, i) : q->node[i];
}

int dlock__quorum_majority(const dlock_quorum *q) { return q->n / 2 + 1; }
int dlock__quorum_votes(const dlock_quorum *q) { return q->n > 1; }

int dlock__quorum_listens(dlock_quorum *q, const char *key, int i)
{
    return q->cluster == NULL || dlock__cluster_owner(q->cluster, key, 0) == i;
}

redisReply *dlock__quorum_script(dlock_quorum *q, enum dlock_script s, int nkeys, int nargs,
                                 const char *const *argv, int *sent)
{
    if (q->cluster)
        return dlock__cluster_script(q->cluster, s, nkeys, nargs, argv, sent);
    dlock_node *n = q->node[0];
    dlock_node_call call, *calls[] = {&call};
    dlock__node_script_begin(n, s, nkeys, nargs, argv, &call);
    dlock__node_wait(calls, 1, dlock__node_deadline(n));
    redisReply *r = dlock__node_script_end(&call);
    if (sent)
        *sent |= call.sent;
    return r;
}

/* ---- fan-out ---- */

/* One call on each server: calls[i] for server i, begun unless skipped.
 * A call goes out in at most two rounds (now[i]: begun in this one). */
struct fanout {
    dlock_quorum *q;
    dlock_node_call calls[DLOCK_NODES_MAX];
    int begun[DLOCK_NODES_MAX], now[DLOCK_NODES_MAX];
};

/* A fan-out with no call begun. Only what says which calls run is cleared:
 * a call is set up when it begins, and zeroing the 26 KB of calls on every
 * acquire and release was a visible share of a lone client's CPU. */
static struct fanout *fanout_init(struct fanout *f, dlock_quorum *q)
{
    f->q = q;
    memset(f->begun, 0, sizeof(f->begun));
    memset(f->now, 0, sizeof(f->now));
    return f;
}

/* Which servers a call goes to: all but those left out for not answering
 * lately - unless the others alone could not make a majority: then all, so
 * that a server that is back is found at once. */
static void choose(struct fanout *f)
{
    dlock_quorum *q = f->q;
    int64_t now = dlock__now_ms();
    int in = 0;
    for (int i = 0; i < q->n; i++)
        in += f->now[i] = f->begun[i] = now >= atomic_load(&q->skip_until[i]);
    if (in < dlock__quorum_majority(q))
        for (int i = 0; i < q->n; i++)
            f->now[i] = f->begun[i] = 1;
}

/* The second round, when the first one could not make a majority: the
 * servers left out are asked after all - one may be back, and a call must
 * not fail for a server it did not ask. Returns 0 when none was left out. */
static int ask_the_rest(struct fanout *f)
{
    int more = 0;
    for (int i = 0; i < f->q->n; i++) {
        more += f->now[i] = !f->begun[i];
        f->begun[i] = 1;
    }
    return more;
}

/* Waits for the calls of this round (one deadline for all). */
static void wait_all(struct fanout *f)
{
    dlock_node_call *pending[DLOCK_NODES_MAX];
    int k = 0;
    for (int i = 0; i < f->q->n; i++)
        if (f->now[i])
            pending[k++] = &f->calls[i];
    if (k > 0)
        dlock__node_wait(pending, k, dlock__node_deadline(f->q->node[0]));
}

/* After server i's call ended: skip it for a while when it did not answer. */
static void note_answer(dlock_quorum *q, int i, const dlock_node_call *call)
{
    if (q->n == 1)
        return;
    if (call->rc == DLOCK_OK) {
        atomic_store(&q->failures[i], 0);
        atomic_store(&q->skip_until[i], 0);
        return;
    }
    int failures = atomic_fetch_add(&q->failures[i], 1) + 1;
    int64_t ms = SKIP_FIRST_MS;
    while (--failures > 0 && ms < SKIP_MAX_MS)
        ms *= 2;
    atomic_store(&q->skip_until[i], dlock__now_ms() + (ms < SKIP_MAX_MS ? ms : SKIP_MAX_MS));
}

/* The failures of a call over all servers, gathered into one error text. */
struct failures {
    int count, auth;
    char text[600];
};

static void add_failure(struct failures *fl, dlock_quorum *q, int i, int rc)
{
    size_t len = strlen(fl->text);
    fl->count++;
    fl->auth |= rc == DLOCK_ERR_AUTH;
    const char *name = dlock__node_name(q->node[i]), *why = dlock_errstr();
    if (q->n == 1 || strstr(why, name)) /* one server, or the text names it already */
        snprintf(fl->text + len, sizeof(fl->text) - len, "%s%s", len ? "; " : "", why);
    else
        snprintf(fl->text + len, sizeof(fl->text) - len, "%s%s: %s", len ? "; " : "", name, why);
}

/* Sets errstr for a call that could not reach a majority; returns the code. */
static int no_majority(dlock_quorum *q, const struct failures *fl, const char *what)
{
    int code = fl->auth ? DLOCK_ERR_AUTH : DLOCK_ERR_REDIS;
    if (q->n == 1)
        return dlock__fail(code, "%s", fl->text);
    return dlock__fail(code, "%s: %d of %d Redis servers failed, a majority is %d (%s)", what,
                       fl->count, q->n, dlock__quorum_majority(q), fl->text);
}

/* ---- ping ---- */

int dlock__quorum_ping(dlock_quorum *q, int up[DLOCK_NODES_MAX], int *need)
{
    *need = dlock__quorum_majority(q);
    if (q->cluster)
        return dlock__cluster_ping(q->cluster, up, need);
    struct fanout f;
    fanout_init(&f, q);
    struct failures fl = {0};
    int count = 0;
    for (int i = 0; i < q->n; i++) { /* health checks try every server, skipped or not */
        dlock__node_ping_begin(q->node[i], &f.calls[i]);
        f.now[i] = f.begun[i] = 1;
    }
    wait_all(&f);
    for (int i = 0; i < q->n; i++) {
        int rc = dlock__node_ping_end(&f.calls[i]);
        note_answer(q, i, &f.calls[i]);
        up[i] = rc == DLOCK_OK;
        count += up[i];
        if (rc != DLOCK_OK)
            add_failure(&fl, q, i, rc);
    }
    if (count < dlock__quorum_majority(q))
        no_majority(q, &fl, "ping");
    return count;
}

/* ---- acquire ---- */

/* Releases the key where an attempt that did not hold took it (ok[i]). f is
 * the acquire's own fan-out, its answers read: write-back and give-back
 * reuse it, as a fan-out is 26 KB and a request thread's stack is not large
 * (less so under ThreadSanitizer). */
static void give_back(dlock_quorum *q, const dlock_node_acquire_args *a, const int *ok,
                      struct fanout *f)
{
    dlock_node_release_args r = {.key = a->key,
                                 .token = a->token,
                                 .grant_ms = a->grant_ms,
                                 .keep_ms = a->keep_ms,
                                 .seed_slack_us = a->seed_slack_us};
    fanout_init(f, q);
    for (int i = 0; i < q->n; i++)
        if (ok[i]) {
            dlock__node_release_begin(q->node[i], &r, &f->calls[i]);
            f->now[i] = f->begun[i] = 1;
        }
    wait_all(f);
    for (int i = 0; i < q->n; i++)
        if (f->begun[i]) {
            dlock__node_release_end(&f->calls[i], NULL); /* if it fails, the lease runs out there */
            note_answer(q, i, &f->calls[i]);
        }
}

/* Raises key's fence counter to fence on the servers that answered less
 * (lower[i]), where target (the lease's) holds token; returns how many
 * accepted it, and *refused (may be NULL) how many said it was not ours. */
static int write_back(dlock_quorum *q, const char *key, const char *target, const char *token,
                      int keep_ms, int64_t fence, const int *lower, struct fanout *f,
                      int *refused)
{
    int accepted = 0, lost = 0;
    fanout_init(f, q);
    for (int i = 0; i < q->n; i++)
        if (lower[i]) {
            dlock__node_fence_begin(q->node[i], key, target, token, fence, keep_ms,
                                    &f->calls[i]);
            f->now[i] = f->begun[i] = 1;
        }
    wait_all(f);
    for (int i = 0; i < q->n; i++)
        if (f->begun[i]) {
            int rc = dlock__node_fence_end(&f->calls[i]);
            accepted += rc == DLOCK_OK;
            lost += rc == DLOCK_ERR_LOST;
            note_answer(q, i, &f->calls[i]);
        }
    if (refused)
        *refused = lost;
    return accepted;
}

/* The largest of the fences got[i] where ok[i]; lower[i] set for the ok
 * servers that answered less; returns it, with *agree the ok servers that
 * answered it. */
static int64_t top_fence(const dlock_quorum *q, const int *ok, const int64_t *got, int *lower,
                         int *agree)
{
    int64_t top = 0;
    for (int i = 0; i < q->n; i++)
        if (ok[i] && got[i] > top)
            top = got[i];
    *agree = 0;
    for (int i = 0; i < q->n; i++)
        if (ok[i])
            got[i] == top ? (*agree)++ : (lower[i] = 1);
    return top;
}

/* Server i's acquire answer, counted: ok (with its fence in got[i]), held
 * by another (the soonest TTL kept in *soonest), or failed. */
static void count_answer(dlock_quorum *q, int i, int rc, const dlock_acquired *got, int *ok,
                         int *nok, int *held, int64_t *soonest, struct failures *fl)
{
    if (rc == DLOCK_OK) {
        ok[i] = 1, (*nok)++;
    } else if (rc == DLOCK_ERR_TIMEOUT) {
        (*held)++;
        if (got->pttl >= 0 && (*soonest < 0 || got->pttl < *soonest))
            *soonest = got->pttl;
    } else {
        add_failure(fl, q, i, rc);
    }
}

int dlock__quorum_acquire(dlock_quorum *q, const dlock_node_acquire_args *args,
                          dlock_acquired *out)
{
    if (q->cluster)
        return dlock__cluster_acquire(q->cluster, args, out);
    dlock_node_acquire_args a = *args;
    a.queue_score = q->n > 1 ? args->queue_score : 0;
    a.seed_slack_us = q->n > 1 ? DLOCK_SEED_SLACK_US : 0;
    int64_t started = dlock__now_ms(), soonest = -1;
    dlock_acquired got[DLOCK_NODES_MAX];
    int ok[DLOCK_NODES_MAX] = {0}, nok = 0, held = 0, quorum = dlock__quorum_majority(q);
    struct fanout f;
    fanout_init(&f, q);
    struct failures fl = {0};
    out->sent = 0;
    out->pttl = -1;
    choose(&f);
    do {
        for (int i = 0; i < q->n; i++)
            if (f.now[i])
                dlock__node_acquire_begin(q->node[i], &a, &f.calls[i]);
        wait_all(&f);
        for (int i = 0; i < q->n; i++) {
            if (!f.now[i])
                continue;
            int rc = dlock__node_acquire_end(&f.calls[i], &got[i]);
            note_answer(q, i, &f.calls[i]);
            out->sent |= got[i].sent;
            count_answer(q, i, rc, &got[i], ok, &nok, &held, &soonest, &fl);
        }
    } while (nok + held < quorum && ask_the_rest(&f));
    if (q->n == 1 && nok == 1) {
        out->fence = got[0].fence;
        return DLOCK_OK;
    }
    if (nok >= quorum) {
        int64_t fences[DLOCK_NODES_MAX];
        int agree, lower[DLOCK_NODES_MAX] = {0};
        for (int i = 0; i < q->n; i++)
            fences[i] = ok[i] ? got[i].fence : 0;
        int64_t top = top_fence(q, ok, fences, lower, &agree);
        if (agree < quorum)
            agree += write_back(q, a.key, a.key, a.token, a.keep_ms, top, lower, &f, NULL);
        int64_t elapsed = dlock__now_ms() - started;
        if (agree >= quorum && elapsed < a.lease_ms - dlock__drift_ms(a.lease_ms)) {
            out->fence = top;
            return DLOCK_OK;
        }
        held = quorum; /* it was ours, but not for long enough: ask again */
        soonest = -1;
    }
    if (nok > 0)
        give_back(q, &a, ok, &f);
    if (nok + held >= quorum) {
        out->pttl = soonest;
        return dlock__fail(DLOCK_ERR_TIMEOUT, "lock %s is held by another owner", a.key);
    }
    return no_majority(q, &fl, "acquire");
}

/* ---- fence raise ---- */

/* Sends the raise to the servers of this round of f and reads their
 * answers: ok[i] with got[i], *lost those that said not ours. */
static void raise_round(dlock_quorum *q, const dlock_node_raise_args *a, struct fanout *f,
                        int *ok, int64_t *got, int *nok, int *lost, struct failures *fl)
{
    for (int i = 0; i < q->n; i++)
        if (f->now[i])
            dlock__node_raise_begin(q->node[i], a, &f->calls[i]);
    wait_all(f);
    for (int i = 0; i < q->n; i++) {
        if (!f->now[i])
            continue;
        int rc = dlock__node_raise_end(&f->calls[i], &got[i]);
        note_answer(q, i, &f->calls[i]);
        if (rc == DLOCK_OK)
            ok[i] = 1, (*nok)++;
        else if (rc == DLOCK_ERR_LOST)
            (*lost)++;
        else
            add_failure(fl, q, i, rc);
    }
}

int dlock__quorum_raise(dlock_quorum *q, const dlock_node_raise_args *a, int64_t *fence)
{
    if (q->cluster)
        return dlock__cluster_raise(q->cluster, a, fence);
    struct fanout f;
    fanout_init(&f, q);
    struct failures fl = {0};
    int64_t got[DLOCK_NODES_MAX];
    int ok[DLOCK_NODES_MAX] = {0}, nok = 0, lost = 0, quorum = dlock__quorum_majority(q);
    choose(&f);
    do
        raise_round(q, a, &f, ok, got, &nok, &lost, &fl);
    while (nok < quorum && lost <= q->n - quorum && ask_the_rest(&f));
    if (nok < quorum && lost > q->n - quorum)
        return dlock__fail(DLOCK_ERR_LOST, "lock %s was no longer ours at fence raise%s",
                           a->target, q->n > 1 ? " on a majority of the Redis servers" : "");
    if (nok < quorum)
        return no_majority(q, &fl, "fence raise");
    int agree, refused = 0, lower[DLOCK_NODES_MAX] = {0};
    int64_t top = top_fence(q, ok, got, lower, &agree);
    if (agree < quorum) /* as an acquire's: a majority must hold it, see lock/README.md */
        agree += write_back(q, a->key, a->target, a->token, a->keep_ms, top, lower, &f, &refused);
    if (agree >= quorum) {
        *fence = top;
        return DLOCK_OK;
    }
    int code = lost + refused > q->n - quorum ? DLOCK_ERR_LOST : DLOCK_ERR_REDIS;
    return dlock__fail(code, "lock %s: the raised fence holds on only %d of %d Redis servers, a "
                       "majority is %d%s", a->key, agree, q->n, quorum,
                       code == DLOCK_ERR_LOST ? "" : "; the others did not answer");
}

/* ---- release ---- */

int dlock__quorum_release(dlock_quorum *q, const dlock_node_release_args *args, int *queued)
{
    if (q->cluster)
        return dlock__cluster_release(q->cluster, args, queued);
    dlock_node_release_args a = *args;
    a.seed_slack_us = q->n > 1 ? DLOCK_SEED_SLACK_US : 0;
    a.next_score = q->n > 1 ? args->next_score : 0;
    struct fanout f;
    fanout_init(&f, q);
    struct failures fl = {0};
    int released = 0, lost = 0, in_line = 0, quorum = dlock__quorum_majority(q);
    choose(&f);
    do {
        for (int i = 0; i < q->n; i++)
            if (f.now[i])
                dlock__node_release_begin(q->node[i], &a, &f.calls[i]);
        wait_all(&f);
        for (int i = 0; i < q->n; i++) {
            if (!f.now[i])
                continue;
            int node_queued;
            int rc = dlock__node_release_end(&f.calls[i], &node_queued);
            note_answer(q, i, &f.calls[i]);
            in_line += node_queued;
            if (rc == DLOCK_OK)
                released++;
            else if (rc == DLOCK_ERR_LOST)
                lost++;
            else
                add_failure(&fl, q, i, rc);
        }
    } while (released < quorum && lost < quorum && ask_the_rest(&f));
    *queued = in_line >= quorum;
    if (lost >= quorum)
        return dlock__fail(DLOCK_ERR_LOST, "lock %s was no longer ours at release%s", a.key,
                           q->n > 1 ? " on a majority of the Redis servers" : "");
    if (released >= quorum)
        return DLOCK_OK;
    if (fl.count == 0) /* released on some, lost on others, and no majority either way */
        return dlock__fail(DLOCK_ERR_LOST, "lock %s was ours on only %d of %d Redis servers at "
                           "release", a.key, released, q->n);
    return no_majority(q, &fl, "release");
}

/* ---- any script ---- */

int dlock__quorum_script_all(dlock_quorum *q, enum dlock_script s, int nkeys, int nargs,
                             const char *const *argv, int need, redisReply **replies, int *sent)
{
    struct fanout f;
    fanout_init(&f, q);
    struct failures fl = {0};
    int answered = 0;
    choose(&f);
    do {
        for (int i = 0; i < q->n; i++)
            if (f.now[i])
                dlock__node_script_begin(q->node[i], s, nkeys, nargs, argv, &f.calls[i]);
        wait_all(&f);
        for (int i = 0; i < q->n; i++) {
            if (!f.now[i])
                continue;
            replies[i] = dlock__node_script_end(&f.calls[i]);
            if (replies[i] == NULL)
                add_failure(&fl, q, i, dlock__redis_failure());
            note_answer(q, i, &f.calls[i]);
            answered += replies[i] != NULL;
            if (sent)
                *sent |= f.calls[i].sent;
        }
    } while (answered < need && ask_the_rest(&f));
    for (int i = 0; i < q->n; i++)
        if (!f.begun[i])
            replies[i] = NULL;
    int code = fl.auth ? DLOCK_ERR_AUTH : DLOCK_ERR_REDIS;
    if (answered < need && q->n == 1)
        dlock__fail(code, "%s", fl.text);
    else if (answered < need)
        dlock__fail(code, "%d of %d Redis servers failed, %d must answer (%s)", fl.count, q->n,
                    need, fl.text);
    return answered;
}

/* ---- renew ---- */

/* Each renewal's verdict over the servers' answers (rcs[j]), renewed when
 * its need of them (a majority unless it says) renewed it; 1 when every
 * one is settled - renewed or lost on enough servers that the rest cannot
 * change it. */
static int renewals_settled(const dlock_quorum *q, int node_rcs[][DLOCK_MULTI_MAX], int count,
                            const dlock_node_renewal *renewals, int *rcs)
{
    if (q->n == 1) {
        memcpy(rcs, node_rcs[0], (size_t)count * sizeof(*rcs));
        return 1;
    }
    int settled = 1;
    for (int j = 0; j < count; j++) {
        int renewed = 0, lost = 0, auth = 0;
        int quorum = renewals[j].need > 0 ? renewals[j].need : dlock__quorum_majority(q);
        for (int i = 0; i < q->n; i++) {
            renewed += node_rcs[i][j] == DLOCK_OK;
            lost += node_rcs[i][j] == DLOCK_ERR_LOST;
            auth |= node_rcs[i][j] == DLOCK_ERR_AUTH;
        }
        rcs[j] = renewed >= quorum          ? DLOCK_OK
                 : lost > q->n - quorum     ? DLOCK_ERR_LOST
                 : auth                     ? DLOCK_ERR_AUTH
                                            : DLOCK_ERR_REDIS;
        settled &= rcs[j] == DLOCK_OK || rcs[j] == DLOCK_ERR_LOST;
    }
    return settled;
}

void dlock__quorum_renew(dlock_quorum *q, redisContext **own, int count,
                         const dlock_node_renewal *renewals, int *rcs)
{
    if (q->cluster) {
        dlock__cluster_renew(q->cluster, own, count, renewals, rcs);
        return;
    }
    struct fanout f;
    fanout_init(&f, q);
    int node_rcs[DLOCK_NODES_MAX][DLOCK_MULTI_MAX];
    choose(&f);
    do {
        for (int i = 0; i < q->n; i++)
            if (f.now[i])
                dlock__node_renew_begin(q->node[i], &own[i], count, renewals, &f.calls[i]);
        wait_all(&f);
        for (int i = 0; i < q->n; i++)
            if (f.now[i]) {
                dlock__node_renew_end(&f.calls[i], count, renewals, node_rcs[i]);
                note_answer(q, i, &f.calls[i]);
            } else if (!f.begun[i]) {
                for (int j = 0; j < count; j++)
                    node_rcs[i][j] = DLOCK_ERR_REDIS;
            }
    } while (!renewals_settled(q, node_rcs, count, renewals, rcs) && ask_the_rest(&f));
}
