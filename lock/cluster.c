/* cluster.c - a Redis Cluster's slot map (CLUSTER SLOTS), and each call
 * routed to the owner of its key's slot, redone on MOVED, ASK and TRYAGAIN
 * (cluster.h). Written here because bookworm's hiredis (0.14) has no
 * cluster support and no maintained C cluster client is packaged. */
#include "lock/cluster.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lock/err.h"
#include "lock/sync.h"

#define REFRESH_MS 100 /* the least time between two fetches of the map */
#define TRYAGAIN_MS 10      /* the first pause after TRYAGAIN, doubled each time ... */
#define TRYAGAIN_MAX_MS 100 /* ... up to this */
#define NO_NODE 0xff

struct dlock_cluster {
    dlock_config cfg; /* for the nodes made later (its strings are the client's) */
    dlock_counters *counters;
    pthread_mutex_t mu; /* guards adding nodes, and one fetch of the map at a time */
    _Atomic int n;
    dlock_node *node[DLOCK_NODES_MAX]; /* [0, n) set before n grows: read without mu */
    _Atomic unsigned char owner[DLOCK_SLOTS]; /* node index per slot, NO_NODE unknown */
    _Atomic int64_t fetched_ms;              /* the last fetch of the map, tried */
};

/* ---- hash slots ---- */

