/* stock.c - stockd's business operations. /reduceStock reads the stock, does
 * the (simulated) work, then writes the new stock and a ledger row: separate
 * steps on purpose, as in the classic findById / modify / save. In redis mode
 * the three run under the item's distributed lock, and the read claims the
 * row with the lock's fencing token so a holder whose lease ran out can never
 * write after a newer holder has started. */
#include "stock.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "batch.h"
#include "config.h"
#include "log.h"

const char *stock_outcome_name(enum stock_outcome o)
{
    static const char *const names[STOCK_OUTCOME_COUNT] = {
        "ok", "replayed", "item_not_found", "insufficient_stock", "request_id_conflict",
        "lock_timeout", "lock_interrupted", "lock_lost", "redis_unavailable", "storage_busy",
        "storage_error", "shutting_down"};
    return o < STOCK_OUTCOME_COUNT ? names[o] : "storage_error";
}

static int set_outcome(stock_result *out, enum stock_outcome o, const char *fmt, const char *detail)
{
    out->outcome = o;
    snprintf(out->message, sizeof(out->message), fmt, detail);
    return o;
}

/* Maps a store result; on STORE_ERR_DUPLICATE out->order holds the earlier order. */
static int from_store(stock_result *out, int rc, const store_conn *c, const req_reduce *r)
{
    switch (rc) {
    case STORE_OK: return out->outcome = STOCK_OK;
    case STORE_ERR_NOT_FOUND: return set_outcome(out, STOCK_NOT_FOUND, "no item with this id%s", "");
    case STORE_ERR_STALE:
        return set_outcome(out, STOCK_LOCK_LOST,
                           "stale lock holder refused by fencing (%s); nothing deducted",
                           store_errstr(c));
    case STORE_ERR_BUSY:
        return set_outcome(out, STOCK_STORAGE_BUSY, "database busy: %s", store_errstr(c));
    case STORE_ERR_VETOED: /* only drain_check vetoes */
        return set_outcome(out, STOCK_SHUTTING_DOWN, "server is shutting down%s; nothing deducted",
                           "");
    case STORE_ERR_DUPLICATE:
        if (r && out->order.item_id == r->item_id && out->order.quantity == r->quantity)
            return out->outcome = STOCK_REPLAYED;
        return set_outcome(out, STOCK_CONFLICT,
                           "requestId \"%s\" was already used for another itemId or quantity",
                           r ? r->request_id : "");
    default: return set_outcome(out, STOCK_STORAGE_ERROR, "storage error: %s", store_errstr(c));
    }
}

/* What Redis last told us, so that a change is logged once, not per request. */
enum redis_state { REDIS_UNKNOWN, REDIS_UP, REDIS_DOWN, REDIS_AUTH_FAILED };
static _Atomic int redis_state;

void stock_note_redis(int rc)
{
    int now = rc == DLOCK_ERR_AUTH    ? REDIS_AUTH_FAILED
              : rc == DLOCK_ERR_REDIS ? REDIS_DOWN
                                      : REDIS_UP;
    int was = atomic_exchange(&redis_state, now);
    if (now == was)
        return;
    if (now == REDIS_AUTH_FAILED)
        log_event(LOG_ERROR, "Redis refuses our credentials; every deduction fails until the "
                  "password or ACL user is fixed", "detail=\"%s\"", dlock_errstr());
    else if (now == REDIS_DOWN)
        log_event(LOG_WARN, "Redis unreachable", "detail=\"%s\"", dlock_errstr());
    else if (was != REDIS_UNKNOWN)
        log_event(LOG_INFO, "Redis reachable again", NULL);
}

static int from_lock(stock_result *out, int rc, const char *key)
{
    if (rc == DLOCK_ERR_REDIS || rc == DLOCK_ERR_AUTH)
        stock_note_redis(rc);
    switch (rc) {
    case DLOCK_ERR_TIMEOUT:
        return set_outcome(out, STOCK_LOCK_TIMEOUT, "lock %s is busy; try again", key);
    case DLOCK_ERR_INTERRUPTED:
        return set_outcome(out, STOCK_LOCK_INTERRUPTED,
                           "lock %s: work outlasted the maximum renewals; rolled back, nothing "
                           "deducted", key);
    case DLOCK_ERR_LOST:
        return set_outcome(out, STOCK_LOCK_LOST, "lock %s was lost; rolled back, nothing deducted",
                           key);
    case DLOCK_ERR_REDIS:
        return set_outcome(out, STOCK_REDIS_DOWN, "Redis unavailable: %s", dlock_errstr());
    case DLOCK_ERR_AUTH: /* dlock_errstr says "Redis authentication failed: ..." */
        return set_outcome(out, STOCK_REDIS_DOWN, "%s; nothing deducted", dlock_errstr());
    default: return set_outcome(out, STOCK_STORAGE_ERROR, "lock error: %s", dlock_errstr());
    }
}

