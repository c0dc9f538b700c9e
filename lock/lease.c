/* lease.c - leases and their holders: owner tokens, the holder's state, and
 * a lease's acquire and release in Redis. */
#include "lock/lease.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "lock/err.h"
#include "lock/sync.h"

static void make_token(char out[DLOCK_TOKEN_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[DLOCK_TOKEN_LEN / 2];
    size_t got = 0;
    while (got < sizeof(raw)) { /* getrandom only fails on EINTR here */
        ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
        if (n > 0)
            got += (size_t)n;
    }
    for (size_t i = 0; i < sizeof(raw); i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[DLOCK_TOKEN_LEN] = '\0';
}

/* A lease as dlock__lease_new_in makes it, but for its token and its place
 * in line (none yet: dlock__lease_ready). */
static struct dlock_lease *made(const char *key, const char *suffix, int kind,
                               const dlock_opts *o)
{
    size_t klen = strlen(key), slen = suffix ? strlen(suffix) : 0;
    struct dlock_lease *l = dlock__zalloc(sizeof(*l) + klen + 1 + (suffix ? klen + slen + 1 : 0));
    if (l == NULL)
        return NULL;
    l->kind = kind;
    l->target = l->key;
    if (suffix) {
        char *t = l->key + klen + 1;
        memcpy(t, key, klen);
        memcpy(t + klen, suffix, slen + 1);
        l->target = t;
    }
    l->lease_ms = o->lease_ms;
    l->retry_ms = o->retry_ms;
    l->handoff_max = l->handoff_bound = o->handoff_max;
    l->handoff_ms = o->handoff_ms;
    memcpy(l->key, key, klen + 1);
    return l;
}

struct dlock_lease *dlock__lease_new(const char *key, const dlock_opts *o)
{
    return dlock__lease_new_in(key, NULL, DLOCK_LEASE_LOCK, o);
}

struct dlock_lease *dlock__lease_reserve(const char *key, const dlock_opts *o)
{
    return made(key, NULL, DLOCK_LEASE_LOCK, o);
}

void dlock__lease_ready(struct dlock_lease *l)
{
    if (l->token[0] != '\0')
        return;
    make_token(l->token);
    struct timespec now; /* its place in the keys' Redis queues with several servers */
    clock_gettime(CLOCK_REALTIME, &now);
    l->queue_score = (int64_t)now.tv_sec * 1000000 + now.tv_nsec / 1000;
}

struct dlock_lease *dlock__lease_new_in(const char *key, const char *suffix, int kind,
                                        const dlock_opts *o)
{
    struct dlock_lease *l = made(key, suffix, kind, o);
    if (l)
        dlock__lease_ready(l);
    return l;
}

enum dlock_script dlock__lease_renew_script(const struct dlock_lease *l)
{
    return l->kind == DLOCK_LEASE_PERMIT || l->kind == DLOCK_LEASE_READ ? DLOCK_SCRIPT_SEM_RENEW
                                                                         : DLOCK_SCRIPT_RENEW;
}

dlock_handle *dlock__handle_new(dlock_client *c, const dlock_opts *o)
{
    dlock_handle *h = dlock__zalloc(sizeof(*h));
    if (h == NULL || dlock__cond_init(&h->wake) != 0) {
        free(h);
        return NULL;
    }
    h->client = c;
    h->thread = pthread_self();
    h->max_renewals = o->max_renewals;
    return h;
}

void dlock__handle_free(dlock_handle *h)
{
    pthread_cond_destroy(&h->wake);
    free(h->parts);
    free(h);
}

int dlock__holder_state(const dlock_handle *h, int64_t now)
{
    if (h->outer)
        h = h->outer;
    if (h->parts) {
        int worst = DLOCK_OK;
        for (int i = 0; i < h->nparts && worst != DLOCK_ERR_INTERRUPTED; i++) {
            int st = dlock__holder_state(h->parts[i], now);
            worst = st == DLOCK_OK ? worst : st;
        }
        return worst;
    }
    if (h->interrupted)
        return DLOCK_ERR_INTERRUPTED;
    if (h->lease->lost || now >= h->lease->valid_until_ms)
        return DLOCK_ERR_LOST;
    return DLOCK_OK;
}

const dlock_handle *dlock__holder_at(const dlock_handle *h, int i)
{
    return h->outer ? h->outer : h->parts ? h->parts[i] : h;
}

int64_t dlock__holder_valid_until(const dlock_handle *h)
{
    if (h->outer)
        h = h->outer;
    if (h->parts == NULL)
        return h->lease->valid_until_ms;
    int64_t until = INT64_MAX;
    for (int i = 0; i < h->nparts; i++) {
        int64_t part = dlock__holder_valid_until(h->parts[i]);
        until = part < until ? part : until;
    }
    return until;
}

int dlock__keep_ms(int lease_ms)
{
    int64_t ms = (int64_t)lease_ms * DLOCK_KEEP_LEASES;
    return ms < INT32_MAX ? (int)ms : INT32_MAX;
}

int dlock__lease_grant_ms(const struct dlock_lease *l)
{
    int grace = dlock__grace_ms(l->retry_ms);
    return grace < l->lease_ms ? grace : l->lease_ms;
}

int dlock__lease_try(dlock_quorum *q, struct dlock_lease *l, int queue, int64_t *pttl)
{
    dlock_node_acquire_args a = {.key = l->key,
                                 .token = l->token,
                                 .lease_ms = l->lease_ms,
                                 .queue_ms = queue ? dlock__grace_ms(l->retry_ms) : 0,
                                 .keep_ms = dlock__keep_ms(l->lease_ms),
                                 .queue_score = l->queue_score,
                                 .grant_ms = dlock__lease_grant_ms(l)};
    int64_t sent_at = dlock__now_ms(); /* the lease can't have started before this */
    a.sent_ms = sent_at;
    dlock_acquired got;
    int rc = dlock__quorum_acquire(q, &a, &got);
    l->sent |= got.sent;
    if (rc == DLOCK_OK) {
        l->fence = got.fence;
        l->acquired_ms = sent_at;
    } else {
        *pttl = got.pttl;
    }
    return rc;
}

redisReply *dlock__lease_call(dlock_quorum *q, enum dlock_script s, int nkeys, int nargs,
                              const char *const *argv, int *sent)
{
    return dlock__quorum_script(q, s, nkeys, nargs, argv, sent);
}

int dlock__lease_give_back(dlock_quorum *q, const struct dlock_lease *l)
{
    if (l->kind == DLOCK_LEASE_LOCK)
        return dlock__lease_release(q, l, 1, NULL, NULL);
    dlock_names k;
    dlock_names_of(l->key, &k);
    const char *argv[] = {l->target, l->token, k.channel};
    enum dlock_script s = l->kind == DLOCK_LEASE_WRITE ? DLOCK_SCRIPT_RW_WRITE_RELEASE
                                                       : DLOCK_SCRIPT_SEM_RELEASE;
    redisReply *r = dlock__lease_call(q, s, 1, 3, argv, NULL);
    if (r == NULL)
        return dlock__redis_failure();
    int ours = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    freeReplyObject(r);
    return ours ? DLOCK_OK : dlock__fail(DLOCK_ERR_LOST, "%s: our lease had expired", l->key);
}

int dlock__lease_release(dlock_quorum *q, const struct dlock_lease *l, int leaving,
                         const struct dlock_next *next, int *queued)
{
    dlock_node_release_args a = {.key = l->key,
                                 .token = l->token,
                                 .grant_ms = dlock__lease_grant_ms(l),
                                 .leaving = leaving,
                                 .keep_ms = dlock__keep_ms(l->lease_ms)};
    if (next) {
        a.next = next->token;
        a.next_queue_ms = next->queue_ms;
        a.next_score = next->queue_score;
        a.next_sent_ms = dlock__now_ms();
        a.next_grant_ms = next->grant_ms;
    }
    int in_line;
    int rc = dlock__quorum_release(q, &a, &in_line);
    if (queued)
        *queued = rc == DLOCK_OK && in_line;
    return rc;
}
