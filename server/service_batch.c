/* service_batch.c - group commit, redis mode's usual path. Two levels:
 * orders queue per item (or, for carts, in one queue for orders of several
 * items), and one leader serves a queue's batch under one lock hold; then
 * the batches of the whole process queue once more, for a transaction of
 * their own: one commit (one fsync) for the batches of every item that was
 * ready meanwhile. Each batch keeps its own lock and fences: its lock is
 * checked just before the commit and its rows are claimed with its tokens,
 * and a batch whose lock was lost is answered with that and left out. Each
 * order is written behind a savepoint: one that fails is undone alone. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lock/dlock_async.h"
#include "server/service_parts.h"

#define BATCH_MAX 64   /* orders in one item's (or the carts') batch */
#define COMMIT_MAX 64  /* batches in one transaction */
#define CART_QUEUE 0   /* the queue of orders of several items (items are >= 1) */
#define COMMIT_QUEUE -1 /* the queue of batches waiting for a transaction */

/* The items a batch touches (the union of its orders' lines), each with its
 * lock key, its token and the stock left as the batch goes. */
struct batch_items {
    int n;
    int64_t id[DLOCK_MULTI_MAX];
    char key[DLOCK_MULTI_MAX][DLOCK_KEY_MAX + 1];
    store_fence fence[DLOCK_MULTI_MAX];
    store_fence refused[DLOCK_MULTI_MAX]; /* the row's newer token when it refused ours */
    int64_t stock[DLOCK_MULTI_MAX];
};

/* One leader's batch: its orders, their items and the lock held on them,
 * from the lock to the release (malloc'd: it waits for its transaction as
 * memory, not as a thread). */
struct batch {
    service *s;
    int64_t queue; /* the orders' queue: an item's id, or CART_QUEUE */
    dlock_handle *h;
    struct batch_items u;
    batch_job *jobs[BATCH_MAX];
    int n;
    int out;    /* answered (its lock failed): left out of the transaction */
    int stale;  /* rows refused its tokens for newer ones: raise, then try again */
    int raised; /* it was, once: a row that refuses it now is answered so */
    int lock_rc;      /* how asking for its lock went */
    char lock_err[256]; /* ...and why it failed, in words (dlock_errstr on the thread it
                         * failed on) */
    dlock_req lock_req; /* its asynchronous acquire */
    int64_t asked_ms; /* ...asked then */
    batch_job commit; /* its place in the queue of batches waiting for a transaction */
    service_result results[BATCH_MAX]; /* lent to its orders (a waiting order has none) */
};

static struct deduction *job_of(const batch_job *j) { return j->arg; }

static int item_index(const struct batch_items *u, int64_t id)
{
    for (int i = 0; i < u->n; i++)
        if (u->id[i] == id)
            return i;
    return -1;
}

/* batch_take's fits: a job joins when the union of items stays lockable as
 * one (DLOCK_MULTI_MAX keys); its items are added then. */
static int fits_union(const batch_job *job, void *arg)
{
    struct batch_items *u = arg;
    const struct deduction *x = job_of(job);
    int more = 0;
    for (int i = 0; i < x->r->nlines; i++)
        more += item_index(u, x->r->lines[i].item_id) < 0;
    if (u->n + more > DLOCK_MULTI_MAX)
        return 0;
    for (int i = 0; i < x->r->nlines; i++)
        if (item_index(u, x->r->lines[i].item_id) < 0) {
            u->id[u->n] = x->r->lines[i].item_id;
            memcpy(u->key[u->n++], x->keys[i], sizeof(u->key[0]));
        }
    return 1;
}

static void fail_jobs(batch_job **jobs, int n, const service_result *res)
{
    for (int i = 0; i < n; i++)
        if (job_of(jobs[i])->out != res)
            *job_of(jobs[i])->out = *res;
}

/* Answers b with fail and leaves it out of the transaction. */
static void leave_out(struct batch *b, const service_result *fail)
{
    fail_jobs(b->jobs, b->n, fail);
    b->out = 1;
}

/* The transaction was rolled back: every answer of b gets res, except
 * replays of orders committed before it (first_order: its first order, 0
 * when it wrote none), which stay true. (Refusals too: an
 * insufficient_stock or a requestId conflict may have come from an order of
 * this transaction that no longer exists.) */
static void undo_batch(struct batch *b, int64_t first_order, const service_result *res)
{
    for (int i = 0; i < b->n; i++) {
        const service_result *o = job_of(b->jobs[i])->out;
        if (!(o->outcome == SERVICE_REPLAYED &&
              (!first_order || o->order.info.order_id < first_order)))
            *job_of(b->jobs[i])->out = *res;
    }
}

