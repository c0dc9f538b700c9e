/* api.c - blocking calls for set-up (create items) and the verdict (read
 * items and their ledger), on the load's own HTTP client (conn.h) with a loop
 * of its own, and error text that names the URL and the answer, since these
 * failures are what a user sees first. */
#include "loadgen/api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "loadgen/conn.h"
#include "loadgen/evloop.h"
#include "loadgen/http.h"

#define BODY_MAX (64L * 1024 * 1024) /* a page of ledger rows fits many times over */
#define CALL_TIMEOUT_NS 60000000000LL
#define CONNECT_TIMEOUT_NS 5000000000LL
#define PAGE_ROWS 1000 /* stockd's largest ?limit=; further rows by ?after= */

struct lg_ledger {
    json_t *pages;       /* the answers, which own the rows' strings */
    lg_ledger_row *rows;
    size_t n, cap;
};

typedef struct buf {
    char *data;
    size_t len;
} buf;

/* Runs c's request to its end: LG_CONN_DONE, or LG_CONN_ERROR with c->why.
 * timeout_ns > 0 bounds the whole exchange, connecting included; 0 means
 * CONNECT_TIMEOUT_NS to connect and CALL_TIMEOUT_NS in all. */
static int wait_answer(lg_conn *c, lg_evloop *loop, int rc, int64_t timeout_ns)
{
    int64_t start = lg_now_ns();
    int64_t call = timeout_ns > 0 ? timeout_ns : CALL_TIMEOUT_NS;
    int64_t connect = timeout_ns > 0 && timeout_ns < CONNECT_TIMEOUT_NS ? timeout_ns
                                                                        : CONNECT_TIMEOUT_NS;
    while (rc == LG_CONN_AGAIN) {
        int64_t until = start + (lg_conn_connecting(c) ? connect : call);
        if (lg_now_ns() >= until) {
            snprintf(c->why, sizeof(c->why), "timed out after %.3g s %s",
                     (double)(until - start) / 1e9,
                     lg_conn_connecting(c) ? "connecting" : "waiting for the answer");
            lg_conn_close(c);
            return LG_CONN_ERROR;
        }
        lg_event ev;
        if (lg_evloop_wait(loop, until, &ev, 1) == 1)
            rc = lg_conn_event(c, ev.events);
    }
    return rc;
}

/* One exchange on a connection of its own; *status 0 on transport failure.
 * The caller frees out->data. headers, when not NULL, gets the headers
 * lg_answer_full reports. */
static int exchange(const char *method, const char *url, const char *extra, int json,
                    const char *body, int64_t timeout_ns, long *status, buf *out,
                    lg_answer_full *headers, lg_err *err)
{
    memset(out, 0, sizeof(*out));
    *status = 0;
    lg_http_addr a;
    const char *path;
    char head[LG_HTTP_HEAD_MAX + 2048]; /* an --api profile's headers too */
    lg_err bad;
    int rc = lg_http_resolve(url, &a, &path, &bad);
    if (rc != LG_OK)
        return lg_errf(err, LG_ERR_TRANSPORT, "%s %s", method, bad.msg);
    int n = lg_http_head_with(head, sizeof(head) - 24, method, path, a.host, extra ? extra : "",
                              body != NULL, json);
    if (n < 0)
        return lg_errf(err, LG_ERR_TRANSPORT, "%s %s: the URL is too long", method, url);
    size_t blen = body ? strlen(body) : 0;
    if (body)
        n += (int)lg_http_head_end(head + n, blen);
    struct iovec iov[2] = {{head, (size_t)n}, {(char *)body, blen}};
    lg_evloop *loop;
    if ((rc = lg_evloop_new(&loop, err)) != LG_OK)
        return rc;
    lg_conn c;
    lg_conn_init(&c, loop, &a, &c, BODY_MAX, headers != NULL);
    c.resp.head = strcmp(method, "HEAD") == 0;
    rc = wait_answer(&c, loop, lg_conn_send(&c, iov, body ? 2 : 1), timeout_ns);
    if (rc == LG_CONN_DONE && c.resp.truncated) {
        rc = LG_CONN_ERROR;
        snprintf(c.why, sizeof(c.why), "the answer is larger than %ld bytes", BODY_MAX);
    }
    if (rc == LG_CONN_DONE) {
        *status = c.resp.status;
        out->data = c.resp.body; /* taken over from the answer */
        out->len = c.resp.len;
        c.resp.body = NULL;
        if (headers) {
            snprintf(headers->retry_after, sizeof(headers->retry_after), "%s",
                     c.resp.retry_after);
            snprintf(headers->content_type, sizeof(headers->content_type), "%s",
                     c.resp.content_type);
        }
    } else {
        lg_errf(err, LG_ERR_TRANSPORT, "%s %s: %s", method, url, c.why);
    }
    lg_conn_free(&c);
    lg_evloop_free(loop);
    return rc == LG_CONN_DONE ? LG_OK : LG_ERR_TRANSPORT;
}

