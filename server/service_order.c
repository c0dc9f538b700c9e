/* service_order.c - deducting an order. The operation is deliberately the
 * classic read, work, write: separate steps, as in findById / modify / save.
 * In redis mode they run under the item's distributed lock, and the read
 * claims the row with the lock's fencing token, so a holder whose lease ran
 * out can never write after a newer holder has started. Hot items go through
 * group commit: one lock hold and one transaction for a batch of requests. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "service_internal.h"

#define BATCH_MAX 64

/* Where a request's answer goes, and what it asked. */
struct deduction {
    service *s;
    store_conn *c;
    const req_reduce *r;
    service_result *out;
    char key[DLOCK_KEY_MAX + 1]; /* the item's lock key */
};

static int from_lock(service *s, service_result *out, int rc, const char *key)
{
    if (rc == DLOCK_ERR_REDIS || rc == DLOCK_ERR_AUTH)
        service_note_redis(s, rc);
    switch (rc) {
    case DLOCK_ERR_TIMEOUT:
        return service_fail(out, SERVICE_LOCK_TIMEOUT, "lock %s is busy; try again", key);
    case DLOCK_ERR_INTERRUPTED:
        return service_fail(out, SERVICE_LOCK_INTERRUPTED,
                            "lock %s: work outlasted the maximum renewals; rolled back, nothing "
                            "deducted", key);
    case DLOCK_ERR_LOST:
        return service_fail(out, SERVICE_LOCK_LOST,
                            "lock %s was lost; rolled back, nothing deducted", key);
    case DLOCK_ERR_REDIS:
        return service_fail(out, SERVICE_REDIS_DOWN, "Redis unavailable: %s", dlock_errstr());
    case DLOCK_ERR_AUTH: /* dlock_errstr says "Redis authentication failed: ..." */
        return service_fail(out, SERVICE_REDIS_DOWN, "%s; nothing deducted", dlock_errstr());
    default:
        return service_fail(out, SERVICE_STORAGE_ERROR, "lock error: %s", dlock_errstr());
    }
}

/* Maps a store result for request r; STORE_ERR_DUPLICATE means out->order
 * holds the earlier order of r's requestId: a replay when it is the same
 * order, else a conflict. */
static int from_store(service_result *out, int rc, const store_conn *c, const req_reduce *r)
{
    if (rc == STORE_OK)
        return out->outcome = SERVICE_OK;
    if (rc != STORE_ERR_DUPLICATE)
        return service_from_store(out, rc, c);
    const store_order *o = &out->order;
    if (r && o->nlines == 1 && o->lines[0].item_id == r->item_id &&
        o->lines[0].quantity == r->quantity)
        return out->outcome = SERVICE_REPLAYED;
    return service_fail(out, SERVICE_CONFLICT,
                        "requestId \"%s\" was already used for another itemId or quantity",
                        r ? r->request_id : "");
}

static int insufficient(service_result *out, const req_reduce *r, int64_t stock)
{
    out->item_id = r->item_id;
    out->remaining = stock;
    out->requested = r->quantity;
    return service_fail(out, SERVICE_INSUFFICIENT, "not enough stock; nothing deducted");
}

/* Asked by the store inside a write's transaction, once it holds the write
 * lock: a wait for it (up to --busy-timeout-ms) may have outlasted the drain
 * deadline, after which the answer could not be sent. */
static int commits_allowed(void *arg)
{
    service *s = arg;
    return !atomic_load(&s->commits_refused);
}

/* The test-only fault (--test-stop-before-write): the process stops itself
 * once, after the holder's last check and before its write, the window no
 * lease check can cover. */
static void fault_point(service *s)
{
    if (s->cfg.stop_before_write && atomic_exchange(&s->stopped_once, 1) == 0) {
        log_event(LOG_WARN, "test fault: stopping before the write", NULL);
        raise(SIGSTOP);
    }
}

/* The fencing token of the held lock, or (0, 0) when unfenced. */
static store_fence token_of(const service *s, dlock_handle *h)
{
    store_fence f = {0, 0};
    if (h && s->cfg.fencing)
        f.fence = dlock_fence(h), f.seq = dlock_handoff_seq(h);
    return f;
}

