/* service.c - stockd's business layer, its top: opening and closing what
 * requests need, items, health, metrics, draining at shutdown, and each
 * request's entry. Orders are placed by service_order.c; the outcomes and
 * error mapping every file shares are in service_result.c. */
#include "server/service_parts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "server/log.h"

void service_config_defaults(service_config *c)
{
    memset(c, 0, sizeof(*c));
    c->store = (store_config){.db = "stock.db", .sync_full = 1, .busy_timeout_ms = 5000,
                              .pool_size = 16, .timeout_ms = 5000};
    c->lock_mode = SERVICE_LOCK_REDIS;
    c->lock_prefix = "stock:lock:";
    dlock_config_defaults(&c->redis);
    dlock_opts_defaults(&c->lock);
    c->batch = 1;
    c->fencing = 1;
    c->max_work_ms = 60000;
}

/* --workers 0: the number of cores + 6, so that threads stay within
 * 2 x cores + 16 (the event threads are one per core, libdlock's and the
 * rest a handful). */
int service_workers_of(const service_config *c)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    return c->workers > 0 ? c->workers : (cores > 0 ? (int)cores : 1) + 6;
}

static int open_locks(service *s, char *err, size_t errlen)
{
    if (s->cfg.lock_mode != SERVICE_LOCK_REDIS)
        return 0;
    if (dlock_client_new(&s->cfg.redis, &s->locks) != DLOCK_OK) {
        snprintf(err, errlen, "cannot create the lock client: %s", dlock_errstr());
        return -1;
    }
    int rc = dlock_ping(s->locks); /* not fatal: /health says so, requests get 503 */
    if (rc != DLOCK_OK)
        service_note_redis(s, rc);
    if (s->cfg.batch && (s->batches = batch_new()) == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

int service_open(const service_config *cfg, service **out, char *err, size_t errlen)
{
    *out = NULL;
    service *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    s->cfg = *cfg;
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t attr; /* draining waits on the monotonic clock */
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&s->idle, &attr);
    pthread_condattr_destroy(&attr);
    s->metrics = metrics_new(service_outcome_names, SERVICE_OUTCOME_COUNT);
    s->work = s->metrics ? workers_start(service_workers_of(cfg), "work") : NULL;
    s->probes = s->work ? workers_start(1, "probes") : NULL;
    int rc = s->probes ? open_locks(s, err, errlen) : -1;
    s->cfg.redis.password = NULL; /* the lock client has its copy; keep none here */
    s->cfg.redis.sentinel_password = NULL;
    if (s->probes == NULL)
        snprintf(err, errlen, "out of memory or threads");
    int store_rc = rc == 0 ? store_open(&cfg->store, &s->store, err, errlen) : STORE_ERR_IO;
    if (rc != 0 || store_rc != STORE_OK) {
        service_close(s);
        return store_rc == STORE_ERR_UNAVAILABLE ? SERVICE_OPEN_UNREACHABLE : -1;
    }
    s->cfg.store.password = NULL; /* the store has its copy */
    if (cfg->lock_mode == SERVICE_LOCK_DB && !store_has_row_locks(s->store)) {
        snprintf(err, errlen, "--lock db needs a database with row locks: PostgreSQL (--db "
                 "postgresql://...); %s has none to wait for", store_backend_name(s->store));
        service_close(s);
        return -1;
    }
    *out = s;
    return 0;
}

void service_close(service *s)
{
    if (s == NULL)
        return;
    workers_stop(s->probes);
    workers_stop(s->work); /* what is queued runs first: nothing is left half done */
    batch_free(s->batches);
    dlock_client_free(s->locks);
    store_close(s->store);
    metrics_free(s->metrics);
    pthread_cond_destroy(&s->idle);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

metrics *service_metrics(service *s) { return s->metrics; }

char *service_metrics_text(service *s, uint64_t reaped, size_t *len)
{
    pthread_mutex_lock(&s->mu);
    metrics_extra x = {s->locks, s->inflight, reaped};
    pthread_mutex_unlock(&s->mu);
    return metrics_render(s->metrics, &x, len);
}

/* Clears out and takes a store connection; NULL with the failure in out
 * (mapped as any store result: store_get tells why in err, having no
 * connection to say it on). */
static store_conn *begin(service *s, service_result *out)
{
    char err[256];
    store_conn *c;
    service_result_clear(out);
    service_from_store_text(out, store_get(s->store, &c, err, sizeof(err)), err);
    return c;
}

/* What the last write told about space. A write refused for a full disk
 * marks the storage full, and one that commits (wrote: o is a write's
 * outcome) clears it; each change is logged once, as an operator must free
 * space and wants to know when writes resumed. */
static void note_space(service *s, enum service_outcome o, int wrote)
{
    int64_t since = 0, now = service_now_ms();
    if (o == SERVICE_STORAGE_FULL) {
        if (atomic_compare_exchange_strong(&s->full_since_ms, &since, now > 0 ? now : 1))
            log_kv(LOG_ERROR, "database disk full: writes refused until space is freed, "
                   "reads still answered", LOG_STR("backend", store_backend_name(s->store)));
    } else if (wrote && o == SERVICE_OK && (since = atomic_exchange(&s->full_since_ms, 0))) {
        log_kv(LOG_INFO, "database takes writes again", LOG_INT("fullForMs", now - since));
    }
}

int service_run(service *s, workers_fn *fn, void *arg) { return workers_submit(s->work, fn, arg); }

int service_run_probe(service *s, workers_fn *fn, void *arg)
{
    return workers_submit(s->probes, fn, arg);
}

/* One order from its request to its answer: the service's, freed once
 * done has run. */
struct order_call {
    struct deduction x;  /* x.out: own, or, while its batch is served, the batch's */
    req_order r;
    service_result *own; /* its result, but while it waits in group commit (a result is
                          * some kilobytes: the leader lends one instead) */
    store_fence held[RULE_ORDER_LINES_MAX];
    batch_job job;
    int reduce;        /* counted as a POST /reduceStock too */
    int64_t t0_us;
    service_order_done *done;
    void *arg;
    char keys[][DLOCK_KEY_MAX + 1]; /* x.keys: one per line */
};

static struct order_call *call_of(batch_job *job)
{
    return (struct order_call *)((char *)job - offsetof(struct order_call, job));
}

/* The order is answered: counted, logged, handed to the caller, freed. */
static void order_finish(struct order_call *k)
{
    service *s = k->x.s;
    const req_order *r = &k->r;
    const service_result *out = k->x.out;
    note_space(s, out->outcome, 1);
    int64_t units = 0;
    for (int i = 0; out->outcome == SERVICE_OK && i < r->nlines; i++)
        units += r->lines[i].quantity;
    metrics_order(s->metrics, out->outcome, r->nlines, units);
    if (k->reduce)
        metrics_reduce(s->metrics, out->outcome);
    service_log_order(s, r, out, k->held, k->t0_us);
    k->done(out, k->arg);
    free(k->own);
    free(k);
}

/* Leads the order's batch from this thread (the order itself is answered
 * with the others, through on_served). */
static void order_lead(void *arg)
{
    struct order_call *k = arg;
    service_batch_lead(&k->x);
}

/* batch.h's callbacks: promoted to lead (on the promoting leader's
 * thread, which must not block: the lead goes to a worker), or served. */
static void on_lead(batch_job *job)
{
    struct order_call *k = call_of(job);
    if (service_run(k->x.s, order_lead, k) != 0)
        order_lead(k); /* out of memory: here, late rather than never */
}

static void on_served(batch_job *job) { order_finish(call_of(job)); }

/* The order through group commit: queued without its store connection (a
 * waiting order holds no descriptor) nor its result, led here when it
 * heads the queue. */
static void order_batched(struct order_call *k)
{
    store_put(k->x.s->store, k->x.c);
    k->x.c = NULL;
    free(k->own);
    k->own = k->x.out = NULL;
    k->job.on_lead = on_lead, k->job.on_done = on_served;
    int lead = service_batch_enter(&k->x, &k->job);
    if (lead > 0) {
        order_lead(k);
    } else if (lead < 0) { /* out of memory: alone, if it can be */
        if ((k->own = k->x.out = malloc(sizeof(*k->own))) == NULL) {
            service_result oom;
            service_result_clear(&oom);
            service_fail(&oom, SERVICE_STORAGE_ERROR, "out of memory");
            k->x.out = &oom;
            order_finish(k);
            return;
        }
        if ((k->x.c = begin(k->x.s, k->own)) != NULL) {
            service_order_alone(&k->x);
            store_put(k->x.s->store, k->x.c);
        }
        order_finish(k);
    } /* else a leader answers it, or promotes it to lead */
}

static void place(service *s, const req_order *r, int reduce, service_order_done *done,
                  void *arg)
{
    struct order_call *k = malloc(sizeof(*k) + (size_t)r->nlines * sizeof(k->keys[0]));
    service_result *own = malloc(sizeof(*own));
    if (k == NULL || own == NULL) {
        service_result oom;
        service_result_clear(&oom);
        service_fail(&oom, SERVICE_STORAGE_ERROR, "out of memory");
        done(&oom, arg);
        free(k), free(own);
        return;
    }
    k->r = *r;
    k->reduce = reduce, k->done = done, k->arg = arg;
    k->t0_us = service_now_us();
    memset(k->held, 0, (size_t)r->nlines * sizeof(k->held[0]));
    k->own = own;
    k->x = (struct deduction){.s = s, .r = &k->r, .out = own, .held = k->held,
                              .keys = k->keys};
    if ((k->x.c = begin(s, own)) == NULL) {
        order_finish(k);
        return;
    }
    int go = service_order_check(&k->x) == SERVICE_OK;
    if (go && service_order_batched(s, r)) {
        order_batched(k);
        return;
    }
    if (go)
        service_order_alone(&k->x);
    store_put(s->store, k->x.c);
    order_finish(k);
}

void service_place_order(service *s, const req_order *r, service_order_done *done, void *arg)
{
    place(s, r, 0, done, arg);
}

void service_reduce(service *s, const req_order *r, service_order_done *done, void *arg)
{
    place(s, r, 1, done, arg);
}

void service_get_order(service *s, int64_t order_id, service_result *out)
{
    store_conn *c = begin(s, out);
    if (c == NULL)
        return;
    int rc = store_order_get(c, order_id, &out->order);
    if (rc == STORE_ERR_NOT_FOUND)
        service_fail(out, SERVICE_ORDER_NOT_FOUND, "no order with this id");
    else
        service_from_store(out, rc, c);
    store_put(s->store, c);
    note_space(s, out->outcome, 0);
}

enum auth_verdict service_authorize(service *s, const char *authorization, enum route_role role,
                                    char *name, size_t namelen)
{
    return auth_check(s->cfg.tokens, authorization, role, name, namelen);
}

void service_create_item(service *s, const req_item *r, const char *who, service_result *out)
{
    store_conn *c = begin(s, out);
    if (c == NULL)
        return;
    int rc = store_item_create(c, r->name, r->stock, &out->item);
    if (rc == STORE_ERR_IN_DOUBT) /* no requestId to retry with: the id it would have */
        service_fail(out, SERVICE_COMMIT_UNKNOWN, "%s; item %lld may have been created: GET "
                     "/items/%lld before creating it again", store_errstr(c),
                     (long long)out->item.id, (long long)out->item.id);
    else
        service_from_store(out, rc, c);
    store_put(s->store, c);
    note_space(s, out->outcome, 1);
    if (out->outcome == SERVICE_OK)
        log_kv(LOG_INFO, "item created", LOG_INT("item", out->item.id),
               LOG_INT("stock", out->item.stock), LOG_STR("instance", s->cfg.instance_id),
               LOG_STR("tokenName", who[0] ? who : NULL));
}

void service_set_stock(service *s, int64_t item_id, int64_t stock, const char *who,
                       service_result *out)
{
    int64_t t0 = service_now_us();
    store_fence held = {0, 0};
    store_conn *c = begin(s, out);
    if (c) {
        service_order_set_stock(s, c, item_id, stock, out, &held);
        if (out->outcome == SERVICE_COMMIT_UNKNOWN) /* no requestId to retry with */
            service_fail(out, SERVICE_COMMIT_UNKNOWN, "%s; the stock may have been set: GET "
                         "/items/%lld shows it, or set it again", store_errstr(c),
                         (long long)item_id);
        store_put(s->store, c);
    }
    note_space(s, out->outcome, 1);
    service_log_stock_set(s, item_id, stock, who, out, &held, t0);
}

void service_item_ledger(service *s, int64_t item_id, int64_t before, int limit,
                         store_line_fn fn, void *arg, service_result *out)
{
    store_conn *c = begin(s, out);
    if (c == NULL)
        return;
    int rc = store_item_get(c, item_id, &out->item);
    if (rc == STORE_OK)
        rc = store_lines_of_item(c, item_id, before, limit, fn, arg);
    service_from_store(out, rc, c);
    store_put(s->store, c);
    note_space(s, out->outcome, 0);
}

void service_list_items(service *s, int64_t after, int limit, store_item_fn fn, void *arg,
                        service_result *out)
{
    store_conn *c = begin(s, out);
    if (c) {
        service_from_store(out, store_item_list(c, after, limit, fn, arg), c);
        store_put(s->store, c);
    }
    note_space(s, out->outcome, 0);
}

/* Pings every Redis server into h: "ok" when all answer, "degraded"
 * naming those down while a majority answers, else what went wrong.
 * Returns whether the lock can be had (a majority answered). */
static int check_redis(service *s, service_health *h)
{
    int up[DLOCK_NODES_MAX], answered = 0;
    h->nodes = dlock_node_count(s->locks);
    int rc = dlock_ping_each(s->locks, up), majority = rc == DLOCK_OK;
    char down[400] = "";
    for (int i = 0; i < h->nodes; i++) {
        answered += up[i];
        dlock_node_info info;
        dlock_node_info_read(s->locks, i, &info);
        snprintf(h->node[i].name, sizeof(h->node[i].name), "%s", info.name);
        h->node[i].up = up[i];
        if (!up[i])
            snprintf(down + strlen(down), sizeof(down) - strlen(down), "%s%s",
                     down[0] ? ", " : "", info.name);
    }
    if (answered == h->nodes)
        snprintf(h->redis, sizeof(h->redis), "ok");
    else if (majority)
        snprintf(h->redis, sizeof(h->redis), "degraded: %d of %d Redis servers down (%s); the "
                 "lock holds on the majority", h->nodes - answered, h->nodes, down);
    else
        snprintf(h->redis, sizeof(h->redis), "%s", dlock_errstr());
    h->degraded = majority && answered < h->nodes;
    service_note_redis(s, rc);
    return majority;
}

/* Writes failed for lack of space: whether they still do, by a write of
 * health's own (the storage answers reads either way). */
static void check_space(service *s, store_conn *c, service_health *h)
{
    service_result res = {0};
    int rc = store_probe_write(c);
    service_from_store(&res, rc, c);
    note_space(s, res.outcome, 1);
    if (rc == STORE_OK)
        return;
    h->storage_full = 1;
    int64_t since = atomic_load(&s->full_since_ms);
    long long secs = since ? (service_now_ms() - since) / 1000 : 0;
    snprintf(h->storage, sizeof(h->storage), "%s: writes refused for %lld s, reads answered: "
             "%.160s", rc == STORE_ERR_FULL ? "disk full" : "disk full, not re-checked", secs,
             store_errstr(c));
}

void service_check_health(service *s, service_health *h)
{
    memset(h, 0, sizeof(*h));
    h->backend = store_backend_name(s->store);
    h->lock_mode = service_lock_mode_names[s->cfg.lock_mode];
    h->instance = s->cfg.instance_id;
    char err[256];
    store_conn *c;
    store_get(s->store, &c, err, sizeof(err));
    int storage_ok = c && store_ping(c) == STORE_OK;
    snprintf(h->storage, sizeof(h->storage), "%s", storage_ok ? "ok" : c ? store_errstr(c) : err);
    if (storage_ok && atomic_load(&s->full_since_ms))
        check_space(s, c, h);
    if (c)
        store_put(s->store, c);
    int redis_ok = 1;
    if (s->locks == NULL)
        snprintf(h->redis, sizeof(h->redis), "unused (lock mode %s)", h->lock_mode);
    else
        redis_ok = check_redis(s, h);
    h->ok = storage_ok && redis_ok;
}

void service_enter(service *s)
{
    pthread_mutex_lock(&s->mu);
    s->inflight++;
    pthread_mutex_unlock(&s->mu);
}

void service_leave(service *s)
{
    pthread_mutex_lock(&s->mu);
    if (--s->inflight == 0)
        pthread_cond_broadcast(&s->idle);
    pthread_mutex_unlock(&s->mu);
}

int service_drain(service *s, int timeout_ms)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
    if (until.tv_nsec >= 1000000000L)
        until.tv_sec++, until.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&s->mu);
    while (s->inflight > 0 && pthread_cond_timedwait(&s->idle, &s->mu, &until) == 0) {
    }
    int left = s->inflight;
    pthread_mutex_unlock(&s->mu);
    return left;
}

void service_refuse_commits(service *s) { atomic_store(&s->commits_refused, 1); }
