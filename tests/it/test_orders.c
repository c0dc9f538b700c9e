/* test_orders.c - orders of several items (POST /orders, GET /orders/{id})
 * end to end: real redis-server, real stockd replicas on one SQLite file.
 * All or nothing: a short line, an unknown item, a crash, an interrupted or
 * a stalled holder leave every item as it was; the answer names each short
 * line; a requestId answers once across replicas and across /reduceStock;
 * carts whose items overlap in opposite orders never deadlock or oversell;
 * and the ledger in the database is checked row by row after each run. */
#include <jansson.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <sqlite3.h>

#include "lock/dlock.h"
#include "tests/support/calls.h"
#include "tests/support/harness.h"

static th_redis redis;
static th_stockd a, b, unbatched, atomic_srv, unlocked;
static char dir[64], db[128];

#define LOCK_FLAGS "--lease-ms", "600", "--redis-timeout-ms", "100", "--max-renewals", "8", \
                   "--wait-ms", "5000", "--retry-ms", "20", "--allow-work-ms", \
                   "--busy-timeout-ms", "2000"

static int group_setup(void **state)
{
    (void)state;
    curl_global_init(CURL_GLOBAL_ALL);
    if (th_tempdir("orders-it", dir, sizeof(dir)) != 0 || th_redis_start(&redis) != 0)
        return -1;
    snprintf(db, sizeof(db), "%s/stock.db", dir);
    const char *fa[] = {LOCK_FLAGS, "--instance-id", "replica-a", NULL};
    const char *fb[] = {LOCK_FLAGS, "--instance-id", "replica-b", NULL};
    const char *fu[] = {LOCK_FLAGS, "--instance-id", "unbatched", "--batch", "off", NULL};
    const char *fatomic[] = {"--lock", "atomic", "--busy-timeout-ms", "2000", NULL};
    const char *fnone[] = {"--lock", "none", "--busy-timeout-ms", "2000", NULL};
    if (th_stockd_start(&a, &redis, db, dir, fa) != 0 ||
        th_stockd_start(&b, &redis, db, dir, fb) != 0 ||
        th_stockd_start(&unbatched, &redis, db, dir, fu) != 0 ||
        th_stockd_start(&atomic_srv, NULL, db, dir, fatomic) != 0 ||
        th_stockd_start(&unlocked, NULL, db, dir, fnone) != 0)
        return -1;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    int rc = th_stockd_stop_clean(&a) | th_stockd_stop_clean(&b) |
             th_stockd_stop_clean(&unbatched) | th_stockd_stop_clean(&atomic_srv) |
             th_stockd_stop_clean(&unlocked);
    th_redis_stop(&redis, 0);
    return rc;
}

/* ---- HTTP ---- */

static long long new_item(long long stock) { return th_new_item(&a, "cart item", stock); }

static long long stock_of(long long id)
{
    char path[64];
    snprintf(path, sizeof(path), "/items/%lld", id);
    json_t *j = th_call(&a, "GET", path, NULL, 200);
    long long stock = th_jint(j, "stock");
    json_decref(j);
    return stock;
}

static json_t *order(const th_stockd *s, const long long *items, const int *qty, int n,
                     const char *rid, int work_ms, long expect)
{
    char body[4096];
    th_order_body(body, sizeof(body), items, qty, n, rid, work_ms);
    return th_call(s, "POST", "/orders", body, expect);
}

/* ---- the ledger, read straight from the database ---- */

static sqlite3 *open_db(void)
{
    sqlite3 *h = NULL;
    assert_int_equal(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_busy_timeout(h, 5000);
    return h;
}

static long long db_int(sqlite3 *h, const char *sql, long long arg)
{
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(h, sql, -1, &st, NULL), SQLITE_OK);
    sqlite3_bind_int64(st, 1, arg);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    long long v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

/* The ledger of item id tells one story: walked in commit (order id) order,
 * each line's "remaining" is the one before it less its quantity, starting
 * from initial; the last is the stock now. A lost update (two holders that
 * read the same stock) breaks the chain. Returns the units sold. */
static long long check_ledger(long long id, long long initial)
{
    sqlite3 *h = open_db();
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(h, "SELECT order_id, quantity, remaining FROM "
                                        "order_lines WHERE item_id = ?1 ORDER BY order_id",
                                        -1, &st, NULL),
                     SQLITE_OK);
    sqlite3_bind_int64(st, 1, id);
    long long left = initial, sold = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        long long qty = sqlite3_column_int64(st, 1), remaining = sqlite3_column_int64(st, 2);
        if (remaining != left - qty)
            fail_msg("item %lld, order %lld: remaining %lld after %lld - %lld: a lost update", id,
                     (long long)sqlite3_column_int64(st, 0), remaining, left, qty);
        left = remaining, sold += qty;
    }
    sqlite3_finalize(st);
    assert_int_equal(db_int(h, "SELECT stock FROM items WHERE id = ?1", id), left);
    sqlite3_close(h);
    return sold;
}

