/* service_log.c - the lines an operator follows an order by: one per order
 * (placed, replayed or not placed) and one per stock set, each with the
 * requestId, the items, their lock keys and the fencing tokens the write was
 * made (or refused) under, so that one grep finds an order on every replica
 * it touched; and one per fence raised past a row's (or not). */
#include <string.h>

#include "server/log.h"
#include "server/service_parts.h"

/* An acknowledged deduction is routine (info: a line per order, quieted by
 * --log-level warn); so are the refusals a client causes and is told about.
 * Lock and storage trouble is what an operator must see (warn), and a
 * storage fault or a commit in doubt is worse (error). */
static const enum log_level outcome_level[SERVICE_OUTCOME_COUNT] = {
    [SERVICE_OK] = LOG_INFO,
    [SERVICE_REPLAYED] = LOG_INFO,
    [SERVICE_NOT_FOUND] = LOG_INFO,
    [SERVICE_ORDER_NOT_FOUND] = LOG_INFO,
    [SERVICE_INSUFFICIENT] = LOG_INFO,
    [SERVICE_CONFLICT] = LOG_WARN,
    [SERVICE_LOCK_TIMEOUT] = LOG_WARN,
    [SERVICE_LOCK_INTERRUPTED] = LOG_WARN,
    [SERVICE_LOCK_LOST] = LOG_WARN,
    [SERVICE_REDIS_DOWN] = LOG_WARN,
    [SERVICE_STORAGE_BUSY] = LOG_WARN,
    [SERVICE_STORAGE_UNAVAILABLE] = LOG_WARN,
    [SERVICE_COMMIT_UNKNOWN] = LOG_ERROR,
    [SERVICE_STORAGE_ERROR] = LOG_ERROR,
    [SERVICE_SHUTTING_DOWN] = LOG_WARN,
    [SERVICE_STORAGE_FULL] = LOG_ERROR,
    [SERVICE_NO_MEMORY] = LOG_ERROR,
    [SERVICE_RESERVATION_NOT_FOUND] = LOG_INFO,
    [SERVICE_RESERVATION_EXPIRED] = LOG_INFO,
    [SERVICE_RESERVATION_CANCELLED] = LOG_INFO,
    [SERVICE_RESERVATION_CONFIRMED] = LOG_INFO,
    [SERVICE_BUYER_LIMIT] = LOG_INFO,
    [SERVICE_BUYER_REQUIRED] = LOG_INFO,
};

static enum log_level level_of(enum service_outcome o)
{
    return o < SERVICE_OUTCOME_COUNT ? outcome_level[o] : LOG_ERROR;
}

/* What a line says about the lock: the items, their keys (redis mode) and
 * the tokens, with room for every field of the line. Up to DLOCK_MULTI_MAX
 * items (a batch's); keys are made here only for an order's lines. */
struct lock_fields {
    long long items[DLOCK_MULTI_MAX], fences[DLOCK_MULTI_MAX], seqs[DLOCK_MULTI_MAX];
    char key[RULE_ORDER_LINES_MAX][DLOCK_KEY_MAX + 1];
    const char *keys[DLOCK_MULTI_MAX];
    log_field f[16];
    int nf;
};

/* Appends the n items in lf->items, then, when any line had one, the tokens
 * (fences, fenceSeqs), then (redis mode) the keys: given, or made into
 * lf->key from the items when keys is NULL (then n <= RULE_ORDER_LINES_MAX). */
