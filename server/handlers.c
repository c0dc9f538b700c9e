/* handlers.c - stockd's routes, one handler each: it parses the body or the
 * query with request.c, asks the service one thing, and makes the answer's
 * JSON; an outcome that failed becomes its status and error code here. The
 * plumbing that reads requests and sends answers is http.c, below. Orders
 * and stock sets start on the event thread (the service never blocks
 * them); the rest, which read or write the store at once, on a service
 * thread (the probes' one for /health and /metrics). */
#include "server/handlers.h"

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "server/auth.h"
#include "server/log.h"
#include "server/request.h"
#include "server/route.h"
#include "server/service.h"

#define ORDERS_DEFAULT 100 /* an item's orders shown when ?limit= is not given */

static const struct {
    int status;
    int retry_after;
    const char *code; /* the error code when not the outcome's name */
} outcome_http[SERVICE_OUTCOME_COUNT] = {
    [SERVICE_OK] = {200, 0},           [SERVICE_REPLAYED] = {200, 0},
    [SERVICE_NOT_FOUND] = {404, 0},    [SERVICE_ORDER_NOT_FOUND] = {404, 0},
    [SERVICE_INSUFFICIENT] = {409, 0},
    [SERVICE_CONFLICT] = {409, 0},     [SERVICE_LOCK_TIMEOUT] = {503, 1},
    [SERVICE_LOCK_INTERRUPTED] = {503, 0}, [SERVICE_LOCK_LOST] = {503, 0},
    [SERVICE_REDIS_DOWN] = {503, 1},   [SERVICE_STORAGE_BUSY] = {503, 1},
    [SERVICE_STORAGE_UNAVAILABLE] = {503, 1}, [SERVICE_COMMIT_UNKNOWN] = {503, 1},
    [SERVICE_STORAGE_ERROR] = {500, 0},    [SERVICE_SHUTTING_DOWN] = {503, 0},
    /* not 503 with Retry-After: every replica shares the full disk (one SQLite
     * file, one PostgreSQL server), so "again soon, or elsewhere" would only
     * multiply the load until an operator frees space (RFC 4918, 11.5) */
    [SERVICE_STORAGE_FULL] = {507, 0},
    [SERVICE_NO_MEMORY] = {503, 1},
    [SERVICE_RESERVATION_NOT_FOUND] = {404, 0},
    [SERVICE_RESERVATION_EXPIRED] = {409, 0},
    [SERVICE_RESERVATION_CANCELLED] = {409, 0},
    [SERVICE_RESERVATION_CONFIRMED] = {409, 0},
    [SERVICE_BUYER_LIMIT] = {409, 0},
    [SERVICE_BUYER_REQUIRED] = {400, 0, "invalid_request"}, /* a field the body lacks */
};

static json_t *reservation_state_json(const store_reservation *res);

/* A failed outcome as its error answer; 0 when the outcome is a success. */
static int reply_failure(http_reply *r, const service_result *res)
{
    enum service_outcome o = res->outcome;
    if (o == SERVICE_OK || o == SERVICE_REPLAYED)
        return 0;
    const char *code = outcome_http[o].code ? outcome_http[o].code : service_outcome_name(o);
    http_reply_error(r, outcome_http[o].status, code, "%s", res->message);
    r->retry_after = outcome_http[o].retry_after;
    const store_limit_info *l = &res->limit;
    if (o == SERVICE_BUYER_LIMIT) {
        json_t *fig = json_pack("{s:I, s:I, s:I, s:I}", "itemId", (json_int_t)l->item_id, "limit",
                                (json_int_t)l->limit, "had", (json_int_t)l->had, "requested",
                                (json_int_t)l->asked);
        json_object_update(r->json, fig);
        json_decref(fig);
    } else if (o == SERVICE_BUYER_REQUIRED) {
        json_object_set_new(r->json, "itemId", json_integer(l->item_id));
    } else if (o >= SERVICE_RESERVATION_EXPIRED && o <= SERVICE_RESERVATION_CONFIRMED) {
        json_object_set_new(r->json, "state", reservation_state_json(&res->reservation));
    }
    return 1;
}

