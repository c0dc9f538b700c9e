/* test_server.c - stockd end to end: real redis-server, real stockd replicas
 * sharing one SQLite file, driven over HTTP. Every status code of the API,
 * a table of malformed requests that must leave stock alone, renewal,
 * interruption, lock waits that don't stall other items, Redis going away
 * and coming back, and a graceful SIGTERM (with a drain notice, SIGHUP
 * during it, and a second SIGTERM that cuts it short). */
#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <sqlite3.h>

#include "lock/dlock.h"
#include "tests/support/calls.h"
#include "tests/support/harness.h"

static th_redis redis;
static th_stockd a, b, atomic_srv; /* a, b: redis mode on one database; atomic_srv too */
static char dir[64], db[128];
static char lock_key[DLOCK_KEY_MAX + 1]; /* th_item_lock_key's buffer */

#define LOCK_FLAGS "--lease-ms", "600", "--redis-timeout-ms", "100", "--max-renewals", "12", \
                   "--wait-ms", "300", "--retry-ms", "20", "--allow-work-ms", \
                   "--busy-timeout-ms", "300"

static int group_setup(void **state)
{
    (void)state;
    curl_global_init(CURL_GLOBAL_ALL);
    if (th_tempdir("stockd-it", dir, sizeof(dir)) != 0 || th_redis_start(&redis) != 0)
        return -1;
    snprintf(db, sizeof(db), "%s/stock.db", dir);
    const char *redis_flags[] = {LOCK_FLAGS, "--instance-id", "replica-a", NULL};
    const char *redis_flags_b[] = {LOCK_FLAGS, "--instance-id", "replica-b", NULL};
    const char *atomic_flags[] = {"--lock", "atomic", NULL};
    if (th_stockd_start(&a, &redis, db, dir, redis_flags) != 0 ||
        th_stockd_start(&b, &redis, db, dir, redis_flags_b) != 0 ||
        th_stockd_start(&atomic_srv, NULL, db, dir, atomic_flags) != 0)
        return -1;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    int rc = th_stockd_stop_clean(&a) | th_stockd_stop_clean(&b) |
             th_stockd_stop_clean(&atomic_srv);
    th_redis_stop(&redis, 0);
    return rc;
}

/* The item's stock and the number of ledger rows, read back over HTTP. */
static void item_state(const th_stockd *s, long long id, long long *stock, long long *orders)
{
    char path[64];
    snprintf(path, sizeof(path), "/items/%lld", id);
    json_t *j = th_call(s, "GET", path, NULL, 200);
    *stock = th_jint(j, "stock");
    *orders = th_jint(j, "orderCount");
    assert_int_equal(th_jint(j, "stock") + th_jint(j, "sold"), *stock + th_jint(j, "sold"));
    json_decref(j);
}

static json_t *reduce(const th_stockd *s, long long item, int qty, const char *rid, int work_ms,
                      long expect)
{
    char body[256];
    if (rid)
        snprintf(body, sizeof(body), "{\"itemId\":%lld,\"quantity\":%d,\"requestId\":\"%s\","
                 "\"workMs\":%d}", item, qty, rid, work_ms);
    else
        snprintf(body, sizeof(body), "{\"itemId\":%lld,\"quantity\":%d,\"workMs\":%d}", item, qty,
                 work_ms);
    return th_call(s, "POST", "/reduceStock", body, expect);
}

static void test_create_reduce_and_read_back(void **state)
{
    (void)state;
    long long id = th_new_item(&a, "it", 42), stock, orders;
    json_t *j = reduce(&a, id, 1, NULL, 0, 200);
    assert_int_equal(th_jint(j, "remaining"), 41);
    assert_int_equal(th_jint(j, "itemId"), id);
    assert_true(th_jint(j, "orderId") > 0);
    assert_false(json_is_true(json_object_get(j, "replayed")));
    json_decref(j);
    char path[64];
    snprintf(path, sizeof(path), "/items/%lld", id);
    j = th_call(&b, "GET", path, NULL, 200); /* the other replica sees the same database */
    assert_int_equal(th_jint(j, "stock"), 41);
    assert_int_equal(th_jint(j, "sold"), 1);
    json_t *ord = json_array_get(json_object_get(j, "orders"), 0);
    assert_string_equal(th_jstr(ord, "instance"), "replica-a");
    assert_string_equal(th_jstr(ord, "lockMode"), "redis");
    assert_true(th_jint(ord, "fence") > 0);
    json_decref(j);
    j = th_call(&a, "GET", "/items", NULL, 200);
    assert_true(json_array_size(json_object_get(j, "items")) >= 1);
    json_decref(j);
    item_state(&a, id, &stock, &orders);
    assert_int_equal(orders, 1);
}

static void test_same_request_id_deducts_once(void **state)
{
    (void)state;
    long long id = th_new_item(&a, "it", 10), stock, orders;
    json_t *first = reduce(&a, id, 3, "order-77", 0, 200);
    json_t *again = reduce(&b, id, 3, "order-77", 0, 200); /* a retry through another replica */
    assert_int_equal(th_jint(again, "orderId"), th_jint(first, "orderId"));
    assert_int_equal(th_jint(again, "remaining"), 7);
    assert_true(json_is_true(json_object_get(again, "replayed")));
    json_decref(first);
    json_decref(again);
    json_t *conflict = reduce(&a, id, 4, "order-77", 0, 409);
    assert_string_equal(th_jstr(conflict, "error"), "request_id_conflict");
    json_decref(conflict);
    item_state(&a, id, &stock, &orders);
    assert_int_equal(stock, 7);
    assert_int_equal(orders, 1);
}

/* POST /items with a requestId, on SQLite: a retry (through another
 * replica) is answered 200, replayed, with the item as it was created,
 * even after its stock was set; the key with another name or stock is
 * refused 409; nothing is created twice. */
static void test_same_request_id_creates_an_item_once(void **state)
{
    (void)state;
    const char *body = "{\"name\":\"keyed\",\"stock\":4,\"requestId\":\"item-77\"}";
    json_t *first = th_call(&a, "POST", "/items", body, 201);
    assert_false(json_is_true(json_object_get(first, "replayed")));
    assert_string_equal(th_jstr(first, "requestId"), "item-77");
    char path[64];
    snprintf(path, sizeof(path), "/items/%lld", th_jint(first, "id"));
    json_decref(th_call(&a, "PUT", path, "{\"stock\":9}", 200));
    json_t *again = th_call(&b, "POST", "/items", body, 200);
    assert_int_equal(th_jint(again, "id"), th_jint(first, "id"));
    assert_int_equal(th_jint(again, "stock"), 4);
    assert_true(json_is_true(json_object_get(again, "replayed")));
    json_t *other = th_call(&a, "POST", "/items", "{\"name\":\"keyed\",\"stock\":5,"
                            "\"requestId\":\"item-77\"}", 409);
    assert_string_equal(th_jstr(other, "error"), "request_id_conflict");
    json_t *plain = th_call(&a, "POST", "/items", "{\"name\":\"keyed\",\"stock\":4}", 201);
    assert_true(json_is_null(json_object_get(plain, "requestId")));
    assert_true(th_jint(plain, "id") != th_jint(first, "id"));
    assert_int_equal(th_item_stock(&a, th_jint(first, "id")), 9);
    json_decref(first);
    json_decref(again);
    json_decref(other);
    json_decref(plain);
}

static void test_insufficient_stock_and_unknown_item(void **state)
{
    (void)state;
    long long id = th_new_item(&a, "it", 2), stock, orders;
    json_t *j = reduce(&a, id, 3, NULL, 0, 409);
    assert_string_equal(th_jstr(j, "error"), "insufficient_stock");
    assert_int_equal(th_jint(j, "remaining"), 2);
    assert_int_equal(th_jint(j, "requested"), 3);
    json_decref(j);
    j = reduce(&a, id + 100000, 1, NULL, 0, 404);
    assert_string_equal(th_jstr(j, "error"), "item_not_found");
    json_decref(j);
    item_state(&a, id, &stock, &orders);
    assert_int_equal(stock, 2);
    assert_int_equal(orders, 0);
}

