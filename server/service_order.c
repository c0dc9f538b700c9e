/* service_order.c - placing an order: every line deducted, or none. The
 * operation is deliberately the classic read, work, write: separate steps,
 * as in findById / modify / save. In redis mode they run under the lock of
 * every item of the order (a multi-lock for several), and the read claims
 * each row with its own key's fencing token, so a holder whose lease ran out
 * can never write after a newer holder has started. Group commit, the
 * redis mode's usual path, is in service_batch.c. */
#include <time.h>

#include "server/service_parts.h"

/* workMs as honoured: only with --allow-work-ms, and capped. */
static int work_ms_of(const service *s, const req_order *r)
{
    if (!s->cfg.allow_work_ms)
        return 0;
    return (int)(r->work_ms < s->cfg.max_work_ms ? r->work_ms : s->cfg.max_work_ms);
}

/* The write half: the order and each item's new stock in the transaction
 * open on c, then its commit; fenced, a stock is written only while its
 * line's claim stands. */
static int write_and_commit(service *s, store_conn *c, const store_new_order *o,
                            store_order *out)
{
    store_commit_check check = {service_commits_allowed, s};
    int rc = store_tx_add_order(c, o, out);
    for (int i = 0; rc == STORE_OK && i < o->nlines; i++) {
        const store_line *l = &o->lines[i];
        rc = store_tx_set_stock(c, l->item_id, l->remaining, l->fence.fence ? &l->fence : NULL);
    }
    if (rc == STORE_OK)
        return store_tx_commit(c, &check);
    store_tx_abort(c);
    return rc;
}

/* The write half in a transaction of its own. */
static int write_order(service *s, store_conn *c, const store_new_order *o, store_order *out)
{
    int rc = store_tx_begin(c);
    return rc == STORE_OK ? write_and_commit(s, c, o, out) : rc;
}

static int pause_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0) {
    }
    return DLOCK_OK;
}

/* After line i's row refused h's token for a newer one (fences that went
 * back): raises h's fence past the row's, which only a holder h still is in
 * Redis gets (service_raise_fence), the new token in *f and x->held[i];
 * SERVICE_OK to write again, or the lock's failure set in x->out. */
static int raise_past_row(struct deduction *x, dlock_handle *h, int i, store_fence *f)
{
    int lock_rc = service_raise_fence(x->s, h, x->keys[i], store_stale_token(x->c));
    if (lock_rc != DLOCK_OK)
        return service_from_lock(x->s, x->out, lock_rc, x->keys[i]);
    *f = x->held[i] = service_token_of(x->s, h, x->keys[i]);
    return SERVICE_OK;
}

/* Claims line i's row for h's token of its key (*f; held[i] gets it) and
 * reads its stock: SERVICE_OK, or the failure's outcome, set in x->out. A
 * row that refuses the token for a newer one is claimed once more after a
 * raise (raise_past_row). */
static int claim_line(struct deduction *x, dlock_handle *h, int i, store_fence *f,
                      int64_t *stock)
{
    int64_t item = x->r->lines[i].item_id;
    int rc = store_stock_claim(x->c, item, f, stock);
    if (rc == STORE_ERR_STALE) {
        if (raise_past_row(x, h, i, f) != SERVICE_OK)
            return x->out->outcome;
        rc = store_stock_claim(x->c, item, f, stock);
    }
    return rc == STORE_OK ? SERVICE_OK : service_from_order_store(x->out, rc, x->c, x->r);
}

/* Read, work, write. h is the held lock (of every line's item), or NULL in
 * mode none. */
static int read_modify_write(dlock_handle *h, void *arg)
{
    struct deduction *x = arg;
    const req_order *r = x->r;
    if (r->nlines > 1 && h)
        metrics_multilock_wait(x->s->metrics, service_now_ms() - x->lock_asked_ms);
    store_new_order o = service_new_order(x->s, r, h);
    int64_t stock[RULE_ORDER_LINES_MAX];
    for (int i = 0; i < r->nlines; i++) { /* each row claimed with its own key's token */
        store_line *l = &o.lines[i];
        l->fence = x->held[i] = service_token_of(x->s, h, x->keys[i]);
        if (l->fence.fence) {
            if (claim_line(x, h, i, &l->fence, &stock[i]) != SERVICE_OK)
                return x->out->outcome;
            continue;
        }
        int rc = store_stock_read(x->c, l->item_id, &stock[i]);
        if (rc != STORE_OK)
            return service_from_order_store(x->out, rc, x->c, r);
    }
    int rc = service_replayed(x->c, r, x->out);
    if (rc != STORE_ERR_NOT_FOUND)
        return service_from_order_store(x->out, rc, x->c, r);
    for (int i = 0; i < r->nlines; i++)
        if (stock[i] < r->lines[i].quantity)
            service_add_short(x->out, r, i, stock[i]);
    if (x->out->nshort)
        return service_insufficient(x->out);
    int work = work_ms_of(x->s, r);
    if (work > 0 && (rc = h ? dlock_sleep(h, work) : pause_ms(work)) != DLOCK_OK)
        return service_from_lock(x->s, x->out, rc, x->keys[0]);
    if (h && (rc = dlock_check(h)) != DLOCK_OK) /* the last moment to back out */
        return service_from_lock(x->s, x->out, rc, x->keys[0]);
    service_fault_point(x->s);
    for (int i = 0; i < r->nlines; i++)
        o.lines[i].remaining = stock[i] - o.lines[i].quantity;
    return service_from_order_store(x->out, write_order(x->s, x->c, &o, &x->out->order), x->c, r);
}

