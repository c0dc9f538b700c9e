/* service_write.c - what writing an order needs, for an order placed alone
 * (service_order.c) and for group commit (service_batch.c): the order as
 * written, a retry's first answer, the tokens a lock holds and their raise
 * past a row's, the drain's commit check, the test-only fault point, and a
 * lock's asynchronous call (registered while in flight, so that the drain
 * can withdraw it; ended on a service thread). Below both. */
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "server/log.h"
#include "server/service_parts.h"

/* Asked by the store inside a write's transaction, once it holds the write
 * lock: a wait for it (up to --busy-timeout-ms) may have outlasted the drain
 * deadline, after which the answer could not be sent. */
int service_commits_allowed(void *arg)
{
    service *s = arg;
    return !atomic_load(&s->commits_refused);
}

/* The test-only fault (--test-stop-before-write): the process stops itself
 * once, after the holder's last check and before its write, the window no
 * lease check can cover. */
void service_fault_point(service *s)
{
    if (s->cfg.stop_before_write && atomic_exchange(&s->stopped_once, 1) == 0) {
        log_event(LOG_WARN, "test fault: stopping before the write", NULL, 0);
        raise(SIGSTOP);
    }
}

store_fence service_token_of(const service *s, dlock_handle *h, const char *key)
{
    store_fence f = {0, 0};
    for (int i = 0; h && s->cfg.fencing && i < dlock_key_count(h); i++)
        if (strcmp(dlock_key_at(h, i), key) == 0)
            f.fence = dlock_fence_at(h, i), f.seq = dlock_handoff_seq_at(h, i);
    return f;
}

int service_raise_fence(service *s, dlock_handle *h, const char *key, store_fence row)
{
    int i = 0, n = dlock_key_count(h);
    while (i < n && strcmp(dlock_key_at(h, i), key) != 0)
        i++;
    if (i == n || !s->cfg.fencing) /* no token of h was refused: callers never ask so */
        return DLOCK_ERR_INVALID;
    int64_t was = dlock_fence_at(h, i);
    int rc = dlock_fence_raise_at(h, i, row.fence);
    service_log_fence_raise(s, key, row, was, dlock_fence_at(h, i), rc);
    return rc;
}

store_conn *service_conn_get(service *s, service_result *out)
{
    char err[256];
    store_conn *c;
    service_result_clear(out);
    service_from_store_text(out, store_get(s->store, &c, err, sizeof(err)), err);
    return c;
}

int service_replay_when_locked_out(service *s, const req_order *r, service_result *out)
{
    if (!r->has_request_id)
        return 0;
    char err[256];
    store_conn *c;
    service_result first;
    service_result_clear(&first);
    if (store_get(s->store, &c, err, sizeof(err)) != STORE_OK)
        return 0;
    int replay = service_replayed(c, r, &first) == STORE_ERR_DUPLICATE &&
                 service_from_order_store(&first, STORE_ERR_DUPLICATE, c, r) == SERVICE_REPLAYED;
    store_put(s->store, c);
    if (replay)
        *out = first;
    return replay;
}

store_new_order service_new_order(const service *s, const req_order *r, dlock_handle *h)
{
    store_new_order o = {
        .request_id = r->has_request_id ? r->request_id : NULL,
        .buyer_id = r->has_buyer_id ? r->buyer_id : NULL, .instance = s->cfg.instance_id,
        .lock_mode = service_lock_mode_names[s->cfg.lock_mode],
        .lock_token = h ? dlock_token(h) : NULL, .nlines = r->nlines};
    for (int i = 0; i < r->nlines; i++)
        o.lines[i] = (store_line){r->lines[i].item_id, r->lines[i].quantity, 0, {0, 0}};
    return o;
}

int service_replayed(store_conn *c, const req_order *r, service_result *out)
{
    if (!r->has_request_id)
        return STORE_ERR_NOT_FOUND;
    int rc = store_order_by_request(c, r->request_id, &out->order);
    return rc == STORE_OK ? STORE_ERR_DUPLICATE : rc;
}