/* workMs as honoured: only with --allow-work-ms, and capped. */
static int work_ms_of(const service *s, const req_reduce *r)
{
    if (!s->cfg.allow_work_ms)
        return 0;
    return (int)(r->work_ms < s->cfg.max_work_ms ? r->work_ms : s->cfg.max_work_ms);
}

/* r as an order of one line that leaves new_stock. */
static store_new_order order_of(const service *s, const req_reduce *r, int64_t new_stock,
                                store_fence fence, dlock_handle *h)
{
    store_new_order o = {
        .request_id = r->has_request_id ? r->request_id : NULL, .instance = s->cfg.instance_id,
        .lock_mode = service_lock_mode_names[s->cfg.lock_mode],
        .lock_token = h ? dlock_token(h) : NULL, .nlines = 1};
    o.lines[0] = (store_line){r->item_id, r->quantity, new_stock, fence};
    return o;
}

/* A retry whose first attempt committed (perhaps while it waited for the
 * lock) gets that first answer, before any stock check: STORE_ERR_DUPLICATE
 * (the order in out), STORE_ERR_NOT_FOUND when new, or a storage error. */
static int replayed(store_conn *c, const req_reduce *r, service_result *out)
{
    if (!r->has_request_id)
        return STORE_ERR_NOT_FOUND;
    int rc = store_order_by_request(c, r->request_id, &out->order);
    return rc == STORE_OK ? STORE_ERR_DUPLICATE : rc;
}

/* The write half: the order and the item's new stock in one transaction;
 * fenced, the stock is written only while our claim stands. */
static int write_order(service *s, store_conn *c, const store_new_order *o, store_order *out)
{
    const store_line *l = &o->lines[0];
    store_commit_check check = {commits_allowed, s};
    int rc = store_tx_begin(c);
    if (rc == STORE_OK)
        rc = store_tx_add_order(c, o, out);
    if (rc == STORE_OK)
        rc = store_tx_set_stock(c, l->item_id, l->remaining, l->fence.fence ? &l->fence : NULL);
    if (rc == STORE_OK)
        return store_tx_commit(c, &check);
    store_tx_abort(c);
    return rc;
}

static int pause_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0) {
    }
    return DLOCK_OK;
}

/* Read, work, write. h is the held lock, or NULL in mode none. */
static int read_modify_write(dlock_handle *h, void *arg)
{
    struct deduction *x = arg;
    const req_reduce *r = x->r;
    int64_t stock;
    store_fence fence = token_of(x->s, h);
    int rc = fence.fence ? store_stock_claim(x->c, r->item_id, &fence, &stock)
                         : store_stock_read(x->c, r->item_id, &stock);
    if (rc != STORE_OK)
        return from_store(x->out, rc, x->c, r);
    if ((rc = replayed(x->c, r, x->out)) != STORE_ERR_NOT_FOUND)
        return from_store(x->out, rc, x->c, r);
    if (stock < r->quantity)
        return insufficient(x->out, r, stock);
    int work = work_ms_of(x->s, r);
    if (work > 0 && (rc = h ? dlock_sleep(h, work) : pause_ms(work)) != DLOCK_OK)
        return from_lock(x->s, x->out, rc, x->key);
    if (h && (rc = dlock_check(h)) != DLOCK_OK) /* the last moment to back out */
        return from_lock(x->s, x->out, rc, x->key);
    fault_point(x->s);
    store_new_order o = order_of(x->s, r, stock - r->quantity, fence, h);
    return from_store(x->out, write_order(x->s, x->c, &o, &x->out->order), x->c, r);
}

/* Runs fn(x) under the item's lock and folds the lock's result into x->out. */
static void under_lock(struct deduction *x, dlock_fn fn)
{
    int fn_rc = -1;
    int rc = dlock_run(x->s->locks, x->key, &x->s->cfg.lock, fn, x, &fn_rc);
    if (fn_rc >= 0)
        service_note_redis(x->s, DLOCK_OK); /* it granted the lock */
    if (rc == DLOCK_OK)
        return; /* fn's outcome stands */
    if (fn_rc < 0) { /* fn did not run */
        from_lock(x->s, x->out, rc, x->key);
    } else if (x->out->outcome == SERVICE_OK) {
        /* committed while still ours (dlock_check and the fence agreed); the
         * loss came after, so the answer stands */
        log_event(LOG_WARN, "lock lost after commit", "key=%s result=%s", x->key,
                  dlock_strerror(rc));
    }
    if (x->out->outcome == SERVICE_LOCK_INTERRUPTED || x->out->outcome == SERVICE_LOCK_LOST)
        log_event(LOG_WARN, "deduction rolled back", "key=%s outcome=%s detail=\"%s\"", x->key,
                  service_outcome_name(x->out->outcome), x->out->message);
}

