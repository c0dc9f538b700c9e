/* service_reserve.c - reservations (made, confirmed, cancelled, extended,
 * read) and an order's cancel. Every one that changes an item's stock, or
 * writes an order, runs as one transaction under its items' locks
 * (service_locked.c): the units a reservation takes, gives back or turns
 * into an order, and an order's returns, never interleave with an order's
 * read-modify-write, on any replica. Which state wins a race (a confirm
 * and a cancel, a confirm and the expiry) the database decides, in the
 * statement that changes the state. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/service_parts.h"

/* One reservation write or order cancel, from its door to its answer: one
 * allocation. */
struct res_write {
    struct locked w;            /* first: the write under the items' locks */
    enum service_res_kind kind;
    int64_t id;                 /* the reservation's or the order's (not SERVICE_RES_MAKE) */
    req_reservation r;          /* SERVICE_RES_MAKE */
    req_cancel cancel;          /* SERVICE_RES_ORDER_CANCEL */
    store_reservation read;     /* SERVICE_RES_CONFIRM, SERVICE_RES_CANCEL: as read before the locks */
    store_order read_order;     /* SERVICE_RES_ORDER_CANCEL: as read before the locks */
    char who[RULE_TOKEN_NAME_MAX + 1];
    service_done *done;
    void *arg;
};

static struct res_write *res_of(struct locked *w) { return (struct res_write *)w; }

static store_fence fence_or_none(const struct locked *w, int64_t item)
{
    const store_fence *f = service_locked_fence(w, item);
    return f ? *f : (store_fence){0, 0};
}

/* ---- before the locks: which items ---- */

/* A confirm or a cancel of a reservation read ended - in a state that
 * never changes again, or held past its expiry, which nothing can confirm
 * or cancel any more - answered from that read, without its items' locks
 * (no Redis round trips for a repeat): a replay, or its state's 409. Only
 * one read held and unlapsed goes on to the locks and re-checks in the
 * transaction. STORE_OK, or the failure of the replayed order's read. */
static int res_ended(struct locked *w, store_conn *c)
{
    struct res_write *rw = res_of(w);
    service_result *out = &w->out;
    enum store_reservation_state repeat =
        rw->kind == SERVICE_RES_CONFIRM ? STORE_RES_CONFIRMED : STORE_RES_CANCELLED;
    out->reservation = rw->read;
    if (rw->read.state != repeat) {
        service_from_state(out, &rw->read);
        return STORE_OK;
    }
    if (rw->kind == SERVICE_RES_CONFIRM) { /* a repeat answers the order it became */
        int rc = store_order_get(c, rw->read.order_id, &out->order);
        if (rc != STORE_OK)
            return rc == STORE_ERR_NOT_FOUND ? STORE_ERR_IO : rc;
    }
    out->outcome = SERVICE_REPLAYED;
    return STORE_OK;
}

static void res_prepare(struct locked *w, store_conn *c)
{
    struct res_write *rw = res_of(w);
    service_result *out = &w->out;
    int rc = STORE_OK;
    switch (rw->kind) {
    case SERVICE_RES_MAKE: /* items that don't exist: answered before their locks touch Redis */
        for (int i = 0; rc == STORE_OK && i < rw->r.order.nlines; i++) {
            int64_t item = rw->r.order.lines[i].item_id, stock;
            rc = store_stock_read(c, item, &stock);
            if (rc == STORE_ERR_NOT_FOUND)
                service_fail(out, SERVICE_NOT_FOUND, "no item with id %lld (lines[%d]); "
                             "nothing reserved", (long long)item, i);
            else if (rc == STORE_OK)
                service_locked_add(w, item);
        }
        break;
    case SERVICE_RES_CONFIRM:
    case SERVICE_RES_CANCEL:
        rc = store_reservation_get(c, rw->id, &rw->read);
        if (rc == STORE_OK && (rw->read.state != STORE_RES_HELD || rw->read.lapsed)) {
            rc = res_ended(w, c);
            break;
        }
        for (int i = 0; rc == STORE_OK && i < rw->read.nlines; i++)
            service_locked_add(w, rw->read.lines[i].item_id);
        if (rc == STORE_ERR_NOT_FOUND)
            service_fail(out, SERVICE_RESERVATION_NOT_FOUND, "no reservation with id %lld",
                         (long long)rw->id);
        break;
    case SERVICE_RES_ORDER_CANCEL:
        rc = store_order_get(c, rw->id, &rw->read_order);
        for (int i = 0; rc == STORE_OK && i < rw->read_order.nlines; i++)
            service_locked_add(w, rw->read_order.lines[i].item_id);
        if (rc == STORE_ERR_NOT_FOUND)
            service_fail(out, SERVICE_ORDER_NOT_FOUND, "no order with id %lld",
                         (long long)rw->id);
        break;
    }
    if (rc != STORE_OK && rc != STORE_ERR_NOT_FOUND)
        service_from_store(out, rc, c);
}