static int http(const char *method, const char *url, const char *body, int64_t timeout_ns,
                long *status, buf *out, lg_err *err)
{
    return exchange(method, url, NULL, 1, body, timeout_ns, status, out, NULL, err);
}

/* The same, with 503 and a Retry-After (the service asking to be asked
 * again: its database restarting, a lock busy) as LG_ERR_LATER. */
static int http_read(const char *url, int64_t timeout_ns, long *status, buf *out, lg_err *err)
{
    lg_answer_full h;
    int rc = exchange("GET", url, NULL, 1, NULL, timeout_ns, status, out, &h, err);
    if (rc == LG_OK && *status == 503 && h.retry_after[0])
        rc = lg_errf(err, LG_ERR_LATER, "GET %s answered 503 (Retry-After: %s): %.200s", url,
                     h.retry_after, out->data ? out->data : "");
    return rc;
}

int lg_api_call(const char *method, const char *url, const char *body, lg_answer_full *out,
                lg_err *err)
{
    return lg_api_call_within(method, url, body, 0, out, err);
}

int lg_api_call_within(const char *method, const char *url, const char *body, int timeout_ms,
                       lg_answer_full *out, lg_err *err)
{
    return lg_api_call_with(method, url, NULL, 1, body, timeout_ms, out, err);
}

int lg_api_call_with(const char *method, const char *url, const char *headers, int json,
                     const char *body, int timeout_ms, lg_answer_full *out, lg_err *err)
{
    buf b;
    memset(out, 0, sizeof(*out));
    int rc = exchange(method, url, headers, json, body, (int64_t)timeout_ms * 1000000,
                      &out->status, &b, out, err);
    out->body = b.data ? b.data : calloc(1, 1);
    out->len = b.len;
    if (out->body == NULL)
        return lg_errf(err, LG_ERR_NOMEM, "out of memory");
    return rc;
}

void lg_answer_full_free(lg_answer_full *a)
{
    free(a->body);
    a->body = NULL;
}

/* "answered 404: {...}" with the start of the body, for error messages. */
static int unexpected(lg_err *err, const char *method, const char *url, long status,
                      const buf *b, const char *what)
{
    return lg_errf(err, LG_ERR_SETUP, "%s %s answered %ld (%s): %.200s", method, url, status,
                   what, b->data ? b->data : "");
}

static int get_ll(json_t *o, const char *key, long long *v)
{
    json_t *j = json_object_get(o, key);
    if (!json_is_integer(j))
        return -1;
    *v = (long long)json_integer_value(j);
    return 0;
}

int lg_api_create_item(const char *base, const char *name, long long stock, long long limit,
                       long long *id, lg_err *err)
{
    char url[512];
    snprintf(url, sizeof(url), "%s/items", base);
    json_t *req = json_pack("{s:s, s:I}", "name", name, "stock", (json_int_t)stock);
    if (req && limit > 0)
        json_object_set_new(req, "perBuyerLimit", json_integer((json_int_t)limit));
    char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    if (body == NULL)
        return lg_errf(err, LG_ERR_NOMEM, "out of memory");
    long status;
    buf b;
    int rc = http("POST", url, body, 0, &status, &b, err);
    free(body);
    json_t *root = rc == LG_OK ? json_loadb(b.data ? b.data : "", b.len, 0, NULL) : NULL;
    if (rc == LG_OK && (status != 201 || get_ll(root, "id", id) != 0))
        rc = unexpected(err, "POST", url, status, &b, "expected 201 with an integer id");
    json_decref(root);
    free(b.data);
    return rc;
}

/* Appends one page's rows, pointing at the strings inside root, which the
 * ledger keeps alive. */
static int add_rows(lg_ledger *l, json_t *root, const char *url, lg_err *err)
{
    json_t *orders = json_object_get(root, "orders");
    if (!json_is_array(orders))
        return lg_errf(err, LG_ERR_SETUP, "GET %s: no \"orders\" array in the answer", url);
    size_t n = json_array_size(orders);
    if (l->n + n > l->cap) {
        size_t cap = (l->n + n) * 2;
        lg_ledger_row *grown = realloc(l->rows, cap * sizeof(*grown));
        if (grown == NULL)
            return lg_errf(err, LG_ERR_NOMEM, "out of memory for %zu ledger rows", l->n + n);
        l->rows = grown, l->cap = cap;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *row = json_array_get(orders, i);
        json_t *rid = json_object_get(row, "requestId");
        lg_ledger_row *out = &l->rows[l->n + i];
        if (get_ll(row, "quantity", &out->quantity) != 0 ||
            (rid && !json_is_string(rid) && !json_is_null(rid)))
            return lg_errf(err, LG_ERR_SETUP,
                           "GET %s: orders[%zu] lacks an integer quantity or has a "
                           "non-string requestId", url, i);
        out->request_id = json_string_value(rid);
    }
    l->n += n;
    return json_array_append(l->pages, root) == 0 ? LG_OK
                                                    : lg_errf(err, LG_ERR_NOMEM, "out of memory");
}