static void test_put_sets_stock_under_the_lock(void **state)
{
    (void)state;
    long long id = th_new_item(&a, "it", 2);
    char path[64];
    snprintf(path, sizeof(path), "/items/%lld", id);
    json_t *j = th_call(&a, "PUT", path, "{\"stock\":50}", 200);
    assert_int_equal(th_jint(j, "stock"), 50);
    json_decref(j);
    json_decref(th_call(&a, "PUT", "/items/999999999", "{\"stock\":5}", 404));
    j = reduce(&b, id, 5, NULL, 0, 200); /* the PUT's fence doesn't block later holders */
    assert_int_equal(th_jint(j, "remaining"), 45);
    json_decref(j);
}

struct bad_request {
    const char *method, *path, *body;
    long status;
    const char *error;
};

static void test_malformed_requests_get_json_errors_and_leave_stock_alone(void **state)
{
    (void)state;
    long long id = th_new_item(&a, "it", 100), stock, orders;
    char item_path[64], missing[128], big_id[128], long_rid[400], oversized[20000];
    snprintf(item_path, sizeof(item_path), "/items/%lld", id);
    snprintf(missing, sizeof(missing), "{\"itemId\":%lld,\"quantity\":1}", id + 100000);
    snprintf(big_id, sizeof(big_id), "{\"itemId\":%lld,\"quantity\":99999999999999999999}", id);
    char rid[200];
    memset(rid, 'r', 129);
    rid[129] = '\0';
    snprintf(long_rid, sizeof(long_rid), "{\"itemId\":%lld,\"quantity\":1,\"requestId\":\"%s\"}",
             id, rid);
    int n = snprintf(oversized, sizeof(oversized), "{\"itemId\":%lld,\"quantity\":1,\"pad\":\"", id);
    memset(oversized + n, 'x', 17000);
    strcpy(oversized + n + 17000, "\"}");

    char cut_utf8[2000] = "/"; /* "no route GET /éé..." is cut mid-character at 512 bytes */
    for (int i = 0; i < 300; i++)
        strcat(cut_utf8, "%C3%A9");
    char bodies[16][160];
    const char *fmt[] = {
        "{\"itemId\":\"%lld\",\"quantity\":1}", "{\"itemId\":%lld,\"quantity\":\"1\"}",
        "{\"itemId\":%lld}", "{\"itemId\":%lld,\"quantity\":0}",
        "{\"itemId\":%lld,\"quantity\":-5}", "{\"itemId\":%lld,\"quantity\":1e3}",
        "{\"itemId\":%lld,\"quantity\":2000000}", "{\"itemId\":%lld,\"quantity\":1,\"workMs\":-3}",
        "{\"itemId\":%lld,\"quantity\":1,\"requestId\":\"\"}",
        "{\"itemId\":%lld,\"quantity\":1,\"quantity\":2}",
        "{\"itemId\":%lld,\"quantity\":\"\xc3\x28\"}", "{\"itemId\":%lld,\"quantity\":true}",
    };
    for (int i = 0; i < 12; i++)
        snprintf(bodies[i], sizeof(bodies[i]), fmt[i], id);

    const struct bad_request table[] = {
        {"POST", "/reduceStock", NULL, 400, "invalid_json"},
        {"POST", "/reduceStock", "{", 400, "invalid_json"},
        {"POST", "/reduceStock", "null", 400, "invalid_json"},
        {"POST", "/reduceStock", "[1]", 400, "invalid_json"},
        {"POST", "/reduceStock", "{\"quantity\":1}", 400, "invalid_request"},
        {"POST", "/reduceStock", bodies[0], 400, "invalid_request"},
        {"POST", "/reduceStock", bodies[1], 400, "invalid_request"},
        {"POST", "/reduceStock", bodies[2], 400, "invalid_request"},
        {"POST", "/reduceStock", bodies[3], 400, "invalid_request"},
        {"POST", "/reduceStock", bodies[4], 400, "invalid_request"},
        {"POST", "/reduceStock", bodies[5], 400, "invalid_request"},
        {"POST", "/reduceStock", bodies[6], 400, "invalid_request"},
        {"POST", "/reduceStock", bodies[7], 400, "invalid_request"},
        {"POST", "/reduceStock", bodies[8], 400, "invalid_request"},
        {"POST", "/reduceStock", bodies[9], 400, "invalid_json"},
        {"POST", "/reduceStock", bodies[10], 400, "invalid_json"},
        {"POST", "/reduceStock", bodies[11], 400, "invalid_request"},
        {"POST", "/reduceStock", big_id, 400, "invalid_request"},
        {"POST", "/reduceStock", long_rid, 400, "invalid_request"},
        {"POST", "/reduceStock", missing, 404, "item_not_found"},
        {"POST", "/reduceStock", oversized, 413, "body_too_large"},
        {"GET", "/reduceStock", NULL, 405, "method_not_allowed"},
        {"DELETE", item_path, NULL, 405, "method_not_allowed"},
        {"PUT", item_path, "{\"stock\":-1}", 400, "invalid_request"},
        {"PUT", item_path, "{\"stock\":\"5\"}", 400, "invalid_request"},
        {"POST", "/items", "{\"name\":\"\",\"stock\":1}", 400, "invalid_request"},
        {"GET", "/items/abc", NULL, 400, "invalid_request"},
        {"GET", "/items/0", NULL, 400, "invalid_request"},
        {"GET", "/items/99999999999999999999", NULL, 400, "invalid_request"},
        {"GET", "/items/-1", NULL, 400, "invalid_request"},
        {"GET", "/nope", NULL, 404, "not_found"},
        {"GET", "/%FF", NULL, 404, "not_found"}, /* raw bytes that are not UTF-8 */
        {"GET", "/%C3", NULL, 404, "not_found"}, /* a character cut short */
        {"GET", cut_utf8, NULL, 404, "not_found"},
        {"GET", "/items?limit=-1", NULL, 400, "invalid_request"},
    };
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        json_t *j = th_call(&a, table[i].method, table[i].path, table[i].body, table[i].status);
        if (strcmp(th_jstr(j, "error"), table[i].error) != 0 || !*th_jstr(j, "message"))
            fail_msg("%s %s: error %s (want %s)", table[i].method, table[i].path, th_jstr(j, "error"),
                     table[i].error);
        json_decref(j);
    }
    item_state(&a, id, &stock, &orders);
    assert_int_equal(stock, 100);
    assert_int_equal(orders, 0);
}

/* What curl would normalise away, and what only a raw socket can send. */
static void test_raw_protocol_abuse_is_refused_without_touching_stock(void **state)
{
    (void)state;
    long long id = th_new_item(&a, "it", 100), stock, orders;
    char req[512], out[4096];
    snprintf(req, sizeof(req), "GET /items/..%%2F..%%2Fetc%%2Fpasswd HTTP/1.1\r\nHost: x\r\n"
             "Connection: close\r\n\r\n");
    assert_true(th_raw(a.port, req, strlen(req), 0, out, sizeof(out), 3000) > 0);
    assert_non_null(strstr(out, " 404 "));
    assert_non_null(strstr(out, "not_found"));

    /* a declared length shorter than the body: the body is cut, then refused */
    const char *body = "{\"itemId\":1,\"quantity\":1}";
    snprintf(req, sizeof(req), "POST /reduceStock HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
             "Connection: close\r\n\r\n%s", body);
    assert_true(th_raw(a.port, req, strlen(req), 0, out, sizeof(out), 3000) > 0);
    assert_non_null(strstr(out, " 400 "));
    assert_non_null(strstr(out, "invalid_json"));

    /* a declared oversized body is refused before it is read */
    snprintf(req, sizeof(req), "POST /reduceStock HTTP/1.1\r\nHost: x\r\n"
             "Content-Length: 100000000\r\n\r\n{");
    assert_true(th_raw(a.port, req, strlen(req), 0, out, sizeof(out), 3000) > 0);
    assert_non_null(strstr(out, " 413 "));
    assert_non_null(strstr(out, "body_too_large"));

    /* a body cut short by the client: no answer is possible, nothing written */
    snprintf(req, sizeof(req), "POST /reduceStock HTTP/1.1\r\nHost: x\r\nContent-Length: 200\r\n"
             "\r\n{\"itemId\":%lld,\"quantity\":1}", id);
    th_raw(a.port, req, strlen(req), 1, out, sizeof(out), 3000);
    assert_null(strstr(out, " 200 "));

    /* garbage instead of HTTP */
    const char garbage[] = "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 not http\r\n\r\n";
    th_raw(a.port, garbage, sizeof(garbage) - 1, 1, out, sizeof(out), 3000);
    assert_null(strstr(out, " 200 "));
    item_state(&a, id, &stock, &orders);
    assert_int_equal(stock, 100);
    assert_int_equal(orders, 0);
}

