/* service.c - stockd's business layer, its top: opening and closing what
 * requests need, each order's door, items, health, metrics and draining at
 * shutdown. An order is placed by service_order.c (alone) or
 * service_batch.c (group commit); the outcomes and error mapping every file
 * shares are in service_result.c. */
#include "server/service_parts.h"

#include <limits.h>
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
    c->sweep_ms = 100;     /* lapsed holds back within a second, the promise */
    c->sweep_batch = 256;  /* a pass's transaction: a few ms */
    dlock_config_defaults(&c->redis);
    dlock_opts_defaults(&c->lock);
    c->batch = 1;
    c->fencing = 1;
    c->max_work_ms = 60000;
    c->hold_ms = 600000;      /* ten minutes to pay */
    c->max_hold_ms = 3600000; /* an hour */
}

/* --workers 0: the number of cores + 6, so that threads stay within
 * 2 x cores + 16 (the event threads are one per core, libdlock's and the
 * rest a handful). No thread waits for a store connection: with a
 * database server's pool, at most its size - 2 (one for the probes' thread,
 * one for a request that holds its connection across a wait). */
int service_workers_of(const service_config *c)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int n = c->workers > 0 ? c->workers : (cores > 0 ? (int)cores : 1) + 6;
    if (c->workers == 0 && store_pooled(c->store.db) && n > c->store.pool_size - 2)
        n = c->store.pool_size - 2 > 1 ? c->store.pool_size - 2 : 1;
    return n;
}