static json_t *request_id_json(const store_order_info *o)
{
    return o->has_request_id ? http_json_text(o->request_id) : json_null();
}

static json_t *short_json(const service_short_line *l)
{
    return json_pack("{s:I, s:I, s:I}", "itemId", (json_int_t)l->item_id, "remaining",
                     (json_int_t)l->remaining, "requested", (json_int_t)l->requested);
}

/* The short lines of a refusal for stock, as POST /orders answers them. */
static void add_shorts(http_reply *r, const service_result *res)
{
    json_t *lines = json_array();
    for (int i = 0; i < res->nshort; i++)
        json_array_append_new(lines, short_json(&res->shorts[i]));
    json_object_set_new(r->json, "lines", lines);
}

/* Answers rq with res's failure (a refusal for stock with its short lines)
 * and returns 1; 0 when res is a success, not answered. */
static int answer_failure(http_request *rq, const service_result *res)
{
    http_reply r = {0};
    if (!reply_failure(&r, res))
        return 0;
    if (res->outcome == SERVICE_INSUFFICIENT)
        add_shorts(&r, res);
    http_answer(rq, &r);
    return 1;
}

/* A body parse failure as its 400 answer; 0 when the body parsed. */
static int reply_bad_body(http_reply *r, int rc, const char *err)
{
    if (rc == REQ_OK)
        return 0;
    http_reply_error(r, 400, rc == REQ_ERR_JSON ? "invalid_json" : "invalid_request", "%s", err);
    return 1;
}

/* ---- /reduceStock ---- */

/* Parses rq's order body (one line for /reduceStock): 0 with *order set,
 * else answered 400. */
static int parse_order(http_request *rq, int reduce, const char *who, req_order *order)
{
    char err[256];
    http_reply r = {0};
    int rc = reduce ? req_parse_reduce(rq->body, rq->len, order, err, sizeof(err))
                    : req_parse_order(rq->body, rq->len, order, err, sizeof(err));
    if (!reply_bad_body(&r, rc, err)) {
        snprintf(order->token_name, sizeof(order->token_name), "%s", who);
        snprintf(order->client, sizeof(order->client), "%s", http_client(rq));
        return 0;
    }
    http_answer(rq, &r);
    return -1;
}

static void reduce_done(const service_result *res, void *arg)
{
    http_request *rq = arg;
    http_reply reply = {0}, *r = &reply;
    if (reply_failure(r, res)) {
        if (res->outcome == SERVICE_INSUFFICIENT) { /* its line's figures, at the top level */
            json_t *line = short_json(&res->shorts[0]);
            json_object_update(r->json, line);
            json_decref(line);
        }
        http_answer(rq, r);
        return;
    }
    const store_order *o = &res->order;
    r->status = 200;
    r->json = json_pack("{s:I, s:I, s:I, s:I, s:o, s:b}", "itemId",
                        (json_int_t)o->lines[0].item_id, "quantity",
                        (json_int_t)o->lines[0].quantity, "remaining",
                        (json_int_t)o->lines[0].remaining, "orderId",
                        (json_int_t)o->info.order_id, "requestId", request_id_json(&o->info),
                        "replayed", res->outcome == SERVICE_REPLAYED);
    http_answer(rq, r);
}

/* POST /reduceStock: answered by reduce_done, at once or once its batch
 * committed. */
static void handle_reduce(http_request *rq, const char *who)
{
    req_order req;
    if (parse_order(rq, 1, who, &req) == 0)
        service_reduce(rq->svc, &req, reduce_done, rq);
}

/* ---- /orders and /orders/{id} ---- */

/* An order's lines, each with its item's stock after it as left ("remaining"
 * for an order placed, "available" for one cancelled). */
static json_t *lines_json(const store_order *o, const char *left)
{
    json_t *lines = json_array();
    for (int i = 0; i < o->nlines; i++)
        json_array_append_new(lines, json_pack("{s:I, s:I, s:I}", "itemId",
                                               (json_int_t)o->lines[i].item_id, "quantity",
                                               (json_int_t)o->lines[i].quantity, left,
                                               (json_int_t)o->lines[i].remaining));
    return lines;
}