/* ---- under the locks: the store's write ---- */

static int make_write(struct res_write *rw, store_conn *c)
{
    struct locked *w = &rw->w;
    const req_order *r = &rw->r.order;
    store_new_reservation n = {
        .request_id = r->has_request_id ? r->request_id : NULL,
        .buyer_id = r->has_buyer_id ? r->buyer_id : NULL, .instance = w->s->cfg.instance_id,
        .hold_ms = rw->r.hold_ms ? rw->r.hold_ms : w->s->cfg.hold_ms, .nlines = r->nlines};
    for (int i = 0; i < r->nlines; i++)
        n.lines[i] = (store_line){r->lines[i].item_id, r->lines[i].quantity, 0,
                                  fence_or_none(w, r->lines[i].item_id)};
    return store_tx_reserve(c, &n, &w->out.reservation);
}

static int confirm_write(struct res_write *rw, store_conn *c)
{
    struct locked *w = &rw->w;
    const store_reservation *res = &rw->read;
    store_new_order o = {
        .buyer_id = res->has_buyer_id ? res->buyer_id : NULL,
        .instance = w->s->cfg.instance_id,
        .lock_mode = service_lock_mode_names[w->s->cfg.lock_mode],
        .lock_token = w->h ? dlock_token(w->h) : NULL, .nlines = res->nlines};
    for (int i = 0; i < res->nlines; i++)
        o.lines[i] = (store_line){res->lines[i].item_id, res->lines[i].quantity, 0,
                                  fence_or_none(w, res->lines[i].item_id)};
    return store_tx_reservation_confirm(c, rw->id, &o, &w->out.reservation, &w->out.order);
}

/* Cancels get the locked items' fences as they were claimed, by item (a
 * token 0: unfenced): the store matches them to the lines it reads itself,
 * whatever order it reads them in. */
static int res_write(struct locked *w, store_conn *c)
{
    struct res_write *rw = res_of(w);
    switch (rw->kind) {
    case SERVICE_RES_MAKE: return make_write(rw, c);
    case SERVICE_RES_CONFIRM: return confirm_write(rw, c);
    case SERVICE_RES_CANCEL:
        return store_tx_reservation_cancel(c, rw->id, w->items, w->held, w->n,
                                           &w->out.reservation);
    case SERVICE_RES_ORDER_CANCEL:
        return store_tx_order_cancel(c, rw->id,
                                     rw->cancel.has_request_id ? rw->cancel.request_id : NULL,
                                     w->s->cfg.instance_id, w->h ? dlock_token(w->h) : NULL,
                                     w->items, w->held, w->n, &w->out.order);
    }
    return STORE_ERR_IO;
}

/* ---- what it came to ---- */

/* Whether reservation res is what r asks for: exactly its lines (in any
 * order), for the same buyer (or none for none): another buyer's retry is
 * not this reservation and must not be told it was held. */
