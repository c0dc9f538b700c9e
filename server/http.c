/* http.c - stockd's HTTP server: libmicrohttpd plumbing (request bodies,
 * limits, graceful stop), JSON responses, and the route handlers. */
#include "http.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "metrics.h"
#include "reaper.h"
#include "request.h"
#include "route.h"

#define DISCARD_MAX (1024 * 1024) /* past the limit, drop this much before closing */
#define STACK_SIZE (512 * 1024)
#define PAGE_MAX 1000     /* rows per answer of a listing; more by ?after= */
#define ORDERS_DEFAULT 100

struct http_server {
    http_deps deps;
    struct MHD_Daemon *daemon;
    reaper *reaper; /* deadlines for slow senders */
    _Atomic int draining;
};

/* Per-request state, from the headers to NOTIFY_COMPLETED. */
struct request {
    char *body;
    size_t len;
    size_t discarded;
    int too_large;
};

/* What a handler answers: a status, a JSON body (or text), optional headers. */
struct reply {
    int status;
    json_t *json;      /* owned; NULL when text is set */
    char *text;        /* owned, malloc'd (metrics) */
    size_t text_len;
    const char *location;
    int retry_after;   /* seconds; 0 = no header */
    const char *allow; /* 405 */
};

/* Length of the well-formed UTF-8 sequence at s (n bytes left): 1..4, or 0
 * when it is not one (a stray or truncated byte, an overlong form, a
 * surrogate, beyond U+10FFFF). */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    if (s[0] < 0x80)
        return 1;
    size_t len = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 ? 2 : 0;
    if (len == 0 || len > n || s[0] > 0xf4)
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    if ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] > 0x9f) ||
        (s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] > 0x8f))
        return 0; /* overlong, surrogate, or past U+10FFFF */
    return len;
}

/* A JSON string of s with every byte that is not part of valid UTF-8 (raw
 * bytes from a URL, a message cut mid-character) replaced by U+FFFD: jansson
 * refuses invalid UTF-8, and an answer must never fail to build for it. */
static json_t *json_text(const char *s)
{
    size_t n = strlen(s), used = 0;
    char *out = malloc(3 * n + 1);
    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < n;) {
        size_t len = utf8_len((const unsigned char *)s + i, n - i);
        if (len == 0) {
            memcpy(out + used, "\xef\xbf\xbd", 3), used += 3, i++;
        } else {
            memcpy(out + used, s + i, len), used += len, i += len;
        }
    }
    json_t *j = json_stringn_nocheck(out, used);
    free(out);
    return j;
}

static void reply_error(struct reply *r, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void reply_error(struct reply *r, int status, const char *code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    json_decref(r->json);
    r->status = status;
    r->json = json_pack("{s:s, s:o}", "error", code, "message", json_text(msg));
}

static enum MHD_Result send_reply(struct MHD_Connection *conn, struct reply *r, int closing)
{
    char *body = r->text;
    size_t len = r->text_len;
    if (body == NULL) {
        body = r->json ? json_dumps(r->json, JSON_COMPACT) : NULL;
        len = body ? strlen(body) : 0;
    }
    json_decref(r->json);
    struct MHD_Response *resp =
        body ? MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE) : NULL;
    if (resp == NULL) { /* out of memory: drop the connection rather than lie */
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            r->text ? "text/plain; version=0.0.4" : "application/json");
    if (r->location)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_LOCATION, r->location);
    if (r->allow)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, r->allow);
    if (r->retry_after) {
        char v[16];
        snprintf(v, sizeof(v), "%d", r->retry_after);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, v);
    }
    if (closing)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ok = MHD_queue_response(conn, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    return ok;
}

/* ---- /reduceStock ---- */

static const struct {
    int status;
    int retry_after;
} outcome_http[STOCK_OUTCOME_COUNT] = {
    [STOCK_OK] = {200, 0},           [STOCK_REPLAYED] = {200, 0},
    [STOCK_NOT_FOUND] = {404, 0},    [STOCK_INSUFFICIENT] = {409, 0},
    [STOCK_CONFLICT] = {409, 0},     [STOCK_LOCK_TIMEOUT] = {503, 1},
    [STOCK_LOCK_INTERRUPTED] = {503, 0}, [STOCK_LOCK_LOST] = {503, 0},
    [STOCK_REDIS_DOWN] = {503, 1},   [STOCK_STORAGE_BUSY] = {503, 1},
    [STOCK_STORAGE_ERROR] = {500, 0},    [STOCK_SHUTTING_DOWN] = {503, 0},
};