/* Sends req on a new connection and reads until the server closes it: 1 when
 * it did within timeout_ms (a hang bound), with everything it sent in out. */
static int raw_until_closed(int port, const char *req, char *out, size_t size, int timeout_ms)
{
    int fd = th_connect(port), closed = 0;
    assert_true(fd >= 0);
    th_send_all(fd, req, strlen(req));
    size_t got = 0;
    out[0] = '\0';
    for (int64_t end = th_now_ms() + timeout_ms; !closed && th_now_ms() < end;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0)
            continue;
        ssize_t n = recv(fd, out + got, size - 1 - got, 0);
        closed = n == 0 || (n < 0 && errno == ECONNRESET);
        got += n > 0 ? (size_t)n : 0;
        out[got] = '\0';
    }
    close(fd);
    return closed;
}

static int count_of(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p++)
        n++;
    return n;
}

/* RFC 9112 6.1 and 6.3: a body framed two ways is what request smuggling
 * behind a proxy is made of. Each is refused as soon as its headers are in,
 * and the connection is closed, so the request hidden in its body never runs. */
static void test_a_body_framed_two_ways_is_refused_and_closes(void **state)
{
    (void)state;
    long long id = th_new_item(&a, "it", 100), stock, orders;
    char json[64], hidden[256], body[512], req[1024], out[4096];
    snprintf(json, sizeof(json), "{\"itemId\":%lld,\"quantity\":1}", id);
    snprintf(hidden, sizeof(hidden), "POST /reduceStock HTTP/1.1\r\nHost: x\r\n"
             "Content-Length: %zu\r\n\r\n%s", strlen(json), json);

    snprintf(body, sizeof(body), "0\r\n\r\n%s", hidden); /* CL.TE */
    snprintf(req, sizeof(req), "POST /reduceStock HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n"
             "Transfer-Encoding: chunked\r\n\r\n%s", strlen(body), body);
    assert_true(raw_until_closed(a.port, req, out, sizeof(out), 5000));
    assert_int_equal(count_of(out, "HTTP/1.1 "), 1);
    assert_non_null(strstr(out, "HTTP/1.1 400 "));
    assert_non_null(strstr(out, "\"bad_framing\""));
    assert_non_null(strstr(out, "Connection: close"));

    snprintf(req, sizeof(req), "POST /reduceStock HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
             "Content-Length: %zu\r\n\r\n{\"it%s", 4 + strlen(hidden), hidden);
    assert_true(raw_until_closed(a.port, req, out, sizeof(out), 5000));
    assert_int_equal(count_of(out, "HTTP/1.1 "), 1);
    assert_non_null(strstr(out, "HTTP/1.1 400 "));
    assert_non_null(strstr(out, "Content-Length given 2 times"));

    /* a coding we can't read: answered at once, not after the request timeout */
    snprintf(req, sizeof(req), "POST /reduceStock HTTP/1.1\r\nHost: x\r\n"
             "Transfer-Encoding: xchunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n%s", hidden);
    assert_true(raw_until_closed(a.port, req, out, sizeof(out), 5000));
    assert_int_equal(count_of(out, "HTTP/1.1 "), 1);
    assert_non_null(strstr(out, "HTTP/1.1 501 "));
    assert_non_null(strstr(out, "\"unsupported_transfer_coding\""));

    /* a blank before the colon: libmicrohttpd and a proxy may read the field
     * differently (it frames by Content-Length, the proxy by chunked) */
    snprintf(body, sizeof(body), "0\r\n\r\n%s", hidden);
    snprintf(req, sizeof(req), "POST /reduceStock HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n"
             "Transfer-Encoding : chunked\r\n\r\n%s", strlen(body), body);
    assert_true(raw_until_closed(a.port, req, out, sizeof(out), 5000));
    assert_int_equal(count_of(out, "HTTP/1.1 "), 1);
    assert_non_null(strstr(out, "HTTP/1.1 400 "));
    assert_non_null(strstr(out, "\"bad_framing\""));

    /* a folded Transfer-Encoding line */
    snprintf(req, sizeof(req), "POST /reduceStock HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n"
             "Transfer-Encoding: x\r\n chunked\r\n\r\n%s", strlen(body), body);
    assert_true(raw_until_closed(a.port, req, out, sizeof(out), 5000));
    assert_int_equal(count_of(out, "HTTP/1.1 "), 1);
    assert_non_null(strstr(out, "HTTP/1.1 400 "));

    /* chunked alone is fine, and keeps the connection */
    snprintf(body, sizeof(body), "{\"itemId\":%lld,\"quantity\":2}", id);
    snprintf(req, sizeof(req), "POST /reduceStock HTTP/1.1\r\nHost: x\r\n"
             "Transfer-Encoding: chunked\r\n\r\n%zx\r\n%s\r\n0\r\n\r\n", strlen(body), body);
    int fd = th_connect(a.port);
    assert_true(th_exchange(fd, req, out, sizeof(out), 5000) > 0);
    assert_non_null(strstr(out, "HTTP/1.1 200 "));
    assert_null(strstr(out, "Connection: close"));
    assert_true(th_exchange(fd, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", out, sizeof(out),
                            5000) > 0);
    assert_non_null(strstr(out, "HTTP/1.1 200 "));
    close(fd);
    item_state(&a, id, &stock, &orders);
    assert_int_equal(stock, 98);
    assert_int_equal(orders, 1);
}

static void test_watchdog_renews_during_long_work(void **state)
{
    (void)state;
    long long id = th_new_item(&a, "it", 5), stock, orders;
    json_t *j = reduce(&a, id, 1, NULL, 900, 200); /* lease 600 ms: about 4 renewals */
    assert_int_equal(th_jint(j, "remaining"), 4);
    json_decref(j);
    char url[128];
    th_resp r;
    snprintf(url, sizeof(url), "%s/metrics", a.url);
    th_http("GET", url, NULL, &r);
    const char *line = strstr(r.body, "\nstockd_lock_renewals_total ");
    assert_non_null(line);
    assert_true(atoll(line + 28) >= 2);
    assert_non_null(strstr(r.content_type, "text/plain"));
    th_resp_free(&r);
    item_state(&a, id, &stock, &orders);
    assert_int_equal(orders, 1);
}

static void test_interrupted_holder_rolls_back(void **state)
{
    (void)state;
    long long id = th_new_item(&a, "it", 5), stock, orders;
    int64_t t0 = th_now_ms();
    /* interrupted after 12 renewals, one every 200 ms: about 2.6 s */
    json_t *j = reduce(&a, id, 1, "interrupt-me", 10000, 503);
    assert_true(th_now_ms() - t0 < 5000);
    assert_string_equal(th_jstr(j, "error"), "lock_interrupted");
    json_decref(j);
    item_state(&a, id, &stock, &orders);
    assert_int_equal(stock, 5);
    assert_int_equal(orders, 0);
    char key[64];
    snprintf(key, sizeof(key), "EXISTS %s", th_item_lock_key(id, lock_key));
    assert_int_equal(th_redis_int(&redis, key), 0); /* released at once */
    j = reduce(&a, id, 1, "interrupt-me", 0, 200); /* the same requestId works afterwards */
    json_decref(j);
}

static void test_busy_lock_times_out_without_stalling_other_items(void **state)
{
    (void)state;
    long long hot = th_new_item(&a, "it", 5), cold = th_new_item(&a, "it", 5);
    th_bg_reduce holder = {.url = a.url, .item = hot, .work_ms = 1000};
    th_bg_reduce_start(&holder);
    assert_int_equal(th_wait_item_locked(&redis, hot, 5000), 0);

    char url[128];
    th_resp r;
    snprintf(url, sizeof(url), "%s/reduceStock", b.url);
    char body[96];
    snprintf(body, sizeof(body), "{\"itemId\":%lld,\"quantity\":1}", hot);
    th_http("POST", url, body, &r); /* waits wait-ms (300), then gives up */
    assert_int_equal(r.status, 503);
    assert_non_null(strstr(r.body, "lock_timeout"));
    assert_string_equal(r.retry_after, "1");
    th_resp_free(&r);

    int64_t t0 = th_now_ms(); /* the same replica still serves other items and /health */
    json_decref(reduce(&a, cold, 1, NULL, 0, 200));
    json_decref(th_call(&a, "GET", "/health", NULL, 200));
    assert_true(th_now_ms() - t0 < 1000);
    th_bg_reduce_join(&holder);
    assert_int_equal(holder.status, 200);
}