/* An order placed (201), replayed (200) or refused, as POST /orders answers
 * it; a confirm's with its reservation (reservation_id, 0 for none). */
static void order_answer(http_request *rq, const service_result *res, int64_t reservation_id)
{
    if (answer_failure(rq, res))
        return;
    http_reply reply = {0}, *r = &reply;
    const store_order *o = &res->order;
    r->status = res->outcome == SERVICE_REPLAYED ? 200 : 201; /* a replay creates nothing */
    if (r->status == 201)
        snprintf(r->location, sizeof(r->location), "/orders/%lld", (long long)o->info.order_id);
    r->json = json_pack("{s:I, s:o, s:o, s:b}", "orderId", (json_int_t)o->info.order_id,
                        "requestId", request_id_json(&o->info), "lines",
                        lines_json(o, "remaining"), "replayed",
                        res->outcome == SERVICE_REPLAYED);
    if (reservation_id)
        json_object_set_new(r->json, "reservationId", json_integer(reservation_id));
    http_answer(rq, r);
}

static void order_done(const service_result *res, void *arg) { order_answer(arg, res, 0); }

/* POST /orders: answered by order_done. */
static void handle_order(http_request *rq, const char *who)
{
    req_order req;
    if (parse_order(rq, 0, who, &req) == 0)
        service_place_order(rq->svc, &req, order_done, rq);
}

static void show_order(const http_request *rq, http_reply *r)
{
    service_result res;
    service_get_order(rq->svc, rq->route->path_id, &res);
    if (reply_failure(r, &res))
        return;
    const store_order *o = &res.order;
    json_t *lines = json_array();
    for (int i = 0; i < o->nlines; i++) {
        const store_line *l = &o->lines[i];
        json_array_append_new(lines, json_pack("{s:I, s:I, s:I, s:I, s:i}", "itemId",
                                               (json_int_t)l->item_id, "quantity",
                                               (json_int_t)l->quantity, "remaining",
                                               (json_int_t)l->remaining, "fence",
                                               (json_int_t)l->fence.fence, "fenceSeq",
                                               l->fence.seq));
    }
    r->status = 200;
    r->json = json_pack("{s:I, s:o, s:o, s:s, s:s, s:o, s:o, s:b}", "orderId",
                        (json_int_t)o->info.order_id, "requestId", request_id_json(&o->info),
                        "instance", http_json_text(o->info.instance), "lockMode", o->info.lock_mode,
                        "createdAt", o->info.created_at, "lines", lines, "reservationId",
                        o->info.reservation_id ? json_integer(o->info.reservation_id)
                                               : json_null(),
                        "cancelled", o->info.cancelled);
    if (o->info.has_buyer_id)
        json_object_set_new(r->json, "buyerId", http_json_text(o->info.buyer_id));
}

/* ---- /reservations and an order's cancel ---- */

static json_t *reservation_state_json(const store_reservation *res)
{
    return json_string(service_reservation_state(res));
}

/* Unix time in ms as RFC 3339 in UTC, to the millisecond. */
static json_t *time_json(int64_t ms)
{
    time_t secs = (time_t)(ms / 1000);
    struct tm tm;
    char buf[48];
    gmtime_r(&secs, &tm);
    size_t n = strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, sizeof(buf) - n, ".%03dZ", (int)(ms % 1000));
    return json_string(buf);
}

/* A reservation as every route answers it, with its own hold (the one it
 * was made or last extended with, not the server's default). */
static json_t *reservation_json(const store_reservation *res)
{
    json_t *lines = json_array();
    for (int i = 0; i < res->nlines; i++)
        json_array_append_new(lines, json_pack("{s:I, s:I, s:I}", "itemId",
                                               (json_int_t)res->lines[i].item_id, "quantity",
                                               (json_int_t)res->lines[i].quantity, "available",
                                               (json_int_t)res->lines[i].available));
    json_t *j = json_pack("{s:I, s:o, s:o, s:o, s:o, s:o, s:s}", "reservationId",
                          (json_int_t)res->id, "state", reservation_state_json(res), "expiresAt",
                          time_json(res->expires_at_ms), "lines", lines, "orderId",
                          res->order_id ? json_integer(res->order_id) : json_null(), "instance",
                          http_json_text(res->instance), "createdAt", res->created_at);
    if (res->hold_ms)
        json_object_set_new(j, "holdMs", json_integer(res->hold_ms));
    if (res->has_buyer_id)
        json_object_set_new(j, "buyerId", http_json_text(res->buyer_id));
    if (res->has_request_id)
        json_object_set_new(j, "requestId", http_json_text(res->request_id));
    return j;
}