static void reply_outcome(struct reply *r, const stock_result *res, const req_reduce *req)
{
    enum stock_outcome o = res->outcome;
    r->status = outcome_http[o].status;
    r->retry_after = outcome_http[o].retry_after;
    if (o == STOCK_OK || o == STOCK_REPLAYED) {
        const store_order *ord = &res->order;
        r->json = json_pack("{s:I, s:I, s:I, s:I, s:o, s:b}", "itemId", (json_int_t)ord->item_id,
                            "quantity", (json_int_t)ord->quantity, "remaining",
                            (json_int_t)ord->remaining, "orderId", (json_int_t)ord->order_id,
                            "requestId",
                            ord->has_request_id ? json_text(ord->request_id) : json_null(),
                            "replayed", o == STOCK_REPLAYED);
        return;
    }
    r->json = json_pack("{s:s, s:o}", "error", stock_outcome_name(o), "message",
                        json_text(res->message));
    if (o == STOCK_INSUFFICIENT && req) {
        json_object_set_new(r->json, "itemId", json_integer(req->item_id));
        json_object_set_new(r->json, "remaining", json_integer(res->remaining));
        json_object_set_new(r->json, "requested", json_integer(req->quantity));
    }
}

static void handle_reduce(http_server *s, store_conn *c, const struct request *rq,
                          struct reply *r)
{
    req_reduce req;
    char err[256];
    int rc = req_parse_reduce(rq->body, rq->len, &req, err, sizeof(err));
    if (rc != REQ_OK) {
        reply_error(r, 400, rc == REQ_ERR_JSON ? "invalid_json" : "invalid_request", "%s", err);
        return;
    }
    stock_result res;
    stock_reduce(s->deps.stock, s->deps.locks, s->deps.batches, c, &req, &res);
    metrics_outcome(res.outcome, req.quantity);
    reply_outcome(r, &res, &req);
}

/* ---- /items and /items/{id} ---- */

static json_t *item_json(const store_item *it)
{
    return json_pack("{s:I, s:o, s:I, s:I}", "id", (json_int_t)it->id, "name",
                     json_text(it->name), "stock", (json_int_t)it->stock, "sold",
                     (json_int_t)it->sold);
}

static void add_item(const store_item *it, void *arr) { json_array_append_new(arr, item_json(it)); }

static void add_order(const store_order *o, void *arr)
{
    json_array_append_new(
        arr, json_pack("{s:I, s:I, s:I, s:o, s:o, s:s, s:I, s:i, s:s}", "orderId",
                       (json_int_t)o->order_id, "quantity", (json_int_t)o->quantity, "remaining",
                       (json_int_t)o->remaining, "requestId",
                       o->has_request_id ? json_text(o->request_id) : json_null(), "instance",
                       json_text(o->instance), "lockMode", o->lock_mode, "fence",
                       (json_int_t)o->fence, "fenceSeq", o->fence_seq, "createdAt",
                       o->created_at));
}

static void reply_store_error(struct reply *r, int rc, store_conn *c)
{
    if (rc == STORE_ERR_NOT_FOUND) {
        reply_error(r, 404, "item_not_found", "no item with this id");
    } else if (rc == STORE_ERR_BUSY) {
        reply_error(r, 503, "storage_busy", "database busy: %s", store_errstr(c));
        r->retry_after = 1;
    } else {
        reply_error(r, 500, "storage_error", "storage error: %s", store_errstr(c));
    }
}

/* One page of a listing: ?limit= rows (at most PAGE_MAX) after the row whose
 * id is ?after= in the listing's order. Memory per answer stays bounded
 * however long the ledger grows. */
struct page {
    int64_t limit, after; /* after 0: from the start */
};

/* Reads ?limit= and ?after=. Returns 0, or -1 with a 400 in r. */
static int page_args(struct MHD_Connection *conn, int64_t def, struct page *p, struct reply *r)
{
    const char *limit = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "limit");
    const char *after = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "after");
    if (req_parse_int_arg(limit, def, 0, PAGE_MAX, &p->limit) != 0) {
        reply_error(r, 400, "invalid_request", "limit must be 0..%d; page on with ?after=",
                    PAGE_MAX);
        return -1;
    }
    if (req_parse_int_arg(after, 0, 0, INT64_MAX, &p->after) != 0) {
        reply_error(r, 400, "invalid_request", "after must be an id 0..%lld", (long long)INT64_MAX);
        return -1;
    }
    return 0;
}