/* Orders with a line for item id that have neither one line nor `whole`
 * lines: the carts of the contention runs have a line for every item, so
 * anything else is a partial order. */
static long long partial_orders(long long id, int whole)
{
    char sql[400];
    snprintf(sql, sizeof(sql), "SELECT count(*) FROM (SELECT count(*) AS n FROM order_lines "
             "WHERE order_id IN (SELECT order_id FROM order_lines WHERE item_id = ?1) "
             "GROUP BY order_id) WHERE n NOT IN (1, %d)", whole);
    sqlite3 *h = open_db();
    long long v = db_int(h, sql, id);
    sqlite3_close(h);
    return v;
}

static long long lines_of_item(long long id)
{
    sqlite3 *h = open_db();
    long long v = db_int(h, "SELECT count(*) FROM order_lines WHERE item_id = ?1", id);
    sqlite3_close(h);
    return v;
}

static long long redis_keys(const char *pattern)
{
    redisContext *c = th_redis_connect(&redis);
    redisReply *r = redisCommand(c, "KEYS %s", pattern);
    long long n = r && r->type == REDIS_REPLY_ARRAY ? (long long)r->elements : -1;
    freeReplyObject(r);
    redisFree(c);
    return n;
}

/* ---- the API ---- */

static void test_an_order_deducts_every_line_and_reads_back(void **state)
{
    (void)state;
    long long items[3] = {new_item(10), new_item(20), new_item(30)};
    int qty[3] = {1, 2, 3};
    json_t *j = order(&a, items, qty, 3, "cart-read-back", 0, 201);
    long long id = th_jint(j, "orderId");
    assert_false(json_is_true(json_object_get(j, "replayed")));
    json_t *lines = json_object_get(j, "lines");
    assert_int_equal(json_array_size(lines), 3);
    for (int i = 0; i < 3; i++) { /* in the client's order */
        json_t *l = json_array_get(lines, (size_t)i);
        assert_int_equal(th_jint(l, "itemId"), items[i]);
        assert_int_equal(th_jint(l, "quantity"), qty[i]);
        assert_int_equal(th_jint(l, "remaining"), 10 * (i + 1) - qty[i]);
    }
    json_decref(j);

    char path[64];
    snprintf(path, sizeof(path), "/orders/%lld", id);
    j = th_call(&b, "GET", path, NULL, 200);
    assert_int_equal(th_jint(j, "orderId"), id);
    assert_string_equal(th_jstr(j, "requestId"), "cart-read-back");
    assert_string_equal(th_jstr(j, "instance"), "replica-a");
    assert_string_equal(th_jstr(j, "lockMode"), "redis");
    lines = json_object_get(j, "lines");
    assert_int_equal(json_array_size(lines), 3);
    for (size_t i = 0; i < 3; i++) /* each line fenced with its own item's token */
        assert_true(th_jint(json_array_get(lines, i), "fence") > 0);
    json_decref(j);

    for (int i = 0; i < 3; i++) {
        assert_int_equal(stock_of(items[i]), 10 * (i + 1) - qty[i]);
        snprintf(path, sizeof(path), "/items/%lld", items[i]); /* the item's ledger has it */
        j = th_call(&a, "GET", path, NULL, 200);
        assert_int_equal(th_jint(json_array_get(json_object_get(j, "orders"), 0), "orderId"), id);
        json_decref(j);
    }
}

