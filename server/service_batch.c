/* service_batch.c - group commit, redis mode's usual path. Two levels:
 * orders queue per item (or, for carts, in one queue for orders of several
 * items), and one leader's batch is served under one lock hold; then the
 * batches of the whole process queue once more, for a transaction: one
 * commit (one fsync) for the batches of every item that was ready
 * meanwhile. Each batch keeps its own lock and fences: its lock is checked
 * just before the commit and its rows are claimed with its tokens, and a
 * batch whose lock was lost is answered with that and left out. Each order
 * is written behind a savepoint: one that fails is undone alone.
 *
 * Nothing here waits on a thread: an order waits in its item's queue, a
 * leader's batch in the lock's queue (an asynchronous acquire), a granted
 * batch in the queue of batches for the transaction in flight. The route
 * of one order is in ARCHITECTURE.md. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "server/service_parts.h"

#define BATCH_MAX 64   /* orders in one item's (or the carts') batch */
#define COMMIT_MAX 64  /* batches in one transaction */

size_t service_batch_size(int nlines)
{
    int items = nlines == 1 ? 1 : DLOCK_MULTI_MAX;
    return sizeof(struct batch) + (size_t)items * sizeof(struct batch_item);
}

static struct order *order_of(batch_link *l)
{
    return (struct order *)((char *)l - offsetof(struct order, link));
}

static struct batch *batch_of(batch_commit_link *l)
{
    return (struct batch *)((char *)l - offsetof(struct batch, commit));
}

static int item_index(const struct batch *b, int64_t id)
{
    for (int i = 0; i < b->nitems; i++)
        if (b->item[i].id == id)
            return i;
    return -1;
}

/* Adds order o to batch b (taken from its queue): b ends it now. */
static void add_order(struct batch *b, struct order *o, struct order **tail)
{
    service_touch(o);
    o->pending = 1;
    o->next = NULL;
    if (*tail)
        (*tail)->next = o;
    else
        b->first = o;
    *tail = o;
    b->n++;
}

/* batch_take's fits for the carts: an order joins while the union of
 * items stays lockable as one (DLOCK_MULTI_MAX keys); its items are added
 * then. */
static int fits_union(const batch_link *l, void *arg)
{
    struct batch *b = arg;
    const struct order *o = order_of((batch_link *)l);
    int more = 0;
    for (int i = 0; i < o->r.nlines; i++)
        more += item_index(b, o->r.lines[i].item_id) < 0;
    if (b->nitems + more > b->items_max)
        return 0;
    for (int i = 0; i < o->r.nlines; i++)
        if (item_index(b, o->r.lines[i].item_id) < 0)
            b->item[b->nitems++] = (struct batch_item){.id = o->r.lines[i].item_id,
                                                       .key = o->keys[i]};
    return 1;
}

/* Takes up to a batch of b's queue into b. */
static void take(struct batch *b, int (*fits)(const batch_link *, void *))
{
    batch_link *links[BATCH_MAX];
    int n = batch_take(b->s->queues, b->key, links, BATCH_MAX, fits, b);
    struct order *tail = NULL;
    for (int i = 0; i < n; i++)
        add_order(b, order_of(links[i]), &tail);
}

/* b is over: its orders, every one answered, are freed; its leader, whose
 * memory b is, last. */
static void batch_end(struct batch *b)
{
    struct order *leader = b->leader, *next;
    for (struct order *o = b->first; o; o = next) {
        next = o->next;
        o->pending = 0;
        if (o != leader)
            service_order_free(o);
    }
    service_order_free(leader);
}

/* ---- a batch's transaction ---- */

/* The transaction was rolled back: every answer of b gets res, except
 * replays of orders committed before it (first_order: its first order, 0
 * when it wrote none), which stay true. (Refusals too: an
 * insufficient_stock or a requestId conflict may have come from an order of
 * this transaction that no longer exists.) */
static void undo_batch(struct batch *b, int64_t first_order, const service_result *res)
{
    for (struct order *o = b->first; o; o = o->next)
        if (!(o->res.outcome == SERVICE_REPLAYED &&
              (!first_order || o->res.order_id < first_order)))
            service_keep(&o->res, &o->r, res);
}

/* Answers b with fail and leaves it out of the transaction. */
static void leave_out(struct batch *b, const service_result *fail)
{
    for (struct order *o = b->first; o; o = o->next)
        service_keep(&o->res, &o->r, fail);
    b->out = 1;
}