/* A reservation made (201), replayed (200) or refused; also a cancel's
 * answer (200), through reservation_done. */
static void reservation_answer(http_request *rq, const service_result *res, int created)
{
    if (answer_failure(rq, res))
        return;
    http_reply reply = {0}, *r = &reply;
    int replayed = res->outcome == SERVICE_REPLAYED;
    r->status = created && !replayed ? 201 : 200;
    if (r->status == 201)
        snprintf(r->location, sizeof(r->location), "/reservations/%lld",
                 (long long)res->reservation.id);
    r->json = reservation_json(&res->reservation);
    json_object_set_new(r->json, "replayed", json_boolean(replayed));
    http_answer(rq, r);
}

static void reserve_done(const service_result *res, void *arg)
{
    reservation_answer(arg, res, 1);
}

static void reservation_done(const service_result *res, void *arg)
{
    reservation_answer(arg, res, 0);
}

/* POST /reservations: answered by reserve_done. */
static void handle_reserve(http_request *rq, const char *who)
{
    req_reservation req;
    char err[256];
    http_reply r = {0};
    int rc = req_parse_reservation(rq->body, rq->len, service_max_hold_ms(rq->svc), &req, err,
                                   sizeof(err));
    if (reply_bad_body(&r, rc, err)) {
        http_answer(rq, &r);
        return;
    }
    service_reserve(rq->svc, &req, who, reserve_done, rq);
}

/* A confirm: the order as POST /orders answers it, with its reservation. */
static void confirm_done(const service_result *res, void *arg)
{
    http_request *rq = arg;
    order_answer(rq, res, rq->route->path_id);
}

static void order_cancel_done(const service_result *res, void *arg)
{
    http_request *rq = arg;
    if (answer_failure(rq, res))
        return;
    http_reply reply = {0}, *r = &reply;
    const store_order *o = &res->order;
    r->status = 200;
    r->json = json_pack("{s:I, s:b, s:o, s:b}", "orderId", (json_int_t)o->info.order_id,
                        "cancelled", 1, "lines", lines_json(o, "available"), "replayed",
                        res->outcome == SERVICE_REPLAYED);
    http_answer(rq, r);
}

/* POST /orders/{id}/cancel: answered by order_cancel_done. */
static void handle_order_cancel(http_request *rq, const char *who)
{
    req_cancel req;
    char err[256];
    http_reply r = {0};
    if (reply_bad_body(&r, req_parse_cancel(rq->body, rq->len, &req, err, sizeof(err)), err))
        http_answer(rq, &r);
    else
        service_order_cancel(rq->svc, rq->route->path_id, &req, who, order_cancel_done, rq);
}

/* POST /reservations/{id}/extend, on a service thread. */
static void extend_reservation(const http_request *rq, const char *who, http_reply *r)
{
    int64_t hold_ms;
    char err[256];
    int rc = req_parse_extend(rq->body, rq->len, service_max_hold_ms(rq->svc), &hold_ms, err,
                              sizeof(err));
    if (reply_bad_body(r, rc, err))
        return;
    service_result res;
    service_reservation_extend(rq->svc, rq->route->path_id, hold_ms, who, &res);
    if (reply_failure(r, &res))
        return;
    r->status = 200;
    r->json = reservation_json(&res.reservation);
}

static void show_reservation(const http_request *rq, http_reply *r)
{
    service_result res;
    service_get_reservation(rq->svc, rq->route->path_id, &res);
    if (reply_failure(r, &res))
        return;
    r->status = 200;
    r->json = reservation_json(&res.reservation);
}

