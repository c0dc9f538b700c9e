/* test_reservation_routes.c - reservations, an order's cancel and per-buyer
 * limits against real stockd replicas sharing one database and one real
 * redis-server, the whole suite once on a SQLite file and once on a real
 * PostgreSQL (where a replica in --lock db joins the mixed run): every endpoint and each of its error statuses; a confirm
 * racing a cancel on two replicas (exactly one wins, the other is told the
 * state it met); an order's cancel racing itself on three replicas (its
 * units come back once); a buyer's limit counted exactly across replicas;
 * a limited item refused without a buyerId; the roles of an API tokens
 * file; PUT setting and clearing a limit; --lock atomic; and the items'
 * invariant (available + reserved + sold - returned == what they were
 * stocked with) after a mixed run. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <jansson.h>
#include <libpq-fe.h>

#include "tests/support/calls.h"
#include "tests/support/harness.h"
#include "tests/support/pg.h"

static th_redis redis;
static th_pg pg;
static th_stockd a, b, c, atomic_srv, rows; /* rows: --lock db, on PostgreSQL only */
static int on_pg;
static char dir[64], db[256];

#define MAX_HOLD_MS 7200000

/* --sweep-ms 0: no replica of this suite gives lapsed holds back (the
 * sweep is test_sweep's), so a lapsed one stays held in the database for
 * as long as a test looks at it */
#define NO_SWEEP "--sweep-ms", "0"
#define LOCK_FLAGS "--lease-ms", "3000", "--redis-timeout-ms", "100", "--wait-ms", "10000", \
                   "--retry-ms", "20", "--busy-timeout-ms", "10000", "--max-hold-ms", "7200000", \
                   NO_SWEEP

/* The replicas on db: two batched, one not (all in redis mode), one in
 * atomic mode, and on PostgreSQL one in db mode. */
static int start_replicas(void)
{
    const char *fa[] = {LOCK_FLAGS, "--instance-id", "replica-a", NULL};
    const char *fb[] = {LOCK_FLAGS, "--instance-id", "replica-b", NULL};
    const char *fc[] = {LOCK_FLAGS, "--instance-id", "replica-c", "--batch", "off", NULL};
    const char *fatomic[] = {"--lock", "atomic", "--busy-timeout-ms", "10000", NO_SWEEP, NULL};
    if (th_stockd_start(&a, &redis, db, dir, fa) != 0 ||
        th_stockd_start(&b, &redis, db, dir, fb) != 0 ||
        th_stockd_start(&c, &redis, db, dir, fc) != 0 ||
        th_stockd_start(&atomic_srv, NULL, db, dir, fatomic) != 0)
        return -1;
    const char *frows[] = {"--lock", "db", "--wait-ms", "10000", "--instance-id", "rows",
                           NO_SWEEP, NULL};
    return on_pg ? th_stockd_start(&rows, NULL, db, dir, frows) : 0;
}

static int stop_replicas(void)
{
    int rc = th_stockd_stop_clean(&a) | th_stockd_stop_clean(&b) | th_stockd_stop_clean(&c) |
             th_stockd_stop_clean(&atomic_srv);
    return on_pg ? rc | th_stockd_stop_clean(&rows) : rc;
}

static int sqlite_setup(void **state)
{
    (void)state;
    curl_global_init(CURL_GLOBAL_ALL);
    if (th_tempdir("reservations-it", dir, sizeof(dir)) != 0 || th_redis_start(&redis) != 0)
        return -1;
    snprintf(db, sizeof(db), "%s/stock.db", dir);
    return start_replicas();
}

static int sqlite_teardown(void **state)
{
    (void)state;
    return stop_replicas();
}

static int pg_setup(void **state)
{
    (void)state;
    on_pg = 1;
    if (th_pg_start(&pg) != 0 || th_pg_create_db(&pg, "reservations", db, sizeof(db)) != 0)
        return -1;
    return start_replicas();
}

static int pg_teardown(void **state)
{
    (void)state;
    int rc = stop_replicas();
    th_pg_stop(&pg, SIGINT);
    th_redis_stop(&redis, 0);
    return rc;
}

/* ---- calls ---- */

/* POST /items with a per-buyer limit (0: none); its id. */
static long long new_item(long long stock, long long limit)
{
    char body[160];
    if (limit)
        snprintf(body, sizeof(body), "{\"name\":\"held item\",\"stock\":%lld,"
                 "\"perBuyerLimit\":%lld}", stock, limit);
    else
        snprintf(body, sizeof(body), "{\"name\":\"held item\",\"stock\":%lld}", stock);
    json_t *j = th_call(&a, "POST", "/items", body, 201);
    long long id = th_jint(j, "id");
    json_decref(j);
    return id;
}

static json_t *item(long long id)
{
    char path[64];
    snprintf(path, sizeof(path), "/items/%lld?limit=0", id);
    return th_call(&a, "GET", path, NULL, 200);
}

static long long item_field(long long id, const char *key)
{
    json_t *j = item(id);
    long long v = th_jint(j, key);
    json_decref(j);
    return v;
}

/* A reservation body of one line; rid and buyer may be NULL; hold 0: none. */
static const char *one_line(char *buf, size_t size, long long id, int qty, int hold,
                            const char *rid, const char *buyer)
{
    int n = snprintf(buf, size, "{\"lines\":[{\"itemId\":%lld,\"quantity\":%d}]", id, qty);
    if (hold)
        n += snprintf(buf + n, size - n, ",\"holdMs\":%d", hold);
    if (rid)
        n += snprintf(buf + n, size - n, ",\"requestId\":\"%s\"", rid);
    if (buyer)
        n += snprintf(buf + n, size - n, ",\"buyerId\":\"%s\"", buyer);
    snprintf(buf + n, size - n, "}");
    return buf;
}

/* POST /reservations of one line on s, expecting status; the answer. */
static json_t *reserve(const th_stockd *s, long long id, int qty, int hold, const char *rid,
                       const char *buyer, long expect)
{
    char body[512];
    return th_call(s, "POST", "/reservations", one_line(body, sizeof(body), id, qty, hold, rid,
                                                        buyer), expect);
}

/* POST /reservations/{id}/<what> on s (body may be NULL). */
static json_t *act(const th_stockd *s, long long id, const char *what, const char *body,
                   long expect)
{
    char path[96];
    snprintf(path, sizeof(path), "/reservations/%lld/%s", id, what);
    return th_call(s, "POST", path, body, expect);
}

static json_t *get_reservation(long long id, long expect)
{
    char path[64];
    snprintf(path, sizeof(path), "/reservations/%lld", id);
    return th_call(&b, "GET", path, NULL, expect);
}

static json_t *cancel_order(const th_stockd *s, long long id, const char *body, long expect)
{
    char path[64];
    snprintf(path, sizeof(path), "/orders/%lld/cancel", id);
    return th_call(s, "POST", path, body, expect);
}

static long long place_order(long long id, int qty, const char *buyer, long expect, json_t **out)
{
    char body[256];
    if (buyer)
        snprintf(body, sizeof(body), "{\"lines\":[{\"itemId\":%lld,\"quantity\":%d}],"
                 "\"buyerId\":\"%s\"}", id, qty, buyer);
    else
        snprintf(body, sizeof(body), "{\"lines\":[{\"itemId\":%lld,\"quantity\":%d}]}", id, qty);
    json_t *j = th_call(&a, "POST", "/orders", body, expect);
    long long order = expect == 201 ? th_jint(j, "orderId") : 0;
    if (out)
        *out = j;
    else
        json_decref(j);
    return order;
}

static void expect_error(json_t *j, const char *code)
{
    if (strcmp(th_jstr(j, "error"), code) != 0)
        fail_msg("want error %s, got %s", code, json_dumps(j, JSON_COMPACT));
}