/* The store was asked for limit + 1 rows: when it had more than limit, the
 * last is dropped and "nextAfter" names the id to page on from (else null). */
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

static void handle_items(http_server *s, struct MHD_Connection *conn, store_conn *c,
                         const char *method, const struct request *rq, struct reply *r)
{
    static _Thread_local char location[64];
    if (strcmp(method, "POST") != 0) {
        struct page p;
        if (page_args(conn, PAGE_MAX, &p, r) != 0)
            return;
        json_t *items = json_array();
        int rc = store_item_list(c, p.after, (int)p.limit + 1, add_item, items);
        if (rc != STORE_OK) {
            json_decref(items);
            reply_store_error(r, rc, c);
            return;
        }
        r->status = 200;
        r->json = json_pack("{s:o}", "items", items);
        page_finish(r->json, items, &p, "id");
        return;
    }
    req_item req;
    store_item it;
    char err[256];
    int rc = req_parse_item(rq->body, rq->len, 1, &req, err, sizeof(err));
    if (rc != REQ_OK) {
        reply_error(r, 400, rc == REQ_ERR_JSON ? "invalid_json" : "invalid_request", "%s", err);
        return;
    }
    if ((rc = store_item_create(c, req.name, req.stock, &it)) != STORE_OK) {
        reply_store_error(r, rc, c);
        return;
    }
    log_event(LOG_INFO, "item created", "item=%lld stock=%lld instance=%s", (long long)it.id,
              (long long)it.stock, s->deps.stock->instance_id);
    snprintf(location, sizeof(location), "/items/%lld", (long long)it.id);
    r->status = 201;
    r->json = item_json(&it);
    r->location = location;
}

static void handle_item(http_server *s, struct MHD_Connection *conn, store_conn *c,
                        const char *method, const route_result *rt, const struct request *rq,
                        struct reply *r)
{
    store_item it;
    char err[256];
    if (strcmp(method, "PUT") == 0) {
        req_item req;
        int rc = req_parse_item(rq->body, rq->len, 0, &req, err, sizeof(err));
        if (rc != REQ_OK) {
            reply_error(r, 400, rc == REQ_ERR_JSON ? "invalid_json" : "invalid_request", "%s", err);
            return;
        }
        stock_result res;
        stock_set(s->deps.stock, s->deps.locks, c, rt->item_id, req.stock, &res);
        if (res.outcome != STOCK_OK) {
            reply_outcome(r, &res, NULL);
            return;
        }
        r->status = 200;
        r->json = item_json(&res.item);
        return;
    }
    struct page p;
    if (page_args(conn, ORDERS_DEFAULT, &p, r) != 0)
        return;
    int rc = store_item_get(c, rt->item_id, &it);
    json_t *orders = json_array();
    if (rc == STORE_OK)
        rc = store_orders(c, rt->item_id, p.after, (int)p.limit + 1, add_order, orders);
    if (rc != STORE_OK) {
        json_decref(orders);
        reply_store_error(r, rc, c);
        return;
    }
    r->status = 200;
    r->json = item_json(&it);
    json_object_set_new(r->json, "orderCount", json_integer(it.order_count));
    json_object_set_new(r->json, "orders", orders);
    page_finish(r->json, orders, &p, "orderId");
}

/* ---- /health and /metrics ---- */

static void handle_health(http_server *s, store_conn *c, struct reply *r)
{
    int db_ok = c && store_ping(c) == STORE_OK;
    int ping = s->deps.locks ? dlock_ping(s->deps.locks) : DLOCK_OK, redis_ok = ping == DLOCK_OK;
    char redis_state[300];
    if (s->deps.locks == NULL)
        snprintf(redis_state, sizeof(redis_state), "unused (lock mode %s)",
                 cfg_lock_mode_name(s->deps.cfg->lock_mode));
    else
        snprintf(redis_state, sizeof(redis_state), "%s", redis_ok ? "ok" : dlock_errstr());
    if (s->deps.locks)
        stock_note_redis(ping);
    r->status = db_ok && redis_ok ? 200 : 503;
    r->json = json_pack("{s:s, s:o, s:o, s:s, s:o}", "status",
                        r->status == 200 ? "ok" : "unavailable", "sqlite",
                        json_text(db_ok ? "ok" : c ? store_errstr(c) : "cannot open database"),
                        "redis", json_text(redis_state), "lockMode",
                        cfg_lock_mode_name(s->deps.cfg->lock_mode), "instance",
                        json_text(s->deps.stock->instance_id));
}

