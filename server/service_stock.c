/* service_stock.c - an item's stock set (PUT /items/{id}): the item must
 * exist (else 404, and its lock never touches Redis); then, in redis mode,
 * the stock is written under the item's lock, fenced with its token, so a
 * restock never interleaves with a deduction; in db mode, in a transaction
 * holding the row's lock, had without waiting (held elsewhere: tried again
 * on a timer until --wait-ms). Each step on a service thread; every wait
 * (the lock, the row) as memory. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "server/service_parts.h"

/* The stock's write: fenced (f) under the lock, or in db mode in a
 * transaction that takes the row's lock without waiting for it; the item
 * as written into ss->out, read inside the transaction (a session lost
 * once COMMIT answered must not turn what committed into a failure).
 * STORE_OK, STORE_ERR_LOCK_TIMEOUT (db mode: the row is held elsewhere), or
 * a failure. */
static int write_stock(struct stock_set *ss, store_conn *c, const store_fence *f)
{
    store_commit_check check = {service_commits_allowed, ss->s};
    if (ss->s->cfg.lock_mode != SERVICE_LOCK_DB)
        return store_item_set_stock(c, ss->item, ss->stock, -1, f, &check, &ss->out.item);
    int64_t was;
    int rc = store_tx_begin(c);
    if (rc == STORE_OK)
        rc = store_tx_lock_stock(c, ss->item, 0, &was);
    if (rc == STORE_OK)
        rc = store_tx_set_stock(c, ss->item, ss->stock, NULL);
    if (rc == STORE_OK)
        rc = store_item_get(c, ss->item, &ss->out.item);
    if (rc == STORE_OK)
        return store_tx_commit(c, &check);
    store_tx_abort(c);
    return rc;
}

static void stock_retry(exec_task *t);

/* A row held elsewhere (db mode): 1 when another try is armed, else 0 with
 * the answer in out (past --wait-ms, or the drain). */
static int try_again(struct stock_set *ss)
{
    service *s = ss->s;
    int64_t now = service_now_ms();
    if (now < ss->deadline_ms && !atomic_load(&s->commits_refused)) {
        int pause = 1 << (ss->tries < 7 ? ss->tries++ : 7);
        pause = pause < s->cfg.lock.retry_ms ? pause : s->cfg.lock.retry_ms;
        /* the last try at --wait-ms, not a pause past it */
        int64_t at = now + pause < ss->deadline_ms ? now + pause : ss->deadline_ms;
        exec_timer_start(s->work, &ss->timer, at, stock_retry);
        return 1;
    }
    service_fail(&ss->out, SERVICE_LOCK_TIMEOUT, "the row of item %lld stayed locked for %d ms; "
                 "try again", (long long)ss->item, s->cfg.lock.wait_ms);
    return 0;
}

/* The stock written, with the item as written: 0 with the answer in
 * ss->out, or 1 when it is to be tried again (db mode, on a timer). */
static int stock_write(struct stock_set *ss)
{
    service *s = ss->s;
    service_result *out = &ss->out;
    store_conn *c = service_conn_get(s, out);
    if (c == NULL)
        return 0;
    store_fence f = ss->held = service_token_of(s, ss->h, ss->key);
    int rc = write_stock(ss, c, f.fence ? &f : NULL);
    if (rc == STORE_ERR_LOCK_TIMEOUT) {
        store_put(s->store, c);
        return try_again(ss);
    }
    if (rc == STORE_ERR_STALE) { /* fences went back, perhaps: as for an order's claim */
        int lock_rc = service_raise_fence(s, ss->h, ss->key, store_stale_token(c));
        if (lock_rc != DLOCK_OK) {
            service_from_lock(s, out, lock_rc, ss->key, dlock_errstr());
            store_put(s->store, c);
            return 0;
        }
        f = ss->held = service_token_of(s, ss->h, ss->key);
        rc = write_stock(ss, c, &f);
    }
    service_from_order_store(out, rc, c, NULL);
    if (out->outcome == SERVICE_COMMIT_UNKNOWN) /* no requestId to retry with */
        service_fail(out, SERVICE_COMMIT_UNKNOWN, "%s; the stock may have been set: GET "
                     "/items/%lld shows it, or set it again", store_errstr(c),
                     (long long)ss->item);
    store_put(s->store, c);
    return 0;
}