/* The item's totals hold: available + reserved + sold - returned == stocked. */
static void check_totals(long long id, long long stocked)
{
    json_t *j = item(id);
    long long avail = th_jint(j, "available"), reserved = th_jint(j, "reserved"),
              sold = th_jint(j, "sold"), returned = th_jint(j, "returned");
    assert_int_equal(avail, th_jint(j, "stock"));
    if (avail + reserved + sold - returned != stocked || avail < 0 || reserved < 0)
        fail_msg("item %lld: available %lld + reserved %lld + sold %lld - returned %lld != %lld",
                 id, avail, reserved, sold, returned, stocked);
    json_decref(j);
}

/* ---- each endpoint ---- */

static void test_a_reservation_holds_its_units_and_reads_back(void **state)
{
    (void)state;
    long long id = new_item(10, 0);
    json_t *r = reserve(&a, id, 3, 60000, "hold-1", "ann", 201);
    long long res = th_jint(r, "reservationId");
    assert_string_equal(th_jstr(r, "state"), "held");
    assert_int_equal(th_jint(r, "holdMs"), 60000);
    assert_string_equal(th_jstr(r, "buyerId"), "ann");
    assert_string_equal(th_jstr(r, "requestId"), "hold-1");
    assert_true(strlen(th_jstr(r, "expiresAt")) == strlen("2026-11-29T07:10:00.123Z"));
    assert_int_equal(json_is_false(json_object_get(r, "replayed")), 1);
    json_t *line = json_array_get(json_object_get(r, "lines"), 0);
    assert_int_equal(th_jint(line, "quantity"), 3);
    assert_int_equal(th_jint(line, "available"), 7);
    json_decref(r);

    json_t *it = item(id);
    assert_int_equal(th_jint(it, "available"), 7);
    assert_int_equal(th_jint(it, "stock"), 7);
    assert_int_equal(th_jint(it, "reserved"), 3);
    assert_int_equal(th_jint(it, "sold"), 0);
    assert_int_equal(th_jint(it, "returned"), 0);
    assert_true(json_is_null(json_object_get(it, "perBuyerLimit")));
    json_decref(it);

    json_t *g = get_reservation(res, 200);
    assert_string_equal(th_jstr(g, "state"), "held");
    assert_true(json_is_null(json_object_get(g, "orderId")));
    assert_string_equal(th_jstr(g, "instance"), "replica-a");
    assert_int_equal(th_jint(json_array_get(json_object_get(g, "lines"), 0), "quantity"), 3);
    json_decref(g);
    check_totals(id, 10);
}

static void test_a_request_id_answers_its_reservation_once(void **state)
{
    (void)state;
    long long id = new_item(10, 0), other = new_item(10, 0);
    json_t *r = reserve(&a, id, 2, 0, "hold-replay", NULL, 201);
    long long res = th_jint(r, "reservationId");
    assert_int_equal(th_jint(r, "holdMs"), 600000); /* --hold-ms's default */
    json_decref(r);
    r = reserve(&b, id, 2, 0, "hold-replay", NULL, 200); /* another replica */
    assert_int_equal(th_jint(r, "reservationId"), res);
    assert_true(json_is_true(json_object_get(r, "replayed")));
    json_decref(r);
    r = reserve(&b, other, 2, 0, "hold-replay", NULL, 409);
    expect_error(r, "request_id_conflict");
    json_decref(r);
    assert_int_equal(item_field(id, "reserved"), 2);
    assert_int_equal(item_field(other, "reserved"), 0);
    /* a namespace of its own: an order may use the same requestId */
    char body[256];
    snprintf(body, sizeof(body), "{\"lines\":[{\"itemId\":%lld,\"quantity\":1}],"
             "\"requestId\":\"hold-replay\"}", other);
    json_decref(th_call(&a, "POST", "/orders", body, 201));
}

/* Review 1.2: every answer shows the reservation's own hold, never the
 * server's --hold-ms. */
static void test_every_answer_shows_the_reservations_own_hold(void **state)
{
    (void)state;
    long long id = new_item(10, 0);
    json_t *r = reserve(&a, id, 1, 5000, "own-hold", "ann", 201);
    long long res = th_jint(r, "reservationId");
    assert_int_equal(th_jint(r, "holdMs"), 5000);
    json_decref(r);
    r = reserve(&b, id, 1, 5000, "own-hold", "ann", 200); /* a replay */
    assert_int_equal(th_jint(r, "holdMs"), 5000);
    json_decref(r);
    r = get_reservation(res, 200);
    assert_int_equal(th_jint(r, "holdMs"), 5000);
    json_decref(r);
    r = act(&a, res, "extend", "{\"holdMs\":7000}", 200);
    assert_int_equal(th_jint(r, "holdMs"), 7000);
    json_decref(r);
    r = act(&b, res, "cancel", NULL, 200);
    assert_int_equal(th_jint(r, "holdMs"), 7000);
    json_decref(r);
    r = act(&a, res, "cancel", NULL, 200); /* a repeat */
    assert_int_equal(th_jint(r, "holdMs"), 7000);
    json_decref(r);
    r = get_reservation(res, 200);
    assert_int_equal(th_jint(r, "holdMs"), 7000);
    json_decref(r);
}

/* Review 1.5: a requestId replayed by another buyer (or with a buyer where
 * there was none) is a conflict, not the first buyer's reservation. */
static void test_a_request_id_replayed_by_another_buyer_conflicts(void **state)
{
    (void)state;
    long long id = new_item(10, 0);
    json_decref(reserve(&a, id, 1, 0, "buyer-rid", "ann", 201));
    json_t *r = reserve(&b, id, 1, 0, "buyer-rid", "bob", 409);
    expect_error(r, "request_id_conflict");
    json_decref(r);
    r = reserve(&b, id, 1, 0, "buyer-rid", NULL, 409);
    expect_error(r, "request_id_conflict");
    json_decref(r);
    json_decref(reserve(&a, id, 1, 0, "nobody-rid", NULL, 201));
    r = reserve(&b, id, 1, 0, "nobody-rid", "ann", 409);
    expect_error(r, "request_id_conflict");
    json_decref(r);
    json_decref(reserve(&b, id, 1, 0, "buyer-rid", "ann", 200));
    assert_int_equal(item_field(id, "reserved"), 2);
}

static void test_refused_reservations_take_nothing(void **state)
{
    (void)state;
    long long id = new_item(5, 0), other = new_item(5, 0);
    char body[512];
    snprintf(body, sizeof(body), "{\"lines\":[{\"itemId\":%lld,\"quantity\":2},"
             "{\"itemId\":%lld,\"quantity\":6}]}", id, other);
    json_t *r = th_call(&a, "POST", "/reservations", body, 409);
    expect_error(r, "insufficient_stock");
    json_t *line = json_array_get(json_object_get(r, "lines"), 0);
    assert_int_equal(th_jint(line, "itemId"), other);
    assert_int_equal(th_jint(line, "remaining"), 5);
    assert_int_equal(th_jint(line, "requested"), 6);
    assert_int_equal(json_array_size(json_object_get(r, "lines")), 1);
    json_decref(r);
    snprintf(body, sizeof(body), "{\"lines\":[{\"itemId\":%lld,\"quantity\":1},"
             "{\"itemId\":999999,\"quantity\":1}]}", id);
    r = th_call(&b, "POST", "/reservations", body, 404);
    expect_error(r, "item_not_found");
    json_decref(r);
    r = reserve(&a, id, 1, MAX_HOLD_MS + 1, NULL, NULL, 400);
    expect_error(r, "invalid_request");
    assert_non_null(strstr(th_jstr(r, "message"), "holdMs"));
    json_decref(r);
    r = reserve(&a, id, 1, 999, NULL, NULL, 400);
    assert_non_null(strstr(th_jstr(r, "message"), "holdMs"));
    json_decref(r);
    json_decref(th_call(&a, "POST", "/reservations", "{\"lines\":[]}", 400));
    json_decref(th_call(&a, "POST", "/reservations", "[1]", 400));
    for (int i = 0; i < 2; i++) {
        long long it = i ? other : id;
        assert_int_equal(item_field(it, "available"), 5);
        assert_int_equal(item_field(it, "reserved"), 0);
    }
}

