/* service_order.c - an order placed alone (with work time, without group
 * commit, or in a lock mode other than redis): every line deducted, or
 * none. The operation is deliberately the classic read, work, write:
 * separate steps, as in findById / modify / save. In
 * redis mode they run under the lock of every item of the order (a
 * multi-lock for several), and the read claims each row with its own key's
 * fencing token, so a holder whose lease ran out can never write after a
 * newer holder has started. Each step runs on a service thread; between
 * steps the order waits as memory: for its lock (an asynchronous acquire),
 * its work (a timer, or dlock_sleep_async under a lock, which ends early
 * when the lock is lost), a row lock held elsewhere (--lock db: tried
 * again on a timer), a turn to hold a store connection across its work. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/log.h"
#include "server/service_parts.h"

/* workMs as honoured: only with --allow-work-ms, and capped. */
static int work_ms_of(const service *s, const req_order *r)
{
    if (!s->cfg.allow_work_ms)
        return 0;
    return (int)(r->work_ms < s->cfg.max_work_ms ? r->work_ms : s->cfg.max_work_ms);
}

int service_order_batched(const service *s, const req_order *r)
{
    return s->cfg.lock_mode == SERVICE_LOCK_REDIS && s->queues && work_ms_of(s, r) == 0;
}

static struct order *order_of_task(exec_task *t)
{
    return (struct order *)((char *)t - offsetof(struct order, task));
}

static struct order *order_of_timer(exec_task *t)
{
    return ((struct alone *)((char *)t - offsetof(struct alone, timer.task)))->o;
}