static void add_lock_fields(const service *s, struct lock_fields *lf, int n,
                            const char *const *keys, const store_fence *tok)
{
    int fenced = 0;
    for (int i = 0; i < n; i++) {
        if (s->cfg.lock_mode == SERVICE_LOCK_REDIS && keys == NULL)
            service_lock_key(s->cfg.lock_prefix, lf->items[i], lf->key[i]);
        lf->keys[i] = keys ? keys[i] : lf->key[i];
        lf->fences[i] = tok[i].fence, lf->seqs[i] = tok[i].seq;
        fenced |= tok[i].fence != 0;
    }
    lf->f[lf->nf++] = LOG_INTS("items", lf->items, n);
    if (fenced) {
        lf->f[lf->nf++] = LOG_INTS("fences", lf->fences, n);
        lf->f[lf->nf++] = LOG_INTS("fenceSeqs", lf->seqs, n);
    }
    /* last: when a long --lock-prefix makes a cart's line too long, the keys
     * (which the items and the prefix tell anyway) are what gets cut */
    if (s->cfg.lock_mode == SERVICE_LOCK_REDIS)
        lf->f[lf->nf++] = LOG_STRS("keys", lf->keys, n);
}

static double ms_since(int64_t t0_us) { return (double)(service_now_us() - t0_us) / 1000.0; }

void service_log_order(const service *s, const req_order *r, const service_result *out,
                       const store_fence *held, int64_t t0_us)
{
    enum log_level level = level_of(out->outcome);
    if (!log_enabled(level))
        return;
    /* Done: the order as written (a replay: as first written, perhaps by
     * another replica), its lines with the tokens they were written under.
     * Not done: the request, with the tokens its locks held, if any. */
    int done = out->outcome == SERVICE_OK || out->outcome == SERVICE_REPLAYED;
    int n = done ? out->order.nlines : r->nlines;
    struct lock_fields lf; /* not zeroed: 20 KiB a line is a cost on the hot path */
    store_fence tok[RULE_ORDER_LINES_MAX];
    lf.nf = 0;
    long long units = 0;
    for (int i = 0; i < n; i++) {
        lf.items[i] = done ? out->order.lines[i].item_id : r->lines[i].item_id;
        units += done ? out->order.lines[i].quantity : r->lines[i].quantity;
        tok[i] = done ? out->order.lines[i].fence : held[i];
    }
    lf.f[lf.nf++] = LOG_STR("requestId", r->has_request_id ? r->request_id : NULL);
    lf.f[lf.nf++] = LOG_STR("outcome", service_outcome_name(out->outcome));
    if (done)
        lf.f[lf.nf++] = LOG_INT("orderId", out->order.info.order_id);
    lf.f[lf.nf++] = LOG_INT("units", units);
    lf.f[lf.nf++] = LOG_MS("ms", ms_since(t0_us));
    lf.f[lf.nf++] = LOG_STR("instance", s->cfg.instance_id);
    if (out->outcome == SERVICE_REPLAYED)
        lf.f[lf.nf++] = LOG_STR("placedBy", out->order.info.instance);
    if (r->token_name[0]) /* the token's name, never the token */
        lf.f[lf.nf++] = LOG_STR("tokenName", r->token_name);
    if (!done)
        lf.f[lf.nf++] = LOG_STR("detail", out->message);
    if (r->client[0]) /* behind a proxy, the client it names */
        lf.f[lf.nf++] = LOG_STR("client", r->client);
    add_lock_fields(s, &lf, n, NULL, tok);
    log_event(level, out->outcome == SERVICE_OK         ? "order placed"
                     : out->outcome == SERVICE_REPLAYED ? "order replayed"
                                                        : "order not placed",
              lf.f, lf.nf);
}