/* ---- group commit (redis mode, --batch on) ---- */

static struct deduction *job_of(batch_job *j) { return j->arg; }

static void fail_jobs(batch_job **jobs, int n, const service_result *res)
{
    for (int i = 0; i < n; i++)
        *job_of(jobs[i])->out = *res;
}

/* The batch was rolled back: every answer gets res, except replays of orders
 * committed before this batch, which stay true. (Refusals too: an
 * insufficient_stock or a requestId conflict may have come from a deduction
 * of this batch that no longer exists.) */
static void undo_jobs(batch_job **jobs, int n, int64_t first_order, const service_result *res)
{
    for (int i = 0; i < n; i++) {
        const service_result *o = job_of(jobs[i])->out;
        if (!(o->outcome == SERVICE_REPLAYED &&
              (!first_order || o->order.info.order_id < first_order)))
            *job_of(jobs[i])->out = *res;
    }
}

/* One job of the batch, inside its transaction, against the stock left. */
static void apply_job(service *s, store_conn *c, dlock_handle *h, store_fence f, int64_t *stock,
                      int64_t *first_order, struct deduction *x)
{
    const req_reduce *r = x->r;
    int rc = replayed(c, r, x->out);
    if (rc != STORE_ERR_NOT_FOUND) {
        from_store(x->out, rc, c, r);
        return;
    }
    if (*stock < r->quantity) {
        insufficient(x->out, r, *stock);
        return;
    }
    store_new_order o = order_of(s, r, *stock - r->quantity, f, h);
    if (from_store(x->out, store_tx_add_order(c, &o, &x->out->order), c, r) == SERVICE_OK) {
        *stock -= r->quantity;
        *first_order = *first_order ? *first_order : x->out->order.info.order_id;
    }
}

/* One transaction for the whole batch: claim the row once, check each
 * deduction against the stock left, in arrival order, commit once. */
static void apply_batch(service *s, store_conn *c, dlock_handle *h, const char *key,
                        batch_job **jobs, int n)
{
    store_fence f = token_of(s, h);
    int64_t stock, first_order = 0, item = jobs[0]->item_id;
    service_result fail = {0};
    int rc = store_tx_begin(c);
    if (rc == STORE_OK)
        rc = f.fence ? store_stock_claim(c, item, &f, &stock) : store_stock_read(c, item, &stock);
    if (rc != STORE_OK) {
        store_tx_abort(c);
        service_from_store(&fail, rc, c);
        fail_jobs(jobs, n, &fail);
        return;
    }
    for (int i = 0; i < n; i++) {
        memset(job_of(jobs[i])->out, 0, sizeof(service_result));
        apply_job(s, c, h, f, &stock, &first_order, job_of(jobs[i]));
    }
    if ((rc = dlock_check(h)) == DLOCK_OK)
        fault_point(s);
    store_commit_check check = {commits_allowed, s};
    if (rc != DLOCK_OK) {
        store_tx_abort(c);
        from_lock(s, &fail, rc, key);
        undo_jobs(jobs, n, first_order, &fail);
    } else if ((rc = store_tx_set_stock(c, item, stock, f.fence ? &f : NULL)) != STORE_OK ||
               (rc = store_tx_commit(c, &check)) != STORE_OK) {
        store_tx_abort(c);
        service_from_store(&fail, rc, c);
        undo_jobs(jobs, n, first_order, &fail);
    }
}

/* The leader: takes the item's lock, then the batch queued meanwhile. The
 * next leader is promoted by batch_take and waits for the lock while we
 * work, so our release hands the lock over inside the process. */
static void lead_batch(service *s, store_conn *c, const char *key, int64_t item_id)
{
    batch_job *jobs[BATCH_MAX];
    dlock_handle *h;
    int rc = dlock_acquire(s->locks, key, &s->cfg.lock, &h);
    int n = batch_take(s->batches, item_id, jobs, BATCH_MAX);
    if (rc == DLOCK_OK) {
        service_note_redis(s, rc);
        apply_batch(s, c, h, key, jobs, n);
        if ((rc = dlock_release(h)) != DLOCK_OK) /* after the commit: the answers stand */
            log_event(LOG_WARN, "lock lost after commit", "key=%s result=%s batch=%d", key,
                      dlock_strerror(rc), n);
    } else {
        service_result fail = {0};
        from_lock(s, &fail, rc, key);
        fail_jobs(jobs, n, &fail);
    }
    batch_finish(s->batches, jobs, n);
}