#define WORKERS 8
#define PER_WORKER 15

struct hammer_arg {
    const th_stockd *s;
    long long item;
    long ok;
};

static void *hammer(void *arg)
{
    struct hammer_arg *h = arg;
    for (int i = 0; i < PER_WORKER; i++)
        h->ok += th_reduce(h->s->url, h->item, 1, 1, NULL, 0) == 200;
    return NULL;
}

static void test_two_replicas_never_oversell(void **state)
{
    (void)state;
    long long id = th_new_item(&a, "it", 50), stock, orders;
    pthread_t t[WORKERS];
    struct hammer_arg calls[WORKERS];
    for (int i = 0; i < WORKERS; i++) {
        calls[i] = (struct hammer_arg){i % 2 ? &a : &b, id, 0};
        pthread_create(&t[i], NULL, hammer, &calls[i]);
    }
    long ok = 0;
    for (int i = 0; i < WORKERS; i++) {
        pthread_join(t[i], NULL);
        ok += calls[i].ok;
    }
    item_state(&a, id, &stock, &orders);
    assert_int_equal(orders, ok);
    assert_int_equal(stock + ok, 50);
    assert_true(stock >= 0);
}

#define BATCH_THREADS 12
#define BATCH_CALLS 25

struct batch_worker {
    const th_stockd *s;
    long long item;
    int qty;
    const char *rid; /* every call with this requestId, or NULL for fresh ones */
    long ok_units, ok_calls, replayed;
};

static void *batch_worker(void *arg)
{
    struct batch_worker *w = arg;
    char url[128], body[160];
    snprintf(url, sizeof(url), "%s/reduceStock", w->s->url);
    for (int i = 0; i < BATCH_CALLS; i++) {
        th_resp r;
        if (w->rid)
            snprintf(body, sizeof(body), "{\"itemId\":%lld,\"quantity\":%d,\"requestId\":\"%s\"}",
                     w->item, w->qty, w->rid);
        else
            snprintf(body, sizeof(body), "{\"itemId\":%lld,\"quantity\":%d}", w->item, w->qty);
        th_http("POST", url, body, &r);
        if (r.status == 200 && strstr(r.body, "\"replayed\":true"))
            w->replayed++;
        else if (r.status == 200)
            w->ok_units += w->qty, w->ok_calls++;
        else if (r.status != 409)
            fail_msg("unexpected answer %ld %s", r.status, r.body);
        th_resp_free(&r);
    }
    return NULL;
}

/* Without workMs, requests for one item are applied in batches (group commit):
 * each still checked against what is left, and a requestId still deducts once. */
static void test_batched_requests_never_oversell_and_replay_once(void **state)
{
    (void)state;
    long long id = th_new_item(&a, "it", 100), stock, orders;
    pthread_t t[BATCH_THREADS + 2];
    struct batch_worker w[BATCH_THREADS + 2];
    for (int i = 0; i < BATCH_THREADS + 2; i++) {
        int dup = i >= BATCH_THREADS; /* two threads, one on each replica, share a requestId */
        w[i] = (struct batch_worker){i % 2 ? &a : &b, id, dup ? 2 : 1 + i % 3,
                                     dup ? "batch-dup" : NULL, 0, 0, 0};
        pthread_create(&t[i], NULL, batch_worker, &w[i]);
    }
    long units = 0, calls = 0, replayed = 0;
    for (int i = 0; i < BATCH_THREADS + 2; i++) {
        pthread_join(t[i], NULL);
        units += w[i].ok_units, calls += w[i].ok_calls, replayed += w[i].replayed;
    }
    item_state(&a, id, &stock, &orders);
    assert_int_equal(stock, 0); /* 12 x 25 requests of 1-3 units: far more than 100 */
    assert_int_equal(units, 100);
    assert_int_equal(orders, calls);
    assert_int_equal(replayed, 2 * BATCH_CALLS - 1); /* "batch-dup" deducted exactly once */
    char url[128];
    th_resp r;
    snprintf(url, sizeof(url), "%s/metrics", a.url);
    th_http("GET", url, NULL, &r);
    const char *line = strstr(r.body, "\nstockd_lock_handoffs_total ");
    assert_non_null(line);
    th_resp_free(&r);
}

static void test_atomic_mode_deducts_without_a_lock(void **state)
{
    (void)state;
    long long id = th_new_item(&atomic_srv, "it", 3), stock, orders;
    json_t *j = reduce(&atomic_srv, id, 2, "atomic-1", 0, 200);
    assert_int_equal(th_jint(j, "remaining"), 1);
    json_decref(j);
    j = reduce(&atomic_srv, id, 2, NULL, 0, 409);
    assert_int_equal(th_jint(j, "remaining"), 1);
    json_decref(j);
    j = reduce(&atomic_srv, id, 2, "atomic-1", 0, 200);
    assert_true(json_is_true(json_object_get(j, "replayed")));
    json_decref(j);
    j = th_call(&atomic_srv, "GET", "/health", NULL, 200);
    assert_non_null(strstr(th_jstr(j, "redis"), "unused"));
    json_decref(j);
    item_state(&atomic_srv, id, &stock, &orders);
    assert_int_equal(stock, 1);
    assert_int_equal(orders, 1);
}

static void test_stolen_lock_is_reported_lost_and_rolled_back(void **state)
{
    (void)state;
    long long id = th_new_item(&a, "it", 5), stock, orders;
    th_bg_reduce holder = {.url = a.url, .item = id, .work_ms = 1000};
    th_bg_reduce_start(&holder);
    char cmd[96];
    snprintf(cmd, sizeof(cmd), "EXISTS %s", th_item_lock_key(id, lock_key));
    while (th_redis_int(&redis, cmd) != 1)
        th_sleep_ms(5);
    snprintf(cmd, sizeof(cmd), "SET %s intruder PX 10000", th_item_lock_key(id, lock_key));
    assert_int_equal(th_redis_int(&redis, cmd), 0); /* the next renewal finds it taken */
    th_bg_reduce_join(&holder);
    assert_int_equal(holder.status, 503);
    assert_non_null(strstr(holder.body, "\"lock_lost\""));
    item_state(&a, id, &stock, &orders);
    assert_int_equal(stock, 5);
    assert_int_equal(orders, 0);
    snprintf(cmd, sizeof(cmd), "DEL %s", th_item_lock_key(id, lock_key));
    th_redis_int(&redis, cmd);
}

