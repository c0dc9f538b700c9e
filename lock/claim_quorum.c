/* claim_quorum.c - a semaphore's permits and a read-write lock's readers
 * and writer on one Redis server or over N as a quorum: the attempt, its
 * fence written back, its give-back (claim_quorum.h; why it is safe:
 * lock/README.md). */
#include "lock/claim_quorum.h"

#include <stdio.h>
#include <string.h>

#include "lock/err.h"
#include "lock/sync.h"

static const char *const kind_name[] = {"lock", "semaphore", "read lock", "write lock"};

/* Several independent servers, each asked: a Redlock quorum. Otherwise
 * every call is dlock__lease_call's, on the one server the key lives on. */
static int redlock(const dlock_quorum *q) { return dlock__quorum_votes(q); }

int dlock__claim_quorum_need(const dlock_quorum *q, int permits)
{
    if (!redlock(q) || permits <= 1)
        return 0;
    return (int)((int64_t)dlock__quorum_size(q) * permits / (permits + 1)) + 1;
}

void dlock__claim_quorum_slack(dlock_quorum *q, char out[24])
{
    snprintf(out, 24, "%lld", redlock(q) ? (long long)DLOCK_SEED_SLACK_US : 0LL);
}

static int need_of(const dlock_quorum *q, const struct dlock_lease *l)
{
    return l->need > 0 ? l->need : dlock__quorum_majority(q);
}

/* An acquire script's {1, fence} or {0, pttl} (r freed): DLOCK_OK with
 * *fence, DLOCK_ERR_TIMEOUT with *pttl, else the failure (errstr set). */
static int answer_of(redisReply *r, int64_t *fence, int64_t *pttl)
{
    if (r == NULL)
        return dlock__redis_failure();
    int rc = DLOCK_ERR_REDIS;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[0]->type == REDIS_REPLY_INTEGER && r->element[1]->type == REDIS_REPLY_INTEGER) {
        rc = r->element[0]->integer == 1 ? DLOCK_OK : DLOCK_ERR_TIMEOUT;
        *(rc == DLOCK_OK ? fence : pttl) = r->element[1]->integer;
    } else {
        dlock__fail(rc, "unexpected reply to an acquire script");
    }
    freeReplyObject(r);
    return rc;
}

/* Script s on every server (need of them must answer); the replies that
 * are the integer 1 counted in *ones, the others in *others. Returns how
 * many answered. */
static int count_ones(dlock_quorum *q, enum dlock_script s, int nkeys, int nargs,
                      const char *const *argv, int need, int *ones, int *others)
{
    redisReply *r[DLOCK_NODES_MAX];
    int answered = dlock__quorum_script_all(q, s, nkeys, nargs, argv, need, r, NULL);
    *ones = *others = 0;
    for (int i = 0; i < dlock__quorum_size(q); i++)
        if (r[i] != NULL) {
            int one = r[i]->type == REDIS_REPLY_INTEGER && r[i]->integer == 1;
            *ones += one;
            *others += !one;
            freeReplyObject(r[i]);
        }
    return answered;
}

/* Raises the fence counter to top wherever l is ours (the fence script
 * leaves a counter alone where it is higher); returns on how many servers
 * l is ours with a counter at top or above. */
static int write_back(dlock_quorum *q, const struct dlock_lease *l, int64_t top)
{
    dlock_names k;
    char fence[24], keep[24];
    dlock_names_of(l->key, &k);
    snprintf(fence, sizeof(fence), "%lld", (long long)top);
    snprintf(keep, sizeof(keep), "%d", dlock__keep_ms(l->lease_ms));
    const char *argv[] = {l->target, k.fence, l->token, fence, keep};
    int agree, refused;
    count_ones(q, DLOCK_SCRIPT_FENCE, 2, 5, argv, dlock__quorum_majority(q), &agree, &refused);
    return agree;
}

/* The release script of l's kind on every server: *ours where l held,
 * *lost where it did not. Returns how many answered. */
static int release_all(dlock_quorum *q, const struct dlock_lease *l, int *ours, int *lost)
{
    dlock_names k;
    dlock_names_of(l->key, &k);
    const char *argv[] = {l->target, l->token, k.channel};
    enum dlock_script s = l->kind == DLOCK_LEASE_WRITE ? DLOCK_SCRIPT_RW_WRITE_RELEASE
                                                       : DLOCK_SCRIPT_SEM_RELEASE;
    return count_ones(q, s, 1, 3, argv, need_of(q, l), ours, lost);
}

/* Each server's answer to an attempt, tallied. */
struct vote_tally {
    int granted, busy, failed, agree;
    int64_t top, soonest;
    char why[400]; /* the first failure's text */
};