/* Runs fn(x) under the lock of every line's item and folds the lock's result
 * into x->out. */
static void under_lock(struct deduction *x, dlock_fn fn, int nkeys)
{
    const char *keys[RULE_ORDER_LINES_MAX];
    for (int i = 0; i < nkeys; i++)
        keys[i] = x->keys[i];
    int fn_rc = -1;
    x->lock_asked_ms = service_now_ms();
    int rc = nkeys == 1 ? dlock_run(x->s->locks, keys[0], &x->s->cfg.lock, fn, x, &fn_rc)
                        : dlock_run_multi(x->s->locks, keys, nkeys, &x->s->cfg.lock, fn, x,
                                          &fn_rc);
    if (fn_rc >= 0)
        service_note_redis(x->s, DLOCK_OK); /* it granted the lock */
    if (rc == DLOCK_OK)
        return; /* fn's outcome stands */
    if (fn_rc < 0) { /* fn did not run */
        service_from_lock(x->s, x->out, rc, nkeys == 1 ? keys[0] : "of the order's items");
    } else if (x->out->outcome == SERVICE_OK) {
        /* committed while still ours (dlock_check and the fences agreed); the
         * loss came after, so the answer stands */
        int64_t items[RULE_ORDER_LINES_MAX];
        for (int i = 0; i < nkeys; i++)
            items[i] = x->r->lines[i].item_id;
        service_log_lost_after_commit(x->s, x->r, 1, items, keys, x->held, nkeys, rc);
    } /* a failed outcome is in the order's own line */
}

/* ---- without a distributed lock ---- */

/* The indices of r's lines by item id: rows locked in one order everywhere,
 * so that two orders of the same items never wait for each other in a
 * circle (a deadlock the database would break by failing one). */
static void by_item(const req_order *r, int *idx)
{
    for (int i = 0; i < r->nlines; i++) {
        int j = i;
        for (; j > 0 && r->lines[idx[j - 1]].item_id > r->lines[i].item_id; j--)
            idx[j] = idx[j - 1];
        idx[j] = i;
    }
}

/* Mode atomic: one transaction of a conditional update per line; a short
 * line rolls the order back, after every line was tried, so the answer can
 * name each short one. */
static void deduct_atomically(service *s, store_conn *c, const req_order *r,
                              service_result *out)
{
    store_commit_check check = {service_commits_allowed, s};
    store_new_order o = service_new_order(s, r, NULL);
    int idx[RULE_ORDER_LINES_MAX];
    by_item(r, idx);
    int rc = store_tx_begin(c);
    if (rc == STORE_OK)
        rc = service_replayed(c, r, out);
    if (rc == STORE_ERR_NOT_FOUND)
        rc = STORE_OK;
    int is_short[RULE_ORDER_LINES_MAX] = {0};
    for (int k = 0; rc == STORE_OK && k < r->nlines; k++) {
        int i = idx[k];
        rc = store_tx_take(c, r->lines[i].item_id, r->lines[i].quantity, &o.lines[i].remaining);
        if (rc == STORE_ERR_INSUFFICIENT)
            is_short[i] = 1, rc = STORE_OK;
    }
    for (int i = 0; rc == STORE_OK && i < r->nlines; i++) /* in the order's own order */
        if (is_short[i])
            service_add_short(out, r, i, o.lines[i].remaining);
    if (rc == STORE_OK && out->nshort) {
        store_tx_abort(c);
        service_insufficient(out);
        return;
    }
    if (rc == STORE_OK && (rc = store_tx_add_order(c, &o, &out->order)) == STORE_OK)
        rc = store_tx_commit(c, &check);
    if (rc != STORE_OK)
        store_tx_abort(c);
    service_from_order_store(out, rc, c, r);
}

/* Mode db: read, work, write inside one transaction that holds the rows'
 * locks from the read on (SELECT ... FOR UPDATE, in item order); another
 * order of the same items waits for them at most --wait-ms (then 503
 * lock_timeout). The database's lock, for comparison with the Redis one. */