static int same_request(const store_reservation *res, const req_order *r)
{
    if (res->nlines != r->nlines || res->has_buyer_id != r->has_buyer_id ||
        (r->has_buyer_id && strcmp(res->buyer_id, r->buyer_id) != 0))
        return 0;
    for (int i = 0; i < r->nlines; i++) {
        int found = 0;
        for (int j = 0; j < res->nlines && !found; j++)
            found = res->lines[j].item_id == r->lines[i].item_id &&
                    res->lines[j].quantity == r->lines[i].quantity;
        if (!found)
            return 0;
    }
    return 1;
}

/* A reservation refused for stock: its short lines, in r's order, with the
 * stock there was (the store's lines carry it as available). */
static void make_short(service_result *out, const req_order *r)
{
    for (int i = 0; i < r->nlines; i++)
        for (int j = 0; j < out->reservation.nlines; j++) {
            const store_reservation_line *l = &out->reservation.lines[j];
            if (l->item_id == r->lines[i].item_id && l->available < r->lines[i].quantity)
                service_add_short(out, r, i, l->available);
        }
    service_fail(out, SERVICE_INSUFFICIENT, "not enough stock on %d line%s; nothing reserved",
                 out->nshort, out->nshort == 1 ? "" : "s");
}

/* What sets each kind apart in its answer, its metric and its log. */
struct res_kind {
    const char *noun, *id_name;  /* "no <noun> with id N"; the log's id field */
    enum service_outcome missing; /* the outcome of an id not found */
    int counted;                  /* a transition stockd_reservations_total counts */
    enum metrics_reservation metric;
    const char *event[3];         /* the log's event: done, replayed, not */
    const char *in_doubt;         /* commit_unknown: what the client can do */
};

static const struct res_kind kinds[] = {
    [SERVICE_RES_MAKE] = {"reservation", "reservationId", SERVICE_RESERVATION_NOT_FOUND, 1,
                          METRICS_RES_HELD,
                          {"reservation held", "reservation replayed", "reservation not held"},
                          NULL /* by whether it has a requestId: in_doubt() */},
    [SERVICE_RES_CONFIRM] = {"reservation", "reservationId", SERVICE_RESERVATION_NOT_FOUND, 1,
                             METRICS_RES_CONFIRMED,
                             {"reservation confirmed", "reservation confirm replayed",
                              "reservation not confirmed"},
                             "the confirm may have been written: retry: it is safe to repeat "
                             "(a repeat answers the order)"},
    [SERVICE_RES_CANCEL] = {"reservation", "reservationId", SERVICE_RESERVATION_NOT_FOUND, 1,
                            METRICS_RES_CANCELLED,
                            {"reservation cancelled", "reservation cancel replayed",
                             "reservation not cancelled"},
                            "the cancel may have been written: retry: it is safe to repeat"},
    [SERVICE_RES_ORDER_CANCEL] = {"order", "orderId", SERVICE_ORDER_NOT_FOUND, 0, METRICS_RES_COUNT,
                                  {"order cancelled", "order cancel replayed",
                                   "order not cancelled"},
                                  "the order's cancel may have been written: retry: it is safe "
                                  "to repeat"},
};

/* A write whose COMMIT's fate is unknown: what the client can safely do
 * next differs by kind (review 2.1): confirm and cancels are idempotent, a
 * reservation is only with a requestId. */
static void in_doubt(service_result *out, const struct res_write *rw, const store_conn *c)
{
    const req_order *r = &rw->r.order;
    if (rw->kind != SERVICE_RES_MAKE)
        service_fail(out, SERVICE_COMMIT_UNKNOWN, "%s; %s", store_errstr(c),
                     kinds[rw->kind].in_doubt);
    else if (r->has_request_id)
        service_fail(out, SERVICE_COMMIT_UNKNOWN, "%s; the reservation may have been held: "
                     "retry with the same requestId (\"%s\"), which answers it if it was",
                     store_errstr(c), r->request_id);
    else
        service_fail(out, SERVICE_COMMIT_UNKNOWN, "%s; the reservation may have been held, and "
                     "without a requestId a retry may hold the units twice: GET /items/{id} "
                     "shows each item's reserved units (a hold not confirmed lapses at its "
                     "expiry)", store_errstr(c));
}