void service_log_stock_set(const service *s, int64_t item_id, int64_t stock, int64_t limit,
                           const char *who, const service_result *out, const store_fence *held,
                           int64_t t0_us)
{
    enum log_level level = level_of(out->outcome);
    if (!log_enabled(level))
        return;
    struct lock_fields lf;
    lf.items[0] = item_id, lf.nf = 0;
    if (stock >= 0)
        lf.f[lf.nf++] = LOG_INT("stock", stock);
    if (limit >= 0) /* 0: cleared */
        lf.f[lf.nf++] = LOG_INT("perBuyerLimit", limit);
    lf.f[lf.nf++] = LOG_STR("outcome", service_outcome_name(out->outcome));
    lf.f[lf.nf++] = LOG_MS("ms", ms_since(t0_us));
    lf.f[lf.nf++] = LOG_STR("instance", s->cfg.instance_id);
    if (who[0]) /* the token's name, never the token */
        lf.f[lf.nf++] = LOG_STR("tokenName", who);
    if (out->outcome != SERVICE_OK)
        lf.f[lf.nf++] = LOG_STR("detail", out->message);
    add_lock_fields(s, &lf, 1, NULL, held);
    log_event(level, out->outcome == SERVICE_OK ? "stock set" : "stock not set", lf.f, lf.nf);
}

void service_log_locked(const service *s, const char *event, const char *id_name, int64_t id,
                        const char *request_id, const char *who, const service_result *out,
                        const struct locked *w)
{
    enum log_level level = level_of(out->outcome);
    if (!log_enabled(level))
        return;
    struct lock_fields lf;
    lf.nf = 0;
    for (int i = 0; i < w->n; i++)
        lf.items[i] = w->items[i];
    if (id)
        lf.f[lf.nf++] = LOG_INT(id_name, id);
    lf.f[lf.nf++] = LOG_STR("requestId", request_id);
    lf.f[lf.nf++] = LOG_STR("outcome", service_outcome_name(out->outcome));
    lf.f[lf.nf++] = LOG_MS("ms", ms_since(w->t0_us));
    lf.f[lf.nf++] = LOG_STR("instance", s->cfg.instance_id);
    if (who[0]) /* the token's name, never the token */
        lf.f[lf.nf++] = LOG_STR("tokenName", who);
    if (out->outcome != SERVICE_OK && out->outcome != SERVICE_REPLAYED)
        lf.f[lf.nf++] = LOG_STR("detail", out->message);
    add_lock_fields(s, &lf, w->n, w->n && w->keys[0] ? w->keys : NULL, w->held);
    log_event(level, event, lf.f, lf.nf);
}

void service_log_lost_after_commit(const service *s, const req_order *r, int orders,
                                   const int64_t *items, const char *const *keys,
                                   const store_fence *tok, int n, int dlock_rc)
{
    if (!log_enabled(LOG_WARN))
        return;
    struct lock_fields lf;
    lf.nf = 0;
    for (int i = 0; i < n; i++)
        lf.items[i] = items[i];
    if (r)
        lf.f[lf.nf++] = LOG_STR("requestId", r->has_request_id ? r->request_id : NULL);
    lf.f[lf.nf++] = LOG_INT("orders", orders);
    lf.f[lf.nf++] = LOG_STR("result", dlock_strerror(dlock_rc));
    lf.f[lf.nf++] = LOG_STR("instance", s->cfg.instance_id);
    add_lock_fields(s, &lf, n, keys, tok);
    log_event(LOG_WARN, "lock lost after commit", lf.f, lf.nf);
}

void service_log_fence_raise(const service *s, const char *key, store_fence row, int64_t was,
                             int64_t now, int dlock_rc)
{
    log_field f[8];
    int n = 0;
    f[n++] = LOG_STR("key", key);
    f[n++] = LOG_INT("rowFence", row.fence);
    f[n++] = LOG_INT("rowFenceSeq", row.seq);
    f[n++] = LOG_INT("fenceWas", was);
    if (dlock_rc == DLOCK_OK) {
        f[n++] = LOG_INT("fence", now);
    } else {
        f[n++] = LOG_STR("result", dlock_strerror(dlock_rc));
        f[n++] = LOG_STR("detail", dlock_errstr());
    }
    f[n++] = LOG_STR("instance", s->cfg.instance_id);
    log_event(LOG_WARN, dlock_rc == DLOCK_OK ? "lock fence raised past the row's"
                                             : "lock fence not raised", f, n);
}