struct rmw {
    const stock_config *cfg;
    store_conn *c;
    const req_reduce *r;
    stock_result *out;
    const char *key;
};

static int plain_sleep(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0) {
    }
    return DLOCK_OK;
}

/* The fencing token of the held lock, or a zero token when unfenced. */
static store_fence token_of(dlock_handle *h, const stock_config *cfg)
{
    store_fence f = {0, 0};
    if (h && cfg->fencing)
        f.fence = dlock_fence(h), f.seq = dlock_handoff_seq(h);
    return f;
}

/* workMs as honoured: only with --allow-work-ms, and capped. */
static int work_ms_of(const stock_config *cfg, const req_reduce *r)
{
    if (!cfg->allow_work_ms)
        return 0;
    return (int)(r->work_ms < cfg->max_work_ms ? r->work_ms : cfg->max_work_ms);
}

/* This module's only state: a stop flag for commits, set past the SIGTERM
 * drain deadline, and the test-only fault injection (--test-stop-before-write):
 * the process stops itself once, after the holder's last check and before its
 * write, the window no lease check can cover. */
static _Atomic int commits_refused;
static _Atomic int stopped_once;

void stock_refuse_commits(void) { atomic_store(&commits_refused, 1); }

/* Whether a commit may still happen; otherwise out says why not. */
static int may_commit(stock_result *out)
{
    if (!atomic_load(&commits_refused))
        return 1;
    set_outcome(out, STOCK_SHUTTING_DOWN, "server is shutting down%s; nothing deducted", "");
    return 0;
}

/* Asked by the store inside a single write's transaction, once it holds the
 * write lock: a wait for it (up to --busy-timeout-ms) may have outlasted the
 * drain deadline, after which the answer could not be sent. */
static int commits_allowed(void *arg)
{
    (void)arg;
    return !atomic_load(&commits_refused);
}

static const store_commit_check drain_check = {commits_allowed, NULL};

static store_deduction deduction_of(const stock_config *cfg, const req_reduce *r,
                                    int64_t new_stock, store_fence fence, dlock_handle *h)
{
    store_deduction d = {
        .item_id = r->item_id, .quantity = r->quantity, .new_stock = new_stock,
        .request_id = r->has_request_id ? r->request_id : NULL, .instance = cfg->instance_id,
        .lock_mode = cfg_lock_mode_name(cfg->lock_mode), .fence = fence,
        .lock_token = h ? dlock_token(h) : NULL, .check = &drain_check};
    return d;
}

static void fault_point(const stock_config *cfg)
{
    if (cfg->stop_before_write && atomic_exchange(&stopped_once, 1) == 0) {
        log_event(LOG_WARN, "test fault: stopping before the write", NULL);
        raise(SIGSTOP);
    }
}

/* A retry whose first attempt committed while it waited for the lock gets that
 * first answer, before any stock check: STORE_ERR_DUPLICATE (the order in
 * out), STORE_ERR_NOT_FOUND when new, or a storage error. */
static int replayed(store_conn *c, const req_reduce *r, stock_result *out)
{
    if (!r->has_request_id)
        return STORE_ERR_NOT_FOUND;
    int rc = store_order_by_request(c, r->request_id, &out->order);
    return rc == STORE_OK ? STORE_ERR_DUPLICATE : rc;
}

/* Read, work, write. h is the held lock, or NULL in mode none. */
static int read_modify_write(dlock_handle *h, void *arg)
{
    struct rmw *x = arg;
    const req_reduce *r = x->r;
    int64_t stock;
    store_fence fence = token_of(h, x->cfg);
    int rc = fence.fence ? store_stock_claim(x->c, r->item_id, &fence, &stock)
                         : store_stock_read(x->c, r->item_id, &stock);
    if (rc != STORE_OK)
        return from_store(x->out, rc, x->c, r);
    if ((rc = replayed(x->c, r, x->out)) != STORE_ERR_NOT_FOUND)
        return from_store(x->out, rc, x->c, r);
    if (stock < r->quantity) {
        x->out->remaining = stock;
        return set_outcome(x->out, STOCK_INSUFFICIENT, "not enough stock%s; nothing deducted", "");
    }
    int work = work_ms_of(x->cfg, r);
    if (work > 0 && (rc = h ? dlock_sleep(h, work) : plain_sleep(work)) != DLOCK_OK)
        return from_lock(x->out, rc, x->key);
    if (h && (rc = dlock_check(h)) != DLOCK_OK) /* the last moment to back out */
        return from_lock(x->out, rc, x->key);
    fault_point(x->cfg);
    store_deduction d = deduction_of(x->cfg, r, stock - r->quantity, fence, h);
    return from_store(x->out, store_deduct_write(x->c, &d, &x->out->order), x->c, r);
}