/* ---- /items and /items/{id} ---- */

static json_t *item_json(const store_item *it)
{
    return json_pack("{s:I, s:o, s:I, s:I, s:I, s:I, s:I, s:o}", "id", (json_int_t)it->id,
                     "name", http_json_text(it->name), "stock", (json_int_t)it->stock,
                     "available", (json_int_t)it->stock, "reserved", (json_int_t)it->reserved,
                     "sold", (json_int_t)it->sold, "returned", (json_int_t)it->returned,
                     "perBuyerLimit", it->per_buyer_limit ? json_integer(it->per_buyer_limit)
                                                          : json_null());
}

static void add_item(const store_item *it, void *arr) { json_array_append_new(arr, item_json(it)); }

/* One of an item's lines, as one of "the orders that took from it". */
static void add_line(const store_order_info *o, const store_line *l, void *arr)
{
    json_array_append_new(
        arr, json_pack("{s:I, s:I, s:I, s:o, s:o, s:s, s:I, s:i, s:s}", "orderId",
                       (json_int_t)o->order_id, "quantity", (json_int_t)l->quantity, "remaining",
                       (json_int_t)l->remaining, "requestId", request_id_json(o), "instance",
                       http_json_text(o->instance), "lockMode", o->lock_mode, "fence",
                       (json_int_t)l->fence.fence, "fenceSeq", l->fence.seq, "createdAt",
                       o->created_at));
}

/* One page of a listing: ?limit= rows (at most RULE_PAGE_MAX) after the row
 * whose id is ?after= in the listing's order. Memory per answer stays
 * bounded however long the ledger grows. */
struct page {
    int64_t limit, after; /* after 0: from the start */
};

/* Reads ?limit= and ?after=. Returns 0, or -1 with a 400 in r. */
static int page_args(const http_request *rq, int64_t def, struct page *p, http_reply *r)
{
    const char *limit = http_query(rq, "limit");
    const char *after = http_query(rq, "after");
    if (req_parse_int_arg(limit, def, 0, RULE_PAGE_MAX, &p->limit) != 0) {
        http_reply_error(r, 400, "invalid_request", "limit must be 0..%d; page on with ?after=",
                         RULE_PAGE_MAX);
        return -1;
    }
    if (req_parse_int_arg(after, 0, 0, INT64_MAX, &p->after) != 0) {
        http_reply_error(r, 400, "invalid_request", "after must be an id 0..%lld",
                         (long long)INT64_MAX);
        return -1;
    }
    return 0;
}

/* The service was asked for limit + 1 rows: when it had more than limit,
 * the last is dropped and "nextAfter" names the id to page on from (else
 * null). */
static void page_finish(json_t *obj, json_t *rows, const struct page *p, const char *id_key)
{
    json_t *next = json_null();
    if (json_array_size(rows) > (size_t)p->limit) {
        json_array_remove(rows, json_array_size(rows) - 1);
        next = json_object_get(json_array_get(rows, json_array_size(rows) - 1), id_key);
        next = next ? json_incref(next) : json_null();
    }
    json_object_set_new(obj, "nextAfter", next);
}

static void list_items(const http_request *rq, http_reply *r)
{
    struct page p;
    if (page_args(rq, RULE_PAGE_MAX, &p, r) != 0)
        return;
    json_t *items = json_array();
    service_result res;
    service_list_items(rq->svc, p.after, (int)p.limit + 1, add_item, items, &res);
    if (reply_failure(r, &res)) {
        json_decref(items);
        return;
    }
    r->status = 200;
    r->json = json_pack("{s:o}", "items", items);
    page_finish(r->json, items, &p, "id");
}

static void create_item(const http_request *rq, const char *who, http_reply *r)
{
    req_item req;
    char err[256];
    if (reply_bad_body(r, req_parse_item(rq->body, rq->len, 1, &req, err, sizeof(err)), err))
        return;
    service_result res;
    service_create_item(rq->svc, &req, who, &res);
    if (reply_failure(r, &res))
        return;
    int replayed = res.outcome == SERVICE_REPLAYED;
    r->status = replayed ? 200 : 201; /* a replay creates nothing, as an order's */
    if (!replayed)
        snprintf(r->location, sizeof(r->location), "/items/%lld", (long long)res.item.id);
    r->json = item_json(&res.item);
    json_object_set_new(r->json, "requestId", req.has_request_id
                                                  ? http_json_text(req.request_id)
                                                  : json_null());
    json_object_set_new(r->json, "replayed", json_boolean(replayed));
}