/* One order of batch b, inside the transaction, against the stock left:
 * STORE_OK with out saying how it went (placed, replayed, refused), or the
 * store failure that ended it (out says that too). */
static int place_one(service *s, store_conn *c, struct batch *b, int64_t *first_order,
                     const req_order *r, service_result *out)
{
    int rc = service_replayed(c, r, out);
    if (rc != STORE_ERR_NOT_FOUND) {
        service_from_order_store(out, rc, c, r);
        return rc == STORE_ERR_DUPLICATE ? STORE_OK : rc;
    }
    store_new_order o = service_new_order(s, r, b->h);
    for (int i = 0; i < r->nlines; i++) {
        const struct batch_item *it = &b->item[item_index(b, r->lines[i].item_id)];
        if (it->stock < r->lines[i].quantity)
            service_add_short(out, r, i, it->stock);
        o.lines[i].remaining = it->stock - r->lines[i].quantity;
        o.lines[i].fence = it->fence;
    }
    if (out->nshort) {
        service_insufficient(out);
        return STORE_OK;
    }
    rc = store_tx_add_order(c, &o, &out->order);
    if (service_from_order_store(out, rc, c, r) != SERVICE_OK)
        return rc == STORE_ERR_DUPLICATE ? STORE_OK : rc;
    for (int i = 0; i < r->nlines; i++)
        b->item[item_index(b, r->lines[i].item_id)].stock -= r->lines[i].quantity;
    *first_order = *first_order ? *first_order : out->order.info.order_id;
    return STORE_OK;
}

/* The order all or nothing in the shared transaction: a failed statement
 * (a full disk, an I/O error, a constraint) would undo only itself on
 * SQLite, leaving an order without its lines or a cart's first lines, and
 * on PostgreSQL would abort the transaction of every batch. Going back to
 * the savepoint taken before it undoes its writes alone: it answers its
 * failure, the stock left is as before it, and the others still commit.
 * Returns STORE_OK, or the failure of the transaction itself. */
static int apply_order(service *s, store_conn *c, struct batch *b, int64_t *first_order,
                       struct order *o)
{
    service_result out;
    service_result_clear(&out);
    int rc = store_tx_savepoint(c);
    if (rc == STORE_OK && place_one(s, c, b, first_order, &o->r, &out) != STORE_OK)
        rc = store_tx_rollback_to_savepoint(c);
    service_keep(&o->res, &o->r, &out);
    return rc;
}

/* Claims every item of b (each with its own key's token) inside the
 * transaction. STORE_ERR_STALE: a row carries a newer token than ours;
 * until b's fences were raised once, every item is tried, and those whose
 * rows refused get the row's token in refused. */