/* ---- a lock's asynchronous calls ---- */

static struct lock_call *call_of_req(dlock_req *req)
{
    return (struct lock_call *)((char *)req - offsetof(struct lock_call, req));
}

struct lock_call *service_lock_call_of(exec_task *t)
{
    return (struct lock_call *)((char *)t - offsetof(struct lock_call, task));
}

/* Takes lc out of the calls registered (the service's mu held). */
static void unlink_call(struct lock_call *lc)
{
    service *s = lc->s;
    if (!lc->registered)
        return;
    if (lc->prev)
        lc->prev->next = lc->next;
    else
        s->waits = lc->next;
    if (lc->next)
        lc->next->prev = lc->prev;
    lc->registered = 0;
}

static void unregister(struct lock_call *lc)
{
    pthread_mutex_lock(&lc->s->mu);
    unlink_call(lc);
    pthread_mutex_unlock(&lc->s->mu);
}

/* req.done: the call's end, on a service thread (or, for a call the lock
 * client's close ends, on the closing thread). */
static void lock_call_done(dlock_req *req)
{
    struct lock_call *lc = call_of_req(req);
    unregister(lc);
    lc->then(&lc->task);
}

static void lock_call_run(exec_task *t) { lock_call_done(&service_lock_call_of(t)->req); }

void service_lock_post(void *ctx, dlock_req *req)
{
    service *s = ctx;
    struct lock_call *lc = call_of_req(req);
    lc->via_lock_thread = !exec_on(s->work); /* else a hand-off, on our own thread */
    exec_post(s->work, &lc->task, lock_call_run);
}

int service_lock_begin(service *s, struct lock_call *lc, void *data, exec_fn *then,
                       int refusable)
{
    lc->s = s;
    lc->req.done = lock_call_done;
    lc->req.data = data;
    lc->then = then;
    lc->via_lock_thread = 0;
    pthread_mutex_lock(&s->mu);
    if (refusable && atomic_load(&s->commits_refused))
        return 0;
    lc->prev = NULL;
    lc->next = s->waits;
    if (s->waits)
        s->waits->prev = lc;
    s->waits = lc;
    lc->registered = 1;
    return 1;
}

void service_lock_asked(struct lock_call *lc, int rc)
{
    service *s = lc->s;
    dlock_req *req = &lc->req;
    if (rc != DLOCK_OK) { /* it never began: then runs with why */
        unlink_call(lc);  /* under mu still: the drain finds no call not asked */
        req->rc = rc, req->h = NULL;
        snprintf(req->err, sizeof(req->err), "%s",
                 rc == DLOCK_ERR_CANCELLED ? "server is shutting down" : dlock_errstr());
    }
    pthread_mutex_unlock(&s->mu);
    if (rc != DLOCK_OK)
        exec_post(s->work, &lc->task, lc->then);
}

void service_lock_release(service *s, struct lock_call *lc, void *data, exec_fn *then,
                          dlock_handle *h)
{
    service_lock_begin(s, lc, data, then, 0); /* a release is never refused */
    if (h) { /* (with none, libdlock would run done inside the call, under mu) */
        dlock_release_async(h, &lc->req);
        service_lock_asked(lc, DLOCK_OK);
        return;
    }
    unlink_call(lc); /* nothing to release: then runs with DLOCK_OK all the same */
    pthread_mutex_unlock(&s->mu);
    lc->req.rc = DLOCK_OK, lc->req.h = NULL, lc->req.err[0] = '\0';
    exec_post(s->work, &lc->task, then);
}

void service_waits_cancel(service *s)
{
    pthread_mutex_lock(&s->mu);
    for (struct lock_call *lc = s->waits; lc; lc = lc->next)
        dlock_cancel(&lc->req); /* a release is not withdrawn: it goes on */
    pthread_mutex_unlock(&s->mu);
}