static void res_result(struct locked *w, int rc, store_conn *c)
{
    struct res_write *rw = res_of(w);
    service_result *out = &w->out;
    if (rc == STORE_OK) {
        out->outcome = SERVICE_OK;
    } else if (rc == STORE_ERR_DUPLICATE && rw->kind == SERVICE_RES_MAKE) {
        if (same_request(&out->reservation, &rw->r.order))
            out->outcome = SERVICE_REPLAYED;
        else
            service_fail(out, SERVICE_CONFLICT, "requestId \"%s\" was already used for another "
                         "reservation (%lld: other lines or another buyerId); nothing reserved",
                         rw->r.order.request_id, (long long)out->reservation.id);
    } else if (rc == STORE_ERR_DUPLICATE) { /* confirmed, cancelled already: a repeat */
        out->outcome = SERVICE_REPLAYED;
    } else if (rc == STORE_ERR_INSUFFICIENT && rw->kind == SERVICE_RES_MAKE) {
        make_short(out, &rw->r.order);
    } else if (rc == STORE_ERR_STATE) {
        service_from_state(out, &out->reservation);
    } else if (rc == STORE_ERR_NOT_FOUND && rw->kind != SERVICE_RES_MAKE) {
        service_fail(out, kinds[rw->kind].missing, "no %s with id %lld", kinds[rw->kind].noun,
                     (long long)rw->id);
    } else if (rc == STORE_ERR_IN_DOUBT) {
        in_doubt(out, rw, c);
    } else {
        service_from_store(out, rc, c);
    }
}

static void res_end(struct locked *w)
{
    struct res_write *rw = res_of(w);
    service *s = w->s;
    const service_result *out = &w->out;
    enum service_outcome o = out->outcome;
    service_note_space(s, o, 1);
    const struct res_kind *k = &kinds[rw->kind];
    if (o == SERVICE_OK && k->counted)
        metrics_reservation(s->metrics, k->metric);
    else if (o == SERVICE_OK)
        metrics_order_cancelled(s->metrics);
    if (o == SERVICE_BUYER_LIMIT)
        metrics_buyer_limit_refusal(s->metrics);
    int how = o == SERVICE_OK ? 0 : o == SERVICE_REPLAYED ? 1 : 2;
    const char *rid = rw->kind == SERVICE_RES_MAKE && rw->r.order.has_request_id ? rw->r.order.request_id
                      : rw->kind == SERVICE_RES_ORDER_CANCEL && rw->cancel.has_request_id
                          ? rw->cancel.request_id
                          : NULL;
    int64_t id = rw->kind != SERVICE_RES_MAKE ? rw->id : how < 2 ? out->reservation.id : 0;
    service_log_locked(s, k->event[how], k->id_name, id, rid, rw->who, out, w);
    rw->done(out, rw->arg);
    free(rw);
}

static const struct locked_ops res_ops = {res_prepare, NULL, res_write, res_result, res_end};

/* ---- the door ---- */

void service_reserve_write(service *s, enum service_res_kind kind, int64_t id,
                           const req_reservation *r, const req_cancel *cancel, const char *who,
                           service_done *done, void *arg)
{
    struct res_write *rw = malloc(sizeof(*rw));
    if (rw == NULL) { /* its one allocation: refused here, once */
        service_result oom;
        service_result_clear(&oom);
        service_fail(&oom, SERVICE_NO_MEMORY, "out of memory; nothing done");
        done(&oom, arg);
        return;
    }
    memset(rw, 0, sizeof(*rw));
    rw->w.s = s, rw->w.ops = &res_ops;
    rw->kind = kind, rw->id = id, rw->done = done, rw->arg = arg;
    if (r)
        rw->r = *r;
    if (cancel)
        rw->cancel = *cancel;
    snprintf(rw->who, sizeof(rw->who), "%s", who);
    service_result_clear(&rw->w.out);
    service_locked_start(&rw->w);
}