static int open_locks(service *s, char *err, size_t errlen)
{
    if (s->cfg.lock_mode != SERVICE_LOCK_REDIS)
        return 0;
    s->cfg.redis.post = service_lock_post; /* grants run on our threads, never bounced */
    s->cfg.redis.post_ctx = s;
    if (dlock_client_new(&s->cfg.redis, &s->locks) != DLOCK_OK) {
        snprintf(err, errlen, "cannot create the lock client: %s", dlock_errstr());
        return -1;
    }
    int rc = dlock_ping(s->locks); /* not fatal: /health says so, requests get 503 */
    if (rc != DLOCK_OK)
        service_note_redis(s, rc, dlock_errstr());
    if (s->cfg.batch && ((s->queues = batch_new()) == NULL ||
                         (s->commits = batch_commits_new()) == NULL)) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

/* How many requests may hold a store connection across a wait (lock mode
 * db with work): what a database server's pool has beyond one a service
 * thread and the probes' thread, so that a thread never waits for one. */
static int holds_of(const service *s, int workers)
{
    if (!store_pooled(s->cfg.store.db))
        return INT_MAX; /* no pool to run out of: SQLite opens what it needs */
    int left = s->cfg.store.pool_size - workers - 1;
    return left > 1 ? left : 1; /* a pool under 3 can't keep the promise: one may wait */
}

static int open_threads(service *s, char *err, size_t errlen)
{
    s->metrics = metrics_new(service_outcome_names, SERVICE_OUTCOME_COUNT);
    s->work = s->metrics ? exec_start(service_workers_of(&s->cfg), "work") : NULL;
    s->probes = s->work ? exec_start(1, "probes") : NULL;
    if (s->probes == NULL)
        snprintf(err, errlen, "out of memory or threads");
    return s->probes ? 0 : -1;
}

int service_open(const service_config *cfg, service **out, char *err, size_t errlen)
{
    *out = NULL;
    int workers = service_workers_of(cfg);
    if (store_pooled(cfg->store.db) && cfg->workers > 0 && workers > cfg->store.pool_size - 2) {
        snprintf(err, errlen, "--workers %d needs --db-pool %d or more: a connection for each "
                 "service thread, one for /health and one to hold across work, so that no "
                 "thread waits for one", workers, workers + 2);
        return -1;
    }
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
    int rc = open_threads(s, err, errlen);
    if (rc == 0)
        rc = open_locks(s, err, errlen);
    s->cfg.redis.password = NULL; /* the lock client has its copy; keep none here */
    s->cfg.redis.sentinel_password = NULL;
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
    s->holds_max = holds_of(s, workers);
    if (service_sweep_start(s, err, errlen) != 0) {
        service_close(s);
        return -1;
    }
    *out = s;
    return 0;
}

/* At close every request was answered; what may still be in flight is
 * releases and their ends (a batch freed, a lost lock logged), which need
 * the lock client and the service threads. Given a few seconds to end. */
static void await_quiet(service *s)
{
    for (int i = 0; i < 500; i++) {
        pthread_mutex_lock(&s->mu);
        int calls = s->waits != NULL;
        pthread_mutex_unlock(&s->mu);
        if (!calls && exec_busy(s->work) == 0)
            return;
        nanosleep(&(struct timespec){0, 10 * 1000000}, NULL);
    }
}

void service_close(service *s)
{
    if (s == NULL)
        return;
    service_sweep_free(s); /* before the lock client and the store it uses */
    if (s->work)
        await_quiet(s);
    /* a call still pending ends now (DLOCK_ERR_CLOSED), its end run here,
     * while the service threads can still take what it posts */
    dlock_client_free(s->locks);
    exec_stop(s->probes);
    exec_stop(s->work);
    batch_free(s->queues);
    batch_commits_free(s->commits);
    store_close(s->store);
    metrics_free(s->metrics);
    pthread_cond_destroy(&s->idle);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

metrics *service_metrics(service *s) { return s->metrics; }

/* Reservations held now, as the store says (on the probes' thread: a
 * scrape's own read), or -1 when it can't say. */
static int64_t reservations_held(service *s)
{
    char err[256];
    store_conn *c;
    int64_t n = -1;
    if (store_get(s->store, &c, err, sizeof(err)) != STORE_OK)
        return -1;
    if (store_reservations_held(c, &n) != STORE_OK)
        n = -1;
    store_put(s->store, c);
    return n;
}

char *service_metrics_text(service *s, uint64_t reaped, size_t *len)
{
    char node[80];
    metrics_extra x = {s->locks, atomic_load(&s->inflight), reaped, exec_posts(s->work),
                       reservations_held(s), store_node(s->store, node, sizeof(node))};
    return metrics_render(s->metrics, &x, len);
}

void service_run(service *s, exec_task *t, exec_fn *fn) { exec_post(s->work, t, fn); }

void service_run_probe(service *s, exec_task *t, exec_fn *fn) { exec_post(s->probes, t, fn); }

/* ---- an order's door ---- */

/* The bytes an order of n lines takes, its keys of keylen bytes at most
 * each, and after it its batch memory (batched) or its steps' (alone). */
static size_t order_size(int n, size_t keylen, int batched)
{
    size_t per_line = sizeof(store_fence) + sizeof(char *) + sizeof(int64_t) + keylen + 1;
    return sizeof(struct order) + (size_t)n * per_line +
           (batched ? service_batch_size(n) : sizeof(struct alone)) +
           sizeof(void *); /* its alignment */
}

/* o's arrays, laid out after it in its one allocation. */
static void order_lay_out(struct order *o, size_t keylen, int batched)
{
    int n = o->r.nlines;
    char *p = (char *)(o + 1);
    o->held = o->res.fence = (store_fence *)p, p += (size_t)n * sizeof(store_fence);
    o->res.remaining = (int64_t *)p, p += (size_t)n * sizeof(int64_t);
    o->keys = (const char **)p, p += (size_t)n * sizeof(char *);
    for (int i = 0; i < n; i++) {
        char key[DLOCK_KEY_MAX + 1];
        service_lock_key(o->s->cfg.lock_prefix, o->r.lines[i].item_id, key);
        o->keys[i] = strcpy(p, key);
        p += keylen + 1;
    }
    uintptr_t at = ((uintptr_t)p + sizeof(void *) - 1) & ~(uintptr_t)(sizeof(void *) - 1);
    o->lead = batched ? (struct batch *)at : NULL;
    o->alone = batched ? NULL : (struct alone *)at;
    if (o->alone)
        *o->alone = (struct alone){.o = o};
}

/* An order's memory, from its request: one allocation, at the door. NULL
 * when out of memory. */
static struct order *order_new(service *s, const req_order *r, int reduce, service_done *done,
                               void *arg)
{
    size_t keylen = strlen(s->cfg.lock_prefix) + 22; /* "{" the id "}" */
    int batched = service_order_batched(s, r);
    struct order *o = malloc(order_size(r->nlines, keylen, batched));
    if (o == NULL)
        return NULL;
    memset(o, 0, sizeof(*o));
    o->s = s, o->r = *r, o->reduce = reduce, o->done = done, o->arg = arg;
    o->t0_us = service_now_us();
    o->thread = o->door = service_here();
    memset((char *)(o + 1), 0, (size_t)r->nlines * sizeof(store_fence));
    order_lay_out(o, keylen, batched);
    return o;
}

/* Whether every item of o is known to exist (no store read needed). */
static int items_known(const struct order *o)
{
    for (int i = 0; i < o->r.nlines; i++) {
        int64_t id = o->r.lines[i].item_id;
        if (atomic_load_explicit(&o->s->known_items[(uint64_t)id % SERVICE_KNOWN_ITEMS],
                                 memory_order_relaxed) != id)
            return 0;
    }
    return 1;
}

/* o's way once its items are known to exist. */
static void order_go(struct order *o)
{
    if (o->lead)
        service_batch_join(o);
    else
        service_order_alone(o);
}

/* Items are never deleted, so one that exists now exists under the lock: an
 * absent one is answered before, and its lock never touches Redis (every
 * itemId a client makes up would otherwise leave keys there). An item seen
 * once is remembered, and not read again for that. On a service thread. */
static void order_check(exec_task *t)
{
    struct order *o = (struct order *)((char *)t - offsetof(struct order, task));
    service *s = o->s;
    service_touch(o);
    service_result out;
    service_result_clear(&out);
    char err[256];
    store_conn *c;
    int rc = store_get(s->store, &c, err, sizeof(err));
    for (int i = 0; rc == STORE_OK && i < o->r.nlines; i++) {
        int64_t id = o->r.lines[i].item_id, stock;
        _Atomic int64_t *known = &s->known_items[(uint64_t)id % SERVICE_KNOWN_ITEMS];
        if (atomic_load_explicit(known, memory_order_relaxed) == id)
            continue;
        rc = store_stock_read(c, id, &stock);
        if (rc == STORE_OK)
            atomic_store_explicit(known, id, memory_order_relaxed);
        else if (rc == STORE_ERR_NOT_FOUND && o->r.nlines > 1)
            service_fail(&out, SERVICE_NOT_FOUND, "no item with id %lld (lines[%d]); nothing "
                         "deducted", (long long)id, i);
        else
            service_from_order_store(&out, rc, c, NULL);
    }
    if (c)
        store_put(s->store, c);
    else
        service_from_store_text(&out, rc, err);
    if (out.outcome != SERVICE_OK) {
        service_keep(&o->res, &o->r, &out);
        service_answer(o);
        return;
    }
    order_go(o);
}

static void place(service *s, const req_order *r, int reduce, service_done *done, void *arg)
{
    struct order *o = order_new(s, r, reduce, done, arg);
    if (o == NULL) { /* the one allocation an order makes: refused here, once */
        service_result oom;
        service_result_clear(&oom);
        service_fail(&oom, SERVICE_NO_MEMORY, "out of memory; nothing deducted");
        done(&oom, arg);
        return;
    }
    if (items_known(o))
        order_go(o);
    else
        service_run(s, &o->task, order_check);
}

void service_place_order(service *s, const req_order *r, service_done *done, void *arg)
{
    place(s, r, 0, done, arg);
}

void service_reduce(service *s, const req_order *r, service_done *done, void *arg)
{
    place(s, r, 1, done, arg);
}

/* ---- reads and items, on a service thread ---- */

void service_get_order(service *s, int64_t order_id, service_result *out)
{
    store_conn *c = service_conn_get(s, out);
    if (c == NULL)
        return;
    int rc = store_order_get(c, order_id, &out->order);
    if (rc == STORE_ERR_NOT_FOUND)
        service_fail(out, SERVICE_ORDER_NOT_FOUND, "no order with this id");
    else
        service_from_store(out, rc, c);
    store_put(s->store, c);
    service_note_space(s, out->outcome, 0);
}

enum auth_verdict service_authorize(service *s, const char *authorization, enum route_role role,
                                    char *name, size_t namelen)
{
    return auth_check(s->cfg.tokens, authorization, role, name, namelen);
}

/* A creation's requestId found used (STORE_ERR_DUPLICATE, out->item as
 * that creation made it): a retry of r when the name and stock are r's. */
static void item_replay(const req_item *r, service_result *out)
{
    if (strcmp(out->item.name, r->name) == 0 && out->item.stock == r->stock) {
        out->outcome = SERVICE_REPLAYED;
        return;
    }
    service_fail(out, SERVICE_CONFLICT, "requestId \"%s\" was already used for another item "
                 "(item %lld, created with another name or stock); nothing written",
                 r->request_id, (long long)out->item.id);
}

void service_create_item(service *s, const req_item *r, const char *who, service_result *out)
{
    store_conn *c = service_conn_get(s, out);
    if (c == NULL)
        return;
    const char *rid = r->has_request_id ? r->request_id : NULL;
    int rc = store_item_create(c, r->name, r->stock, rid, r->per_buyer_limit, &out->item);
    if (rc == STORE_ERR_DUPLICATE)
        item_replay(r, out);
    else if (rc == STORE_ERR_IN_DOUBT && rid)
        service_fail(out, SERVICE_COMMIT_UNKNOWN, "%s; item %lld may have been created: a retry "
                     "with the same requestId answers it if it was", store_errstr(c),
                     (long long)out->item.id);
    else if (rc == STORE_ERR_IN_DOUBT) /* no requestId to retry with: the id it would have */
        service_fail(out, SERVICE_COMMIT_UNKNOWN, "%s; item %lld may have been created: GET "
                     "/items/%lld before creating it again", store_errstr(c),
                     (long long)out->item.id, (long long)out->item.id);
    else
        service_from_store(out, rc, c);
    store_put(s->store, c);
    service_note_space(s, out->outcome, 1);
    if (out->outcome == SERVICE_OK || out->outcome == SERVICE_REPLAYED)
        log_kv(LOG_INFO, out->outcome == SERVICE_OK ? "item created" : "item creation replayed",
               LOG_INT("item", out->item.id), LOG_INT("stock", out->item.stock),
               LOG_STR("requestId", rid), LOG_STR("instance", s->cfg.instance_id),
               LOG_STR("tokenName", who[0] ? who : NULL));
}

void service_set_stock(service *s, int64_t item_id, const req_item *r, const char *who,
                       service_done *done, void *arg)
{
    struct stock_set *ss = malloc(sizeof(*ss));
    if (ss == NULL) { /* its one allocation: refused here, once */
        service_result oom;
        service_result_clear(&oom);
        service_fail(&oom, SERVICE_NO_MEMORY, "out of memory; nothing written");
        done(&oom, arg);
        return;
    }
    memset(ss, 0, sizeof(*ss));
    ss->w.s = s;
    ss->item = item_id, ss->r = *r, ss->done = done, ss->arg = arg;
    snprintf(ss->who, sizeof(ss->who), "%s", who);
    service_result_clear(&ss->w.out);
    service_stock_set(ss);
}

/* ---- reservations and an order's cancel: under their items' locks ---- */

void service_reserve(service *s, const req_reservation *r, const char *who, service_done *done,
                     void *arg)
{
    service_reserve_write(s, SERVICE_RES_MAKE, 0, r, NULL, who, done, arg);
}

void service_reservation_confirm(service *s, int64_t id, const char *who, service_done *done,
                                 void *arg)
{
    service_reserve_write(s, SERVICE_RES_CONFIRM, id, NULL, NULL, who, done, arg);
}

void service_reservation_cancel(service *s, int64_t id, const char *who, service_done *done,
                                void *arg)
{
    service_reserve_write(s, SERVICE_RES_CANCEL, id, NULL, NULL, who, done, arg);
}

void service_order_cancel(service *s, int64_t id, const req_cancel *r, const char *who,
                          service_done *done, void *arg)
{
    service_reserve_write(s, SERVICE_RES_ORDER_CANCEL, id, NULL, r, who, done, arg);
}

int64_t service_max_hold_ms(const service *s) { return s->cfg.max_hold_ms; }

/* Extend and read: no item's lock, no stock changes. */
void service_reservation_extend(service *s, int64_t id, int64_t hold_ms, const char *who,
                                service_result *out)
{
    store_conn *c = service_conn_get(s, out);
    if (c == NULL)
        return;
    int rc = store_reservation_extend(c, id, hold_ms, &out->reservation);
    if (rc == STORE_ERR_NOT_FOUND)
        service_fail(out, SERVICE_RESERVATION_NOT_FOUND, "no reservation with id %lld",
                     (long long)id);
    else if (rc == STORE_ERR_STATE)
        service_from_state(out, &out->reservation);
    else
        service_from_store(out, rc, c);
    store_put(s->store, c);
    service_note_space(s, out->outcome, 1);
    log_kv(LOG_INFO,
           out->outcome == SERVICE_OK ? "reservation extended" : "reservation not extended",
           LOG_INT("reservationId", id), LOG_INT("holdMs", hold_ms),
           LOG_STR("outcome", service_outcome_name(out->outcome)),
           LOG_STR("instance", s->cfg.instance_id), LOG_STR("tokenName", who[0] ? who : NULL));
}

void service_get_reservation(service *s, int64_t id, service_result *out)
{
    store_conn *c = service_conn_get(s, out);
    if (c == NULL)
        return;
    int rc = store_reservation_get(c, id, &out->reservation);
    if (rc == STORE_ERR_NOT_FOUND)
        service_fail(out, SERVICE_RESERVATION_NOT_FOUND, "no reservation with id %lld",
                     (long long)id);
    else
        service_from_store(out, rc, c);
    store_put(s->store, c);
    service_note_space(s, out->outcome, 0);
}

void service_item_ledger(service *s, int64_t item_id, int64_t before, int limit,
                         store_line_fn fn, void *arg, service_result *out)
{
    store_conn *c = service_conn_get(s, out);
    if (c == NULL)
        return;
    int rc = store_item_get(c, item_id, &out->item);
    if (rc == STORE_OK)
        rc = store_lines_of_item(c, item_id, before, limit, fn, arg);
    service_from_store(out, rc, c);
    store_put(s->store, c);
    service_note_space(s, out->outcome, 0);
}

void service_list_items(service *s, int64_t after, int limit, store_item_fn fn, void *arg,
                        service_result *out)
{
    store_conn *c = service_conn_get(s, out);
    if (c) {
        service_from_store(out, store_item_list(c, after, limit, fn, arg), c);
        store_put(s->store, c);
    }
    service_note_space(s, out->outcome, 0);
}

/* ---- health ---- */

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
    service_note_redis(s, rc, dlock_errstr());
    return majority;
}

/* Writes failed for lack of space: whether they still do, by a write of
 * health's own (the storage answers reads either way). */
static void check_space(service *s, store_conn *c, service_health *h)
{
    service_result res = {0};
    int rc = store_probe_write(c);
    service_from_store(&res, rc, c);
    service_note_space(s, res.outcome, 1);
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
    if (storage_ok) /* after this use; none named while storage is down (a lost server) */
        store_node(s->store, h->storage_node, sizeof(h->storage_node));
    int redis_ok = 1;
    if (s->locks == NULL)
        snprintf(h->redis, sizeof(h->redis), "unused (lock mode %s)", h->lock_mode);
    else
        redis_ok = check_redis(s, h);
    h->ok = storage_ok && redis_ok;
    h->draining = atomic_load(&s->drain_notice);
}

/* ---- shutdown ---- */

void service_enter(service *s) { atomic_fetch_add(&s->inflight, 1); }

void service_notice_drain(service *s) { atomic_store(&s->drain_notice, 1); }

void service_leave(service *s)
{
    if (atomic_fetch_sub(&s->inflight, 1) == 1 && atomic_load(&s->draining)) {
        pthread_mutex_lock(&s->mu);
        pthread_cond_broadcast(&s->idle);
        pthread_mutex_unlock(&s->mu);
    }
}

int service_drain(service *s, int timeout_ms)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
    if (until.tv_nsec >= 1000000000L)
        until.tv_sec++, until.tv_nsec -= 1000000000L;
    /* no pass begins from now on; the sweep lock is handed on, unless a pass
     * outlasts the drain's time (it ends on its own, before service_close) */
    service_sweep_stop(s, service_now_ms() + timeout_ms);
    atomic_store(&s->draining, 1); /* before the look: the last leave signals from now on */
    pthread_mutex_lock(&s->mu);
    while (atomic_load(&s->inflight) > 0 &&
           pthread_cond_timedwait(&s->idle, &s->mu, &until) == 0) {
    }
    pthread_mutex_unlock(&s->mu);
    return atomic_load(&s->inflight);
}

void service_refuse_commits(service *s)
{
    atomic_store(&s->commits_refused, 1);
    if (s->locks)
        service_waits_cancel(s); /* a wait for a lock ends now: it could not commit */
}