static void test_a_missing_reservation_is_404_on_every_route(void **state)
{
    (void)state;
    json_t *r = get_reservation(987654321, 404);
    expect_error(r, "reservation_not_found");
    json_decref(r);
    const char *what[] = {"confirm", "cancel", "extend"};
    for (int i = 0; i < 3; i++) {
        r = act(i % 2 ? &b : &a, 987654321, what[i], i == 2 ? "{\"holdMs\":5000}" : NULL, 404);
        expect_error(r, "reservation_not_found");
        json_decref(r);
    }
    json_decref(th_call(&a, "POST", "/reservations/0/confirm", NULL, 400));
    json_decref(th_call(&a, "GET", "/reservations/abc", NULL, 400));
    json_decref(th_call(&a, "GET", "/reservations/1/confirm", NULL, 405));
    r = cancel_order(&a, 987654321, NULL, 404);
    expect_error(r, "order_not_found");
    json_decref(r);
}

static void test_a_confirmed_reservation_becomes_an_order_once(void **state)
{
    (void)state;
    long long id = new_item(10, 0);
    json_t *r = reserve(&a, id, 4, 60000, NULL, "bob", 201);
    long long res = th_jint(r, "reservationId");
    json_decref(r);
    json_t *o = act(&b, res, "confirm", "{\"ignored\":true}", 201);
    long long order = th_jint(o, "orderId");
    assert_int_equal(th_jint(o, "reservationId"), res);
    assert_true(json_is_false(json_object_get(o, "replayed")));
    json_t *line = json_array_get(json_object_get(o, "lines"), 0);
    assert_int_equal(th_jint(line, "itemId"), id);
    assert_int_equal(th_jint(line, "quantity"), 4);
    assert_int_equal(th_jint(line, "remaining"), 6);
    json_decref(o);
    o = act(&c, res, "confirm", NULL, 200); /* a repeat, on a third replica */
    assert_int_equal(th_jint(o, "orderId"), order);
    assert_true(json_is_true(json_object_get(o, "replayed")));
    json_decref(o);

    json_t *it = item(id);
    assert_int_equal(th_jint(it, "available"), 6);
    assert_int_equal(th_jint(it, "reserved"), 0);
    assert_int_equal(th_jint(it, "sold"), 4);
    json_decref(it);
    char path[64];
    snprintf(path, sizeof(path), "/orders/%lld", order);
    o = th_call(&a, "GET", path, NULL, 200);
    assert_int_equal(th_jint(o, "reservationId"), res);
    assert_string_equal(th_jstr(o, "buyerId"), "bob");
    assert_true(json_is_false(json_object_get(o, "cancelled")));
    json_decref(o);
    json_t *g = get_reservation(res, 200);
    assert_string_equal(th_jstr(g, "state"), "confirmed");
    assert_int_equal(th_jint(g, "orderId"), order);
    json_decref(g);

    r = act(&a, res, "cancel", NULL, 409);
    expect_error(r, "reservation_confirmed");
    assert_string_equal(th_jstr(r, "state"), "confirmed");
    json_decref(r);
    r = act(&a, res, "extend", "{\"holdMs\":60000}", 409);
    expect_error(r, "reservation_confirmed");
    json_decref(r);
    check_totals(id, 10);
}

static void test_a_cancelled_reservation_gives_its_units_back_once(void **state)
{
    (void)state;
    long long id = new_item(10, 0);
    json_t *r = reserve(&a, id, 4, 60000, NULL, NULL, 201);
    long long res = th_jint(r, "reservationId");
    json_decref(r);
    r = act(&b, res, "cancel", NULL, 200);
    assert_string_equal(th_jstr(r, "state"), "cancelled");
    assert_true(json_is_false(json_object_get(r, "replayed")));
    assert_int_equal(th_jint(json_array_get(json_object_get(r, "lines"), 0), "available"), 10);
    json_decref(r);
    r = act(&a, res, "cancel", NULL, 200);
    assert_true(json_is_true(json_object_get(r, "replayed")));
    json_decref(r);
    assert_int_equal(item_field(id, "available"), 10);
    assert_int_equal(item_field(id, "reserved"), 0);
    r = act(&a, res, "confirm", NULL, 409);
    expect_error(r, "reservation_cancelled");
    assert_string_equal(th_jstr(r, "state"), "cancelled");
    json_decref(r);
    check_totals(id, 10);
}

static void test_an_extend_moves_the_expiry_within_the_maximum(void **state)
{
    (void)state;
    long long id = new_item(10, 0);
    json_t *r = reserve(&a, id, 1, 5000, NULL, NULL, 201);
    long long res = th_jint(r, "reservationId");
    char was[40];
    snprintf(was, sizeof(was), "%s", th_jstr(r, "expiresAt"));
    json_decref(r);
    r = act(&b, res, "extend", "{\"holdMs\":3600000}", 200);
    assert_string_equal(th_jstr(r, "state"), "held");
    assert_true(strcmp(th_jstr(r, "expiresAt"), was) > 0); /* RFC 3339 sorts as time */
    assert_int_equal(th_jint(r, "holdMs"), 3600000);
    json_decref(r);
    r = act(&b, res, "extend", "{\"holdMs\":7200001}", 400);
    assert_non_null(strstr(th_jstr(r, "message"), "holdMs"));
    json_decref(r);
    json_decref(act(&b, res, "extend", "{}", 400));
    assert_int_equal(item_field(id, "reserved"), 1);
}

/* A hold that lapsed: nothing can confirm, cancel or extend it any more,
 * and it reads as expired at once, while the database still holds it
 * (no replica here sweeps; test_sweep gives units back). */
static void test_a_lapsed_reservation_reads_expired_and_refuses_everything(void **state)
{
    (void)state;
    long long id = new_item(10, 0);
    json_t *r = reserve(&a, id, 2, 1000, NULL, NULL, 201);
    long long res = th_jint(r, "reservationId");
    json_decref(r);
    th_sleep_ms(1300); /* past expiresAt by the database's clock: a lower bound only */
    json_t *g = get_reservation(res, 200);
    assert_string_equal(th_jstr(g, "state"), "expired");
    json_decref(g);
    const char *what[] = {"confirm", "cancel", "extend"};
    for (int i = 0; i < 3; i++) {
        r = act(i % 2 ? &b : &a, res, what[i], i == 2 ? "{\"holdMs\":5000}" : NULL, 409);
        expect_error(r, "reservation_expired");
        assert_string_equal(th_jstr(r, "state"), "expired");
        json_decref(r);
    }
    assert_int_equal(item_field(id, "sold"), 0);
    assert_int_equal(item_field(id, "reserved"), 2); /* not swept: still held there */
}

/* ---- races across replicas ---- */

struct racer {
    const th_stockd *s;
    char method[8], path[96], body[256];
    pthread_barrier_t *go;
    long status;
    char answer[1024];
};

static void *race(void *arg)
{
    struct racer *r = arg;
    char url[256];
    snprintf(url, sizeof(url), "%s%s", r->s->url, r->path);
    pthread_barrier_wait(r->go);
    th_resp resp;
    th_http(r->method, url, r->body[0] ? r->body : NULL, &resp);
    r->status = resp.status;
    snprintf(r->answer, sizeof(r->answer), "%s", resp.body ? resp.body : resp.error);
    th_resp_free(&resp);
    return NULL;
}

/* Runs the n racers at once; each one's status and answer in it. */
static void run_race(struct racer *r, int n)
{
    pthread_t t[8];
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, (unsigned)n);
    for (int i = 0; i < n; i++) {
        r[i].go = &go;
        pthread_create(&t[i], NULL, race, &r[i]);
    }
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&go);
}