/* One order of batch b, inside the transaction, against the stock left:
 * STORE_OK with x->out saying how it went (placed, replayed, refused), or
 * the store failure that ended it (x->out says that too). */
static int place_job(service *s, store_conn *c, struct batch *b, int64_t *first_order,
                     struct deduction *x)
{
    const req_order *r = x->r;
    struct batch_items *u = &b->u;
    int rc = service_replayed(c, r, x->out);
    if (rc != STORE_ERR_NOT_FOUND) {
        service_from_order_store(x->out, rc, c, r);
        return rc == STORE_ERR_DUPLICATE ? STORE_OK : rc;
    }
    store_new_order o = service_new_order(s, r, b->h);
    for (int i = 0; i < r->nlines; i++) {
        int k = item_index(u, r->lines[i].item_id);
        if (u->stock[k] < r->lines[i].quantity)
            service_add_short(x->out, r, i, u->stock[k]);
        o.lines[i].remaining = u->stock[k] - r->lines[i].quantity;
        o.lines[i].fence = u->fence[k];
    }
    if (x->out->nshort) {
        service_insufficient(x->out);
        return STORE_OK;
    }
    rc = store_tx_add_order(c, &o, &x->out->order);
    if (service_from_order_store(x->out, rc, c, r) != SERVICE_OK)
        return rc == STORE_ERR_DUPLICATE ? STORE_OK : rc;
    for (int i = 0; i < r->nlines; i++)
        u->stock[item_index(u, r->lines[i].item_id)] -= r->lines[i].quantity;
    *first_order = *first_order ? *first_order : x->out->order.info.order_id;
    return STORE_OK;
}

/* The order all or nothing in the shared transaction: a failed statement
 * (a full disk, an I/O error, a constraint) would undo only itself on
 * SQLite, leaving an order without its lines or a cart's first lines, and
 * on PostgreSQL would abort the transaction of every batch. Going back to
 * the savepoint taken before it undoes its writes alone: it answers its
 * failure, the stock left is as before it, and the others still commit.
 * Returns STORE_OK, or the failure of the transaction itself. */
static int apply_job(service *s, store_conn *c, struct batch *b, int64_t *first_order,
                     struct deduction *x)
{
    memset(x->out, 0, sizeof(*x->out));
    int rc = store_tx_savepoint(c);
    if (rc == STORE_OK && place_job(s, c, b, first_order, x) != STORE_OK)
        rc = store_tx_rollback_to_savepoint(c);
    return rc;
}

/* Claims every item of b (each with its own key's token) inside the
 * transaction. STORE_ERR_STALE: a row carries a newer token than ours;
 * until b's fences were raised once, every item is tried, and those whose
 * rows refused get the row's token in u->refused. */
static int claim_items(service *s, store_conn *c, struct batch *b)
{
    struct batch_items *u = &b->u;
    int rc = STORE_OK, stale = 0;
    for (int k = 0; rc == STORE_OK && k < u->n; k++) {
        u->fence[k] = service_token_of(s, b->h, u->key[k]);
        u->refused[k] = (store_fence){0, 0};
        rc = u->fence[k].fence ? store_stock_claim(c, u->id[k], &u->fence[k], &u->stock[k])
                               : store_stock_read(c, u->id[k], &u->stock[k]);
        if (rc == STORE_ERR_STALE && !b->raised) {
            u->refused[k] = store_stale_token(c);
            stale = 1, rc = STORE_OK;
        }
    }
    return rc == STORE_OK && stale ? STORE_ERR_STALE : rc;
}

/* Raises b's fences past the rows that refused them, out of any
 * transaction (service_raise_fence asks Redis), once; a batch whose lock is
 * no longer ours (a stale holder, which fencing exists to refuse) or can't
 * be asked is answered so and left out. */
static void raise_fences(service *s, struct batch *b)
{
    struct batch_items *u = &b->u;
    b->stale = 0, b->raised = 1;
    for (int k = 0; k < u->n; k++) {
        int rc = u->refused[k].fence ? service_raise_fence(s, b->h, u->key[k], u->refused[k])
                                     : DLOCK_OK;
        if (rc != DLOCK_OK) {
            service_result fail = {0};
            service_from_lock(s, &fail, rc, u->key[k]);
            leave_out(b, &fail);
            return;
        }
    }
}

/* Claims b's rows and applies its orders in the transaction open on c:
 * STORE_OK (b may have been left out: fenced out; or marked stale: its
 * fences are to be raised first), or a store error. */