static void handle_metrics(http_server *s, struct reply *r)
{
    r->text = metrics_render(s->deps.locks, reaper_reaped(s->reaper), &r->text_len);
    if (r->text == NULL)
        reply_error(r, 500, "out_of_memory", "cannot render metrics");
    else
        r->status = 200;
}

/* ---- dispatch ---- */

static void dispatch(http_server *s, struct MHD_Connection *conn, const char *method,
                     const route_result *rt, const struct request *rq, struct reply *r)
{
    char err[256] = "";
    if (rt->id == ROUTE_METRICS) {
        handle_metrics(s, r);
        return;
    }
    store_conn *c = store_get(s->deps.store, err, sizeof(err));
    if (rt->id == ROUTE_HEALTH)
        handle_health(s, c, r);
    else if (c == NULL)
        reply_error(r, 500, "storage_error", "%s", err);
    else if (rt->id == ROUTE_REDUCE)
        handle_reduce(s, c, rq, r);
    else if (rt->id == ROUTE_ITEMS)
        handle_items(s, conn, c, method, rq, r);
    else
        handle_item(s, conn, c, method, rt, rq, r);
    if (c)
        store_put(s->deps.store, c);
}

static enum MHD_Result respond(http_server *s, struct MHD_Connection *conn, const char *url,
                               const char *method, struct request *rq)
{
    struct reply r = {0};
    route_result rt;
    route_match(method, url, &rt);
    metrics_inflight_add(1); /* before reading the flag: http_drain can't miss us */
    int closing = atomic_load(&s->draining);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (closing)
        reply_error(&r, 503, "shutting_down", "server is shutting down; retry elsewhere");
    else if (rt.id == ROUTE_NOT_FOUND)
        reply_error(&r, 404, "not_found", "no route %s %s", method, url);
    else if (!rt.method_ok)
        reply_error(&r, 405, "method_not_allowed", "%s is not allowed here; use %s", method,
                    rt.allow);
    else if (rt.bad_id)
        reply_error(&r, 400, "invalid_request", "item id must be an integer 1..%lld",
                    (long long)INT64_MAX);
    else if (rq->too_large)
        reply_error(&r, 413, "body_too_large", "request body over %d bytes", HTTP_BODY_MAX);
    else
        dispatch(s, conn, method, &rt, rq, &r);
    if (r.status == 405)
        r.allow = rt.allow;
    metrics_request(rt.id, r.status);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    log_event(LOG_DEBUG, "request", "method=%s path=%s status=%d ms=%.3f", method, url, r.status,
              (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
    enum MHD_Result ok = send_reply(conn, &r, closing);
    metrics_inflight_add(-1);
    return ok;
}

/* Stores a body chunk, up to HTTP_BODY_MAX; past it, discards (and past
 * DISCARD_MAX more, gives up on the connection). */
static enum MHD_Result take_chunk(struct request *rq, const char *data, size_t size)
{
    if (!rq->too_large && rq->len + size <= HTTP_BODY_MAX) {
        if (rq->body == NULL && (rq->body = malloc(HTTP_BODY_MAX + 1)) == NULL)
            return MHD_NO;
        memcpy(rq->body + rq->len, data, size);
        rq->len += size;
        rq->body[rq->len] = '\0';
        return MHD_YES;
    }
    rq->too_large = 1;
    rq->discarded += size;
    return rq->discarded > DISCARD_MAX ? MHD_NO : MHD_YES;
}

/* The connection's deadlines (see reaper.h), kept as its socket context. */
static reaper_conn *deadlines_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info ? info->socket_context : NULL;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **req_cls)
{
    (void)version;
    http_server *s = cls;
    struct request *rq = *req_cls;
    if (rq == NULL) { /* headers are in: set up, or refuse a declared oversized body now */
        if ((rq = calloc(1, sizeof(*rq))) == NULL)
            return MHD_NO;
        *req_cls = rq;
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > HTTP_BODY_MAX) {
            rq->too_large = 1;
            reaper_request_read(deadlines_of(conn));
            return respond(s, conn, url, method, rq); /* MHD drops the body and closes */
        }
        return MHD_YES;
    }
    if (*upload_data_size) {
        enum MHD_Result ok = take_chunk(rq, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return ok;
    }
    reaper_request_read(deadlines_of(conn));
    return respond(s, conn, url, method, rq);
}

/* The request line is in (headers are not yet): its deadline starts. */
static void *on_request_line(void *cls, const char *uri, struct MHD_Connection *conn)
{
    (void)cls, (void)uri;
    reaper_request_line(deadlines_of(conn));
    return NULL; /* on_request sets up the request state */
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    http_server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *info =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_context = info ? reaper_conn_started(s->reaper, info->connect_fd) : NULL;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) { /* before MHD closes the socket */
        reaper_conn_closed(s->reaper, *socket_context);
        *socket_context = NULL;
    }
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    struct request *rq = *req_cls;
    reaper_request_done(deadlines_of(conn));
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && toe != MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN)
        log_event(LOG_DEBUG, "request not completed", "reason=%d", (int)toe);
    if (rq) {
        free(rq->body);
        free(rq);
    }
    *req_cls = NULL;
}