static void test_a_confirm_racing_a_cancel_on_two_replicas_lets_one_win(void **state)
{
    (void)state;
    long long id = new_item(1000, 0);
    int confirmed = 0, cancelled = 0;
    for (int round = 0; round < 20; round++) {
        json_t *j = reserve(&a, id, 1 + round % 3, 60000, NULL, NULL, 201);
        long long res = th_jint(j, "reservationId");
        json_decref(j);
        struct racer r[2] = {{.s = round % 2 ? &a : &b, .method = "POST"},
                             {.s = round % 2 ? &b : &a, .method = "POST"}};
        snprintf(r[0].path, sizeof(r[0].path), "/reservations/%lld/confirm", res);
        snprintf(r[1].path, sizeof(r[1].path), "/reservations/%lld/cancel", res);
        run_race(r, 2);
        if (r[0].status == 201 && r[1].status == 409 &&
            strstr(r[1].answer, "\"reservation_confirmed\"") &&
            strstr(r[1].answer, "\"state\":\"confirmed\"") != NULL)
            confirmed++;
        else if (r[1].status == 200 && r[0].status == 409 &&
                 strstr(r[0].answer, "\"reservation_cancelled\"") &&
                 strstr(r[0].answer, "\"state\":\"cancelled\"") != NULL)
            cancelled++;
        else
            fail_msg("round %d: confirm %ld %s / cancel %ld %s", round, r[0].status,
                     r[0].answer, r[1].status, r[1].answer);
    }
    print_message("confirm vs cancel: %d confirmed, %d cancelled\n", confirmed, cancelled);
    assert_int_equal(item_field(id, "reserved"), 0);
    check_totals(id, 1000);
}

static void test_an_order_cancel_racing_itself_on_three_replicas_returns_once(void **state)
{
    (void)state;
    long long x = new_item(100, 0), y = new_item(100, 0);
    for (int round = 0; round < 5; round++) {
        char body[256];
        snprintf(body, sizeof(body), "{\"lines\":[{\"itemId\":%lld,\"quantity\":3},"
                 "{\"itemId\":%lld,\"quantity\":2}]}", x, y);
        json_t *o = th_call(&b, "POST", "/orders", body, 201);
        long long order = th_jint(o, "orderId");
        json_decref(o);
        struct racer r[3] = {{.s = &a, .method = "POST"}, {.s = &b, .method = "POST"},
                             {.s = &c, .method = "POST"}};
        for (int i = 0; i < 3; i++) {
            snprintf(r[i].path, sizeof(r[i].path), "/orders/%lld/cancel", order);
            snprintf(r[i].body, sizeof(r[i].body), "{\"requestId\":\"cancel-%d-%d\"}", round, i);
        }
        run_race(r, 3);
        int first = 0;
        for (int i = 0; i < 3; i++) {
            if (r[i].status != 200 || !strstr(r[i].answer, "\"cancelled\":true"))
                fail_msg("round %d, replica %d: %ld %s", round, i, r[i].status, r[i].answer);
            first += strstr(r[i].answer, "\"replayed\":false") != NULL;
        }
        assert_int_equal(first, 1);
    }
    json_t *it = item(x);
    assert_int_equal(th_jint(it, "available"), 100);
    assert_int_equal(th_jint(it, "sold"), 15);
    assert_int_equal(th_jint(it, "returned"), 15);
    json_decref(it);
    assert_int_equal(item_field(y, "returned"), 10);
    check_totals(x, 100);
    check_totals(y, 100);
}

static void test_an_order_cancel_answers_its_lines_and_replays(void **state)
{
    (void)state;
    long long id = new_item(20, 0);
    long long order = place_order(id, 5, "cat", 201, NULL);
    json_t *r = cancel_order(&c, order, NULL, 200); /* no body at all */
    assert_int_equal(th_jint(r, "orderId"), order);
    assert_true(json_is_true(json_object_get(r, "cancelled")));
    assert_true(json_is_false(json_object_get(r, "replayed")));
    json_t *line = json_array_get(json_object_get(r, "lines"), 0);
    assert_int_equal(th_jint(line, "quantity"), 5);
    assert_int_equal(th_jint(line, "available"), 20);
    json_decref(r);
    r = cancel_order(&a, order, "{\"requestId\":\"again\"}", 200);
    assert_true(json_is_true(json_object_get(r, "replayed")));
    json_decref(r);
    char path[64];
    snprintf(path, sizeof(path), "/orders/%lld", order);
    r = th_call(&a, "GET", path, NULL, 200);
    assert_true(json_is_true(json_object_get(r, "cancelled")));
    assert_true(json_is_null(json_object_get(r, "reservationId")));
    json_decref(r);
    json_decref(cancel_order(&a, order, "{\"requestId\":\"\"}", 400));
    assert_int_equal(item_field(id, "returned"), 5);
    check_totals(id, 20);
}

/* One unit of item id held for a minute, on a: its reservationId. */
static long long hold_one(long long id)
{
    json_t *j = reserve(&a, id, 1, 60000, NULL, NULL, 201);
    long long res = th_jint(j, "reservationId");
    json_decref(j);
    return res;
}

/* A confirm or a cancel of a reservation already ended is answered from
 * its read, without its items' locks: while another owner holds them, a
 * repeat and a refusal come back at once (with the locks they would wait
 * up to --wait-ms, 10 s here, and answer 503). */
static void test_an_ended_reservation_is_answered_without_the_items_lock(void **state)
{
    (void)state;
    long long id = new_item(10, 0), cancelled = hold_one(id), confirmed = hold_one(id);
    json_decref(act(&a, cancelled, "cancel", NULL, 200));
    json_t *j;
    json_t *o = act(&a, confirmed, "confirm", NULL, 201);
    long long order = th_jint(o, "orderId");
    json_decref(o);
    assert_int_equal(th_wait_item_unlocked(&redis, id, 10000 * TH_SLOWER), 0);
    assert_int_equal(th_hold_item_lock(&redis, id), 0);
    j = act(&b, cancelled, "cancel", NULL, 200);
    assert_true(json_is_true(json_object_get(j, "replayed")));
    json_decref(j);
    j = act(&b, confirmed, "confirm", NULL, 200);
    assert_true(json_is_true(json_object_get(j, "replayed")));
    assert_int_equal(th_jint(j, "orderId"), order);
    assert_int_equal(th_jint(j, "reservationId"), confirmed);
    json_decref(j);
    j = act(&b, cancelled, "confirm", NULL, 409);
    expect_error(j, "reservation_cancelled");
    json_decref(j);
    j = act(&b, confirmed, "cancel", NULL, 409);
    expect_error(j, "reservation_confirmed");
    json_decref(j);
    assert_int_equal(th_release_item_lock(&redis, id), 0);
}

/* While another owner holds an item's lock, a reservation of it, a
 * reservation's cancel and an order's cancel on another replica wait for it
 * (none touches the stock: an order's read-work-write there would
 * overwrite it), and each is served once it is released. */
