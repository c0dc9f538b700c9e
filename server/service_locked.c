/* service_locked.c - one store transaction under the locks of its items,
 * in every lock mode: what a stock set, a reservation's making, confirm
 * and cancel, an order's cancel and a pass of the expiry sweep share.
 * First a read on a service thread (which items; whether there is anything
 * to do), then the items' locks (redis mode: one key, or a multi-lock of
 * the keys service_lock_key makes, asked asynchronously and registered so
 * that the drain withdraws the wait), then the caller's last check if it
 * has one, then one transaction: each item's row claimed with its key's
 * fencing token (mode db: its row lock, had without waiting, else tried
 * again on a timer until --wait-ms), the caller's write, a commit the drain
 * may veto; a claim refused for a newer token raises the key's fence and
 * runs it again; then the release, then the caller's end. Nothing waits
 * as a thread. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "server/service_parts.h"

void service_locked_add(struct locked *w, int64_t item)
{
    int i = w->n;
    for (int j = 0; j < w->n; j++)
        if (w->items[j] == item)
            return;
    /* in id order: rows are claimed (and in mode db locked) in one order
     * everywhere, so that two writes never wait for each other in a circle */
    for (; i > 0 && w->items[i - 1] > item; i--)
        w->items[i] = w->items[i - 1];
    w->items[i] = item;
    w->n++;
}

const store_fence *service_locked_fence(const struct locked *w, int64_t item)
{
    for (int i = 0; i < w->n; i++)
        if (w->items[i] == item)
            return w->held[i].fence ? &w->held[i] : NULL;
    return NULL;
}

/* The transaction: claims, the caller's write, the commit. STORE_OK, or
 * what failed (rolled back); a claim refused for a newer token leaves its
 * item's index in *stale_at. */
static int run_tx(struct locked *w, store_conn *c, int *stale_at)
{
    service *s = w->s;
    store_commit_check check = {service_commits_allowed, s};
    int rc = store_tx_begin(c);
    for (int i = 0; rc == STORE_OK && i < w->n; i++) {
        int64_t stock;
        w->held[i] = service_token_of(s, w->h, w->keys[i]);
        if (w->held[i].fence)
            rc = store_stock_claim(c, w->items[i], &w->held[i], &stock);
        else if (s->cfg.lock_mode == SERVICE_LOCK_DB)
            rc = store_tx_lock_stock(c, w->items[i], 0, &stock);
        if (rc == STORE_ERR_STALE)
            *stale_at = i;
    }
    if (rc == STORE_OK)
        rc = w->ops->write(w, c);
    if (rc == STORE_OK)
        return store_tx_commit(c, &check);
    store_tx_abort(c);
    return rc;
}

static void locked_retry(exec_task *t);

/* A row held elsewhere (mode db): 1 when another try is armed, else 0 with
 * the answer in w->out (past --wait-ms, or the drain). */
static int try_again(struct locked *w)
{
    service *s = w->s;
    int64_t now = service_now_ms();
    if (now < w->deadline_ms && !atomic_load(&s->commits_refused)) {
        int pause = 1 << (w->tries < 7 ? w->tries++ : 7);
        pause = pause < s->cfg.lock.retry_ms ? pause : s->cfg.lock.retry_ms;
        /* the last try at --wait-ms, not a pause past it */
        int64_t at = now + pause < w->deadline_ms ? now + pause : w->deadline_ms;
        exec_timer_start(s->work, &w->timer, at, locked_retry);
        return 1;
    }
    service_fail(&w->out, SERVICE_LOCK_TIMEOUT, "the rows of the items stayed locked for %d "
                 "ms; try again", s->cfg.lock.wait_ms);
    return 0;
}

/* A store connection, or NULL with why in w->out (service_conn_get would
 * clear what w->out holds already: a prepare's read). */
static store_conn *conn_of(struct locked *w)
{
    char err[256];
    store_conn *c;
    int rc = store_get(w->s->store, &c, err, sizeof(err));
    if (rc != STORE_OK)
        service_from_store_text(&w->out, rc, err);
    return rc == STORE_OK ? c : NULL;
}

/* The write, under the locks: 0 with the answer in w->out, or 1 when it is
 * to be tried again (mode db, on a timer). */