/* libmicrohttpd's messages, one log line each, except that a message
 * repeating within a second (a connection flood hitting the limit) is
 * counted and logged once a second with the count. */
static struct {
    pthread_mutex_t mu;
    char last[512];
    time_t at;
    long suppressed;
} mhd_log = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    msg[strcspn(msg, "\r\n")] = '\0';
    for (char *p = msg; *p; p++)
        if (*p == '"')
            *p = '\'';
    time_t now = time(NULL);
    pthread_mutex_lock(&mhd_log.mu);
    int repeat = strcmp(msg, mhd_log.last) == 0 && now == mhd_log.at;
    long suppressed = mhd_log.suppressed;
    if (repeat) {
        mhd_log.suppressed++;
    } else {
        snprintf(mhd_log.last, sizeof(mhd_log.last), "%s", msg);
        mhd_log.at = now;
        mhd_log.suppressed = 0;
    }
    pthread_mutex_unlock(&mhd_log.mu);
    if (!repeat)
        log_event(LOG_WARN, "libmicrohttpd", "detail=\"%s\" repeats_before=%ld", msg, suppressed);
}

int http_start(const http_deps *deps, http_server **out, char *err, size_t errlen)
{
    *out = NULL;
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)deps->cfg->port)};
    if (inet_pton(AF_INET, deps->cfg->bind, &addr.sin_addr) != 1) {
        snprintf(err, errlen, "bind address '%s' is not an IPv4 address", deps->cfg->bind);
        return -1;
    }
    http_server *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    s->deps = *deps;
    s->reaper = reaper_start(deps->cfg->idle_timeout_s * 1000, deps->cfg->request_timeout_ms);
    if (s->reaper == NULL) {
        snprintf(err, errlen, "out of memory or threads");
        free(s);
        return -1;
    }
    s->daemon = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO |
            MHD_USE_ITC | MHD_USE_ERROR_LOG,
        (uint16_t)deps->cfg->port, NULL, NULL, on_request, s,
        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s, /* first, so it sees every message */
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned int)deps->cfg->max_connections,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned int)deps->cfg->max_per_ip,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)deps->cfg->idle_timeout_s,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
        MHD_OPTION_URI_LOG_CALLBACK, on_request_line, s,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        MHD_OPTION_THREAD_STACK_SIZE, (size_t)STACK_SIZE,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned int)1024,
        MHD_OPTION_END);
    if (s->daemon == NULL) {
        snprintf(err, errlen, "cannot listen on %s:%d (in use, or not permitted)",
                 deps->cfg->bind, deps->cfg->port);
        reaper_stop(s->reaper);
        free(s);
        return -1;
    }
    *out = s;
    return 0;
}

void http_quiesce(http_server *s)
{
    atomic_store(&s->draining, 1);
    MHD_socket fd = MHD_quiesce_daemon(s->daemon);
    if (fd != MHD_INVALID_SOCKET)
        close(fd);
}

int http_drain(http_server *s, int timeout_ms)
{
    (void)s;
    struct timespec tick = {0, 10 * 1000000};
    for (int waited = 0; metrics_inflight() > 0 && waited < timeout_ms; waited += 10)
        nanosleep(&tick, NULL);
    return (int)metrics_inflight();
}

void http_stop(http_server *s)
{
    if (s == NULL)
        return;
    MHD_stop_daemon(s->daemon); /* every connection closed: the reaper has none left */
    reaper_stop(s->reaper);
    free(s);
}