static int apply_batch(service *s, store_conn *c, struct batch *b, int64_t *first_order)
{
    int rc = claim_items(s, c, b);
    if (rc == STORE_ERR_STALE && !b->raised) {
        b->stale = 1; /* none of its orders is applied: the transaction starts again */
        return STORE_OK;
    }
    if (rc == STORE_ERR_STALE) {
        /* None of its orders is written. A claim of another of its rows that
         * did succeed stays, harmlessly: it records a token its lock got. */
        service_result fail = {0};
        service_from_store(&fail, rc, c);
        leave_out(b, &fail);
        return STORE_OK;
    }
    for (int j = 0; rc == STORE_OK && j < b->n; j++)
        rc = apply_job(s, c, b, first_order, job_of(b->jobs[j]));
    return rc;
}

/* Whether every batch's lock still holds, the last moment to back out; a
 * batch whose lock failed is answered so and left out. */
static int locks_hold(service *s, struct batch **bs, int nb)
{
    int all = 1;
    for (int i = 0; i < nb; i++) {
        int rc = bs[i]->out ? DLOCK_OK : dlock_check(bs[i]->h);
        if (rc != DLOCK_OK) {
            service_result fail = {0};
            service_from_lock(s, &fail, rc, bs[i]->u.key[0]);
            leave_out(bs[i], &fail);
            all = 0;
        }
    }
    return all;
}

/* Every batch not left out, in the transaction open on c, then their new
 * stocks: STORE_OK, 1 when a lock failed at the last check (that batch is
 * left out) or a batch is stale (its fences are raised before the next
 * try): roll back and start again; or a store error for all. */
static int apply_batches(service *s, store_conn *c, struct batch **bs, int nb,
                         int64_t *first_order)
{
    int stale = 0;
    for (int i = 0; i < nb; i++) {
        int rc = bs[i]->out ? STORE_OK : apply_batch(s, c, bs[i], first_order);
        if (rc != STORE_OK)
            return rc;
        stale |= bs[i]->stale;
    }
    if (stale)
        return 1;
    if (!locks_hold(s, bs, nb))
        return 1;
    service_fault_point(s);
    for (int i = 0; i < nb; i++) {
        struct batch_items *u = &bs[i]->u;
        for (int k = 0; !bs[i]->out && k < u->n; k++) {
            int rc = store_tx_set_stock(c, u->id[k], u->stock[k],
                                        u->fence[k].fence ? &u->fence[k] : NULL);
            if (rc != STORE_OK)
                return rc;
        }
    }
    return STORE_OK;
}

/* One transaction for the batches: each claims its rows once, checks its
 * orders against the stock left, in arrival order; one commit. A batch
 * whose lock failed is answered so and the transaction is made again
 * without it (rare: a lease that ran out while queued); one whose rows
 * refused its tokens for newer ones (fences that went back: Redis's clock
 * stepped back, or a counter was lost) has them raised, once, between two
 * tries: the transaction holds the database's write lock, and a raise asks
 * Redis. */
static void commit_batches(service *s, store_conn *c, struct batch **bs, int nb)
{
    store_commit_check check = {service_commits_allowed, s};
    int64_t first_order;
    int rc;
    do {
        first_order = 0;
        rc = store_tx_begin(c);
        if (rc == STORE_OK)
            rc = apply_batches(s, c, bs, nb, &first_order);
        if (rc == STORE_OK)
            rc = store_tx_commit(c, &check);
        if (rc != STORE_OK)
            store_tx_abort(c);
        for (int i = 0; rc == 1 && i < nb; i++)
            if (bs[i]->stale)
                raise_fences(s, bs[i]);
    } while (rc == 1);
    if (rc == STORE_OK)
        return;
    service_result fail = {0};
    service_from_store(&fail, rc, c);
    for (int i = 0; i < nb; i++)
        if (!bs[i]->out)
            undo_batch(bs[i], first_order, &fail);
}

/* batch_take's fits for the batches of one transaction: a batch joins while
 * their orders, one savepoint each, stay within max (0: no bound). */
struct savepoints {
    int orders, max;
};

static int fits_savepoints(const batch_job *job, void *arg)
{
    struct savepoints *sp = arg;
    const struct batch *b = job->arg;
    if (sp->max > 0 && sp->orders + b->n > sp->max)
        return 0;
    sp->orders += b->n;
    return 1;
}

/* Commits the nb batches bs in one transaction, on a store connection of
 * its own (none: each is answered why), and counts them. */