static void lock_key(const stock_config *cfg, int64_t item_id, char *key, size_t size)
{
    snprintf(key, size, "%s{%lld}", cfg->lock_prefix, (long long)item_id);
}

/* Runs fn(arg) under the item's lock and folds the lock's result into x->out. */
static void under_lock(const stock_config *cfg, dlock_client *locks, struct rmw *x, dlock_fn fn,
                       void *arg)
{
    int fn_rc = -1;
    int rc = dlock_run(locks, x->key, &cfg->lock, fn, arg, &fn_rc);
    if (fn_rc >= 0)
        stock_note_redis(DLOCK_OK); /* it granted the lock */
    if (rc == DLOCK_OK)
        return; /* fn's outcome stands */
    if (fn_rc < 0) { /* fn did not run */
        from_lock(x->out, rc, x->key);
    } else if (x->out->outcome == STOCK_OK) {
        /* committed while still ours (dlock_check and the fence agreed); the
         * loss came after, so the answer stands */
        log_event(LOG_WARN, "lock lost after commit", "key=%s result=%s", x->key,
                  dlock_strerror(rc));
    }
    if (x->out->outcome == STOCK_LOCK_INTERRUPTED || x->out->outcome == STOCK_LOCK_LOST)
        log_event(LOG_WARN, "deduction rolled back", "key=%s outcome=%s detail=\"%s\"", x->key,
                  stock_outcome_name(x->out->outcome), x->out->message);
}

/* ---- group commit (redis mode, --batch on) ---- */

#define BATCH_MAX 64

static void fail_jobs(batch_job **jobs, int n, const stock_result *res)
{
    for (int i = 0; i < n; i++)
        *jobs[i]->out = *res;
}

/* The batch was rolled back: every answer gets res, except replays of orders
 * committed before this batch, which stay true. (Refusals too: an
 * insufficient_stock or a requestId conflict may have come from a deduction
 * of this batch that no longer exists.) */
static void undo_jobs(batch_job **jobs, int n, int64_t first_order, const stock_result *res)
{
    for (int i = 0; i < n; i++) {
        const stock_result *o = jobs[i]->out;
        if (!(o->outcome == STOCK_REPLAYED && (!first_order || o->order.order_id < first_order)))
            *jobs[i]->out = *res;
    }
}

/* One transaction for the whole batch: claim the row once, check each
 * deduction against the stock left, in arrival order, commit once. */
static void apply_batch(const stock_config *cfg, store_conn *c, dlock_handle *h, const char *key,
                        batch_job **jobs, int n)
{
    store_fence f = token_of(h, cfg);
    int64_t stock, first_order = 0, item = jobs[0]->req->item_id;
    stock_result fail = {0};
    int rc = store_batch_begin(c, item, f.fence ? &f : NULL, &stock);
    if (rc != STORE_OK) {
        from_store(&fail, rc, c, NULL);
        fail_jobs(jobs, n, &fail);
        return;
    }
    for (int i = 0; i < n; i++) {
        const req_reduce *r = jobs[i]->req;
        stock_result *out = jobs[i]->out;
        memset(out, 0, sizeof(*out));
        if ((rc = replayed(c, r, out)) != STORE_ERR_NOT_FOUND) {
            from_store(out, rc, c, r);
            continue;
        }
        if (stock < r->quantity) {
            out->remaining = stock;
            set_outcome(out, STOCK_INSUFFICIENT, "not enough stock%s; nothing deducted", "");
            continue;
        }
        store_deduction d = deduction_of(cfg, r, stock - r->quantity, f, h);
        rc = store_batch_add(c, &d, &out->order);
        from_store(out, rc, c, r);
        if (rc == STORE_OK) {
            stock -= r->quantity;
            first_order = first_order ? first_order : out->order.order_id;
        }
    }
    if ((rc = dlock_check(h)) == DLOCK_OK)
        fault_point(cfg);
    if (rc != DLOCK_OK) {
        store_batch_abort(c);
        from_lock(&fail, rc, key);
        undo_jobs(jobs, n, first_order, &fail);
    } else if (!may_commit(&fail)) {
        store_batch_abort(c);
        undo_jobs(jobs, n, first_order, &fail);
    } else if ((rc = store_batch_commit(c, item, stock, f.fence ? &f : NULL)) != STORE_OK) {
        from_store(&fail, rc, c, NULL);
        undo_jobs(jobs, n, first_order, &fail);
    }
}