/* The stock set is answered (and logged). */
static void stock_answer(struct stock_set *ss)
{
    service *s = ss->s;
    service_note_space(s, ss->out.outcome, 1);
    service_log_stock_set(s, ss->item, ss->stock, ss->who, &ss->out, &ss->held, ss->t0_us);
    ss->done(&ss->out, ss->arg);
    free(ss);
}

static void stock_released(exec_task *t)
{
    struct stock_set *ss = service_lock_call_of(t)->req.data;
    int rc = ss->lock.req.rc;
    if (rc != DLOCK_OK && rc != DLOCK_ERR_CLOSED && ss->out.outcome == SERVICE_OK) {
        req_order r = {.nlines = 1, .lines = {{ss->item, 0}}};
        const char *keys[1] = {ss->key};
        service_log_lost_after_commit(ss->s, &r, 1, &ss->item, keys, &ss->held, 1, rc);
    }
    stock_answer(ss);
}

/* The stock set is over: its lock (if any) released, then it is answered. */
static void stock_end(struct stock_set *ss)
{
    if (ss->h == NULL)
        stock_answer(ss);
    else
        service_lock_release(ss->s, &ss->lock, ss, stock_released, ss->h);
}

static void stock_granted(exec_task *t)
{
    struct stock_set *ss = service_lock_call_of(t)->req.data;
    if (ss->lock.req.rc != DLOCK_OK) {
        service_from_lock(ss->s, &ss->out, ss->lock.req.rc, ss->key, ss->lock.req.err);
    } else {
        ss->h = ss->lock.req.h;
        service_note_redis(ss->s, DLOCK_OK, "");
        if (stock_write(ss))
            return; /* tried again on a timer (a row held elsewhere) */
    }
    stock_end(ss);
}

/* The item exists (else 404, and its lock never touches Redis); then the
 * stock is set under its lock (redis mode), so it never interleaves with a
 * deduction. */
static void stock_check(exec_task *t)
{
    struct stock_set *ss = (struct stock_set *)((char *)t - offsetof(struct stock_set, task));
    service *s = ss->s;
    int64_t stock;
    store_conn *c = service_conn_get(s, &ss->out);
    int rc = c ? store_stock_read(c, ss->item, &stock) : STORE_OK;
    if (c) {
        service_from_order_store(&ss->out, rc, c, NULL);
        store_put(s->store, c);
    }
    if (ss->out.outcome != SERVICE_OK)
        return stock_end(ss);
    if (s->cfg.lock_mode != SERVICE_LOCK_REDIS) {
        ss->deadline_ms = service_now_ms() + s->cfg.lock.wait_ms;
        if (stock_write(ss) == 0)
            stock_end(ss);
        return;
    }
    rc = DLOCK_ERR_CANCELLED;
    if (service_lock_begin(s, &ss->lock, ss, stock_granted, 1))
        rc = dlock_acquire_async(s->locks, ss->key, &s->cfg.lock, &ss->lock.req);
    service_lock_asked(&ss->lock, rc); /* refused at once: stock_granted answers why */
}

static void stock_retry(exec_task *t)
{
    struct stock_set *ss = (struct stock_set *)((char *)t - offsetof(struct stock_set,
                                                                     timer.task));
    if (stock_write(ss) == 0)
        stock_end(ss);
}

void service_stock_set(struct stock_set *ss)
{
    service_lock_key(ss->s->cfg.lock_prefix, ss->item, ss->key);
    exec_post(ss->s->work, &ss->task, stock_check);
}