static void test_a_created_order_has_a_location(void **state)
{
    (void)state;
    long long item = new_item(5);
    char body[256], resp[2048], req[512];
    snprintf(body, sizeof(body), "{\"lines\":[{\"itemId\":%lld,\"quantity\":1}]}", item);
    snprintf(req, sizeof(req), "POST /orders HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
             "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s", strlen(body),
             body);
    assert_true(th_raw(a.port, req, strlen(req), 0, resp, sizeof(resp), 5000) > 0);
    assert_non_null(strstr(resp, "HTTP/1.1 201"));
    const char *at = strstr(resp, "\nLocation: /orders/");
    assert_non_null(at);
    const char *id = strstr(resp, "\"orderId\":");
    assert_non_null(id);
    assert_int_equal(atoll(at + strlen("\nLocation: /orders/")), atoll(id + 10));
}

static void test_a_short_line_deducts_nothing_and_each_short_line_is_named(void **state)
{
    (void)state;
    long long items[3] = {new_item(5), new_item(1), new_item(0)};
    int qty[3] = {2, 3, 1};
    json_t *j = order(&b, items, qty, 3, "short-cart", 0, 409);
    assert_string_equal(th_jstr(j, "error"), "insufficient_stock");
    assert_non_null(strstr(th_jstr(j, "message"), "2 lines"));
    json_t *lines = json_object_get(j, "lines");
    assert_int_equal(json_array_size(lines), 2); /* only the short ones */
    assert_int_equal(th_jint(json_array_get(lines, 0), "itemId"), items[1]);
    assert_int_equal(th_jint(json_array_get(lines, 0), "remaining"), 1);
    assert_int_equal(th_jint(json_array_get(lines, 0), "requested"), 3);
    assert_int_equal(th_jint(json_array_get(lines, 1), "itemId"), items[2]);
    assert_int_equal(th_jint(json_array_get(lines, 1), "remaining"), 0);
    json_decref(j);
    for (int i = 0; i < 3; i++) /* the line that fit was not taken either */
        assert_int_equal(lines_of_item(items[i]), 0);
    assert_int_equal(stock_of(items[0]), 5);
    /* the requestId of a refused order is free: the same cart, now smaller, goes through */
    qty[1] = 1;
    json_decref(order(&b, items, qty, 2, "short-cart", 0, 201));
    assert_int_equal(stock_of(items[0]), 3);
    assert_int_equal(stock_of(items[1]), 0);
}

static void test_an_unknown_item_deducts_nothing_and_touches_no_redis_key(void **state)
{
    (void)state;
    long long items[2] = {new_item(5), 987654321};
    int qty[2] = {1, 1};
    json_t *j = order(&a, items, qty, 2, NULL, 0, 404);
    assert_string_equal(th_jstr(j, "error"), "item_not_found");
    assert_non_null(strstr(th_jstr(j, "message"), "987654321"));
    json_decref(j);
    assert_int_equal(stock_of(items[0]), 5);
    assert_int_equal(redis_keys("*987654321*"), 0);
}

static void test_a_request_id_answers_once_across_replicas_and_routes(void **state)
{
    (void)state;
    long long items[2] = {new_item(10), new_item(10)};
    int qty[2] = {2, 3};
    json_t *first = order(&a, items, qty, 2, "once", 0, 201);
    long long id = th_jint(first, "orderId");
    json_decref(first);
    long long swapped[2] = {items[1], items[0]};
    int swapped_qty[2] = {3, 2}; /* the same lines in another order: the same order */
    const th_stockd *replicas[] = {&a, &b, &unbatched, &atomic_srv, &unlocked};
    for (size_t i = 0; i < sizeof(replicas) / sizeof(replicas[0]); i++) {
        json_t *j = order(replicas[i], swapped, swapped_qty, 2, "once", 0, 200);
        assert_int_equal(th_jint(j, "orderId"), id);
        assert_true(json_is_true(json_object_get(j, "replayed")));
        json_decref(j);
    }
    assert_int_equal(stock_of(items[0]), 8);
    assert_int_equal(stock_of(items[1]), 7);

    qty[1] = 4; /* other lines under the same requestId */
    json_t *j = order(&b, items, qty, 2, "once", 0, 409);
    assert_string_equal(th_jstr(j, "error"), "request_id_conflict");
    json_decref(j);
    char body[128]; /* /reduceStock shares the namespace */
    snprintf(body, sizeof(body), "{\"itemId\":%lld,\"quantity\":2,\"requestId\":\"once\"}",
             items[0]);
    json_decref(th_call(&a, "POST", "/reduceStock", body, 409));

    /* an order of one line replays a /reduceStock of the same line, and back */
    snprintf(body, sizeof(body), "{\"itemId\":%lld,\"quantity\":1,\"requestId\":\"single\"}",
             items[0]);
    j = th_call(&a, "POST", "/reduceStock", body, 200);
    id = th_jint(j, "orderId");
    json_decref(j);
    j = order(&b, items, (int[]){1}, 1, "single", 0, 200);
    assert_int_equal(th_jint(j, "orderId"), id);
    json_decref(j);
    assert_int_equal(stock_of(items[0]), 7);
}