static void test_writes_of_reservations_and_returns_wait_for_the_items_lock(void **state)
{
    (void)state;
    long long id = new_item(50, 0);
    long long order = place_order(id, 5, NULL, 201, NULL);
    json_t *j = reserve(&a, id, 4, 60000, NULL, NULL, 201);
    long long held = th_jint(j, "reservationId");
    json_decref(j);
    assert_int_equal(th_wait_item_unlocked(&redis, id, 10000 * TH_SLOWER), 0);
    assert_int_equal(th_hold_item_lock(&redis, id), 0);
    struct racer r[3] = {{.s = &b, .method = "POST", .path = "/reservations"},
                         {.s = &c, .method = "POST"}, {.s = &b, .method = "POST"}};
    one_line(r[0].body, sizeof(r[0].body), id, 3, 60000, NULL, NULL);
    snprintf(r[1].path, sizeof(r[1].path), "/orders/%lld/cancel", order);
    snprintf(r[2].path, sizeof(r[2].path), "/reservations/%lld/cancel", held);
    pthread_t t[3];
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, 1);
    for (int i = 0; i < 3; i++) {
        r[i].go = &go;
        pthread_create(&t[i], NULL, race, &r[i]);
    }
    th_wait_inflight(&b, 2);
    th_wait_inflight(&c, 1);
    th_sleep_ms(300); /* time to write, had they not waited */
    json_t *it = item(id);
    assert_int_equal(th_jint(it, "available"), 41);
    assert_int_equal(th_jint(it, "reserved"), 4);
    assert_int_equal(th_jint(it, "returned"), 0);
    json_decref(it);
    assert_int_equal(th_release_item_lock(&redis, id), 0);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&go);
    assert_int_equal(r[0].status, 201);
    assert_int_equal(r[1].status, 200);
    assert_int_equal(r[2].status, 200);
    it = item(id);
    assert_int_equal(th_jint(it, "available"), 47);
    assert_int_equal(th_jint(it, "reserved"), 3);
    assert_int_equal(th_jint(it, "returned"), 5);
    json_decref(it);
    check_totals(id, 50);
}

/* At the drain deadline, a reservation and an order's cancel still waiting
 * for their item's lock stop waiting (the lock's wait withdrawn): answered
 * shutting_down at once, not after --wait-ms, and nothing taken or
 * returned. */
static void test_waits_of_reservations_end_at_the_drain_deadline(void **state)
{
    (void)state;
    th_stockd d;
    /* a wait for the lock far longer than the client's 60 s */
    const char *flags[] = {LOCK_FLAGS, "--drain-ms", "300", "--wait-ms", "120000", NULL};
    assert_int_equal(th_stockd_start(&d, &redis, db, dir, flags), 0);
    long long id = new_item(20, 0);
    long long order = place_order(id, 2, NULL, 201, NULL);
    assert_int_equal(th_wait_item_unlocked(&redis, id, 10000 * TH_SLOWER), 0);
    assert_int_equal(th_hold_item_lock(&redis, id), 0);
    struct racer r[2] = {{.s = &d, .method = "POST", .path = "/reservations"},
                         {.s = &d, .method = "POST"}};
    one_line(r[0].body, sizeof(r[0].body), id, 1, 0, NULL, NULL);
    snprintf(r[1].path, sizeof(r[1].path), "/orders/%lld/cancel", order);
    pthread_t t[2];
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, 1);
    for (int i = 0; i < 2; i++) {
        r[i].go = &go;
        pthread_create(&t[i], NULL, race, &r[i]);
    }
    th_wait_inflight(&d, 2);
    int64_t t0 = th_now_ms();
    kill(d.pid, SIGTERM);
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
        if (r[i].status != 503 || strstr(r[i].answer, "shutting_down") == NULL)
            fail_msg("%s waiting at the drain deadline: %ld %s", r[i].path, r[i].status,
                     r[i].answer);
    }
    pthread_barrier_destroy(&go);
    assert_true(th_now_ms() - t0 < 5000 * TH_SLOWER); /* not a hang: far sooner than --wait-ms */
    assert_int_equal(th_wait(d.pid, 10000), 0);
    assert_int_equal(th_release_item_lock(&redis, id), 0);
    json_t *it = item(id);
    assert_int_equal(th_jint(it, "reserved"), 0);
    assert_int_equal(th_jint(it, "returned"), 0);
    json_decref(it);
}

/* ---- per-buyer limits ---- */

static void test_a_buyer_limit_counts_reservations_and_orders(void **state)
{
    (void)state;
    long long id = new_item(100, 3);
    assert_int_equal(item_field(id, "perBuyerLimit"), 3);
    json_t *r = reserve(&a, id, 2, 60000, NULL, "dan", 201);
    long long res = th_jint(r, "reservationId");
    json_decref(r);
    json_t *o;
    place_order(id, 2, "dan", 409, &o);
    expect_error(o, "buyer_limit_reached");
    assert_int_equal(th_jint(o, "itemId"), id);
    assert_int_equal(th_jint(o, "limit"), 3);
    assert_int_equal(th_jint(o, "had"), 2);
    assert_int_equal(th_jint(o, "requested"), 2);
    json_decref(o);
    r = reserve(&b, id, 2, 60000, NULL, "dan", 409);
    expect_error(r, "buyer_limit_reached");
    json_decref(r);
    place_order(id, 1, "dan", 201, NULL); /* up to the limit */
    place_order(id, 3, "eve", 201, NULL); /* another buyer has her own */
    /* without a buyerId a limited item refuses, naming the field and the item */
    place_order(id, 1, NULL, 400, &o);
    expect_error(o, "invalid_request");
    assert_non_null(strstr(th_jstr(o, "message"), "buyerId"));
    assert_int_equal(th_jint(o, "itemId"), id);
    json_decref(o);
    r = reserve(&a, id, 1, 0, NULL, NULL, 400);
    assert_non_null(strstr(th_jstr(r, "message"), "buyerId"));
    json_decref(r);
    /* a cancelled reservation no longer counts; a confirmed one counts once */
    json_decref(act(&a, res, "cancel", NULL, 200));
    long long order = place_order(id, 2, "dan", 201, NULL);
    place_order(id, 1, "dan", 409, NULL);
    json_decref(cancel_order(&b, order, NULL, 200)); /* nor does a cancelled order */
    r = reserve(&a, id, 2, 60000, NULL, "dan", 201);
    res = th_jint(r, "reservationId");
    json_decref(r);
    json_decref(act(&b, res, "confirm", NULL, 201));
    place_order(id, 1, "dan", 409, NULL);
    check_totals(id, 100);
}

static void test_a_buyer_limit_holds_exactly_across_replicas(void **state)
{
    (void)state;
    long long id = new_item(1000, 5);
    struct racer r[8];
    int held = 0, refused = 0;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 8; i++) {
            r[i] = (struct racer){.s = i % 3 == 0 ? &a : i % 3 == 1 ? &b : &c};
            snprintf(r[i].method, sizeof(r[i].method), "POST");
            snprintf(r[i].path, sizeof(r[i].path), "%s", (i + round) % 2 ? "/reservations"
                                                                          : "/orders");
            snprintf(r[i].body, sizeof(r[i].body), "{\"lines\":[{\"itemId\":%lld,"
                     "\"quantity\":1}],\"buyerId\":\"fay\"}", id);
        }
        run_race(r, 8);
        for (int i = 0; i < 8; i++) {
            if (r[i].status == 201)
                held++;
            else if (r[i].status == 409 && strstr(r[i].answer, "buyer_limit_reached"))
                refused++;
            else
                fail_msg("%s: %ld %s", r[i].path, r[i].status, r[i].answer);
        }
    }
    assert_int_equal(held, 5);
    assert_int_equal(refused, 19);
    json_t *it = item(id);
    assert_int_equal(th_jint(it, "reserved") + th_jint(it, "sold"), 5);
    json_decref(it);
    check_totals(id, 1000);
}

static void test_put_sets_and_clears_a_limit(void **state)
{
    (void)state;
    long long id = new_item(10, 0);
    char path[64];
    snprintf(path, sizeof(path), "/items/%lld", id);
    json_t *j = th_call(&a, "PUT", path, "{\"perBuyerLimit\":2}", 200);
    assert_int_equal(th_jint(j, "perBuyerLimit"), 2);
    assert_int_equal(th_jint(j, "stock"), 10); /* the limit alone: the stock stays */
    json_decref(j);
    place_order(id, 3, "gus", 409, NULL);
    j = th_call(&b, "PUT", path, "{\"stock\":12}", 200); /* leaves the limit */
    assert_int_equal(th_jint(j, "perBuyerLimit"), 2);
    assert_int_equal(th_jint(j, "available"), 12);
    json_decref(j);
    j = th_call(&b, "PUT", path, "{\"stock\":11,\"perBuyerLimit\":null}", 200);
    assert_true(json_is_null(json_object_get(j, "perBuyerLimit")));
    assert_int_equal(th_jint(j, "stock"), 11);
    json_decref(j);
    place_order(id, 3, NULL, 201, NULL);
    json_decref(th_call(&a, "PUT", path, "{\"perBuyerLimit\":0}", 400));
    json_decref(th_call(&a, "PUT", path, "{}", 400));
}