static int claim_items(service *s, store_conn *c, struct batch *b)
{
    int rc = STORE_OK, stale = 0;
    for (int k = 0; rc == STORE_OK && k < b->nitems; k++) {
        struct batch_item *it = &b->item[k];
        it->fence = service_token_of(s, b->h, it->key);
        it->refused = (store_fence){0, 0};
        rc = it->fence.fence ? store_stock_claim(c, it->id, &it->fence, &it->stock)
                             : store_stock_read(c, it->id, &it->stock);
        if (rc == STORE_ERR_STALE && !b->raised) {
            it->refused = store_stale_token(c);
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
    b->stale = 0, b->raised = 1;
    for (int k = 0; k < b->nitems; k++) {
        const struct batch_item *it = &b->item[k];
        int rc = it->refused.fence ? service_raise_fence(s, b->h, it->key, it->refused)
                                   : DLOCK_OK;
        if (rc != DLOCK_OK) {
            service_result fail;
            service_result_clear(&fail);
            service_from_lock(s, &fail, rc, it->key, dlock_errstr());
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
        service_result fail;
        service_result_clear(&fail);
        service_from_store(&fail, rc, c);
        leave_out(b, &fail);
        return STORE_OK;
    }
    for (struct order *o = b->first; rc == STORE_OK && o; o = o->next)
        rc = apply_order(s, c, b, first_order, o);
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
            service_result fail;
            service_result_clear(&fail);
            service_from_lock(s, &fail, rc, bs[i]->item[0].key, dlock_strerror(rc));
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
    for (int i = 0; i < nb; i++)
        for (int k = 0; !bs[i]->out && k < bs[i]->nitems; k++) {
            const struct batch_item *it = &bs[i]->item[k];
            int rc = store_tx_set_stock(c, it->id, it->stock, it->fence.fence ? &it->fence : NULL);
            if (rc != STORE_OK)
                return rc;
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
    service_result fail;
    service_result_clear(&fail);
    service_from_store(&fail, rc, c);
    for (int i = 0; i < nb; i++)
        if (!bs[i]->out)
            undo_batch(bs[i], first_order, &fail);
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
        service_result fail;
        service_result_clear(&fail);
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

/* ---- a batch from its lock to its release ---- */

/* The release after the commit failed: the answers stand, the log says so. */
static void log_lost(service *s, const struct batch *b, int rc)
{
    int64_t ids[DLOCK_MULTI_MAX];
    const char *keys[DLOCK_MULTI_MAX];
    store_fence fences[DLOCK_MULTI_MAX];
    for (int k = 0; k < b->nitems; k++)
        ids[k] = b->item[k].id, keys[k] = b->item[k].key, fences[k] = b->item[k].fence;
    service_log_lost_after_commit(s, NULL, b->n, ids, keys, fences, b->nitems, rc);
}

static void batch_released(exec_task *t)
{
    struct lock_call *lc = service_lock_call_of(t);
    struct batch *b = lc->req.data;
    int rc = lc->req.rc;
    if (rc != DLOCK_OK && rc != DLOCK_ERR_CLOSED && !b->out) /* after the commit: answers stand */
        log_lost(b->s, b, rc);
    batch_end(b);
}

static void lead_batch(struct order *o);

/* The carts' leader is done with its batch: the next cart leads, taking
 * what queued meanwhile. */
static void promote_carts(service *s)
{
    batch_link *next = batch_promote(s->queues, SERVICE_CARTS);
    if (next)
        lead_batch(order_of(next));
}

/* b's transaction is over: its orders are answered (the next carts'
 * leader may start), then its lock is released without waiting for Redis,
 * and b ends once the release is. */
static void batch_served(service *s, struct batch *b)
{
    for (struct order *o = b->first; o; o = o->next) /* not placed: its locks' tokens, */
        for (int i = 0; o->res.outcome != SERVICE_OK &&   /* after a raise if there was one */
                        o->res.outcome != SERVICE_REPLAYED && i < o->r.nlines; i++)
            o->held[i] = service_token_of(s, b->h, o->keys[i]);
    for (struct order *o = b->first; o; o = o->next)
        service_answer(o);
    if (b->key == SERVICE_CARTS)
        promote_carts(s);
    service_lock_release(s, &b->lock, b, batch_released, b->h);
}

/* batch_commit_take's fits: a batch joins while their orders, one savepoint
 * each, stay within max (0: no bound). */
struct savepoints {
    int orders, max;
};

static int fits_savepoints(const batch_commit_link *l, void *arg)
{
    struct savepoints *sp = arg;
    const struct batch *b = batch_of((batch_commit_link *)l);
    if (sp->max > 0 && sp->orders + b->n > sp->max)
        return 0;
    sp->orders += b->n;
    return 1;
}

/* One transaction of the batches waiting, as many as the store takes
 * savepoints for (PostgreSQL: 64 orders); those that join meanwhile go
 * with the next, which is posted behind what was queued meanwhile (the
 * grants of other items' batches, which so join it). */
static void commit_round(exec_task *t)
{
    service *s = (service *)((char *)t - offsetof(service, commit_task));
    batch_commit_link *links[COMMIT_MAX];
    struct batch *bs[COMMIT_MAX];
    struct savepoints sp = {0, store_savepoints_max(s->store)};
    int nb = batch_commit_take(s->commits, links, COMMIT_MAX, fits_savepoints, &sp);
    for (int i = 0; i < nb; i++) {
        bs[i] = batch_of(links[i]);
        for (struct order *o = bs[i]->first; o; o = o->next)
            service_touch(o);
    }
    commit_now(s, bs, nb);
    for (int i = 0; i < nb; i++)
        batch_served(s, bs[i]);
    if (batch_commit_done(s->commits))
        exec_post(s->work, &s->commit_task, commit_round);
}

/* b's lock failed: every order of it is answered why, but a retry whose
 * first attempt committed, which gets that first answer. */
static void fail_batch(service *s, struct batch *b, int rc, const char *detail)
{
    service_result fail, first;
    service_result_clear(&fail);
    service_from_lock(s, &fail, rc, b->item[0].key, detail);
    for (struct order *o = b->first; o; o = o->next) {
        int replay = service_replay_when_locked_out(s, &o->r, &first);
        service_keep(&o->res, &o->r, replay ? &first : &fail);
    }
    for (struct order *o = b->first; o; o = o->next)
        service_answer(o);
    if (b->key == SERVICE_CARTS)
        promote_carts(s);
    batch_end(b);
}

/* b's lock is granted (or could not be had), on a service thread: an
 * item's leader takes its batch now and promotes the next leader, who asks
 * for the lock at once and so gets it by hand-off at our release; then b
 * waits for a transaction. */
static void batch_granted(exec_task *t)
{
    struct lock_call *lc = service_lock_call_of(t);
    struct batch *b = lc->req.data;
    service *s = b->s;
    b->h = lc->req.h;
    if (lc->via_lock_thread) /* the leader's ask went through libdlock's thread */
        b->leader->hops++;
    if (b->key != SERVICE_CARTS) {
        take(b, NULL);
        batch_link *next = batch_promote(s->queues, b->key);
        if (next)
            lead_batch(order_of(next));
    } else {
        for (struct order *o = b->first; o; o = o->next)
            service_touch(o);
    }
    if (lc->req.rc != DLOCK_OK) {
        fail_batch(s, b, lc->req.rc, lc->req.err);
        return;
    }
    if (b->nitems > 1)
        metrics_multilock_wait(s->metrics, service_now_ms() - b->asked_ms);
    service_note_redis(s, DLOCK_OK, "");
    /* posted, not run here: the grants this thread was handed meanwhile (the
     * last commit's releases hand other items' batches over to it) run first,
     * and join this transaction */
    if (batch_commit_join(s->commits, &b->commit))
        exec_post(s->work, &s->commit_task, commit_round);
}

/* Asks for the lock of every item of b, as one; batch_granted follows on a
 * service thread, once it is granted or the wait is over. Never blocks. */
static void ask_lock(struct batch *b)
{
    service *s = b->s;
    const char *keys[DLOCK_MULTI_MAX];
    for (int k = 0; k < b->nitems; k++)
        keys[k] = b->item[k].key;
    b->asked_ms = service_now_ms();
    int rc = DLOCK_ERR_CANCELLED;
    if (service_lock_begin(s, &b->lock, b, batch_granted, 1))
        rc = b->nitems == 1 ? dlock_acquire_async(s->locks, keys[0], &s->cfg.lock, &b->lock.req)
                            : dlock_acquire_multi_async(s->locks, keys, b->nitems, &s->cfg.lock,
                                                        &b->lock.req);
    service_lock_asked(&b->lock, rc); /* refused at once: batch_granted answers why */
}

/* o leads its queue, with its own batch memory. An item's queue: asks for
 * the item's lock first, and takes the batch queued meanwhile once it is
 * granted. The carts: takes the batch first, whose items it then locks as
 * one; its successor, promoted once the batch is answered, takes what
 * queued meanwhile (promoted at once, it would lead a batch of one, and
 * every cart would lock alone). */
static void lead_batch(struct order *o)
{
    struct batch *b = o->lead;
    *b = (struct batch){.s = o->s, .key = o->link.key, .leader = o,
                        .items_max = o->r.nlines == 1 ? 1 : DLOCK_MULTI_MAX};
    if (b->key == SERVICE_CARTS) {
        take(b, fits_union);
    } else {
        b->nitems = 1;
        b->item[0] = (struct batch_item){.id = o->r.lines[0].item_id, .key = o->keys[0]};
    }
    ask_lock(b);
}

void service_batch_join(struct order *o)
{
    o->link.key = o->r.nlines == 1 ? o->r.lines[0].item_id : SERVICE_CARTS;
    int lead = batch_join(o->s->queues, &o->link);
    if (lead < 0) { /* a first order of its item, and no memory for the queue */
        service_result oom;
        service_result_clear(&oom);
        service_fail(&oom, SERVICE_NO_MEMORY, "out of memory; nothing deducted");
        service_keep(&o->res, &o->r, &oom);
        service_answer(o);
    } else if (lead) {
        lead_batch(o);
    }
}