static void tally_all(dlock_quorum *q, redisReply **r, struct vote_tally *t)
{
    int64_t fence[DLOCK_NODES_MAX];
    int ok[DLOCK_NODES_MAX];
    for (int i = 0; i < dlock__quorum_size(q); i++) {
        int64_t pttl = -1;
        int rc = r[i] ? answer_of(r[i], &fence[i], &pttl) : DLOCK_ERR_REDIS;
        ok[i] = rc == DLOCK_OK;
        t->granted += ok[i];
        t->busy += rc == DLOCK_ERR_TIMEOUT;
        t->failed += rc != DLOCK_OK && rc != DLOCK_ERR_TIMEOUT;
        if (ok[i] && fence[i] > t->top)
            t->top = fence[i];
        if (rc == DLOCK_ERR_TIMEOUT && pttl >= 0 && (t->soonest < 0 || pttl < t->soonest))
            t->soonest = pttl;
        if (r[i] && rc == DLOCK_ERR_REDIS && t->why[0] == '\0')
            snprintf(t->why, sizeof(t->why), "%s", dlock_errstr());
    }
    for (int i = 0; i < dlock__quorum_size(q); i++)
        t->agree += ok[i] && fence[i] == t->top;
}

/* An attempt over several servers (dlock__claim_quorum_try). */
static int quorum_try(dlock_quorum *q, struct dlock_lease *l, enum dlock_script s, int nkeys,
                      int nargs, const char *const *argv, int64_t *pttl)
{
    int n = dlock__quorum_size(q), need = need_of(q, l), majority = dlock__quorum_majority(q);
    redisReply *r[DLOCK_NODES_MAX];
    struct vote_tally t = {.soonest = -1};
    int64_t started = dlock__now_ms();
    if (dlock__quorum_script_all(q, s, nkeys, nargs, argv, need, r, &l->sent) < need)
        snprintf(t.why, sizeof(t.why), "%s", dlock_errstr());
    int code = dlock__redis_failure();
    tally_all(q, r, &t);
    if (t.granted >= need) {
        if (t.agree < majority) /* fences apart: a majority must hold the top one */
            t.agree = write_back(q, l, t.top);
        int64_t elapsed = dlock__now_ms() - started;
        if (t.agree >= majority && elapsed < l->lease_ms - dlock__drift_ms(l->lease_ms)) {
            l->fence = t.top;
            l->acquired_ms = started;
            return DLOCK_OK;
        }
        t.failed = 0; /* it was ours, but not for long enough: ask again */
        t.soonest = -1;
    }
    if (t.granted > 0) {
        int ours, lost;
        release_all(q, l, &ours, &lost); /* where it fails, the lease runs out there */
    }
    if (t.failed > n - need)
        return dlock__fail(code, "%s %s needs %d of %d Redis servers%s: %s", kind_name[l->kind],
                           l->key, need, n, need > majority ? " (q > N x P / (P + 1))" : "",
                           t.why[0] ? t.why : "too many failed");
    *pttl = t.soonest;
    return dlock__fail(DLOCK_ERR_TIMEOUT, "%s %s: not granted on %d of %d Redis servers",
                       kind_name[l->kind], l->key, n - t.granted, n);
}

int dlock__claim_quorum_try(dlock_quorum *q, struct dlock_lease *l, enum dlock_script s,
                            int nkeys, int nargs, const char *const *argv, int64_t *pttl)
{
    if (redlock(q))
        return quorum_try(q, l, s, nkeys, nargs, argv, pttl);
    int64_t sent = dlock__now_ms(), fence; /* the lease can't have started before this */
    int rc = answer_of(dlock__lease_call(q, s, nkeys, nargs, argv, &l->sent), &fence, pttl);
    if (rc == DLOCK_OK) {
        l->fence = fence;
        l->acquired_ms = sent;
    }
    return rc;
}

void dlock__claim_quorum_undo(dlock_quorum *q, enum dlock_script s, int nkeys, int nargs,
                              const char *const *argv)
{
    if (!redlock(q)) {
        freeReplyObject(dlock__lease_call(q, s, nkeys, nargs, argv, NULL));
        return;
    }
    int ones, others;
    count_ones(q, s, nkeys, nargs, argv, dlock__quorum_size(q), &ones, &others);
}

int dlock__claim_quorum_give_back(dlock_quorum *q, const struct dlock_lease *l)
{
    if (l->kind == DLOCK_LEASE_LOCK || !redlock(q))
        return dlock__lease_give_back(q, l);
    int n = dlock__quorum_size(q), need = need_of(q, l), ours, lost;
    int answered = release_all(q, l, &ours, &lost);
    if (ours >= need)
        return DLOCK_OK;
    if (answered < need && lost <= n - need)
        return dlock__redis_failure(); /* errstr names the servers that failed */
    return dlock__fail(DLOCK_ERR_LOST, "%s %s: our lease held on only %d of %d Redis servers at "
                       "release, %d must hold it", kind_name[l->kind], l->key, ours, n, need);
}