static void test_orders_that_are_not_found_or_badly_addressed(void **state)
{
    (void)state;
    json_t *j = th_call(&a, "GET", "/orders/999999999", NULL, 404);
    assert_string_equal(th_jstr(j, "error"), "order_not_found");
    json_decref(j);
    json_decref(th_call(&a, "GET", "/orders/0", NULL, 400));
    json_decref(th_call(&a, "GET", "/orders/abc", NULL, 400));
    json_decref(th_call(&a, "GET", "/orders", NULL, 405));
    json_decref(th_call(&a, "PUT", "/orders/1", "{}", 405));
}

static void test_malformed_orders_get_400_and_leave_stock_alone(void **state)
{
    (void)state;
    long long item = new_item(50);
    char many[4096];
    size_t len = (size_t)snprintf(many, sizeof(many), "{\"lines\":[");
    for (int i = 0; i < 33; i++)
        len += (size_t)snprintf(many + len, sizeof(many) - len,
                                "%s{\"itemId\":%d,\"quantity\":1}", i ? "," : "", i + 1);
    snprintf(many + len, sizeof(many) - len, "]}");
    char repeated[160], zero[160], not_object[160], mixed[200];
    snprintf(repeated, sizeof(repeated), "{\"lines\":[{\"itemId\":%lld,\"quantity\":1},"
             "{\"itemId\":%lld,\"quantity\":2}]}", item, item);
    snprintf(zero, sizeof(zero), "{\"lines\":[{\"itemId\":%lld,\"quantity\":0}]}", item);
    snprintf(not_object, sizeof(not_object), "{\"lines\":[%lld]}", item);
    snprintf(mixed, sizeof(mixed), "{\"lines\":[{\"itemId\":%lld,\"quantity\":1},"
             "{\"itemId\":-1,\"quantity\":1}]}", item);
    const struct {
        const char *body, *error, *message;
    } bad[] = {
        {repeated, "invalid_request", "lines[1]: itemId"},
        {many, "invalid_request", "1-32 lines"},
        {zero, "invalid_request", "lines[0]: field \"quantity\""},
        {not_object, "invalid_request", "lines[0] must be an object"},
        {mixed, "invalid_request", "lines[1]: field \"itemId\""},
        {"{\"lines\":[]}", "invalid_request", "1-32 lines"},
        {"{\"lines\":null}", "invalid_request", "1-32 lines"},
        {"{\"lines\":[{}", "invalid_json", "malformed"},
        {"", "invalid_json", "empty"},
    };
    const th_stockd *replicas[] = {&a, &atomic_srv};
    for (size_t k = 0; k < 2; k++)
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            json_t *j = th_call(replicas[k], "POST", "/orders", bad[i].body, 400);
            if (strcmp(th_jstr(j, "error"), bad[i].error) != 0 ||
                strstr(th_jstr(j, "message"), bad[i].message) == NULL)
                fail_msg("%s: got %s", bad[i].body, json_dumps(j, JSON_COMPACT));
            json_decref(j);
        }
    assert_int_equal(stock_of(item), 50);
    assert_int_equal(lines_of_item(item), 0);
}