/* A default hold longer than the longest a client may ask for, or one past
 * the cap of a week, stops start-up with a message naming the flags. */
static void test_hold_flags_out_of_bounds_stop_start_up(void **state)
{
    (void)state;
    char bin[256], out[160];
    snprintf(bin, sizeof(bin), "%s/stockd", th_build_dir());
    snprintf(out, sizeof(out), "%s/hold.out", dir);
    const char *longer[] = {bin, "--hold-ms", "5000000", "--db", db, NULL};
    assert_int_equal(th_run(longer, out, 10000), 2);
    char *text = th_read_file(out);
    assert_non_null(strstr(text, "--hold-ms 5000000 is longer than --max-hold-ms 3600000"));
    free(text);
    const char *capped[] = {bin, "--max-hold-ms", "604800001", "--db", db, NULL};
    assert_int_equal(th_run(capped, out, 10000), 2);
    text = th_read_file(out);
    assert_non_null(strstr(text, "max-hold-ms"));
    free(text);
    const char *small[] = {bin, "--hold-ms", "999", "--db", db, NULL};
    assert_int_equal(th_run(small, out, 10000), 2);
}

/* ---- lock mode atomic ---- */

static void test_lock_mode_atomic_reserves_confirms_and_cancels(void **state)
{
    (void)state;
    long long id = new_item(10, 2);
    json_t *r = reserve(&atomic_srv, id, 2, 60000, NULL, "hal", 201);
    long long res = th_jint(r, "reservationId");
    json_decref(r);
    r = reserve(&atomic_srv, id, 1, 60000, NULL, "hal", 409);
    expect_error(r, "buyer_limit_reached");
    json_decref(r);
    json_t *o = act(&atomic_srv, res, "confirm", NULL, 201);
    long long order = th_jint(o, "orderId");
    json_decref(o);
    json_decref(cancel_order(&atomic_srv, order, NULL, 200));
    r = reserve(&atomic_srv, id, 2, 60000, NULL, "hal", 201);
    res = th_jint(r, "reservationId");
    json_decref(r);
    json_decref(act(&atomic_srv, res, "cancel", NULL, 200));
    json_t *it = item(id);
    assert_int_equal(th_jint(it, "available"), 10);
    assert_int_equal(th_jint(it, "sold"), 2);
    assert_int_equal(th_jint(it, "returned"), 2);
    json_decref(it);
    check_totals(id, 10);
}

/* ---- a mixed run ---- */

struct mixer {
    const th_stockd *s;
    const long long *items;
    int seed, rounds;
    long other, busy;
    char last[512];
};

/* What a busy machine may turn a write into: a refusal that changed
 * nothing (the totals still hold), counted, not failed. */
static int busy_answer(long status, const char *body)
{
    return status == 503 && (strstr(body, "\"lock_timeout\"") || strstr(body, "\"storage_busy\"") ||
                             strstr(body, "\"redis_unavailable\"") ||
                             strstr(body, "\"lock_lost\""));
}

/* POSTs body to m's replica at path: 1 when answered want (the answer's
 * key, if any, into *id; 0 without), 0 when a busy machine refused it or,
 * when refusable, for lack of stock, else 0 counted as unexpected. */
static int post(struct mixer *m, const char *path, const char *body, long want,
                int refusable, const char *key, long long *id)
{
    char url[256];
    snprintf(url, sizeof(url), "%s%s", m->s->url, path);
    th_resp r;
    th_http("POST", url, body, &r);
    const char *text = r.body ? r.body : r.error;
    *id = 0;
    json_t *j = r.body ? json_loads(r.body, 0, NULL) : NULL;
    if (j && key && json_is_integer(json_object_get(j, key)))
        *id = json_integer_value(json_object_get(j, key));
    json_decref(j);
    int ok = r.status == want;
    if (!ok && busy_answer(r.status, text))
        m->busy++;
    else if (!ok && !(refusable && r.status == 409 && strstr(text, "insufficient_stock"))) {
        m->other++;
        snprintf(m->last, sizeof(m->last), "%s %ld %.400s", path, r.status, text);
    }
    th_resp_free(&r);
    return ok;
}

static void *mix(void *arg)
{
    struct mixer *m = arg;
    unsigned seed = (unsigned)m->seed;
    for (int i = 0; i < m->rounds; i++) {
        long long item_id = m->items[rand_r(&seed) % 2], id, order;
        char body[256], path[96];
        snprintf(body, sizeof(body), "{\"lines\":[{\"itemId\":%lld,\"quantity\":%d}]}", item_id,
                 1 + rand_r(&seed) % 3);
        int what = rand_r(&seed) % 3;
        if (!post(m, what ? "/reservations" : "/orders", body, 201, 1,
                  what ? "reservationId" : "orderId", &id))
            continue;
        if (what == 0) { /* an order: cancelled, one in two */
            snprintf(path, sizeof(path), "/orders/%lld/cancel", id);
            if (rand_r(&seed) % 2)
                post(m, path, NULL, 200, 0, NULL, &order);
            continue;
        }
        /* a reservation: confirmed, cancelled, or left held; a confirmed
         * one's order cancelled now and then */
        int fate = rand_r(&seed) % 3;
        if (fate == 2)
            continue;
        snprintf(path, sizeof(path), "/reservations/%lld/%s", id, fate ? "cancel" : "confirm");
        if (post(m, path, NULL, fate ? 200 : 201, 0, "orderId", &order) && fate == 0 &&
            rand_r(&seed) % 2) {
            snprintf(path, sizeof(path), "/orders/%lld/cancel", order);
            post(m, path, NULL, 200, 0, NULL, &id);
        }
    }
    return NULL;
}

/* Replicas of one lock mode share items; the modes keep to items of their
 * own: an order's read-work-write under Redis's lock knows nothing of a
 * write of another mode (atomic's conditional UPDATEs and db's row locks
 * do know of each other, so they share theirs). */
static void test_the_totals_hold_after_a_mixed_run(void **state)
{
    (void)state;
    long long items[4] = {new_item(120, 0), new_item(60, 0), new_item(120, 0), new_item(60, 0)};
    const th_stockd *replicas[] = {&a, &b, &c, &atomic_srv, &rows, &atomic_srv};
    struct mixer m[6];
    pthread_t t[6];
    for (int i = 0; i < 6; i++) {
        const th_stockd *s = replicas[i];
        if (s == &rows && !on_pg)
            s = &atomic_srv;
        m[i] = (struct mixer){.s = s, .items = &items[i < 3 ? 0 : 2], .seed = 17 + i,
                              .rounds = 40};
        pthread_create(&t[i], NULL, mix, &m[i]);
    }
    long busy = 0;
    for (int i = 0; i < 6; i++) {
        pthread_join(t[i], NULL);
        busy += m[i].busy;
        if (m[i].other)
            fail_msg("mixer %d: %ld unexpected answers, last: %s", i, m[i].other, m[i].last);
    }
    print_message("mixed run: %ld answers of a busy machine\n", busy);
    for (int i = 0; i < 4; i++)
        check_totals(items[i], i % 2 ? 60 : 120);
    th_resp r;
    char url[128];
    snprintf(url, sizeof(url), "%s/metrics", a.url);
    th_http("GET", url, NULL, &r);
    assert_non_null(strstr(r.body, "stockd_reservations_total{result=\"held\"}"));
    assert_non_null(strstr(r.body, "stockd_orders_cancelled_total"));
    assert_non_null(strstr(r.body, "stockd_buyer_limit_refusals_total"));
    th_resp_free(&r);
}