static void commit_now(service *s, struct batch **bs, int nb)
{
    char err[256];
    store_conn *c;
    int rc = store_get(s->store, &c, err, sizeof(err));
    if (rc == STORE_OK) {
        commit_batches(s, c, bs, nb);
        store_put(s->store, c);
    } else {
        service_result fail = {0};
        service_from_store_text(&fail, rc, err);
        for (int i = 0; i < nb; i++)
            if (!bs[i]->out)
                leave_out(bs[i], &fail);
    }
    int orders = 0;
    for (int i = 0; i < nb; i++)
        if (!bs[i]->out) {
            orders += bs[i]->n;
            metrics_batch(s->metrics, bs[i]->n);
        }
    metrics_commit(s->metrics, nb, orders);
}

/* Each order of b learns the tokens its lines' locks hold, for its log line. */
static void note_tokens(service *s, const struct batch *b)
{
    for (int j = 0; j < b->n; j++) {
        struct deduction *x = job_of(b->jobs[j]);
        for (int i = 0; i < x->r->nlines; i++)
            x->held[i] = service_token_of(s, b->h, x->keys[i]);
    }
}

/* The release after the commit failed: the answers stand, the log says so. */
static void log_lost(service *s, const struct batch *b, int rc)
{
    const char *keys[DLOCK_MULTI_MAX];
    for (int k = 0; k < b->u.n; k++)
        keys[k] = b->u.key[k];
    service_log_lost_after_commit(s, NULL, b->n, b->u.id, keys, b->u.fence, b->u.n, rc);
}

/* b's transaction is over: its orders are answered (the next leader of
 * their queue may start), then its lock is released, and b is done. */
static void batch_served(void *arg)
{
    struct batch *b = arg;
    service *s = b->s;
    note_tokens(s, b); /* after the commit: a raise may have changed them */
    batch_finish(s->batches, b->jobs, b->n);
    int rc = dlock_release(b->h);
    if (rc != DLOCK_OK && !b->out) /* after the commit: answers stand */
        log_lost(s, b, rc);
    free(b);
}

/* Leads the queue of batches waiting for a transaction, b's first: commits
 * everything queued (the batches that arrive meanwhile go with the next
 * leader's transaction), as many as the store takes savepoints for in one
 * transaction (PostgreSQL: 64 orders); the rest lead the next one. */
static void lead_commit(void *arg)
{
    struct batch *b = arg;
    service *s = b->s;
    batch_job *jobs[COMMIT_MAX];
    struct batch *bs[COMMIT_MAX];
    struct savepoints sp = {0, store_savepoints_max(s->store)};
    int nb = batch_take(s->batches, COMMIT_QUEUE, jobs, COMMIT_MAX, fits_savepoints, &sp,
                        BATCH_PROMOTE_AT_FINISH);
    for (int i = 0; i < nb; i++)
        bs[i] = jobs[i]->arg;
    commit_now(s, bs, nb);
    batch_finish(s->batches, jobs, nb); /* each batch_served, on a thread of its own */
}

/* Runs fn(b) on a service thread (here when out of memory: late, not never). */
static void run(struct batch *b, workers_fn *fn)
{
    if (workers_submit(b->s->work, fn, b) != 0)
        fn(b);
}

static void on_commit_lead(batch_job *job) { run(job->arg, lead_commit); }
static void on_committed(batch_job *job) { run(job->arg, batch_served); }

/* b, its lock held, waits for a transaction: as a queued batch, not a
 * thread, unless it leads the commit now. */
static void commit_batch(struct batch *b)
{
    b->commit = (batch_job){.queue = COMMIT_QUEUE, .arg = b, .on_lead = on_commit_lead,
                            .on_done = on_committed};
    int lead = batch_enter(b->s->batches, &b->commit);
    if (lead > 0) {
        lead_commit(b);
    } else if (lead < 0) { /* out of memory: alone */
        commit_now(b->s, &b, 1);
        batch_served(b);
    }
}

/* Answers up to a batch of queue's orders with res (the leader's own
 * first), for a leader that can't serve them: each has res as its result
 * until answered. */
static void answer_batch(service *s, int64_t queue, service_result *res)
{
    batch_job *jobs[BATCH_MAX];
    int n = batch_take(s->batches, queue, jobs, BATCH_MAX, NULL, NULL, BATCH_PROMOTE_AT_FINISH);
    for (int i = 0; i < n; i++)
        job_of(jobs[i])->out = res;
    batch_finish(s->batches, jobs, n);
}

/* Lends b's results to its orders, just taken: each is answered from there. */
static void lend_results(struct batch *b)
{
    for (int j = 0; j < b->n; j++) {
        struct deduction *x = job_of(b->jobs[j]);
        if (x->out == NULL) {
            x->out = &b->results[j];
            service_result_clear(x->out);
        }
    }
}