static int locked_write(struct locked *w)
{
    service *s = w->s;
    if (w->ops->ready && w->ops->ready(w) != SERVICE_OK)
        return 0;
    store_conn *c = conn_of(w);
    if (c == NULL)
        return 0;
    int stale_at = -1;
    int rc = run_tx(w, c, &stale_at);
    if (rc == STORE_ERR_LOCK_TIMEOUT) {
        store_put(s->store, c);
        return try_again(w);
    }
    for (int tries = 0; rc == STORE_ERR_STALE && stale_at >= 0 && w->h && tries < w->n;
         tries++) {
        /* fences went back, perhaps: raised past the row's while the lock is
         * still ours (as for an order's claim), then claimed once more; once
         * an item at most, as each key's fence may have gone back */
        const char *key = w->keys[stale_at];
        int lock_rc = service_raise_fence(s, w->h, key, store_stale_token(c));
        if (lock_rc != DLOCK_OK) {
            service_from_lock(s, &w->out, lock_rc, key, dlock_errstr());
            store_put(s->store, c);
            return 0;
        }
        stale_at = -1;
        rc = run_tx(w, c, &stale_at);
    }
    w->ops->result(w, rc, c);
    store_put(s->store, c);
    return 0;
}

static void locked_released(exec_task *t)
{
    struct locked *w = service_lock_call_of(t)->req.data;
    int rc = w->lock.req.rc;
    if (rc != DLOCK_OK && rc != DLOCK_ERR_CLOSED &&
        (w->out.outcome == SERVICE_OK || w->out.outcome == SERVICE_REPLAYED))
        service_log_lost_after_commit(w->s, NULL, 1, w->items, w->keys, w->held, w->n, rc);
    w->ops->end(w);
}

/* The write is over: its locks (if any) released, then it is ended. */
static void locked_finish(struct locked *w)
{
    if (w->h == NULL)
        w->ops->end(w);
    else
        service_lock_release(w->s, &w->lock, w, locked_released, w->h);
}

static void locked_granted(exec_task *t)
{
    struct locked *w = service_lock_call_of(t)->req.data;
    service *s = w->s;
    if (w->lock.req.rc != DLOCK_OK) {
        service_from_lock(s, &w->out, w->lock.req.rc, w->n == 1 ? w->keys[0] : "of the items",
                          w->lock.req.err);
    } else {
        w->h = w->lock.req.h;
        if (w->n > 1)
            metrics_multilock_wait(s->metrics, service_now_ms() - w->asked_ms);
        service_note_redis(s, DLOCK_OK, "");
        if (locked_write(w))
            return; /* tried again on a timer */
    }
    locked_finish(w);
}

/* Its items' locks asked for, as one. */
static void locked_ask(struct locked *w)
{
    service *s = w->s;
    w->asked_ms = service_now_ms();
    int rc = DLOCK_ERR_CANCELLED;
    if (service_lock_begin(s, &w->lock, w, locked_granted, 1))
        rc = w->n == 1 ? dlock_acquire_async(s->locks, w->keys[0], &s->cfg.lock, &w->lock.req)
                       : dlock_acquire_multi_async(s->locks, w->keys, w->n, &s->cfg.lock,
                                                   &w->lock.req);
    service_lock_asked(&w->lock, rc); /* refused at once: locked_granted answers why */
}

/* The read before any lock: an item or reservation or order that does not
 * exist is answered here, and its lock never touches Redis. */
static void locked_prepare(exec_task *t)
{
    struct locked *w = (struct locked *)((char *)t - offsetof(struct locked, task));
    service *s = w->s;
    store_conn *c = conn_of(w);
    if (c == NULL)
        return w->ops->end(w);
    w->ops->prepare(w, c);
    store_put(s->store, c);
    if (w->out.outcome != SERVICE_OK || w->n == 0)
        return w->ops->end(w);
    for (int i = 0; i < w->n; i++) {
        service_lock_key(s->cfg.lock_prefix, w->items[i], w->key[i]);
        w->keys[i] = w->key[i];
    }
    if (s->cfg.lock_mode == SERVICE_LOCK_REDIS)
        return locked_ask(w);
    w->deadline_ms = service_now_ms() + s->cfg.lock.wait_ms;
    if (locked_write(w) == 0)
        locked_finish(w);
}

static void locked_retry(exec_task *t)
{
    struct locked *w = (struct locked *)((char *)t - offsetof(struct locked, timer.task));
    if (locked_write(w) == 0)
        locked_finish(w);
}

void service_locked_start(struct locked *w)
{
    w->t0_us = service_now_us();
    exec_post(w->s->work, &w->task, locked_prepare);
}