uint16_t dlock__crc16(const char *buf, size_t len)
{
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((unsigned char)buf[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = crc & 0x8000 ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

int dlock__slot_of(const char *key, int *tagged)
{
    size_t len = strlen(key);
    const char *open = memchr(key, '{', len), *close = NULL;
    if (open)
        close = memchr(open + 1, '}', len - (size_t)(open + 1 - key));
    int tag = close && close > open + 1;
    if (tagged)
        *tagged = tag;
    if (tag)
        return dlock__crc16(open + 1, (size_t)(close - open - 1)) & (DLOCK_SLOTS - 1);
    return dlock__crc16(key, len) & (DLOCK_SLOTS - 1);
}

/* ---- nodes and the map ---- */

dlock_cluster *dlock__cluster_new(const dlock_config *cfg, dlock_counters *counters)
{
    dlock_cluster *cl = calloc(1, sizeof(*cl));
    if (cl == NULL)
        return NULL;
    cl->cfg = *cfg;
    cl->counters = counters;
    pthread_mutex_init(&cl->mu, NULL);
    for (int s = 0; s < DLOCK_SLOTS; s++)
        atomic_store(&cl->owner[s], NO_NODE);
    for (int i = 0; i < cfg->nodes; i++) {
        if ((cl->node[i] = dlock__node_new(cfg, cfg->node[i].host, cfg->node[i].port,
                                           counters)) == NULL) {
            dlock__cluster_free(cl);
            return NULL;
        }
        atomic_store(&cl->n, i + 1);
    }
    return cl;
}

void dlock__cluster_free(dlock_cluster *cl)
{
    if (cl == NULL)
        return;
    for (int i = 0; i < atomic_load(&cl->n); i++)
        dlock__node_free(cl->node[i]);
    pthread_mutex_destroy(&cl->mu);
    free(cl);
}

int dlock__cluster_size(const dlock_cluster *cl) { return atomic_load(&cl->n); }
dlock_node *dlock__cluster_node(dlock_cluster *cl, int i) { return cl->node[i]; }

/* The index of the node named host:port, made when new (mu held); -1 when
 * DLOCK_NODES_MAX are made already or out of memory. */
static int node_named(dlock_cluster *cl, const char *host, int port)
{
    char name[DLOCK_HOST_MAX + 10];
    snprintf(name, sizeof(name), strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
    int n = atomic_load(&cl->n);
    for (int i = 0; i < n; i++)
        if (strcmp(dlock__node_name(cl->node[i]), name) == 0)
            return i;
    if (n == DLOCK_NODES_MAX || (cl->node[n] = dlock__node_new(&cl->cfg, host, port,
                                                               cl->counters)) == NULL)
        return -1;
    atomic_store(&cl->n, n + 1);
    return n;
}

/* One range of CLUSTER SLOTS ([start, end, [host, port, ...], replicas...])
 * into the map; "" as host means the node we asked (at). */
static void take_range(dlock_cluster *cl, const redisReply *r, int at)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 ||
        r->element[0]->type != REDIS_REPLY_INTEGER || r->element[1]->type != REDIS_REPLY_INTEGER)
        return;
    const redisReply *primary = r->element[2];
    if (primary->type != REDIS_REPLY_ARRAY || primary->elements < 2 ||
        primary->element[0]->type != REDIS_REPLY_STRING ||
        primary->element[1]->type != REDIS_REPLY_INTEGER)
        return;
    const char *host = primary->element[0]->str;
    char asked[DLOCK_HOST_MAX + 1];
    if (host[0] == '\0' || strcmp(host, "?") == 0) {
        snprintf(asked, sizeof(asked), "%s", dlock__node_name(cl->node[at]));
        char *colon = strrchr(asked, ':');
        if (colon)
            *colon = '\0';
        host = asked;
    }
    int i = node_named(cl, host, (int)primary->element[1]->integer);
    long long first = r->element[0]->integer, last = r->element[1]->integer;
    for (long long s = first; i >= 0 && s <= last && s < DLOCK_SLOTS; s++)
        if (s >= 0)
            atomic_store(&cl->owner[s], (unsigned char)i);
}

/* Fetches the map from the first node that answers, starting after the one
 * that failed last (mu held). 0, or -1 with errstr set. */
static int fetch_map(dlock_cluster *cl, int avoid)
{
    static const char *const argv[] = {"CLUSTER", "SLOTS"};
    int n = atomic_load(&cl->n);
    for (int k = 1; k <= n; k++) {
        int at = (avoid + k) % n;
        redisReply *r = dlock__node_command(cl->node[at], 2, argv);
        if (r == NULL)
            continue;
        for (size_t j = 0; r->type == REDIS_REPLY_ARRAY && j < r->elements; j++)
            take_range(cl, r->element[j], at);
        freeReplyObject(r);
        return 0;
    }
    return -1;
}

/* Fetches the map again unless it was within REFRESH_MS (then the caller
 * works with what it has). avoid: a node that just failed, or -1. */
static void refresh(dlock_cluster *cl, int avoid)
{
    int64_t now = dlock__now_ms();
    if (now - atomic_load(&cl->fetched_ms) < REFRESH_MS)
        return;
    pthread_mutex_lock(&cl->mu);
    if (now - atomic_load(&cl->fetched_ms) >= REFRESH_MS) { /* nobody did meanwhile */
        fetch_map(cl, avoid < 0 ? atomic_load(&cl->n) - 1 : avoid);
        atomic_store(&cl->fetched_ms, dlock__now_ms());
    }
    pthread_mutex_unlock(&cl->mu);
}

static int owner_of_slot(dlock_cluster *cl, int slot)
{
    int i = atomic_load(&cl->owner[slot]);
    if (i == NO_NODE) {
        refresh(cl, -1);
        i = atomic_load(&cl->owner[slot]);
    }
    if (i == NO_NODE) {
        char why[256]; /* the fetch's failure, if it failed */
        snprintf(why, sizeof(why), "%s", dlock_errstr());
        dlock__fail(DLOCK_ERR_REDIS, "Redis Cluster: no node is known to serve slot %d (%s)",
                    slot, why);
    }
    return i == NO_NODE ? -1 : i;
}

int dlock__cluster_owner(dlock_cluster *cl, const char *key, int fetch)
{
    int slot = dlock__slot_of(key, NULL);
    if (fetch)
        return owner_of_slot(cl, slot);
    int i = atomic_load(&cl->owner[slot]);
    return i == NO_NODE ? -1 : i;
}

/* The node a redirect named ("host:port", "[v6]:port"), made when new;
 * for MOVED the slot's owner from now on. -1 when none can be. */
static int redirected_to(dlock_cluster *cl, const dlock_node_call *call)
{
    char host[DLOCK_HOST_MAX + 1];
    const char *to = call->redirect_to, *colon = strrchr(to, ':');
    if (colon == NULL || colon - to > DLOCK_HOST_MAX) {
        dlock__fail(DLOCK_ERR_REDIS, "Redis Cluster: a redirect to \"%s\"", to);
        return -1;
    }
    int skip = to[0] == '[';
    snprintf(host, sizeof(host), "%.*s", (int)(colon - to - 2 * skip), to + skip);
    pthread_mutex_lock(&cl->mu);
    int i = node_named(cl, host, atoi(colon + 1));
    if (i >= 0 && call->redirect == DLOCK_REDIRECT_MOVED && call->redirect_slot >= 0 &&
        call->redirect_slot < DLOCK_SLOTS)
        atomic_store(&cl->owner[call->redirect_slot], (unsigned char)i);
    pthread_mutex_unlock(&cl->mu);
    if (i < 0)
        dlock__fail(DLOCK_ERR_REDIS, "Redis Cluster: cannot follow a redirect to %s (at most %d "
                    "nodes, or out of memory)", to, DLOCK_NODES_MAX);
    return i;
}

int dlock__cluster_ping(dlock_cluster *cl, int up[DLOCK_NODES_MAX], int *owners)
{
    refresh(cl, -1);
    int n = atomic_load(&cl->n), owns[DLOCK_NODES_MAX] = {0}, count = 0;
    *owners = 0;
    for (int s = 0; s < DLOCK_SLOTS; s++) {
        int i = atomic_load(&cl->owner[s]);
        if (i != NO_NODE && !owns[i])
            owns[i] = 1, (*owners)++;
    }
    for (int i = 0; i < n; i++) { /* one by one: a health check, not a hot path */
        dlock_node_call call, *calls[] = {&call};
        dlock__node_ping_begin(cl->node[i], &call);
        dlock__node_wait(calls, 1, dlock__node_deadline(cl->node[i]));
        up[i] = dlock__node_ping_end(&call) == DLOCK_OK;
        count += up[i] && owns[i];
    }
    if (*owners == 0)
        *owners = 1; /* no map: nothing is served */
    return count;
}

/* ---- calls routed by key ---- */

/* One kind of call: node.h's begin and end, their arguments and result. */
struct route_op {
    void (*begin)(dlock_node *n, const void *args, dlock_node_call *call);
    int (*end)(dlock_node_call *call, void *out);
};

/* After MOVED or ASK: the node to redo the call at (-1: none), counted. */
static int follow(dlock_cluster *cl, const dlock_node_call *call)
{
    int at;
    if (call->redirect == DLOCK_REDIRECT_MOVED) {
        dlock__count(&cl->counters->moved);
        at = redirected_to(cl, call);
        refresh(cl, -1); /* a slot seldom moves alone: a failover moves a primary's all */
        return at;
    }
    dlock__count(&cl->counters->asked);
    if ((at = redirected_to(cl, call)) >= 0)
        dlock__node_ask_next(); /* and the call names its first key only (node.c) */
    return at;
}

/* The call op routed to key's owner and redone where a redirect says.
 * TRYAGAIN (a migration moved some of the call's keys and not the others,
 * or is between the two nodes' halves) is asked again of the owner after a
 * growing pause, until split_ms have passed; then *split (if split is not
 * NULL) is set and DLOCK_ERR_REDIS returned. MOVED and ASK are followed at most
 * DLOCK_REDIRECTS_MAX times in a row. */
static int routed(dlock_cluster *cl, const char *key, const struct route_op *op,
                  const void *args, void *out, int split_ms, int *split)
{
    int tagged, slot = dlock__slot_of(key, &tagged), pause_ms = TRYAGAIN_MS, hops = 0;
    int64_t give_up = dlock__now_ms() + split_ms;
    if (split)
        *split = 0;
    if (!tagged)
        return dlock__fail(DLOCK_ERR_INVALID, "lock key %s has no hash tag: over a Redis "
                           "Cluster a lock's keys must share a slot, name it like \"name:{tag}\"",
                           key);
    int at = owner_of_slot(cl, slot);
    while (at >= 0) {
        dlock_node_call call, *calls[] = {&call};
        op->begin(cl->node[at], args, &call);
        dlock__node_wait(calls, 1, dlock__node_deadline(cl->node[at]));
        int rc = op->end(&call, out);
        if (call.redirect == DLOCK_REDIRECT_NONE) {
            if (call.rc != DLOCK_OK) /* no answer: a failover may have moved its slots */
                refresh(cl, at);
            return rc;
        }
        if (call.redirect != DLOCK_REDIRECT_TRYAGAIN) {
            if (++hops > DLOCK_REDIRECTS_MAX)
                return dlock__fail(DLOCK_ERR_REDIS, "Redis Cluster: %s still redirected after "
                                   "%d MOVED or ASK", key, DLOCK_REDIRECTS_MAX);
            at = follow(cl, &call);
            continue;
        }
        dlock__count(&cl->counters->tryagain);
        int64_t now = dlock__now_ms();
        if (now >= give_up) {
            if (split)
                *split = 1;
            return dlock__fail(DLOCK_ERR_REDIS, "Redis Cluster: %s's slot %d is migrating and "
                               "its keys are split between two nodes (TRYAGAIN for %d ms)", key,
                               slot, split_ms);
        }
        dlock__sleep_ms(pause_ms < give_up - now ? pause_ms : (int)(give_up - now));
        pause_ms = pause_ms * 2 < TRYAGAIN_MAX_MS ? pause_ms * 2 : TRYAGAIN_MAX_MS;
        hops = 0;
        at = owner_of_slot(cl, slot);
    }
    return DLOCK_ERR_REDIS; /* errstr says why */
}

/* How long a call without a wait of its own (a release, a renewal, a
 * raise) keeps asking through TRYAGAIN: one command timeout. */
static int split_ms_of(const dlock_cluster *cl) { return cl->cfg.command_timeout_ms; }

static void acquire_begin(dlock_node *n, const void *a, dlock_node_call *call)
{
    dlock__node_acquire_begin(n, a, call);
}

static int acquire_end(dlock_node_call *call, void *out)
{
    return dlock__node_acquire_end(call, out);
}

int dlock__cluster_acquire(dlock_cluster *cl, const dlock_node_acquire_args *args,
                           dlock_acquired *out)
{
    static const struct route_op op = {acquire_begin, acquire_end};
    dlock_node_acquire_args a = *args;
    a.queue_score = 0, a.seed_slack_us = 0; /* one server per key: its own rules */
    out->sent = 0;
    out->pttl = -1;
    /* Told "busy" at the first TRYAGAIN: its wait asks again at its own
     * pace (retry_ms, or woken), and no thread sleeps here. */
    int split, rc = routed(cl, a.key, &op, &a, out, 0, &split);
    if (!split)
        return rc;
    /* Busy for now: the acquire's wait (claim.c) tries again, until its
     * deadline, as it would for a key someone holds. */
    out->pttl = -1;
    return dlock__fail(DLOCK_ERR_TIMEOUT, "Redis Cluster: %s's slot is migrating and its keys "
                       "are split between two nodes (TRYAGAIN)", a.key);
}

static void raise_begin(dlock_node *n, const void *a, dlock_node_call *call)
{
    dlock__node_raise_begin(n, a, call);
}

static int raise_end(dlock_node_call *call, void *out) { return dlock__node_raise_end(call, out); }

int dlock__cluster_raise(dlock_cluster *cl, const dlock_node_raise_args *a, int64_t *fence)
{
    static const struct route_op op = {raise_begin, raise_end};
    return routed(cl, a->key, &op, a, fence, split_ms_of(cl), NULL);
}

static void release_begin(dlock_node *n, const void *a, dlock_node_call *call)
{
    dlock__node_release_begin(n, a, call);
}

static int release_end(dlock_node_call *call, void *out)
{
    return dlock__node_release_end(call, out);
}

int dlock__cluster_release(dlock_cluster *cl, const dlock_node_release_args *args, int *queued)
{
    static const struct route_op op = {release_begin, release_end};
    dlock_node_release_args a = *args;
    a.seed_slack_us = 0, a.next_score = 0;
    *queued = 0;
    return routed(cl, a.key, &op, &a, queued, split_ms_of(cl), NULL);
}

struct script_call {
    enum dlock_script s;
    int nkeys, nargs;
    const char *const *argv;
};

struct script_result {
    redisReply *r;
    int sent;
};

static void script_begin(dlock_node *n, const void *args, dlock_node_call *call)
{
    const struct script_call *a = args;
    dlock__node_script_begin(n, a->s, a->nkeys, a->nargs, a->argv, call);
}

static int script_end(dlock_node_call *call, void *out)
{
    struct script_result *res = out;
    res->sent |= call->sent && call->redirect == DLOCK_REDIRECT_NONE;
    res->r = dlock__node_script_end(call);
    return res->r ? DLOCK_OK : dlock__redis_failure();
}

redisReply *dlock__cluster_script(dlock_cluster *cl, enum dlock_script s, int nkeys, int nargs,
                                  const char *const *argv, int *sent)
{
    static const struct route_op op = {script_begin, script_end};
    struct script_call a = {s, nkeys, nargs, argv};
    struct script_result res = {NULL, 0};
    routed(cl, argv[0], &op, &a, &res, split_ms_of(cl), NULL);
    if (sent)
        *sent |= res.sent;
    return res.r;
}

/* One renewal as a routed script call (after a redirect: MOVED, or ASK
 * while its slot migrates, which a pipeline can't follow): its code. */
static int renew_one(dlock_cluster *cl, const dlock_node_renewal *r)
{
    char lease[24];
    snprintf(lease, sizeof(lease), "%d", r->lease_ms);
    const char *argv[] = {r->key, r->token, lease};
    redisReply *reply = dlock__cluster_script(cl, r->script, 1, 3, argv, NULL);
    if (reply == NULL)
        return dlock__redis_failure();
    int rc = reply->type == REDIS_REPLY_INTEGER && reply->integer == 1 ? DLOCK_OK : DLOCK_ERR_LOST;
    freeReplyObject(reply);
    return rc;
}

/* The renewals of node i (at[j] == i) on own[i], their codes into rcs. */
static void renew_at(dlock_cluster *cl, int i, redisContext **own, int count,
                     const dlock_node_renewal *renewals, const int *at, int *rcs)
{
    dlock_node_renewal group[DLOCK_MULTI_MAX];
    int of[DLOCK_MULTI_MAX], got[DLOCK_MULTI_MAX], k = 0;
    for (int j = 0; j < count; j++)
        if (at[j] == i)
            group[k] = renewals[j], of[k++] = j;
    if (k == 0)
        return;
    dlock_node_call call, *calls[] = {&call};
    dlock__node_renew_begin(cl->node[i], &own[i], k, group, &call);
    dlock__node_wait(calls, 1, dlock__node_deadline(cl->node[i]));
    dlock__node_renew_end(&call, k, group, got);
    for (int m = 0; m < k; m++)
        rcs[of[m]] = got[m];
    if (call.rc != DLOCK_OK)
        refresh(cl, i);
    if (call.redirect == DLOCK_REDIRECT_NONE)
        return;
    if (call.redirect == DLOCK_REDIRECT_MOVED) {
        dlock__count(&cl->counters->moved);
        redirected_to(cl, &call);
    }
    for (int m = 0; m < k; m++) /* the redirected ones, again, each routed on its own */
        if (got[m] != DLOCK_OK && got[m] != DLOCK_ERR_LOST)
            rcs[of[m]] = renew_one(cl, &group[m]);
}

void dlock__cluster_renew(dlock_cluster *cl, redisContext **own, int count,
                          const dlock_node_renewal *renewals, int *rcs)
{
    int at[DLOCK_MULTI_MAX];
    for (int j = 0; j < count; j++)
        if ((at[j] = dlock__cluster_owner(cl, renewals[j].key, 1)) < 0)
            rcs[j] = DLOCK_ERR_REDIS;
    for (int i = 0; i < dlock__cluster_size(cl); i++)
        renew_at(cl, i, own, count, renewals, at, rcs);
}