/* b's lock is held (rc DLOCK_OK, b->h), or could not be had: an item's
 * leader takes its batch now, then b waits for its transaction; or every
 * order of it is answered why. */
static void batch_locked(struct batch *b, int rc)
{
    service *s = b->s;
    if (b->queue != CART_QUEUE) {
        /* the next leader asks for the lock at once, and holds no thread
         * while it waits: our release hands the lock to it */
        b->n = batch_take(s->batches, b->queue, b->jobs, BATCH_MAX, NULL, NULL,
                          BATCH_PROMOTE_AT_TAKE);
        lend_results(b);
    }
    if (rc != DLOCK_OK) {
        service_result fail;
        service_result_clear(&fail);
        service_from_lock_text(s, &fail, rc, b->u.key[0], b->lock_err);
        fail_jobs(b->jobs, b->n, &fail);
        batch_finish(s->batches, b->jobs, b->n);
        free(b);
        return;
    }
    if (b->u.n > 1)
        metrics_multilock_wait(s->metrics, service_now_ms() - b->asked_ms);
    service_note_redis(s, rc);
    commit_batch(b);
}

static void batch_locked_task(void *arg)
{
    struct batch *b = arg;
    batch_locked(b, b->lock_rc);
}

/* dlock's callback, on its thread: the rest goes to a service thread. */
static void on_locked(dlock_req *req)
{
    struct batch *b = req->data;
    b->h = req->h, b->lock_rc = req->rc;
    if (req->rc != DLOCK_OK)
        snprintf(b->lock_err, sizeof(b->lock_err), "%s", req->err);
    run(b, batch_locked_task);
}

/* Asks for the lock of every item in b->u, as one; batch_locked follows,
 * now (the ask failed) or once the lock is granted or the wait is over. */
static void lock_items(struct batch *b)
{
    const char *keys[DLOCK_MULTI_MAX];
    for (int k = 0; k < b->u.n; k++)
        keys[k] = b->u.key[k];
    service *s = b->s;
    b->asked_ms = service_now_ms();
    b->lock_req = (dlock_req){.done = on_locked, .data = b};
    int rc = b->u.n == 1
                 ? dlock_acquire_async(s->locks, keys[0], &s->cfg.lock, &b->lock_req)
                 : dlock_acquire_multi_async(s->locks, keys, b->u.n, &s->cfg.lock, &b->lock_req);
    if (rc != DLOCK_OK) {
        snprintf(b->lock_err, sizeof(b->lock_err), "%s", dlock_errstr());
        batch_locked(b, rc);
    }
}

/* The leader of a queue. An item's queue: asks for the item's lock first,
 * and takes the batch queued meanwhile once it is granted; its successor,
 * promoted then, asks for the lock while this batch is served, and gets it
 * by hand-off when it is released. The orders of several items: takes the
 * batch first, whose items it then locks as one; its successor, promoted
 * once the batch is answered, takes what queued meanwhile (promoted at
 * once, it would lead a batch of one, and every cart would lock alone).
 * Neither holds a thread while it waits for the lock or its transaction. */
static void lead_batch(service *s, const struct deduction *own, int64_t queue)
{
    /* Set field by field, not zeroed whole: its key table is 32 KiB, and
     * every entry below u.n is written before it is read. */
    struct batch *b = malloc(sizeof(*b));
    if (b == NULL) {
        service_result oom;
        service_result_clear(&oom);
        service_fail(&oom, SERVICE_STORAGE_ERROR, "out of memory");
        answer_batch(s, queue, &oom);
        return;
    }
    b->s = s, b->queue = queue, b->h = NULL, b->n = 0, b->out = 0, b->stale = 0, b->raised = 0;
    b->u.n = 1, b->u.id[0] = own->r->lines[0].item_id;
    memcpy(b->u.key[0], own->keys[0], sizeof(b->u.key[0]));
    if (queue == CART_QUEUE) {
        b->u.n = 0;
        b->n = batch_take(s->batches, queue, b->jobs, BATCH_MAX, fits_union, &b->u,
                          BATCH_PROMOTE_AT_FINISH);
        lend_results(b);
    }
    lock_items(b);
}

/* x's queue: its item's, or the carts'. */
static int64_t queue_of(const struct deduction *x)
{
    return x->r->nlines == 1 ? x->r->lines[0].item_id : CART_QUEUE;
}

int service_batch_enter(struct deduction *x, batch_job *job)
{
    job->queue = queue_of(x);
    job->arg = x;
    return batch_enter(x->s->batches, job);
}

void service_batch_lead(struct deduction *x)
{
    lead_batch(x->s, x, queue_of(x));
}