/* POST path body to the atomic replica while first (another session's
 * transaction, the request's first try) is open, then commits it: the
 * retry's answer. */
static struct racer retry_meanwhile(PGconn *first, const char *path, const char *body)
{
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, 1);
    struct racer r = {.s = &atomic_srv, .method = "POST", .go = &go};
    snprintf(r.path, sizeof(r.path), "%s", path);
    snprintf(r.body, sizeof(r.body), "%s", body);
    pthread_t t;
    pthread_create(&t, NULL, race, &r);
    th_sleep_ms(800); /* the retry now waits for the row (a lower bound only) */
    PQclear(PQexec(first, "COMMIT"));
    PQfinish(first);
    pthread_join(t, NULL);
    pthread_barrier_destroy(&go);
    r.go = NULL;
    return r;
}

/* Review 1.4: a retry whose first try commits while the retry waits for
 * the item's row (--lock atomic, PostgreSQL) is answered by the first
 * try's reservation, not refused buyer_limit_reached for the units the
 * first try counted. Here another session plays the first try: it holds
 * the row, the buyer's count and the reservation uncommitted meanwhile. */
static void test_a_retry_waiting_for_its_first_try_is_replayed_not_refused(void **state)
{
    (void)state;
    if (!on_pg)
        return; /* SQLite checks the requestId first, under its write lock */
    long long id = new_item(10, 2);
    PGconn *first = PQconnectdb(db);
    char sql[1024];
    snprintf(sql, sizeof(sql),
             "BEGIN; UPDATE items SET stock = stock - 2, reserved = reserved + 2 WHERE id = %lld;"
             "INSERT INTO buyer_units (item_id, buyer_id, units) VALUES (%lld, 'una', 2);"
             "WITH r AS (INSERT INTO reservations (request_id, buyer_id, instance_id, hold_ms, "
             "expires_at_ms) VALUES ('first-try', 'una', 'replica-x', 60000, "
             "(extract(epoch FROM clock_timestamp()) * 1000)::bigint + 60000) RETURNING id) "
             "INSERT INTO reservation_lines (reservation_id, item_id, quantity, available) "
             "SELECT id, %lld, 2, 8 FROM r", id, id, id);
    PQclear(PQexec(first, sql));
    assert_int_equal(PQtransactionStatus(first), PQTRANS_INTRANS);
    char body[256];
    struct racer r = retry_meanwhile(first, "/reservations",
                                     one_line(body, sizeof(body), id, 2, 60000, "first-try",
                                              "una"));
    if (r.status != 200 || strstr(r.answer, "\"replayed\":true") == NULL)
        fail_msg("a retry of a reservation made meanwhile: %ld %s", r.status, r.answer);
    assert_int_equal(item_field(id, "reserved"), 2);
}

/* Another session placing order rid of 2 units of item id for buyer
 * (NULL: none), as --lock atomic would, left uncommitted. */
static PGconn *first_order(long long id, const char *rid, const char *buyer)
{
    PGconn *first = PQconnectdb(db);
    char sql[1024], count[160] = "";
    if (buyer)
        snprintf(count, sizeof(count), "INSERT INTO buyer_units (item_id, buyer_id, units) "
                 "VALUES (%lld, '%s', 2);", id, buyer);
    snprintf(sql, sizeof(sql),
             "BEGIN; UPDATE items SET stock = stock - 2 WHERE id = %lld; %s"
             "WITH o AS (INSERT INTO orders (request_id, instance_id, lock_mode, buyer_id) "
             "VALUES ('%s', 'replica-x', 'atomic', %s%s%s) RETURNING id) "
             "INSERT INTO order_lines (order_id, item_id, quantity, remaining) "
             "SELECT id, %lld, 2, 0 FROM o", id, count, rid, buyer ? "'" : "",
             buyer ? buyer : "NULL", buyer ? "'" : "", id);
    PQclear(PQexec(first, sql));
    assert_int_equal(PQtransactionStatus(first), PQTRANS_INTRANS);
    return first;
}

/* Review 1.4, for orders: a retry whose first try commits while it waits
 * for the item's row is answered by that order, neither refused
 * buyer_limit_reached (the units the first try counted) nor
 * insufficient_stock (the units the first try took). */
static void test_an_order_retry_waiting_for_its_first_try_is_replayed_not_refused(void **state)
{
    (void)state;
    if (!on_pg)
        return; /* SQLite checks the requestId first, under its write lock */
    long long limited = new_item(10, 2), last = new_item(2, 0);
    const char *buyer[] = {"una", NULL}, *rid[] = {"first-order-limit", "first-order-stock"};
    long long id[] = {limited, last};
    for (int i = 0; i < 2; i++) {
        PGconn *first = first_order(id[i], rid[i], buyer[i]);
        char body[256];
        int n = snprintf(body, sizeof(body), "{\"lines\":[{\"itemId\":%lld,\"quantity\":2}],"
                         "\"requestId\":\"%s\"", id[i], rid[i]);
        snprintf(body + n, sizeof(body) - n, buyer[i] ? ",\"buyerId\":\"%s\"}" : "}",
                 buyer[i]);
        struct racer r = retry_meanwhile(first, "/orders", body);
        if (r.status != 200 || strstr(r.answer, "\"replayed\":true") == NULL)
            fail_msg("a retry of an order placed meanwhile: %ld %s", r.status, r.answer);
        assert_int_equal(item_field(id[i], "sold"), 2);
    }
}

/* Review 1.3: --lock atomic on PostgreSQL takes no item lock, so two
 * reservations over the same items meet on the rows' locks; taken in the
 * request's order, {A, B} and {B, A} at once could wait for each other in
 * a circle, which PostgreSQL breaks after deadlock_timeout by failing one
 * (503 storage_busy). In item id order they only ever queue. The cancels
 * that follow race the same way. */
static void test_reservations_over_the_same_items_in_opposite_orders_never_deadlock(void **state)
{
    (void)state;
    if (!on_pg)
        return; /* SQLite writes one transaction at a time */
    long long x = new_item(1000, 0), y = new_item(1000, 0);
    int rounds = 40;
    for (int round = 0; round < rounds; round++) {
        pthread_barrier_t go;
        pthread_barrier_init(&go, NULL, 2);
        struct racer r[2];
        pthread_t t[2];
        for (int i = 0; i < 2; i++) {
            r[i] = (struct racer){.s = &atomic_srv, .method = "POST", .path = "/reservations",
                                  .go = &go};
            snprintf(r[i].body, sizeof(r[i].body), "{\"lines\":[{\"itemId\":%lld,\"quantity\":1},"
                     "{\"itemId\":%lld,\"quantity\":1}]}", i ? y : x, i ? x : y);
            pthread_create(&t[i], NULL, race, &r[i]);
        }
        for (int i = 0; i < 2; i++)
            pthread_join(t[i], NULL);
        pthread_barrier_destroy(&go);
        long long id[2] = {0, 0};
        for (int i = 0; i < 2; i++) {
            if (r[i].status != 201)
                fail_msg("round %d: a reservation over {%lld, %lld}: %ld %s", round, x, y,
                         r[i].status, r[i].answer);
            json_t *j = json_loads(r[i].answer, 0, NULL);
            id[i] = th_jint(j, "reservationId");
            json_decref(j);
        }
        pthread_barrier_init(&go, NULL, 2);
        for (int i = 0; i < 2; i++) {
            r[i] = (struct racer){.s = &atomic_srv, .method = "POST", .go = &go};
            snprintf(r[i].path, sizeof(r[i].path), "/reservations/%lld/cancel", id[i]);
            pthread_create(&t[i], NULL, race, &r[i]);
        }
        for (int i = 0; i < 2; i++)
            pthread_join(t[i], NULL);
        pthread_barrier_destroy(&go);
        for (int i = 0; i < 2; i++)
            if (r[i].status != 200)
                fail_msg("round %d: a cancel: %ld %s", round, r[i].status, r[i].answer);
    }
    assert_int_equal(item_field(x, "reserved"), 0);
    assert_int_equal(item_field(y, "available"), 1000);
}