/* ---- without a distributed lock ---- */

/* Mode atomic: one transaction of a conditional update per line. */
static void deduct_atomically(service *s, store_conn *c, const req_reduce *r,
                              service_result *out)
{
    store_commit_check check = {commits_allowed, s};
    int64_t left;
    int rc = store_tx_begin(c);
    if (rc == STORE_OK)
        rc = replayed(c, r, out);
    if (rc == STORE_ERR_NOT_FOUND && (rc = store_tx_take(c, r->item_id, r->quantity, &left)) ==
                                         STORE_ERR_INSUFFICIENT) {
        store_tx_abort(c);
        insufficient(out, r, left);
        return;
    }
    if (rc == STORE_OK) {
        store_new_order o = order_of(s, r, left, (store_fence){0, 0}, NULL);
        if ((rc = store_tx_add_order(c, &o, &out->order)) == STORE_OK)
            rc = store_tx_commit(c, &check);
    }
    if (rc != STORE_OK)
        store_tx_abort(c);
    from_store(out, rc, c, r);
}

/* Items are never deleted, so one that exists now exists under the lock: an
 * absent one is answered before, and its lock never touches Redis (every
 * itemId a client makes up would otherwise leave keys there). */
static int item_exists(store_conn *c, int64_t item_id)
{
    int64_t stock;
    return store_stock_read(c, item_id, &stock);
}

void service_order_reduce(service *s, store_conn *c, const req_reduce *r, service_result *out)
{
    struct deduction x = {.s = s, .c = c, .r = r, .out = out};
    int rc = replayed(c, r, out); /* a retry of a committed request needs no lock */
    if (rc == STORE_ERR_NOT_FOUND)
        rc = item_exists(c, r->item_id);
    if (rc != STORE_OK) {
        from_store(out, rc, c, r);
        return;
    }
    service_lock_key(s->cfg.lock_prefix, r->item_id, x.key);
    if (s->cfg.lock_mode == SERVICE_LOCK_REDIS && s->batches && work_ms_of(s, r) == 0) {
        batch_job job = {.item_id = r->item_id, .arg = &x};
        int lead = batch_enter(s->batches, &job);
        if (lead > 0)
            lead_batch(s, c, x.key, r->item_id);
        else if (lead < 0)
            under_lock(&x, read_modify_write);
    } else if (s->cfg.lock_mode == SERVICE_LOCK_REDIS) {
        under_lock(&x, read_modify_write);
    } else if (s->cfg.lock_mode == SERVICE_LOCK_NONE) {
        read_modify_write(NULL, &x);
    } else {
        deduct_atomically(s, c, r, out);
    }
}

/* ---- setting the stock ---- */

struct set_stock {
    struct deduction x;
    int64_t stock;
};

static int set_stock(dlock_handle *h, void *arg)
{
    struct set_stock *a = arg;
    store_fence fence = token_of(a->x.s, h);
    store_commit_check check = {commits_allowed, a->x.s};
    int rc = store_item_set_stock(a->x.c, a->x.r->item_id, a->stock, fence.fence ? &fence : NULL,
                                  &check);
    if (rc == STORE_OK)
        rc = store_item_get(a->x.c, a->x.r->item_id, &a->x.out->item);
    return from_store(a->x.out, rc, a->x.c, NULL);
}

void service_order_set_stock(service *s, store_conn *c, int64_t item_id, int64_t stock,
                             service_result *out)
{
    req_reduce r = {.item_id = item_id};
    struct set_stock a = {{.s = s, .c = c, .r = &r, .out = out}, stock};
    service_lock_key(s->cfg.lock_prefix, item_id, a.x.key);
    int rc = item_exists(c, item_id);
    if (rc != STORE_OK)
        from_store(out, rc, c, NULL);
    else if (s->cfg.lock_mode == SERVICE_LOCK_REDIS)
        under_lock(&a.x, set_stock);
    else
        set_stock(NULL, &a);
}