/* One page: GET base/items/{id}?limit=..&after=..; *root gets the answer. */
static int get_page(const char *base, long long id, long long limit, long long after,
                    int64_t timeout_ns, json_t **root, char *url, size_t urlsize, lg_err *err)
{
    snprintf(url, urlsize, "%s/items/%lld?limit=%lld&after=%lld", base, id, limit, after);
    long status;
    buf b;
    int rc = http_read(url, timeout_ns, &status, &b, err);
    *root = rc == LG_OK ? json_loadb(b.data ? b.data : "", b.len, 0, NULL) : NULL;
    if (rc == LG_OK && status != 200)
        rc = unexpected(err, "GET", url, status, &b, "expected 200");
    else if (rc == LG_OK && !json_is_object(*root))
        rc = unexpected(err, "GET", url, status, &b, "expected a JSON object");
    free(b.data);
    return rc;
}

/* Follows "nextAfter" until rows rows are in l or there are no more. */
static int read_ledger(const char *base, long long id, long long rows, int64_t timeout_ns,
                       json_t *first, lg_ledger *l, const char *url, lg_err *err)
{
    char next_url[512];
    json_t *page = json_incref(first);
    int rc = LG_OK;
    while (rc == LG_OK && (rc = add_rows(l, page, url, err)) == LG_OK && (long long)l->n < rows) {
        json_t *next = json_object_get(page, "nextAfter");
        if (!json_is_integer(next))
            break;
        long long want = rows - (long long)l->n;
        json_decref(page);
        rc = get_page(base, id, want < PAGE_ROWS ? want : PAGE_ROWS, json_integer_value(next),
                      timeout_ns, &page, next_url, sizeof(next_url), err);
        url = next_url;
    }
    json_decref(page);
    return rc;
}

int lg_api_get_item(const char *base, long long id, long long rows, int timeout_ms,
                    lg_item_state *st, lg_ledger **ledger, lg_err *err)
{
    char url[512];
    json_t *root;
    int64_t timeout_ns = timeout_ms > 0 ? (int64_t)timeout_ms * 1000000 : 0;
    if (ledger)
        *ledger = NULL;
    int rc = get_page(base, id, rows < PAGE_ROWS ? rows : PAGE_ROWS, 0, timeout_ns, &root, url,
                      sizeof(url), err);
    st->id = id;
    if (rc == LG_OK && (get_ll(root, "stock", &st->stock) != 0 ||
                        get_ll(root, "sold", &st->sold) != 0 ||
                        get_ll(root, "orderCount", &st->order_count) != 0))
        rc = lg_errf(err, LG_ERR_SETUP, "GET %s: expected integer stock, sold, orderCount", url);
    if (rc == LG_OK && get_ll(root, "reserved", &st->reserved) != 0)
        st->reserved = -1;
    if (rc == LG_OK && get_ll(root, "returned", &st->returned) != 0)
        st->returned = -1;
    lg_ledger *l = NULL;
    if (rc == LG_OK && ledger && ((l = calloc(1, sizeof(*l))) == NULL ||
                                  (l->pages = json_array()) == NULL))
        rc = lg_errf(err, LG_ERR_NOMEM, "out of memory");
    if (rc == LG_OK && ledger)
        rc = read_ledger(base, id, rows, timeout_ns, root, l, url, err);
    json_decref(root);
    if (rc == LG_OK && ledger)
        *ledger = l;
    else
        lg_ledger_free(l);
    return rc;
}

int lg_api_probe(const char *base, const char *path, long *status, lg_err *err)
{
    char url[512];
    snprintf(url, sizeof(url), "%s%s", base, path);
    buf b;
    int rc = http("GET", url, NULL, 0, status, &b, err);
    free(b.data);
    return rc;
}

const lg_ledger_row *lg_ledger_rows(const lg_ledger *l, size_t *n)
{
    *n = l->n;
    return l->rows;
}

void lg_ledger_free(lg_ledger *l)
{
    if (l == NULL)
        return;
    json_decref(l->pages);
    free(l->rows);
    free(l);
}