static void test_every_lock_mode_places_whole_orders(void **state)
{
    (void)state;
    const th_stockd *replicas[] = {&unbatched, &atomic_srv, &unlocked};
    for (size_t k = 0; k < sizeof(replicas) / sizeof(replicas[0]); k++) {
        long long items[2] = {new_item(3), new_item(3)};
        int qty[2] = {2, 2};
        json_t *j = order(replicas[k], items, qty, 2, NULL, 0, 201);
        json_decref(j);
        j = order(replicas[k], items, qty, 2, NULL, 0, 409); /* both short now */
        assert_int_equal(json_array_size(json_object_get(j, "lines")), 2);
        json_decref(j);
        int one[2] = {1, 2}; /* the second line is short: the first is not taken */
        json_decref(order(replicas[k], items, one, 2, NULL, 0, 409));
        assert_int_equal(stock_of(items[0]), 1);
        assert_int_equal(stock_of(items[1]), 1);
    }
}

/* ---- contention ---- */

#define CART_WORKERS 8

struct cart_worker {
    const th_stockd *s;
    const long long *items; /* the shared items, a few */
    int nitems, first, reverse, single, run_ms;
    long placed, refused, busy, unavailable;
    char last_error[256];
};

/* A 503 that a busy machine may cause and that sells nothing (the ledger is
 * checked): Redis slower than --redis-timeout-ms (100 ms here, as the lease
 * is short), the database busy, a renewal late enough that the lease went.
 * Never lock_timeout: a deadlock would be that. */
static int busy_answer(const th_resp *r)
{
    return r->status == 503 && (strstr(r->body, "\"redis_unavailable\"") ||
                                strstr(r->body, "\"storage_busy\"") ||
                                strstr(r->body, "\"lock_lost\""));
}

/* Places orders until the run ends: carts of every item starting at
 * `first`, forwards or in reverse, or (single) one-line orders of one item,
 * so that locks are asked for in every order at once. */
static void *cart_worker(void *arg)
{
    struct cart_worker *w = arg;
    int64_t end = th_now_ms() + w->run_ms;
    char url[128], body[1024];
    snprintf(url, sizeof(url), "%s/orders", w->s->url);
    for (int round = 0; th_now_ms() < end; round++) {
        long long items[8];
        int qty[8], n = w->single ? 1 : w->nitems;
        for (int i = 0; i < n; i++) {
            int k = (w->first + (w->reverse ? -i : i) + round + w->nitems) % w->nitems;
            items[i] = w->items[w->single ? (w->first + round) % w->nitems : k];
            qty[i] = 1 + (round + i) % 2;
        }
        th_order_body(body, sizeof(body), items, qty, n, NULL, 0);
        th_resp r;
        th_http("POST", url, body, &r);
        if (r.status == 201)
            w->placed++;
        else if (r.status == 409 && strstr(r.body, "insufficient_stock"))
            w->refused++;
        else if (busy_answer(&r))
            w->busy++;
        else {
            w->unavailable++;
            snprintf(w->last_error, sizeof(w->last_error), "%ld %s", r.status, r.body);
        }
        th_resp_free(&r);
    }
    return NULL;
}

/* Carts over the same items in opposite orders, and one-line orders of each,
 * from three replicas (batched and not), for run_ms: no order waits out its
 * lock (a deadlock would), and the ledger adds up; a busy machine's 503s
 * (busy_answer) are counted, not failed. */
static void carts_in_every_order_scenario(int stock, int run_ms)
{
    long long items[3] = {new_item(stock), new_item(stock), new_item(stock)};
    const th_stockd *replicas[] = {&a, &b, &unbatched};
    pthread_t t[CART_WORKERS];
    struct cart_worker w[CART_WORKERS];
    for (int i = 0; i < CART_WORKERS; i++) {
        w[i] = (struct cart_worker){.s = replicas[i % 3], .items = items, .nitems = 3,
                                    .first = i % 3, .reverse = i % 2, .single = i >= 6,
                                    .run_ms = run_ms};
        pthread_create(&t[i], NULL, cart_worker, &w[i]);
    }
    long placed = 0, refused = 0, busy = 0;
    for (int i = 0; i < CART_WORKERS; i++) {
        pthread_join(t[i], NULL);
        placed += w[i].placed, refused += w[i].refused, busy += w[i].busy;
        if (w[i].unavailable)
            fail_msg("worker %d: %ld answers neither 201 nor 409 insufficient_stock, last: %s",
                     i, w[i].unavailable, w[i].last_error);
    }
    long long sold = 0;
    for (int i = 0; i < 3; i++) {
        long long item_sold = check_ledger(items[i], stock);
        assert_true(item_sold <= stock);
        assert_int_equal(partial_orders(items[i], 3), 0);
        sold += item_sold;
    }
    print_message("carts: %ld placed, %ld refused as short, %ld busy, %lld units sold\n", placed,
                  refused, busy, sold);
    assert_true(placed > 0);
    if (stock < 100) /* a small stock sells out */
        for (int i = 0; i < 3; i++)
            assert_true(stock_of(items[i]) <= 1);
}