/* o ends with out. */
static void end_with(struct order *o, const service_result *out)
{
    service_keep(&o->res, &o->r, out);
    service_answer(o);
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

/* o's order as written, from the stock its lines found (kept in
 * o->res.remaining by the read) and the tokens they were claimed with. */
static store_new_order new_order_of(struct order *o)
{
    store_new_order n = service_new_order(o->s, &o->r, o->alone->h);
    for (int i = 0; i < o->r.nlines; i++) {
        n.lines[i].fence = o->alone->h ? o->held[i] : (store_fence){0, 0};
        n.lines[i].remaining = o->res.remaining[i] - o->r.lines[i].quantity;
    }
    return n;
}

/* After line i's row refused o's token for a newer one (fences that went
 * back): raises it past the row's, which only a holder o still is in
 * Redis gets (service_raise_fence), the new token in *f and held[i];
 * SERVICE_OK to claim again, or the lock's failure set in out. */
static int raise_past_row(struct order *o, store_conn *c, int i, store_fence *f,
                          service_result *out)
{
    int rc = service_raise_fence(o->s, o->alone->h, o->keys[i], store_stale_token(c));
    if (rc != DLOCK_OK)
        return service_from_lock(o->s, out, rc, o->keys[i], dlock_errstr());
    *f = o->held[i] = service_token_of(o->s, o->alone->h, o->keys[i]);
    return SERVICE_OK;
}

/* The read half, under o's lock (o->alone->h) or none: claims each line's
 * row with its key's token (a row that refuses it for a newer one is
 * claimed once more after a raise), reads its stock into o->res.remaining,
 * then answers a retry of a committed order and refuses a short one.
 * SERVICE_OK to go on, else the outcome set in out. */
static int read_lines(struct order *o, store_conn *c, service_result *out)
{
    const req_order *r = &o->r;
    int64_t *stock = o->res.remaining;
    for (int i = 0; i < r->nlines; i++) {
        int64_t item = r->lines[i].item_id;
        store_fence f = o->held[i] = service_token_of(o->s, o->alone->h, o->keys[i]);
        int rc = f.fence ? store_stock_claim(c, item, &f, &stock[i])
                         : store_stock_read(c, item, &stock[i]);
        if (rc == STORE_ERR_STALE) {
            if (raise_past_row(o, c, i, &f, out) != SERVICE_OK)
                return out->outcome;
            rc = store_stock_claim(c, item, &f, &stock[i]);
        }
        if (rc != STORE_OK)
            return service_from_order_store(out, rc, c, r);
    }
    int rc = service_replayed(c, r, out);
    if (rc != STORE_ERR_NOT_FOUND)
        return service_from_order_store(out, rc, c, r);
    for (int i = 0; i < r->nlines; i++)
        if (stock[i] < r->lines[i].quantity)
            service_add_short(out, r, i, stock[i]);
    return out->nshort ? service_insufficient(out) : SERVICE_OK;
}

/* The write half (its own transaction), once the work is done: out says
 * how it went. */
static void write_lines(struct order *o, service_result *out)
{
    store_conn *c = service_conn_get(o->s, out);
    if (c == NULL)
        return;
    int rc = o->alone->h ? dlock_check(o->alone->h) : DLOCK_OK; /* the last moment to back out */
    if (rc != DLOCK_OK) {
        service_from_lock(o->s, out, rc, o->keys[0], dlock_strerror(rc));
    } else {
        service_fault_point(o->s);
        store_new_order n = new_order_of(o);
        rc = store_tx_begin(c);
        if (rc == STORE_OK)
            rc = write_and_commit(o->s, c, &n, &out->order);
        service_from_order_store(out, rc, c, &o->r);
    }
    store_put(o->s->store, c);
}

/* ---- under the Redis lock ---- */

/* The release of o's lock is done: o is answered now (so that an answer
 * means the lock was let go, as a caller of dlock_run would see it), and a
 * loss after the commit is logged (the answer stands). */
static void locked_released(exec_task *t)
{
    struct order *o = service_lock_call_of(t)->req.data;
    int rc = o->alone->lock.req.rc;
    if (rc != DLOCK_OK && rc != DLOCK_ERR_CLOSED && o->res.outcome == SERVICE_OK) {
        int64_t items[RULE_ORDER_LINES_MAX];
        for (int i = 0; i < o->r.nlines; i++)
            items[i] = o->r.lines[i].item_id;
        service_log_lost_after_commit(o->s, &o->r, 1, items, o->keys, o->held, o->r.nlines,
                                      rc);
    }
    service_answer(o);
}

/* o (holding its lock) ends with out: its lock released without waiting for
 * Redis, then answered. */
static void locked_end(struct order *o, const service_result *out)
{
    service_keep(&o->res, &o->r, out);
    service_lock_release(o->s, &o->alone->lock, o, locked_released, o->alone->h);
}

/* Written under the lock, then released. */
static void locked_write(struct order *o)
{
    service_result out;
    write_lines(o, &out);
    locked_end(o, &out);
}

/* The work's sleep under the lock is over: written, or (the lock was lost,
 * interrupted, or the drain withdrew it) answered why. */
static void locked_worked(exec_task *t)
{
    struct order *o = service_lock_call_of(t)->req.data;
    service_touch(o);
    if (o->alone->lock.req.rc == DLOCK_OK)
        return locked_write(o);
    service_result out;
    service_result_clear(&out);
    service_from_lock(o->s, &out, o->alone->lock.req.rc, o->keys[0], o->alone->lock.req.err);
    locked_end(o, &out);
}

/* o's lock is granted (or could not be had), on a service thread: read,
 * then work (a sleep that holds no thread), then write. */
static void locked_granted(exec_task *t)
{
    struct lock_call *lc = service_lock_call_of(t);
    struct order *o = lc->req.data;
    service *s = o->s;
    service_touch(o);
    o->hops += lc->via_lock_thread;
    service_result out;
    service_result_clear(&out);
    if (lc->req.rc != DLOCK_OK) {
        if (!service_replay_when_locked_out(s, &o->r, &out))
            service_from_lock(s, &out, lc->req.rc, o->r.nlines == 1 ? o->keys[0]
                                                                   : "of the order's items",
                              lc->req.err);
        return end_with(o, &out);
    }
    o->alone->h = lc->req.h;
    if (o->r.nlines > 1)
        metrics_multilock_wait(s->metrics, service_now_ms() - o->alone->lock_asked_ms);
    service_note_redis(s, DLOCK_OK, "");
    store_conn *c = service_conn_get(s, &out);
    int go = c && read_lines(o, c, &out) == SERVICE_OK;
    if (c)
        store_put(s->store, c);
    if (!go)
        return locked_end(o, &out);
    int work = work_ms_of(s, &o->r);
    if (work == 0)
        return locked_write(o);
    int rc = DLOCK_ERR_CANCELLED;
    if (service_lock_begin(s, &o->alone->lock, o, locked_worked, 1))
        rc = dlock_sleep_async(o->alone->h, work, &o->alone->lock.req);
    service_lock_asked(&o->alone->lock, rc); /* not slept: locked_worked answers why */
}

/* Asks for the lock of every line's item, as one. */
static void locked_ask(struct order *o)
{
    service *s = o->s;
    o->alone->lock_asked_ms = service_now_ms();
    int rc = DLOCK_ERR_CANCELLED;
    if (service_lock_begin(s, &o->alone->lock, o, locked_granted, 1))
        rc = o->r.nlines == 1
                 ? dlock_acquire_async(s->locks, o->keys[0], &s->cfg.lock, &o->alone->lock.req)
                 : dlock_acquire_multi_async(s->locks, o->keys, o->r.nlines, &s->cfg.lock,
                                             &o->alone->lock.req);
    service_lock_asked(&o->alone->lock, rc); /* refused at once: locked_granted answers why */
}

/* ---- without a distributed lock ---- */

static void unlocked_write(struct order *o)
{
    service_result out;
    write_lines(o, &out);
    end_with(o, &out);
}

static void unlocked_worked(exec_task *t)
{
    struct order *o = order_of_timer(t);
    service_touch(o);
    unlocked_write(o);
}

/* Mode none: read, work (a timer), write, with nothing between two orders. */
static void unlocked_read(exec_task *t)
{
    struct order *o = order_of_task(t);
    service_touch(o);
    service_result out;
    store_conn *c = service_conn_get(o->s, &out);
    int go = c && read_lines(o, c, &out) == SERVICE_OK;
    if (c)
        store_put(o->s->store, c);
    if (!go)
        return end_with(o, &out);
    int work = work_ms_of(o->s, &o->r);
    if (work == 0)
        return unlocked_write(o);
    exec_timer_start(o->s->work, &o->alone->timer, service_now_ms() + work, unlocked_worked);
}

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
    if (rc == STORE_OK && out->nshort && r->has_request_id) {
        /* a take that waited for another transaction's row lock, maybe
         * this very request's first try committing: a retry is answered by
         * its order, not refused for the stock it took itself */
        int again = service_replayed(c, r, out);
        if (again != STORE_ERR_NOT_FOUND) {
            store_tx_abort(c);
            out->nshort = 0;
            service_from_order_store(out, again, c, r);
            return;
        }
    }
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

static void atomic_task(exec_task *t)
{
    struct order *o = order_of_task(t);
    service_touch(o);
    service_result out;
    store_conn *c = service_conn_get(o->s, &out);
    if (c) {
        deduct_atomically(o->s, c, &o->r, &out);
        store_put(o->s->store, c);
    }
    end_with(o, &out);
}

/* ---- mode db: the rows' own locks ---- */

static void rows_try(exec_task *t);
static exec_fn rows_retry_fn;

/* o gives back its turn to hold a connection: the next waiting gets it. */
static void hold_end(struct order *o)
{
    service *s = o->s;
    if (!o->alone->holding)
        return;
    o->alone->holding = 0;
    pthread_mutex_lock(&s->mu);
    struct order *next = s->hold_head;
    if (next && (s->hold_head = next->next) == NULL)
        s->hold_tail = NULL;
    int disarmed = 0;
    if (next) { /* our turn passes on, all under mu: its deadline's handler looks */
        next->alone->waiting_turn = 0;
        next->alone->holding = 1;
        disarmed = exec_timer_stop(s->work, &next->alone->timer);
    } else {
        s->holds--;
    }
    pthread_mutex_unlock(&s->mu);
    /* disarmed: its turn runs now; else its deadline's handler, queued, runs it (and
     * next, which it may end, is not ours to touch any more) */
    if (disarmed)
        exec_post(s->work, &next->task, rows_try);
}

/* A turn did not come within the busy timeout. */
static void hold_timed_out(exec_task *t)
{
    struct order *o = order_of_timer(t);
    service *s = o->s;
    pthread_mutex_lock(&s->mu);
    int waiting = o->alone->waiting_turn;
    struct order **p = &s->hold_head, *prev = NULL;
    while (waiting && *p != o)
        prev = *p, p = &(*p)->next;
    if (waiting) {
        *p = o->next;
        if (s->hold_tail == o)
            s->hold_tail = prev;
        o->alone->waiting_turn = 0;
    }
    pthread_mutex_unlock(&s->mu);
    if (!waiting) { /* a turn came as the deadline did: it is ours */
        exec_post(s->work, &o->task, rows_try);
        return;
    }
    service_result out;
    service_result_clear(&out);
    service_fail(&out, SERVICE_STORAGE_BUSY, "database busy: all %d connections stayed in use "
                 "for %d ms", s->cfg.store.pool_size, s->cfg.store.busy_timeout_ms);
    end_with(o, &out);
}

/* A turn to hold a store connection across the work (the pool keeps one a
 * service thread, so a thread never waits for one; the rest is for
 * holders): 1 when o has one, 0 when it waits for one as memory (rows_try
 * runs again once it comes; at the busy timeout, o is answered). */
static int hold_begin(struct order *o)
{
    service *s = o->s;
    if (o->alone->holding)
        return 1;
    pthread_mutex_lock(&s->mu);
    int now = s->holds < s->holds_max;
    if (now) {
        s->holds++;
        o->alone->holding = 1;
    } else {
        o->next = NULL, o->alone->waiting_turn = 1;
        if (s->hold_tail)
            s->hold_tail->next = o;
        else
            s->hold_head = o;
        s->hold_tail = o;
        exec_timer_start(s->work, &o->alone->timer,
                         service_now_ms() + s->cfg.store.busy_timeout_ms, hold_timed_out);
    }
    pthread_mutex_unlock(&s->mu);
    return now;
}

/* The work is done, the rows' locks held all along: written, committed. */
static void rows_write(struct order *o)
{
    struct alone *a = o->alone;
    service_result out;
    service_result_clear(&out);
    service_fault_point(o->s);
    store_new_order n = new_order_of(o);
    service_from_order_store(&out, write_and_commit(o->s, a->c, &n, &out.order), a->c, &o->r);
    store_put(o->s->store, a->c);
    a->c = NULL;
    hold_end(o);
    end_with(o, &out);
}

static void rows_worked(exec_task *t)
{
    struct order *o = order_of_timer(t);
    service_touch(o);
    rows_write(o);
}

/* Locks every line's row (SELECT ... FOR UPDATE, in item order) without
 * waiting: STORE_OK, STORE_ERR_LOCK_TIMEOUT when one is held elsewhere, or
 * a failure. */
static int lock_rows(store_conn *c, const req_order *r, int64_t *stock)
{
    int idx[RULE_ORDER_LINES_MAX];
    by_item(r, idx);
    int rc = store_tx_begin(c);
    for (int k = 0; rc == STORE_OK && k < r->nlines; k++)
        rc = store_tx_lock_stock(c, r->lines[idx[k]].item_id, 0, &stock[idx[k]]);
    return rc;
}

/* Mode db: read, work, write inside one transaction that holds the rows'
 * locks from the read on. A row held by another transaction is not waited
 * for on a thread: the order tries again on a timer (a pause growing to
 * retry_ms) until --wait-ms (then 503 lock_timeout). The database's lock,
 * for comparison with the Redis one. */
static void rows_step(struct order *o)
{
    service *s = o->s;
    service_touch(o);
    service_result out;
    if (atomic_load(&s->commits_refused)) { /* the drain: no commit could follow */
        service_result_clear(&out);
        service_fail(&out, SERVICE_SHUTTING_DOWN, "server is shutting down; nothing deducted");
        hold_end(o);
        return end_with(o, &out);
    }
    int work = work_ms_of(s, &o->r);
    if (work > 0 && !hold_begin(o))
        return;
    store_conn *c = service_conn_get(s, &out);
    int rc = c ? lock_rows(c, &o->r, o->res.remaining) : STORE_OK;
    if (c && rc == STORE_ERR_LOCK_TIMEOUT) {
        store_put(s->store, c);
        int64_t now = service_now_ms();
        if (now < o->alone->deadline_ms) {
            int pause = 1 << (o->alone->tries < 7 ? o->alone->tries++ : 7);
            pause = pause < s->cfg.lock.retry_ms ? pause : s->cfg.lock.retry_ms;
            /* the last try at --wait-ms, not a pause past it */
            int64_t at = now + pause < o->alone->deadline_ms ? now + pause : o->alone->deadline_ms;
            exec_timer_start(s->work, &o->alone->timer, at, rows_retry_fn);
            return;
        }
        service_fail(&out, SERVICE_LOCK_TIMEOUT, "the rows of the order's items stayed locked "
                     "for %d ms; try again", s->cfg.lock.wait_ms);
        hold_end(o);
        return end_with(o, &out);
    }
    /* committed while we waited for the rows: its first answer */
    if (c && rc == STORE_OK && (rc = service_replayed(c, &o->r, &out)) == STORE_ERR_NOT_FOUND)
        rc = STORE_OK;
    if (c && rc != STORE_OK)
        service_from_order_store(&out, rc, c, &o->r);
    for (int i = 0; c && rc == STORE_OK && i < o->r.nlines; i++)
        if (o->res.remaining[i] < o->r.lines[i].quantity)
            service_add_short(&out, &o->r, i, o->res.remaining[i]);
    if (c && rc == STORE_OK && out.nshort)
        service_insufficient(&out);
    if (c == NULL || rc != STORE_OK || out.nshort) {
        if (c)
            store_put(s->store, c); /* rolls back */
        hold_end(o);
        return end_with(o, &out);
    }
    o->alone->c = c; /* held, with its rows' locks, across the work */
    if (work == 0)
        return rows_write(o);
    exec_timer_start(s->work, &o->alone->timer, service_now_ms() + work, rows_worked);
}

static void rows_try(exec_task *t) { rows_step(order_of_task(t)); }
static void rows_retry_fn(exec_task *t) { rows_step(order_of_timer(t)); }

void service_order_alone(struct order *o)
{
    service *s = o->s;
    o->alone->deadline_ms = service_now_ms() + s->cfg.lock.wait_ms;
    switch (s->cfg.lock_mode) {
    case SERVICE_LOCK_REDIS: locked_ask(o); break;
    case SERVICE_LOCK_NONE: exec_post(s->work, &o->task, unlocked_read); break;
    case SERVICE_LOCK_DB: exec_post(s->work, &o->task, rows_try); break;
    default: exec_post(s->work, &o->task, atomic_task); break;
    }
}