static void deduct_under_row_locks(service *s, store_conn *c, const req_order *r,
                                   service_result *out)
{
    store_new_order o = service_new_order(s, r, NULL);
    int64_t stock[RULE_ORDER_LINES_MAX];
    int idx[RULE_ORDER_LINES_MAX], work = work_ms_of(s, r);
    by_item(r, idx);
    int rc = store_tx_begin(c);
    for (int k = 0; rc == STORE_OK && k < r->nlines; k++)
        rc = store_tx_lock_stock(c, r->lines[idx[k]].item_id, s->cfg.lock.wait_ms,
                                 &stock[idx[k]]);
    /* committed while we waited for the rows: its first answer */
    if (rc == STORE_OK && (rc = service_replayed(c, r, out)) == STORE_ERR_NOT_FOUND)
        rc = STORE_OK;
    if (rc != STORE_OK) {
        store_tx_abort(c);
        service_from_order_store(out, rc, c, r);
        return;
    }
    for (int i = 0; i < r->nlines; i++)
        if (stock[i] < r->lines[i].quantity)
            service_add_short(out, r, i, stock[i]);
    if (out->nshort) {
        store_tx_abort(c);
        service_insufficient(out);
        return;
    }
    if (work > 0)
        pause_ms(work);
    service_fault_point(s);
    for (int i = 0; i < r->nlines; i++)
        o.lines[i].remaining = stock[i] - o.lines[i].quantity;
    service_from_order_store(out, write_and_commit(s, c, &o, &out->order), c, r);
}

/* Items are never deleted, so one that exists now exists under the lock: an
 * absent one is answered before, and its lock never touches Redis (every
 * itemId a client makes up would otherwise leave keys there). An item seen
 * once is remembered, and not read again for that. */
static int items_exist(service *s, store_conn *c, const req_order *r, service_result *out)
{
    int64_t stock;
    for (int i = 0; i < r->nlines; i++) {
        int64_t id = r->lines[i].item_id;
        _Atomic int64_t *known = &s->known_items[(uint64_t)id % SERVICE_KNOWN_ITEMS];
        if (atomic_load_explicit(known, memory_order_relaxed) == id)
            continue;
        int rc = store_stock_read(c, id, &stock);
        if (rc == STORE_OK)
            atomic_store_explicit(known, id, memory_order_relaxed);
        if (rc == STORE_ERR_NOT_FOUND && r->nlines > 1)
            return service_fail(out, SERVICE_NOT_FOUND, "no item with id %lld (lines[%d]); "
                                "nothing deducted", (long long)r->lines[i].item_id, i);
        if (rc != STORE_OK)
            return service_from_order_store(out, rc, c, NULL);
    }
    return SERVICE_OK;
}

int service_order_check(struct deduction *x)
{
    int rc = service_replayed(x->c, x->r, x->out); /* a retry of a committed order needs no lock */
    if (rc != STORE_ERR_NOT_FOUND)
        return service_from_order_store(x->out, rc, x->c, x->r);
    if (items_exist(x->s, x->c, x->r, x->out) != SERVICE_OK)
        return x->out->outcome;
    for (int i = 0; i < x->r->nlines; i++)
        service_lock_key(x->s->cfg.lock_prefix, x->r->lines[i].item_id, x->keys[i]);
    return SERVICE_OK;
}

int service_order_batched(const service *s, const req_order *r)
{
    return s->cfg.lock_mode == SERVICE_LOCK_REDIS && s->batches && work_ms_of(s, r) == 0;
}

void service_order_alone(struct deduction *x)
{
    if (x->s->cfg.lock_mode == SERVICE_LOCK_REDIS)
        under_lock(x, read_modify_write, x->r->nlines);
    else if (x->s->cfg.lock_mode == SERVICE_LOCK_NONE)
        read_modify_write(NULL, x);
    else if (x->s->cfg.lock_mode == SERVICE_LOCK_DB)
        deduct_under_row_locks(x->s, x->c, x->r, x->out);
    else
        deduct_atomically(x->s, x->c, x->r, x->out);
}

/* ---- setting the stock ---- */

struct set_stock {
    struct deduction x;
    int64_t stock;
};

static int set_stock(dlock_handle *h, void *arg)
{
    struct set_stock *a = arg;
    int64_t item = a->x.r->lines[0].item_id;
    store_fence fence = *a->x.held = service_token_of(a->x.s, h, a->x.keys[0]);
    store_commit_check check = {service_commits_allowed, a->x.s};
    int rc = store_item_set_stock(a->x.c, item, a->stock, fence.fence ? &fence : NULL, &check);
    if (rc == STORE_ERR_STALE) { /* fences went back, perhaps: as for a claim (claim_line) */
        if (raise_past_row(&a->x, h, 0, &fence) != SERVICE_OK)
            return a->x.out->outcome;
        rc = store_item_set_stock(a->x.c, item, a->stock, &fence, &check);
    }
    if (rc == STORE_OK)
        rc = store_item_get(a->x.c, item, &a->x.out->item);
    return service_from_order_store(a->x.out, rc, a->x.c, NULL);
}

void service_order_set_stock(service *s, store_conn *c, int64_t item_id, int64_t stock,
                             service_result *out, store_fence *held)
{
    req_order r = {.nlines = 1, .lines = {{item_id, 0}}};
    char key[1][DLOCK_KEY_MAX + 1];
    struct set_stock a = {{.s = s, .c = c, .r = &r, .out = out, .held = held, .keys = key}, stock};
    service_lock_key(s->cfg.lock_prefix, item_id, a.x.keys[0]);
    if (items_exist(s, c, &r, out) != SERVICE_OK)
        return;
    if (s->cfg.lock_mode == SERVICE_LOCK_REDIS)
        under_lock(&a.x, set_stock, 1);
    else
        set_stock(NULL, &a);
}