static void test_carts_in_opposite_orders_never_deadlock_or_oversell(void **state)
{
    (void)state;
    carts_in_every_order_scenario(1000000, 10000);
}

static void test_carts_sell_out_exactly(void **state)
{
    (void)state;
    carts_in_every_order_scenario(60, 3000);
}

/* ---- faults ---- */

/* A cart's lock keys in Redis: how many exist. */
static int lock_keys_held(const long long *items, int n)
{
    int held = 0;
    for (int i = 0; i < n; i++) {
        char key[DLOCK_KEY_MAX + 1];
        held += th_redis_int(&redis, "EXISTS %s", th_item_lock_key(items[i], key)) == 1;
    }
    return held;
}

/* A replica killed (-9) in the middle of a cart, under its multi-lock: none
 * of the cart's lines is written; another replica waits about a lease and
 * places the same cart. */
static void test_a_replica_killed_mid_cart_writes_no_line(void **state)
{
    (void)state;
    const char *flags[] = {LOCK_FLAGS, "--instance-id", "doomed", NULL};
    th_stockd doomed;
    assert_int_equal(th_stockd_start(&doomed, &redis, db, dir, flags), 0);
    long long items[3] = {new_item(10), new_item(10), new_item(10)};
    int qty[3] = {1, 2, 3};
    char body[512];
    th_order_body(body, sizeof(body), items, qty, 3, "killed-cart", 3000);
    th_bg_reduce cart = {.url = doomed.url, .order = body};
    th_bg_reduce_start(&cart);
    for (int64_t end = th_now_ms() + 5000; lock_keys_held(items, 3) != 3;) {
        assert_true(th_now_ms() < end);
        th_sleep_ms(2);
    }
    th_sleep_ms(300); /* well into its work */
    th_stockd_stop(&doomed, SIGKILL);
    th_bg_reduce_join(&cart);
    assert_int_equal(cart.status, 0); /* its connection died with it */
    for (int i = 0; i < 3; i++)
        assert_int_equal(lines_of_item(items[i]), 0);

    int64_t t0 = th_now_ms(); /* the same cart elsewhere: after the 600 ms lease at most */
    json_t *j = order(&b, items, qty, 3, "killed-cart", 0, 201);
    json_decref(j);
    assert_true(th_now_ms() - t0 < 3000);
    for (int i = 0; i < 3; i++)
        assert_int_equal(check_ledger(items[i], 10), qty[i]);
}

/* A cart whose work outlasts the maximum renewals is interrupted: rolled
 * back whole, every key of the multi-lock released at once. */
static void test_an_interrupted_cart_rolls_back_every_line(void **state)
{
    (void)state;
    long long items[2] = {new_item(10), new_item(10)};
    int64_t t0 = th_now_ms();
    /* 8 renewals, one every 200 ms: interrupted after about 1.8 s */
    json_t *j = order(&a, items, (int[]){1, 1}, 2, "interrupt-cart", 10000, 503);
    assert_true(th_now_ms() - t0 < 5000);
    assert_string_equal(th_jstr(j, "error"), "lock_interrupted");
    json_decref(j);
    assert_int_equal(lock_keys_held(items, 2), 0);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(stock_of(items[i]), 10);
        assert_int_equal(lines_of_item(items[i]), 0);
    }
    json_decref(order(&a, items, (int[]){1, 1}, 2, "interrupt-cart", 0, 201));
}

/* A cart holder that loses one of its keys while it works (the key deleted,
 * as an expiry or a Redis failover would): the set is lost, the whole order
 * rolls back, and the key's next holder sells undisturbed. */