/* The leader: takes the item's lock, then the batch queued meanwhile. The next
 * leader is promoted by batch_take and waits for the lock while we work, so
 * our release hands the lock over inside the process. */
static void lead_batch(const stock_config *cfg, dlock_client *locks, batch_queues *bq,
                       store_conn *c, int64_t item_id)
{
    char key[512];
    batch_job *jobs[BATCH_MAX];
    dlock_handle *h;
    lock_key(cfg, item_id, key, sizeof(key));
    int rc = dlock_acquire(locks, key, &cfg->lock, &h);
    int n = batch_take(bq, item_id, jobs, BATCH_MAX);
    if (rc == DLOCK_OK) {
        stock_note_redis(rc);
        apply_batch(cfg, c, h, key, jobs, n);
        if ((rc = dlock_release(h)) != DLOCK_OK) /* after the commit: the answers stand */
            log_event(LOG_WARN, "lock lost after commit", "key=%s result=%s batch=%d", key,
                      dlock_strerror(rc), n);
    } else {
        stock_result fail = {0};
        from_lock(&fail, rc, key);
        fail_jobs(jobs, n, &fail);
    }
    batch_finish(bq, jobs, n);
}

/* Items are never deleted, so one that exists now exists under the lock: an
 * absent one is answered before, and its lock never touches Redis (every
 * itemId a client makes up would otherwise leave keys there). */
static int item_exists(store_conn *c, int64_t item_id)
{
    int64_t stock;
    return store_stock_read(c, item_id, &stock);
}

void stock_reduce(const stock_config *cfg, dlock_client *locks, batch_queues *batches,
                  store_conn *c, const req_reduce *r, stock_result *out)
{
    char key[512];
    struct rmw x = {cfg, c, r, out, key};
    memset(out, 0, sizeof(*out));
    int rc = replayed(c, r, out); /* a retry of a committed request needs no lock */
    if (rc == STORE_ERR_NOT_FOUND)
        rc = item_exists(c, r->item_id);
    if (rc != STORE_OK) {
        from_store(out, rc, c, r);
        return;
    }
    lock_key(cfg, r->item_id, key, sizeof(key));
    if (cfg->lock_mode == CFG_LOCK_REDIS && batches && work_ms_of(cfg, r) == 0) {
        batch_job job = {.req = r, .out = out};
        int lead = batch_enter(batches, &job);
        if (lead > 0)
            lead_batch(cfg, locks, batches, c, r->item_id);
        else if (lead < 0)
            under_lock(cfg, locks, &x, read_modify_write, &x);
    } else if (cfg->lock_mode == CFG_LOCK_REDIS) {
        under_lock(cfg, locks, &x, read_modify_write, &x);
    } else if (cfg->lock_mode == CFG_LOCK_NONE) {
        read_modify_write(NULL, &x);
    } else {
        store_deduction d = {
            .item_id = r->item_id, .quantity = r->quantity,
            .request_id = r->has_request_id ? r->request_id : NULL,
            .instance = cfg->instance_id, .lock_mode = cfg_lock_mode_name(cfg->lock_mode),
            .check = &drain_check};
        rc = store_deduct_atomic(c, &d, &out->order, &out->remaining);
        if (rc == STORE_ERR_INSUFFICIENT)
            set_outcome(out, STOCK_INSUFFICIENT, "not enough stock%s; nothing deducted", "");
        else
            from_store(out, rc, c, r);
    }
}

struct set_args {
    struct rmw x;
    int64_t stock;
};

static int set_stock(dlock_handle *h, void *arg)
{
    struct set_args *a = arg;
    store_fence fence = token_of(h, a->x.cfg);
    int rc = store_item_set_stock(a->x.c, a->x.r->item_id, a->stock, fence.fence ? &fence : NULL,
                                  &drain_check);
    if (rc == STORE_OK)
        rc = store_item_get(a->x.c, a->x.r->item_id, &a->x.out->item);
    return from_store(a->x.out, rc, a->x.c, NULL);
}

void stock_set(const stock_config *cfg, dlock_client *locks, store_conn *c, int64_t item_id,
               int64_t stock, stock_result *out)
{
    char key[512];
    req_reduce r = {.item_id = item_id};
    struct set_args a = {{cfg, c, &r, out, key}, stock};
    memset(out, 0, sizeof(*out));
    lock_key(cfg, item_id, key, sizeof(key));
    int rc = item_exists(c, item_id);
    if (rc != STORE_OK)
        from_store(out, rc, c, NULL);
    else if (cfg->lock_mode == CFG_LOCK_REDIS)
        under_lock(cfg, locks, &a.x, set_stock, &a);
    else
        set_stock(NULL, &a);
}