/* Another process holds SQLite's write lock past --busy-timeout-ms (300 ms). */
static void test_locked_database_gives_storage_busy(void **state)
{
    (void)state;
    long long id = th_new_item(&a, "it", 5), stock, orders;
    sqlite3 *other;
    assert_int_equal(sqlite3_open(db, &other), SQLITE_OK);
    sqlite3_busy_timeout(other, 5000); /* a replica may be writing this instant */
    assert_int_equal(sqlite3_exec(other, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
    char url[128], body[96];
    th_resp r;
    snprintf(url, sizeof(url), "%s/reduceStock", a.url);
    snprintf(body, sizeof(body), "{\"itemId\":%lld,\"quantity\":1}", id);
    th_http("POST", url, body, &r);
    sqlite3_exec(other, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close(other);
    assert_int_equal(r.status, 503);
    assert_non_null(strstr(r.body, "storage_busy"));
    assert_string_equal(r.retry_after, "1");
    th_resp_free(&r);
    item_state(&a, id, &stock, &orders);
    assert_int_equal(stock, 5);
    assert_int_equal(orders, 0);
}

/* A real storage fault, injected through SQLite itself: a trigger that aborts
 * the ledger insert. The stock update in the same transaction must roll back. */
static void test_storage_fault_gives_500_and_writes_nothing(void **state)
{
    (void)state;
    long long id = th_new_item(&a, "it", 1000), stock, orders;
    sqlite3 *other;
    assert_int_equal(sqlite3_open(db, &other), SQLITE_OK);
    assert_int_equal(sqlite3_exec(other, "CREATE TRIGGER injected_fault BEFORE INSERT ON "
                                         "order_lines WHEN NEW.quantity = 777 BEGIN SELECT "
                                         "RAISE(ABORT, 'injected fault'); END;",
                                  NULL, NULL, NULL), SQLITE_OK);
    json_t *j = reduce(&a, id, 777, NULL, 0, 500);
    assert_string_equal(th_jstr(j, "error"), "storage_error");
    assert_non_null(strstr(th_jstr(j, "message"), "injected fault"));
    json_decref(j);
    json_decref(reduce(&atomic_srv, id, 777, NULL, 0, 500)); /* same fault, atomic mode */
    sqlite3_exec(other, "DROP TRIGGER injected_fault", NULL, NULL, NULL);
    sqlite3_close(other);
    item_state(&a, id, &stock, &orders);
    assert_int_equal(stock, 1000);
    assert_int_equal(orders, 0);
    json_decref(reduce(&a, id, 777, NULL, 0, 200));
}

/* One unit of item from s after Redis came back. A connection to the old
 * server that the replica has not used since may still meet its close: that
 * order is answered 503 redis_unavailable and writes nothing, and the
 * connection is made anew. So a few such answers may come first (as many as
 * the replica had connections idle), then the 200, which is returned. */
static json_t *reduce_once_redis_is_back(const th_stockd *s, long long item)
{
    char url[96], body[96];
    snprintf(url, sizeof(url), "%s/reduceStock", s->url);
    snprintf(body, sizeof(body), "{\"itemId\":%lld,\"quantity\":1}", item);
    for (int attempt = 0; attempt < 32; attempt++) {
        th_resp r;
        assert_int_equal(th_http("POST", url, body, &r), 0);
        json_t *j = json_loads(r.body ? r.body : "", 0, NULL);
        long status = r.status;
        th_resp_free(&r);
        if (status == 200)
            return j;
        assert_int_equal(status, 503);
        assert_string_equal(th_jstr(j, "error"), "redis_unavailable");
        json_decref(j);
    }
    fail_msg("no order went through in 32 tries after Redis came back");
    return NULL;
}

static void test_redis_down_gives_503_then_recovers(void **state)
{
    (void)state;
    long long id = th_new_item(&a, "it", 5), stock, orders;
    th_redis_stop(&redis, 1);
    int64_t t0 = th_now_ms();
    json_t *j = reduce(&a, id, 1, NULL, 0, 503);
    assert_string_equal(th_jstr(j, "error"), "redis_unavailable");
    json_decref(j);
    assert_true(th_now_ms() - t0 < 3000);
    j = th_call(&a, "GET", "/health", NULL, 503);
    assert_string_equal(th_jstr(j, "status"), "unavailable");
    assert_string_equal(th_jstr(j, "storage"), "ok");
    assert_string_equal(th_jstr(j, "storageBackend"), "sqlite");
    json_decref(j);
    item_state(&a, id, &stock, &orders);
    assert_int_equal(stock, 5);

    assert_int_equal(th_redis_start(&redis), 0);
    json_decref(th_call(&a, "GET", "/health", NULL, 200));
    j = reduce_once_redis_is_back(&a, id); /* fences restart above the stored ones */
    assert_int_equal(th_jint(j, "remaining"), 4);
    json_decref(j);
    json_decref(reduce_once_redis_is_back(&b, id));
}

/* SIGTERM while an order holds its item's lock for 700 ms; `resp` gets what a
 * keep-alive probe connection to `port`, opened before the signal, is
 * answered 100 ms after it. The order is left in `inflight`, to be joined. */
static void sigterm_during_an_order(th_stockd *d, long long id, int port, th_bg_reduce *inflight,
                                    char *resp, size_t size)
{
    int keepalive = th_connect(port);
    const char *health = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    assert_true(th_exchange(keepalive, health, resp, size, 3000) > 0);
    assert_non_null(strstr(resp, " 200 "));
    *inflight = (th_bg_reduce){.url = d->url, .item = id, .work_ms = 700};
    th_bg_reduce_start(inflight);
    char key[64];
    snprintf(key, sizeof(key), "EXISTS %s", th_item_lock_key(id, lock_key));
    while (th_redis_int(&redis, key) != 1)
        th_sleep_ms(5);
    kill(d->pid, SIGTERM);
    th_sleep_ms(100);
    if (port == d->port) { /* a new client is closed at once, not half-answered */
        char out[256];
        assert_true(th_raw(d->port, "GET /health HTTP/1.0\r\n\r\n", 24, 0, out, sizeof(out),
                           1000) <= 0);
    }
    /* an open keep-alive connection gets a whole answer telling it to go elsewhere */
    assert_true(th_exchange(keepalive, health, resp, size, 3000) > 0);
    close(keepalive);
    assert_non_null(strstr(resp, " 503 "));
    assert_non_null(strstr(resp, "shutting_down"));
}

static void test_sigterm_finishes_in_flight_requests_and_releases_locks(void **state)
{
    (void)state;
    th_stockd d;
    const char *flags[] = {LOCK_FLAGS, NULL};
    assert_int_equal(th_stockd_start(&d, &redis, db, dir, flags), 0);
    long long id = th_new_item(&d, "it", 5), stock, orders;
    char resp[2048];
    th_bg_reduce inflight;
    sigterm_during_an_order(&d, id, d.port, &inflight, resp, sizeof(resp));
    assert_non_null(strcasestr(resp, "Connection: close"));
    th_bg_reduce_join(&inflight); /* committed before the stop: its answer must arrive */
    if (inflight.status != 200)
        fail_msg("the request in flight: %ld %s", inflight.status, inflight.body);
    assert_int_equal(th_stockd_stop_clean(&d), 0);
    char key[64];
    snprintf(key, sizeof(key), "EXISTS %s", th_item_lock_key(id, lock_key));
    assert_int_equal(th_redis_int(&redis, key), 0);
    item_state(&a, id, &stock, &orders);
    assert_int_equal(stock, 4);
    assert_int_equal(orders, 1);
    char *log = th_read_file(d.log);
    assert_non_null(strstr(log, "msg=\"stopped\""));
    free(log);
}

/* --probe-port: a second port, with an event thread of its own, answers the
 * probes and nothing else, and tells a balancer to go elsewhere as soon as
 * the replica drains. */
static void test_a_probe_port_answers_only_the_probes(void **state)
{
    (void)state;
    th_stockd d;
    int probe = th_free_port();
    char port[16], url[96];
    snprintf(port, sizeof(port), "%d", probe);
    const char *flags[] = {LOCK_FLAGS, "--probe-port", port, NULL};
    assert_int_equal(th_stockd_start(&d, &redis, db, dir, flags), 0);
    long long id = th_new_item(&d, "it", 5);
    th_resp r;
    const char *probes[] = {"/health", "/metrics"};
    for (int i = 0; i < 2; i++) {
        snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", probe, probes[i]);
        assert_int_equal(th_http("GET", url, NULL, &r), 0);
        assert_int_equal(r.status, 200);
        th_resp_free(&r);
    }
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/items/%lld", probe, id);
    assert_int_equal(th_http("GET", url, NULL, &r), 0);
    assert_int_equal(r.status, 404);
    assert_non_null(strstr(r.body, "\"not_found\""));
    th_resp_free(&r);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/reduceStock", probe);
    char body[96];
    snprintf(body, sizeof(body), "{\"itemId\":%lld,\"quantity\":1}", id);
    assert_int_equal(th_http("POST", url, body, &r), 0);
    assert_int_equal(r.status, 404);
    th_resp_free(&r);
    assert_int_equal(th_item_stock(&d, id), 5); /* nothing sold through the probe port */
    json_decref(th_call(&d, "GET", "/health", NULL, 200)); /* the main port still answers */

    char resp[2048];
    th_bg_reduce inflight; /* draining: the balancer takes it out */
    sigterm_during_an_order(&d, id, probe, &inflight, resp, sizeof(resp));
    th_bg_reduce_join(&inflight);
    assert_int_equal(inflight.status, 200);
    assert_int_equal(th_wait(d.pid, 10000), 0);
}

/* Requests still waiting for a lock at the drain deadline stop waiting (the
 * lock's wait withdrawn, dlock_cancel): they are answered shutting_down at
 * once, not after --wait-ms, and nothing is sold. */
static void test_lock_waits_end_at_the_drain_deadline(void **state)
{
    (void)state;
    th_stockd d;
    const char *flags[] = {LOCK_FLAGS, "--drain-ms", "300", "--wait-ms", "20000", NULL};
    assert_int_equal(th_stockd_start(&d, &redis, db, dir, flags), 0);
    long long id = th_new_item(&d, "it", 5);
    assert_int_equal(th_hold_item_lock(&redis, id), 0); /* another owner, for 30 s */
    th_bg_reduce waiting[3] = {{.url = d.url, .item = id}, {.url = d.url, .item = id},
                               {.url = d.url, .item = id, .work_ms = 50}}; /* batched, alone */
    for (int i = 0; i < 3; i++)
        th_bg_reduce_start(&waiting[i]);
    th_wait_inflight(&d, 3);
    int64_t t0 = th_now_ms();
    kill(d.pid, SIGTERM);
    for (int i = 0; i < 3; i++) {
        th_bg_reduce_join(&waiting[i]);
        if (waiting[i].status != 503 || strstr(waiting[i].body, "shutting_down") == NULL)
            fail_msg("a lock's waiter at the drain deadline: %ld %s", waiting[i].status,
                     waiting[i].body);
    }
    assert_true(th_now_ms() - t0 < 10000); /* far sooner than --wait-ms */
    assert_int_equal(th_wait(d.pid, 10000), 0);
    assert_int_equal(th_release_item_lock(&redis, id), 0);
    assert_int_equal(th_item_stock(&a, id), 5);
}

/* GET /health until it answers 503 "draining" (1), or within_ms passes (0). */
static int wait_health_draining(const char *base_url, int within_ms)
{
    char url[128];
    snprintf(url, sizeof(url), "%s/health", base_url);
    for (int64_t end = th_now_ms() + within_ms; th_now_ms() < end; th_sleep_ms(20)) {
        th_resp r;
        int draining = th_http("GET", url, NULL, &r) == 0 && r.status == 503 &&
                       strstr(r.body, "\"status\":\"draining\"") != NULL;
        th_resp_free(&r);
        if (draining)
            return 1;
    }
    return 0;
}

/* --drain-notice-ms: after SIGTERM, /health answers 503 "draining" while
 * orders are still sold on new connections (a load balancer drops the
 * replica before it refuses anyone); then the drain stops it, exit 0. */
static void test_a_drain_notice_sells_while_health_says_draining(void **state)
{
    (void)state;
    th_stockd d;
    int notice_ms = 3000 * th_slower();
    char notice[16];
    snprintf(notice, sizeof(notice), "%d", notice_ms);
    const char *flags[] = {LOCK_FLAGS, "--drain-notice-ms", notice, NULL};
    assert_int_equal(th_stockd_start(&d, &redis, db, dir, flags), 0);
    long long id = th_new_item(&d, "it", 5);
    int64_t t0 = th_now_ms();
    kill(d.pid, SIGTERM);
    assert_true(wait_health_draining(d.url, notice_ms));
    char body[512];
    long status = th_reduce(d.url, id, 1, 0, body, sizeof(body));
    int64_t sold_at = th_now_ms() - t0;
    if (status != 200)
        fail_msg("an order during the drain notice: %ld %s", status, body);
    if (sold_at >= notice_ms) /* too slow a machine to tell; not the code's fault */
        print_message("the order came %lld ms after SIGTERM, past the notice\n",
                      (long long)sold_at);
    assert_int_equal(th_wait(d.pid, notice_ms + 10000), 0);
    assert_true(th_now_ms() - t0 >= notice_ms - 50); /* the notice was served, not skipped */
    assert_int_equal(th_item_stock(&a, id), 4);
}

/* Writes one buyer token, token, as the tokens file path (whole: a temp
 * file renamed over it). */
static void write_buyer_token(const char *path, const char *token)
{
    char line[192];
    snprintf(line, sizeof(line), "buyer shop %s\n", token);
    assert_int_equal(th_replace_file(path, line), 0);
}

/* The status of GET /items on s with token as a bearer token. */
static int items_status_with(const th_stockd *s, const char *token)
{
    char req[256], out[8192];
    snprintf(req, sizeof(req), "GET /items?limit=1 HTTP/1.1\r\nHost: t\r\nAuthorization: "
             "Bearer %s\r\nConnection: close\r\n\r\n", token);
    int fd = th_connect(s->port);
    assert_true(fd >= 0);
    int got = th_exchange(fd, req, out, sizeof(out), 10000 * TH_SLOWER);
    close(fd);
    return got > 0 ? atoi(out + 9) : 0;
}

/* Where msg first is in log after from (a pointer into log), or NULL. */
static const char *logged_after(const char *log, const char *from, const char *msg)
{
    char needle[160];
    snprintf(needle, sizeof(needle), "msg=\"%s", msg);
    const char *at = log ? strstr(from ? from : log, needle) : NULL;
    if (at == NULL)
        print_message("not in the log%s: %s\n", from ? " after the line before" : "", msg);
    return at;
}

/* During a drain notice SIGHUP still reloads the tokens (the new one is
 * taken, the old refused: every route is served meanwhile), and a second
 * SIGTERM cuts the notice short: stockd exits 0 long before the notice's
 * end. The log shows the order: the notice, the reload, the second signal,
 * the stop. (Each signal is sent once the one before has been seen to
 * act, so two can't merge into one.) */
static void test_a_second_sigterm_cuts_the_notice_short_and_sighup_reloads_in_it(void **state)
{
    (void)state;
    const int notice_ms = 600000; /* never waited for: exiting before it is the point */
    char tokens[160], notice[16];
    snprintf(tokens, sizeof(tokens), "%s/notice-tokens", dir);
    snprintf(notice, sizeof(notice), "%d", notice_ms);
    write_buyer_token(tokens, "notice-token-one");
    const char *flags[] = {LOCK_FLAGS, "--drain-notice-ms", notice, "--api-tokens-file", tokens,
                           NULL};
    th_stockd d;
    assert_int_equal(th_stockd_start(&d, &redis, db, dir, flags), 0);
    assert_int_equal(items_status_with(&d, "notice-token-one"), 200);
    int64_t t0 = th_now_ms();
    kill(d.pid, SIGTERM);
    assert_true(wait_health_draining(d.url, 10000 * TH_SLOWER));

    write_buyer_token(tokens, "notice-token-two");
    kill(d.pid, SIGHUP);
    for (int64_t end = th_now_ms() + 10000 * TH_SLOWER;
         th_count_in_file(d.log, "msg=\"api tokens reloaded") < 1;) {
        if (th_now_ms() > end)
            fail_msg("no \"api tokens reloaded\" in %s after SIGHUP", d.log);
        th_sleep_ms(20);
    }
    assert_int_equal(items_status_with(&d, "notice-token-two"), 200); /* still served */
    assert_int_equal(items_status_with(&d, "notice-token-one"), 401);

    kill(d.pid, SIGTERM);
    assert_int_equal(th_wait(d.pid, 10000 * TH_SLOWER), 0); /* a hang: the notice not cut */
    int64_t took = th_now_ms() - t0;
    print_message("stopped %lld ms after the first SIGTERM, of a %d ms notice\n",
                  (long long)took, notice_ms);
    assert_true(took < notice_ms);
    char *log = th_read_file(d.log);
    const char *at = logged_after(log, NULL, "drain notice: /health answers 503");
    at = at ? logged_after(log, at, "api tokens reloaded") : NULL;
    at = at ? logged_after(log, at, "second stop signal: the drain notice is cut short") : NULL;
    at = at ? logged_after(log, at, "stopped") : NULL;
    free(log);
    assert_non_null(at);
}

/* A request still running when the drain deadline passes must not commit:
 * its answer could no longer be sent. */
static void test_requests_past_the_drain_deadline_do_not_commit(void **state)
{
    (void)state;
    th_stockd d;
    const char *flags[] = {LOCK_FLAGS, "--drain-ms", "300", NULL};
    assert_int_equal(th_stockd_start(&d, &redis, db, dir, flags), 0);
    long long id = th_new_item(&a, "it", 5), stock, orders;
    th_bg_reduce late = {.url = d.url, .item = id, .work_ms = 1000};
    th_bg_reduce_start(&late);
    char key[64];
    snprintf(key, sizeof(key), "EXISTS %s", th_item_lock_key(id, lock_key));
    while (th_redis_int(&redis, key) != 1)
        th_sleep_ms(5);
    assert_int_equal(th_stockd_stop_clean(&d), 0); /* SIGTERM; drains 300 ms of the 1000 */
    th_bg_reduce_join(&late);
    assert_int_not_equal(late.status, 200);
    item_state(&a, id, &stock, &orders);
    assert_int_equal(stock, 5);
    assert_int_equal(orders, 0);
}

/* Everything the server sends on fd until it closes (or timeout_ms), NUL-terminated. */
static void read_to_close(int fd, char *out, size_t size, int timeout_ms)
{
    size_t used = 0;
    int64_t end = th_now_ms() + timeout_ms;
    while (used + 1 < size && th_now_ms() < end) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        ssize_t n = read(fd, out + used, size - 1 - used);
        if (n <= 0)
            break;
        used += (size_t)n;
    }
    out[used] = '\0';
}

/* Orders whose commits straddle the drain deadline, each on a connection its
 * client reads only once the replica has exited: an order that committed has
 * its 200 waiting in the client's socket (the stop did not cut its answer
 * off), one that did not has its 503. Before the stop waited for made answers
 * to be written, an answer made an instant before MHD_stop_daemon was lost
 * (the client read nothing): a race, which this caught in 4 runs of 12 on a
 * busy 2-core machine (a refusal's 503 each time; a commit's 200 goes the
 * same way), and never since. On a busy machine the signal may come before
 * the server reads any of them: all 24 are then closed unanswered, and
 * before the stop stopped making answers once it had waited for those
 * made, their 503s were logged as made and cut off (CI, once). */
#define STRADDLING 24
static void test_every_order_committed_at_the_drain_deadline_is_answered(void **state)
{
    (void)state;
    th_stockd d;
    const char *flags[] = {LOCK_FLAGS, "--drain-ms", "300", "--log-level", "debug", NULL};
    assert_int_equal(th_stockd_start(&d, &redis, db, dir, flags), 0);
    long long ids[STRADDLING];
    int fds[STRADDLING];
    char req[STRADDLING][512];
    /* each connection taken by the server first (a keep-alive exchange): one
     * still in the listen backlog at the signal is closed unanswered, and
     * its order never reached the server */
    for (int i = 0; i < STRADDLING; i++) {
        char body[128], out[1024];
        ids[i] = th_new_item(&d, "it", 5);
        int n = snprintf(body, sizeof(body), "{\"itemId\":%lld,\"quantity\":1,\"workMs\":%d}",
                         ids[i], 260 + 4 * i); /* 260 to 352 ms: around the 300 ms drain */
        snprintf(req[i], sizeof(req[i]), "POST /reduceStock HTTP/1.1\r\nHost: x\r\n"
                 "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", n, body);
        assert_true((fds[i] = th_connect(d.port)) >= 0);
        assert_true(th_exchange(fds[i], "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", out,
                                sizeof(out), 5000 * TH_SLOWER) > 0);
        assert_non_null(strstr(out, " 200 "));
    }
    for (int i = 0; i < STRADDLING; i++)
        th_send_all(fds[i], req[i], strlen(req[i]));
    kill(d.pid, SIGTERM);
    assert_int_equal(th_wait(d.pid, 30000 * TH_SLOWER), 0);
    int answered = 0, refused = 0, unread = 0;
    for (int i = 0; i < STRADDLING; i++) {
        char resp[2048];
        read_to_close(fds[i], resp, sizeof(resp), 2000);
        close(fds[i]);
        long long stock = th_item_stock(&a, ids[i]);
        if (stock == 4 && strncmp(resp, "HTTP/1.1 200 ", 13) == 0)
            answered++;
        else if (stock == 5 && strstr(resp, " 503 ") && strstr(resp, "shutting_down"))
            refused++;
        else if (stock == 5 && resp[0] == '\0')
            unread++; /* not read before the stop (or its answer lost: counted below) */
        else
            fail_msg("order %d (workMs %d): stock %lld, answered '%.60s'", i, 260 + 4 * i, stock,
                     resp);
    }
    /* every order the server answered (its debug line, written as the
     * answer is made) reached its client: one not read before the stop may
     * go unanswered, as on any connection the server closes */
    char *log = th_read_file(d.log);
    int made = 0;
    for (const char *p = log; (p = strstr(p, "path=/reduceStock")) != NULL; p++)
        made++;
    free(log);
    print_message("%d committed and answered, %d refused, %d not read before the stop\n",
                  answered, refused, unread);
    assert_int_equal(made, answered + refused);
}

/* The drain deadline passes while a single write waits for the database's
 * write lock: the decision is taken inside the transaction, so it rolls back
 * instead of committing a deduction whose answer can no longer be sent. */
static void test_a_write_that_waits_past_the_drain_deadline_does_not_commit(void **state)
{
    (void)state;
    th_stockd d;
    const char *flags[] = {LOCK_FLAGS, "--batch", "off", "--drain-ms", "500",
                           "--busy-timeout-ms", "5000", NULL};
    assert_int_equal(th_stockd_start(&d, &redis, db, dir, flags), 0);
    long long id = th_new_item(&a, "it", 5), stock, orders;
    th_bg_reduce late = {.url = d.url, .item = id, .work_ms = 1000};
    th_bg_reduce_start(&late);
    char key[64];
    snprintf(key, sizeof(key), "EXISTS %s", th_item_lock_key(id, lock_key));
    while (th_redis_int(&redis, key) != 1)
        th_sleep_ms(5);
    sqlite3 *other;
    assert_int_equal(sqlite3_open(db, &other), SQLITE_OK);
    sqlite3_busy_timeout(other, 5000); /* the request's claim may be writing this instant */
    assert_int_equal(sqlite3_exec(other, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
    th_sleep_ms(700);
    kill(d.pid, SIGTERM); /* the drain ends at 1.2 s, after the work (1 s) began its write */
    th_sleep_ms(2300);
    sqlite3_exec(other, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close(other);
    assert_int_equal(th_stockd_stop(&d, SIGTERM), 0);
    th_bg_reduce_join(&late);
    assert_int_not_equal(late.status, 200);
    item_state(&a, id, &stock, &orders);
    assert_int_equal(stock, 5);
    assert_int_equal(orders, 0);
}

/* 250 requests for items that do not exist leave Redis as it was: they are
 * answered before any lock is taken. */
static void test_requests_for_absent_items_touch_no_redis_key(void **state)
{
    (void)state;
    long long before = th_redis_int(&redis, "DBSIZE");
    char path[64], body[96];
    for (int i = 0; i < 250; i++) {
        long long absent = 900000000LL + i;
        snprintf(body, sizeof(body), "{\"itemId\":%lld,\"quantity\":1}", absent);
        json_decref(th_call(i % 2 ? &a : &b, "POST", "/reduceStock", body, 404));
        if (i % 50 == 0) {
            snprintf(path, sizeof(path), "/items/%lld", absent);
            json_decref(th_call(&a, "PUT", path, "{\"stock\":5}", 404));
        }
    }
    assert_true(th_redis_int(&redis, "DBSIZE") <= before);
}

#define BIG_LEDGER 300000

/* Writes n ledger rows for item straight into the database (quantity 1,
 * as if sold before), in one transaction. */
static void fill_ledger(long long item, int n)
{
    sqlite3 *other;
    char sql[512];
    assert_int_equal(sqlite3_open(db, &other), SQLITE_OK);
    sqlite3_busy_timeout(other, 5000);
    snprintf(sql, sizeof(sql), "BEGIN; WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 "
             "FROM n WHERE i < %d) INSERT INTO orders (instance_id, lock_mode) SELECT "
             "'filled-by-test', 'none' FROM n; INSERT INTO order_lines (order_id, item_id, "
             "quantity, remaining) SELECT id, %lld, 1, 0 FROM orders WHERE instance_id = "
             "'filled-by-test'; COMMIT", n, item);
    assert_int_equal(sqlite3_exec(other, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(other);
}

/* A ledger of 300,000 rows: an answer is at most one page (1000 rows), a
 * larger limit is refused, pages follow one another by ?after=, and the
 * replica's memory stays about where it was. */
static void test_a_long_ledger_is_read_in_bounded_pages(void **state)
{
    (void)state;
    long long id = th_new_item(&a, "it", 5);
    fill_ledger(id, BIG_LEDGER);
    char path[128];
    snprintf(path, sizeof(path), "/items/%lld?limit=1000000", id);
    json_decref(th_call(&a, "GET", path, NULL, 400));
    snprintf(path, sizeof(path), "/items/%lld?limit=1000", id);
    json_decref(th_call(&a, "GET", path, NULL, 200)); /* warm up: caches, arenas */
    long before_kb = th_rss_kb(a.pid);
    long long after = 0, last = 0;
    for (int page = 0; page < 10; page++) {
        snprintf(path, sizeof(path), "/items/%lld?limit=1000&after=%lld", id, after);
        json_t *j = th_call(&a, "GET", path, NULL, 200);
        json_t *orders = json_object_get(j, "orders");
        assert_int_equal(json_array_size(orders), 1000);
        assert_int_equal(th_jint(j, "orderCount"), BIG_LEDGER);
        for (size_t i = 0; i < json_array_size(orders); i++) {
            long long oid = th_jint(json_array_get(orders, i), "orderId");
            assert_true(last == 0 || oid == last - 1); /* contiguous, newest first */
            last = oid;
        }
        after = th_jint(j, "nextAfter");
        assert_int_equal(after, last);
        json_decref(j);
    }
    long grown_kb = th_rss_kb(a.pid) - before_kb;
    print_message("RSS grew by %ld KiB over ten pages of 1000 rows\n", grown_kb);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    /* (a sanitizer keeps freed memory in quarantine: only measured here) */
    if (grown_kb > 16 * 1024)
        fail_msg("RSS grew by %ld KiB over ten pages of 1000 rows", grown_kb);
#endif
}

/* GET /items pages in id order; the last page says there is no next one. */
static void test_items_are_listed_in_pages(void **state)
{
    (void)state;
    long long first = th_new_item(&a, "it", 1);
    th_new_item(&a, "it", 1);
    long long third = th_new_item(&a, "it", 1);
    char path[64];
    snprintf(path, sizeof(path), "/items?limit=2&after=%lld", first - 1);
    json_t *j = th_call(&a, "GET", path, NULL, 200);
    assert_int_equal(json_array_size(json_object_get(j, "items")), 2);
    long long next = th_jint(j, "nextAfter");
    json_decref(j);
    snprintf(path, sizeof(path), "/items?limit=2&after=%lld", next);
    j = th_call(&a, "GET", path, NULL, 200);
    assert_int_equal(th_jint(json_array_get(json_object_get(j, "items"), 0), "id"), third);
    assert_true(json_is_null(json_object_get(j, "nextAfter")));
    json_decref(j);
    json_decref(th_call(&a, "GET", "/items?limit=1001", NULL, 400));
    json_decref(th_call(&a, "GET", "/items?after=-1", NULL, 400));
}

/* One Redis command must not outlast the room a renewal has: the renew
 * scenario's 500 ms lease with the default 1000 ms timeout is refused. */
static void test_a_redis_timeout_too_long_for_the_lease_stops_start_up(void **state)
{
    (void)state;
    char bin[256], out[160];
    snprintf(bin, sizeof(bin), "%s/stockd", th_build_dir());
    snprintf(out, sizeof(out), "%s/config.out", dir);
    const char *too_long[] = {bin, "--lease-ms", "500", "--db", db, NULL};
    assert_int_equal(th_run(too_long, out, 10000), 2);
    char *text = th_read_file(out);
    assert_non_null(strstr(text, "--redis-timeout-ms 1000 is too long for --lease-ms 500"));
    assert_non_null(strstr(text, "use --redis-timeout-ms 83 or less"));
    free(text);
    th_stockd d;
    const char *fits[] = {"--lease-ms", "500", "--redis-timeout-ms", "83", NULL};
    assert_int_equal(th_stockd_start(&d, &redis, db, dir, fits), 0);
    assert_int_equal(th_stockd_stop_clean(&d), 0);
    const char *no_redis[] = {"--lease-ms", "500", "--lock", "atomic", NULL};
    assert_int_equal(th_stockd_start(&d, NULL, db, dir, no_redis), 0);
    assert_int_equal(th_stockd_stop_clean(&d), 0);
}

#define ROLLBACK_THREADS 12

static void *take_all(void *arg)
{
    th_bg_reduce *call = arg;
    call->status = th_reduce(call->url, call->item, 5, 0, call->body, sizeof(call->body));
    return NULL;
}

/* A storage fault at commit rolls the whole batch back: the deduction that
 * took everything is gone, so no answer may say the stock ran out. */
static void test_a_rolled_back_batch_leaves_no_false_refusal(void **state)
{
    (void)state;
    long long id = th_new_item(&a, "it", 5), stock, orders;
    sqlite3 *other;
    char sql[200];
    assert_int_equal(sqlite3_open(db, &other), SQLITE_OK);
    snprintf(sql, sizeof(sql), "CREATE TRIGGER batch_fault BEFORE UPDATE OF stock ON items "
             "WHEN OLD.id = %lld AND NEW.stock = 0 BEGIN SELECT RAISE(ABORT, 'injected'); END",
             id);
    assert_int_equal(sqlite3_exec(other, sql, NULL, NULL, NULL), SQLITE_OK);
    pthread_t t[ROLLBACK_THREADS];
    th_bg_reduce calls[ROLLBACK_THREADS];
    for (int i = 0; i < ROLLBACK_THREADS; i++) {
        calls[i] = (th_bg_reduce){.url = i % 2 ? a.url : b.url, .item = id};
        pthread_create(&t[i], NULL, take_all, &calls[i]);
    }
    for (int i = 0; i < ROLLBACK_THREADS; i++) {
        pthread_join(t[i], NULL);
        if (calls[i].status != 500)
            fail_msg("answer %d: %ld %s", i, calls[i].status, calls[i].body);
    }
    sqlite3_exec(other, "DROP TRIGGER batch_fault", NULL, NULL, NULL);
    sqlite3_close(other);
    item_state(&a, id, &stock, &orders);
    assert_int_equal(stock, 5);
    assert_int_equal(orders, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_reduce_and_read_back),
        cmocka_unit_test(test_same_request_id_deducts_once),
        cmocka_unit_test(test_same_request_id_creates_an_item_once),
        cmocka_unit_test(test_insufficient_stock_and_unknown_item),
        cmocka_unit_test(test_put_sets_stock_under_the_lock),
        cmocka_unit_test(test_malformed_requests_get_json_errors_and_leave_stock_alone),
        cmocka_unit_test(test_raw_protocol_abuse_is_refused_without_touching_stock),
        cmocka_unit_test(test_watchdog_renews_during_long_work),
        cmocka_unit_test(test_interrupted_holder_rolls_back),
        cmocka_unit_test(test_busy_lock_times_out_without_stalling_other_items),
        cmocka_unit_test(test_two_replicas_never_oversell),
        cmocka_unit_test(test_batched_requests_never_oversell_and_replay_once),
        cmocka_unit_test(test_atomic_mode_deducts_without_a_lock),
        cmocka_unit_test(test_stolen_lock_is_reported_lost_and_rolled_back),
        cmocka_unit_test(test_locked_database_gives_storage_busy),
        cmocka_unit_test(test_storage_fault_gives_500_and_writes_nothing),
        cmocka_unit_test(test_a_body_framed_two_ways_is_refused_and_closes),
        cmocka_unit_test(test_redis_down_gives_503_then_recovers),
        cmocka_unit_test(test_sigterm_finishes_in_flight_requests_and_releases_locks),
        cmocka_unit_test(test_a_probe_port_answers_only_the_probes),
        cmocka_unit_test(test_lock_waits_end_at_the_drain_deadline),
        cmocka_unit_test(test_requests_past_the_drain_deadline_do_not_commit),
        cmocka_unit_test(test_a_drain_notice_sells_while_health_says_draining),
        cmocka_unit_test(test_a_second_sigterm_cuts_the_notice_short_and_sighup_reloads_in_it),
        cmocka_unit_test(test_every_order_committed_at_the_drain_deadline_is_answered),
        cmocka_unit_test(test_a_write_that_waits_past_the_drain_deadline_does_not_commit),
        cmocka_unit_test(test_a_redis_timeout_too_long_for_the_lease_stops_start_up),
        cmocka_unit_test(test_requests_for_absent_items_touch_no_redis_key),
        cmocka_unit_test(test_a_long_ledger_is_read_in_bounded_pages),
        cmocka_unit_test(test_items_are_listed_in_pages),
        cmocka_unit_test(test_a_rolled_back_batch_leaves_no_false_refusal),
    };
    return cmocka_run_group_tests_name("server", tests, group_setup, group_teardown);
}
