/* service_stock.c - an item's stock set (PUT /items/{id}): the item must
 * exist (else 404, and its lock never touches Redis); then, in redis mode,
 * the stock is written under the item's lock, fenced with its token, so a
 * restock never interleaves with a deduction. Each step on a service
 * thread; the lock waited for as memory. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "server/service_parts.h"

/* The stock written (fenced under the lock), and the item read back. */
static void stock_write(struct stock_set *ss)
{
    service *s = ss->s;
    service_result *out = &ss->out;
    store_conn *c = service_conn_get(s, out);
    if (c == NULL)
        return;
    store_commit_check check = {service_commits_allowed, s};
    store_fence f = ss->held = service_token_of(s, ss->h, ss->key);
    int rc = store_item_set_stock(c, ss->item, ss->stock, f.fence ? &f : NULL, &check);
    if (rc == STORE_ERR_STALE) { /* fences went back, perhaps: as for an order's claim */
        int lock_rc = service_raise_fence(s, ss->h, ss->key, store_stale_token(c));
        if (lock_rc != DLOCK_OK) {
            service_from_lock(s, out, lock_rc, ss->key, dlock_errstr());
            store_put(s->store, c);
            return;
        }
        f = ss->held = service_token_of(s, ss->h, ss->key);
        rc = store_item_set_stock(c, ss->item, ss->stock, &f, &check);
    }
    if (rc == STORE_OK)
        rc = store_item_get(c, ss->item, &out->item);
    service_from_order_store(out, rc, c, NULL);
    if (out->outcome == SERVICE_COMMIT_UNKNOWN) /* no requestId to retry with */
        service_fail(out, SERVICE_COMMIT_UNKNOWN, "%s; the stock may have been set: GET "
                     "/items/%lld shows it, or set it again", store_errstr(c),
                     (long long)ss->item);
    store_put(s->store, c);
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
        stock_write(ss);
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
        stock_write(ss);
        return stock_end(ss);
    }
    rc = DLOCK_ERR_CANCELLED;
    if (service_lock_begin(s, &ss->lock, ss, stock_granted, 1))
        rc = dlock_acquire_async(s->locks, ss->key, &s->cfg.lock, &ss->lock.req);
    service_lock_asked(&ss->lock, rc); /* refused at once: stock_granted answers why */
}

void service_stock_set(struct stock_set *ss)
{
    service_lock_key(ss->s->cfg.lock_prefix, ss->item, ss->key);
    exec_post(ss->s->work, &ss->task, stock_check);
}