static void stock_set(const service_result *res, void *arg)
{
    http_reply r = {0};
    if (!reply_failure(&r, res)) {
        r.status = 200;
        r.json = item_json(&res->item);
    }
    http_answer(arg, &r);
}

/* PUT /items/{id}: answered by stock_set, once the item's lock was had. */
static void set_stock(http_request *rq, const char *who)
{
    req_item req;
    char err[256];
    http_reply r = {0};
    if (reply_bad_body(&r, req_parse_item(rq->body, rq->len, 0, &req, err, sizeof(err)), err))
        http_answer(rq, &r);
    else
        service_set_stock(rq->svc, rq->route->path_id, &req, who, stock_set, rq);
}

static void show_item(const http_request *rq, http_reply *r)
{
    struct page p;
    if (page_args(rq, ORDERS_DEFAULT, &p, r) != 0)
        return;
    json_t *orders = json_array();
    service_result res;
    service_item_ledger(rq->svc, rq->route->path_id, p.after, (int)p.limit + 1, add_line, orders,
                        &res);
    if (reply_failure(r, &res)) {
        json_decref(orders);
        return;
    }
    r->status = 200;
    r->json = item_json(&res.item);
    json_object_set_new(r->json, "orderCount", json_integer(res.item.line_count));
    json_object_set_new(r->json, "orders", orders);
    page_finish(r->json, orders, &p, "orderId");
}

/* ---- /health and /metrics ---- */

static void handle_health(const http_request *rq, http_reply *r)
{
    service_health h;
    service_check_health(rq->svc, &h);
    /* a full disk is not 200: nothing can be sold here (nor on the replicas
     * that share that disk), though reads still answer */
    r->status = h.ok && !h.storage_full && !h.draining ? 200 : 503;
    r->json = json_pack("{s:s, s:o, s:s, s:b, s:o, s:s, s:o}", "status",
                        h.draining ? "draining" : !h.ok ? "unavailable"
                        : h.degraded || h.storage_full ? "degraded" : "ok",
                        "storage", http_json_text(h.storage), "storageBackend", h.backend,
                        "storageFull", h.storage_full, "redis", http_json_text(h.redis), "lockMode",
                        h.lock_mode, "instance", http_json_text(h.instance));
    if (h.storage_node[0]) /* a database server's: which one, after a failover */
        json_object_set_new(r->json, "storageNode", json_string(h.storage_node));
    if (h.nodes > 0) { /* each Redis server, for the operator */
        json_t *nodes = json_array();
        for (int i = 0; i < h.nodes; i++)
            json_array_append_new(nodes, json_pack("{s:o, s:b}", "node",
                                                   http_json_text(h.node[i].name), "up",
                                                   h.node[i].up));
        json_object_set_new(r->json, "redisNodes", nodes);
    }
}

static void handle_metrics(const http_request *rq, http_reply *r)
{
    r->text = service_metrics_text(rq->svc, http_reaped(rq->server), &r->text_len);
    if (r->text == NULL)
        http_reply_error(r, 500, "out_of_memory", "cannot render metrics");
    else
        r->status = 200;
}

/* ---- who may ask ---- */

/* The name of the token rq came with, for the log; set by refuse_caller. */
struct who {
    char name[RULE_TOKEN_NAME_MAX + 1];
};

/* RFC 6750 3: a 401 says how to authenticate, and why a token failed. */
#define CHALLENGE "Bearer realm=\"stockd\""

/* Answers rq 401 or 403 when its token may not ask for its route (auth.h):
 * 1 then, else 0 with the token's name (if known) in who. The answers never
 * show the token. */