static void test_a_cart_that_loses_one_key_rolls_back_whole(void **state)
{
    (void)state;
    long long items[3] = {new_item(10), new_item(10), new_item(10)};
    char body[512], key[DLOCK_KEY_MAX + 1];
    th_order_body(body, sizeof(body), items, (int[]){1, 1, 1}, 3, "one-key-lost", 1500);
    th_bg_reduce cart = {.url = a.url, .order = body};
    th_bg_reduce_start(&cart);
    for (int64_t end = th_now_ms() + 5000; lock_keys_held(items, 3) != 3;) {
        assert_true(th_now_ms() < end);
        th_sleep_ms(2);
    }
    assert_int_equal(th_redis_int(&redis, "DEL %s", th_item_lock_key(items[1], key)), 1);
    json_decref(order(&b, &items[1], (int[]){2}, 1, NULL, 0, 201)); /* the key's next holder */
    th_bg_reduce_join(&cart);
    if (cart.status != 503 || strstr(cart.body, "\"lock_lost\"") == NULL)
        fail_msg("the cart that lost a key was not rolled back: %ld %s", cart.status, cart.body);
    assert_int_equal(lock_keys_held(items, 3), 0); /* its other keys released at once */
    assert_int_equal(check_ledger(items[0], 10), 0);
    assert_int_equal(check_ledger(items[1], 10), 2);
    assert_int_equal(check_ledger(items[2], 10), 0);
}

/* A replica that stops (SIGSTOP) after its last lease check and before its
 * write, for longer than the lease, while others sell the same items: when
 * it continues, fencing refuses its cart as a whole,
 * and the ledger holds only the others' orders. */
static void test_a_stalled_cart_holder_is_fenced_out(void **state)
{
    (void)state;
    const char *flags[] = {LOCK_FLAGS, "--instance-id", "stalled", "--test-stop-before-write",
                           NULL};
    th_stockd stalled;
    assert_int_equal(th_stockd_start(&stalled, &redis, db, dir, flags), 0);
    long long items[2] = {new_item(100), new_item(100)};
    char body[512];
    th_order_body(body, sizeof(body), items, (int[]){5, 5}, 2, "stale-cart", 1); /* not batched */
    th_bg_reduce stale = {.url = stalled.url, .order = body};
    th_bg_reduce_start(&stale);
    for (int64_t end = th_now_ms() + 5000; th_proc_state(stalled.pid) != 'T';) {
        assert_true(th_now_ms() < end);
        th_sleep_ms(2);
    }
    th_sleep_ms(900); /* past the 600 ms lease */
    json_decref(order(&b, items, (int[]){1, 1}, 2, NULL, 0, 201)); /* the cart's items */
    json_decref(order(&a, &items[1], (int[]){1}, 1, NULL, 0, 201)); /* and one of them */
    th_signal(stalled.pid, SIGCONT, 0);
    th_bg_reduce_join(&stale);
    if (stale.status != 503 || strstr(stale.body, "\"lock_lost\"") == NULL)
        fail_msg("the stale cart was not refused by fencing: %ld %s", stale.status, stale.body);
    assert_int_equal(check_ledger(items[0], 100), 1);
    assert_int_equal(check_ledger(items[1], 100), 2);
    assert_int_equal(th_stockd_stop_clean(&stalled), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_an_order_deducts_every_line_and_reads_back),
        cmocka_unit_test(test_a_created_order_has_a_location),
        cmocka_unit_test(test_a_short_line_deducts_nothing_and_each_short_line_is_named),
        cmocka_unit_test(test_an_unknown_item_deducts_nothing_and_touches_no_redis_key),
        cmocka_unit_test(test_a_request_id_answers_once_across_replicas_and_routes),
        cmocka_unit_test(test_orders_that_are_not_found_or_badly_addressed),
        cmocka_unit_test(test_malformed_orders_get_400_and_leave_stock_alone),
        cmocka_unit_test(test_every_lock_mode_places_whole_orders),
        cmocka_unit_test(test_carts_in_opposite_orders_never_deadlock_or_oversell),
        cmocka_unit_test(test_carts_sell_out_exactly),
        cmocka_unit_test(test_a_replica_killed_mid_cart_writes_no_line),
        cmocka_unit_test(test_an_interrupted_cart_rolls_back_every_line),
        cmocka_unit_test(test_a_cart_that_loses_one_key_rolls_back_whole),
        cmocka_unit_test(test_a_stalled_cart_holder_is_fenced_out),
    };
    return cmocka_run_group_tests_name("orders", tests, group_setup, group_teardown);
}