/* --lock db (PostgreSQL): the rows' own locks instead of Redis's. */
static void test_lock_mode_db_reserves_confirms_and_cancels(void **state)
{
    (void)state;
    if (!on_pg)
        return; /* SQLite has no row locks: the PostgreSQL group runs it */
    long long id = new_item(10, 2);
    json_t *r = reserve(&rows, id, 2, 60000, NULL, "ivy", 201);
    long long res = th_jint(r, "reservationId");
    json_decref(r);
    r = reserve(&rows, id, 1, 60000, NULL, "ivy", 409);
    expect_error(r, "buyer_limit_reached");
    json_decref(r);
    json_t *o = act(&rows, res, "confirm", NULL, 201);
    long long order = th_jint(o, "orderId");
    json_decref(o);
    json_decref(cancel_order(&rows, order, NULL, 200));
    json_decref(cancel_order(&a, order, NULL, 200));
    char path[64];
    snprintf(path, sizeof(path), "/items/%lld", id);
    json_decref(th_call(&rows, "PUT", path, "{\"stock\":12,\"perBuyerLimit\":null}", 200));
    json_t *it = item(id);
    assert_int_equal(th_jint(it, "available"), 12);
    assert_int_equal(th_jint(it, "sold"), 2);
    assert_int_equal(th_jint(it, "returned"), 2);
    assert_true(json_is_null(json_object_get(it, "perBuyerLimit")));
    json_decref(it);
}

/* ---- roles ---- */

static const char *write_tokens(char *path, size_t size)
{
    snprintf(path, size, "%s/tokens", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("operator ops op-token-0123456789\nbuyer shop buyer-token-0123456789\n"
          "scrape prom scrape-token-0123456789\n", f);
    fclose(f);
    return path;
}

/* One request with token (NULL: none) on a connection of its own: its status. */
static int call_as(const th_stockd *s, const char *method, const char *path, const char *token,
                   const char *body)
{
    char req[1024], out[4096], auth[128] = "";
    if (token)
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s\r\n", token);
    snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\nHost: t\r\n%sConnection: close\r\n"
             "Content-Length: %zu\r\n\r\n%s", method, path, auth, body ? strlen(body) : 0,
             body ? body : "");
    assert_true(th_raw(s->port, req, strlen(req), 0, out, sizeof(out), 10000) > 0);
    int status = 0;
    sscanf(out, "HTTP/1.1 %d", &status);
    return status;
}

static void test_reservations_and_cancels_are_a_buyers_calls(void **state)
{
    (void)state;
    char tokens[128];
    const char *flags[] = {LOCK_FLAGS, "--api-tokens-file", write_tokens(tokens, sizeof(tokens)),
                           NULL};
    th_stockd s;
    assert_int_equal(th_stockd_start(&s, &redis, db, dir, flags), 0);
    long long id = new_item(10, 0);
    char body[256], path[96];
    one_line(body, sizeof(body), id, 1, 0, NULL, NULL);
    assert_int_equal(call_as(&s, "POST", "/reservations", NULL, body), 401);
    assert_int_equal(call_as(&s, "POST", "/reservations", "scrape-token-0123456789", body), 403);
    assert_int_equal(call_as(&s, "POST", "/reservations", "buyer-token-0123456789", body), 201);
    json_t *r = reserve(&a, id, 1, 0, NULL, NULL, 201);
    long long res = th_jint(r, "reservationId");
    json_decref(r);
    const char *what[] = {"extend", "confirm"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof(path), "/reservations/%lld/%s", res, what[i]);
        const char *b2 = i ? NULL : "{\"holdMs\":5000}";
        assert_int_equal(call_as(&s, "POST", path, NULL, b2), 401);
        assert_int_equal(call_as(&s, "POST", path, "scrape-token-0123456789", b2), 403);
        assert_int_equal(call_as(&s, "POST", path, "buyer-token-0123456789", b2), i ? 201 : 200);
    }
    snprintf(path, sizeof(path), "/reservations/%lld", res);
    assert_int_equal(call_as(&s, "GET", path, NULL, NULL), 401);
    assert_int_equal(call_as(&s, "GET", path, "buyer-token-0123456789", NULL), 200);
    long long order = place_order(id, 1, NULL, 201, NULL);
    snprintf(path, sizeof(path), "/orders/%lld/cancel", order);
    assert_int_equal(call_as(&s, "POST", path, NULL, NULL), 401);
    assert_int_equal(call_as(&s, "POST", path, "op-token-0123456789", NULL), 200);
    assert_int_equal(call_as(&s, "POST", path, "buyer-token-0123456789", NULL), 200);
    assert_int_equal(th_count_in_file(s.log, "tokenName=ops"), 1);
    assert_int_equal(th_stockd_stop_clean(&s), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_reservation_holds_its_units_and_reads_back),
        cmocka_unit_test(test_a_request_id_answers_its_reservation_once),
        cmocka_unit_test(test_refused_reservations_take_nothing),
        cmocka_unit_test(test_every_answer_shows_the_reservations_own_hold),
        cmocka_unit_test(test_a_request_id_replayed_by_another_buyer_conflicts),
        cmocka_unit_test(test_a_missing_reservation_is_404_on_every_route),
        cmocka_unit_test(test_a_confirmed_reservation_becomes_an_order_once),
        cmocka_unit_test(test_a_cancelled_reservation_gives_its_units_back_once),
        cmocka_unit_test(test_an_extend_moves_the_expiry_within_the_maximum),
        cmocka_unit_test(test_a_lapsed_reservation_reads_expired_and_refuses_everything),
        cmocka_unit_test(test_a_confirm_racing_a_cancel_on_two_replicas_lets_one_win),
        cmocka_unit_test(test_an_order_cancel_racing_itself_on_three_replicas_returns_once),
        cmocka_unit_test(test_an_order_cancel_answers_its_lines_and_replays),
        cmocka_unit_test(test_writes_of_reservations_and_returns_wait_for_the_items_lock),
        cmocka_unit_test(test_an_ended_reservation_is_answered_without_the_items_lock),
        cmocka_unit_test(test_waits_of_reservations_end_at_the_drain_deadline),
        cmocka_unit_test(test_a_buyer_limit_counts_reservations_and_orders),
        cmocka_unit_test(test_a_buyer_limit_holds_exactly_across_replicas),
        cmocka_unit_test(test_put_sets_and_clears_a_limit),
        cmocka_unit_test(test_hold_flags_out_of_bounds_stop_start_up),
        cmocka_unit_test(test_lock_mode_atomic_reserves_confirms_and_cancels),
        cmocka_unit_test(test_lock_mode_db_reserves_confirms_and_cancels),
        cmocka_unit_test(test_reservations_over_the_same_items_in_opposite_orders_never_deadlock),
        cmocka_unit_test(test_a_retry_waiting_for_its_first_try_is_replayed_not_refused),
        cmocka_unit_test(test_an_order_retry_waiting_for_its_first_try_is_replayed_not_refused),
        cmocka_unit_test(test_the_totals_hold_after_a_mixed_run),
        cmocka_unit_test(test_reservations_and_cancels_are_a_buyers_calls),
    };
    /* the same suite on each database; Redis (and its lock keys' names) shared */
    int failed = cmocka_run_group_tests_name("reservations on SQLite", tests, sqlite_setup,
                                             sqlite_teardown);
    return failed | cmocka_run_group_tests_name("reservations on PostgreSQL", tests, pg_setup,
                                                pg_teardown);
}
