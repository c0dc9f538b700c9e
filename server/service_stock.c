/* service_stock.c - an item's stock set (PUT /items/{id}): its stock and
 * its per-buyer limit written in one transaction under the item's lock
 * (service_locked.c), fenced with its token in redis mode, so a restock
 * never interleaves with a deduction, a reservation or a return. The item
 * must exist (else 404, and its lock never touches Redis). */
#include <stdio.h>
#include <stdlib.h>

#include "server/service_parts.h"

static struct stock_set *stock_set_of(struct locked *w) { return (struct stock_set *)w; }

static void stock_prepare(struct locked *w, store_conn *c)
{
    struct stock_set *ss = stock_set_of(w);
    int64_t stock;
    int rc = store_stock_read(c, ss->item, &stock);
    service_from_order_store(&w->out, rc, c, NULL);
    if (rc == STORE_OK)
        service_locked_add(w, ss->item);
}

/* The stock and the limit as asked, then the item as written, read inside
 * the transaction (a session lost once COMMIT answered must not turn what
 * committed into a failure). */
static int stock_write(struct locked *w, store_conn *c)
{
    struct stock_set *ss = stock_set_of(w);
    int rc = STORE_OK;
    if (ss->r.has_stock)
        rc = store_tx_set_stock(c, ss->item, ss->r.stock, service_locked_fence(w, ss->item));
    if (rc == STORE_OK && ss->r.per_buyer_limit >= 0)
        rc = store_tx_set_buyer_limit(c, ss->item, ss->r.per_buyer_limit);
    if (rc == STORE_OK)
        rc = store_item_get(c, ss->item, &w->out.item);
    return rc;
}

static void stock_result(struct locked *w, int rc, store_conn *c)
{
    service_from_order_store(&w->out, rc, c, NULL);
    if (w->out.outcome == SERVICE_COMMIT_UNKNOWN) /* no requestId to retry with */
        service_fail(&w->out, SERVICE_COMMIT_UNKNOWN, "%s; the stock may have been set: GET "
                     "/items/%lld shows it, or set it again", store_errstr(c),
                     (long long)stock_set_of(w)->item);
}

/* The stock set is answered (and logged). */
static void stock_end(struct locked *w)
{
    struct stock_set *ss = stock_set_of(w);
    service *s = w->s;
    service_note_space(s, w->out.outcome, 1);
    service_log_stock_set(s, ss->item, ss->r.has_stock ? ss->r.stock : -1, ss->r.per_buyer_limit,
                          ss->who, &w->out, &w->held[0], w->t0_us);
    ss->done(&w->out, ss->arg);
    free(ss);
}

static const struct locked_ops stock_ops = {stock_prepare, NULL, stock_write, stock_result,
                                            stock_end};

void service_stock_set(struct stock_set *ss)
{
    ss->w.ops = &stock_ops;
    service_locked_start(&ss->w);
}