static int refuse_caller(http_request *rq, struct who *who)
{
    enum route_role role = rq->route->role;
    const char *need = route_role_name(role);
    http_reply r = {0};
    switch (service_authorize(rq->svc, http_header(rq, "Authorization"), role, who->name,
                              sizeof(who->name))) {
    case AUTH_OK: return 0;
    case AUTH_NO_TOKEN:
        http_reply_error(&r, 401, "unauthorized", "%s %s needs a token of role %s: "
                         "Authorization: Bearer TOKEN", rq->method, rq->url, need);
        r.www_authenticate = CHALLENGE;
        break;
    case AUTH_BAD_TOKEN:
        http_reply_error(&r, 401, "unauthorized", "the bearer token is not one of this "
                         "server's; %s %s needs a token of role %s", rq->method, rq->url, need);
        r.www_authenticate = CHALLENGE ", error=\"invalid_token\"";
        break;
    case AUTH_FORBIDDEN:
        http_reply_error(&r, 403, "forbidden", "token %s has no role %s, which %s %s needs",
                         who->name, need, rq->method, rq->url);
        break;
    }
    /* who knocks without the right token: behind a proxy, the client it
     * names; once a second at most (one who hammers without a token would
     * fill the log; /metrics counts every 401 and 403 by route) */
    if (http_log_due(rq->server, HTTP_LOG_NOT_AUTHORIZED))
        log_kv(LOG_INFO, "request not authorized (logged once a second at most)",
               LOG_STR("method", rq->method), LOG_STR("path", rq->url),
               LOG_INT("status", r.status), LOG_STR("tokenName", who->name[0] ? who->name : NULL),
               LOG_STR("client", http_client(rq)));
    http_answer(rq, &r);
    return 1;
}

/* ---- every route ---- */

/* The routes that read or write the store at once, on a service thread. */
static void answer_blocking(exec_task *t)
{
    http_request *rq = (http_request *)((char *)t - offsetof(http_request, task));
    struct who who;
    if (refuse_caller(rq, &who))
        return;
    int post = strcmp(rq->method, "POST") == 0;
    http_reply r = {0};
    switch (rq->route->id) {
    case ROUTE_METRICS: handle_metrics(rq, &r); break;
    case ROUTE_HEALTH: handle_health(rq, &r); break;
    case ROUTE_ITEMS: post ? create_item(rq, who.name, &r) : list_items(rq, &r); break;
    case ROUTE_ORDER: show_order(rq, &r); break;
    case ROUTE_RESERVATION: show_reservation(rq, &r); break;
    case ROUTE_RESERVATION_EXTEND: extend_reservation(rq, who.name, &r); break;
    default: show_item(rq, &r); break;
    }
    http_answer(rq, &r);
}

void handlers_answer(http_request *rq)
{
    int id = rq->route->id;
    if (route_is_probe(id)) {
        service_run_probe(rq->svc, &rq->task, answer_blocking);
        return;
    }
    int put = strcmp(rq->method, "PUT") == 0;
    if (id == ROUTE_ITEMS || id == ROUTE_ORDER || id == ROUTE_RESERVATION ||
        id == ROUTE_RESERVATION_EXTEND || (id == ROUTE_ITEM && !put)) {
        service_run(rq->svc, &rq->task, answer_blocking);
        return;
    }
    /* orders, stock sets and the writes under items' locks: here, on the
     * event thread; answered when done, later */
    struct who who;
    if (refuse_caller(rq, &who))
        return;
    switch (id) {
    case ROUTE_REDUCE: handle_reduce(rq, who.name); break;
    case ROUTE_ORDERS: handle_order(rq, who.name); break;
    case ROUTE_RESERVATIONS: handle_reserve(rq, who.name); break;
    case ROUTE_RESERVATION_CONFIRM:
        service_reservation_confirm(rq->svc, rq->route->path_id, who.name, confirm_done, rq);
        break;
    case ROUTE_RESERVATION_CANCEL:
        service_reservation_cancel(rq->svc, rq->route->path_id, who.name, reservation_done, rq);
        break;
    case ROUTE_ORDER_CANCEL: handle_order_cancel(rq, who.name); break;
    default: set_stock(rq, who.name); break;
    }
}
