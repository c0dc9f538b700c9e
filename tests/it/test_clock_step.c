/* test_clock_step.c - stockd when fencing tokens go back: Redis's clock
 * stepped forward and back, or a lock's fence counter lost (an eviction, a
 * restart without persistence, its expiry while the item was idle). The
 * machine's clock can't be stepped here, so a row is made to carry a token
 * "from the future" as a holder under a stepped-forward clock would write it
 * (the counter set ahead, then one deduction), and the counter is then lost
 * (DEL, FLUSHALL) as it would be. New tokens come from the clock, below the
 * row's: every deduction was refused (503 lock_lost) until the clock caught
 * up. Now the holder raises its fence past the row's and the item serves at
 * once - one Redis server or three, batched or not, single lines, carts and
 * stock sets - while a holder whose lock moved on is still refused. Real
 * redis-servers, real stockd processes on one SQLite file, then on a
 * private PostgreSQL server. */
#include <jansson.h>
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
#include <sqlite3.h>

#include "lock/dlock.h"
#include "tests/support/calls.h"
#include "tests/support/harness.h"
#include "tests/support/logline.h"
#include "tests/support/pg.h"

#define NODES 3
#define LOCK_FLAGS "--lease-ms", "1000", "--redis-timeout-ms", "150", "--wait-ms", "5000", \
                   "--retry-ms", "20", "--busy-timeout-ms", "2000"
#define AHEAD_US 1000000000000LL /* 11.6 days: a clock stepped that far forward */

static th_redis one, nodes[NODES];
static th_stockd batched, unbatched, q_batched, q_unbatched;
static th_pg pg;
static char dir[64], db[256]; /* the group's database: a SQLite file, or a URL */

/* The Redis servers, once for both groups (stopped at the end of main). */
static int servers_up(char *list, size_t size)
{
    curl_global_init(CURL_GLOBAL_ALL);
    if ((dir[0] == '\0' && th_tempdir("clock-step-it", dir, sizeof(dir)) != 0) ||
        (one.pid == 0 && th_redis_start(&one) != 0))
        return -1;
    list[0] = '\0';
    for (int i = 0; i < NODES; i++) {
        if (nodes[i].pid == 0 && th_redis_start(&nodes[i]) != 0)
            return -1;
        snprintf(list + strlen(list), size - strlen(list), "%s127.0.0.1:%d", i ? "," : "",
                 nodes[i].port);
    }
    return 0;
}

/* Replicas on one Redis server, batched and not, on the group's database. */
static int replicas_up(void)
{
    const char *fb[] = {LOCK_FLAGS, NULL};
    const char *fu[] = {LOCK_FLAGS, "--batch", "off", NULL};
    return th_stockd_start(&batched, &one, db, dir, fb) == 0 &&
                   th_stockd_start(&unbatched, &one, db, dir, fu) == 0
               ? 0
               : -1;
}

/* SQLite: those, and two on a quorum of three servers. */
static int sqlite_setup(void **state)
{
    (void)state;
    char list[128];
    if (servers_up(list, sizeof(list)) != 0)
        return -1;
    snprintf(db, sizeof(db), "%s/stock.db", dir);
    const char *fqb[] = {LOCK_FLAGS, "--redis", list, NULL};
    const char *fqu[] = {LOCK_FLAGS, "--redis", list, "--batch", "off", NULL};
    return replicas_up() == 0 && th_stockd_start(&q_batched, NULL, db, dir, fqb) == 0 &&
                   th_stockd_start(&q_unbatched, NULL, db, dir, fqu) == 0
               ? 0
               : -1;
}

static int sqlite_teardown(void **state)
{
    (void)state;
    return th_stockd_stop_clean(&batched) | th_stockd_stop_clean(&unbatched) |
           th_stockd_stop_clean(&q_batched) | th_stockd_stop_clean(&q_unbatched);
}

/* PostgreSQL: the store's refusal and the group commit's redo there. */
static int pg_setup(void **state)
{
    (void)state;
    char list[128];
    return servers_up(list, sizeof(list)) == 0 && th_pg_start(&pg) == 0 &&
                   th_pg_create_db(&pg, "clock_step", db, sizeof(db)) == 0 && replicas_up() == 0
               ? 0
               : -1;
}

static int pg_teardown(void **state)
{
    (void)state;
    int rc = th_stockd_stop_clean(&batched) | th_stockd_stop_clean(&unbatched);
    th_pg_stop(&pg, SIGINT);
    return rc;
}

/* The Redis servers a replica's lock uses. */
static int servers_of(const th_stockd *s, const th_redis **out)
{
    if (s == &batched || s == &unbatched) {
        out[0] = &one;
        return 1;
    }
    for (int i = 0; i < NODES; i++)
        out[i] = &nodes[i];
    return NODES;
}

/* Runs "<verb> <item's lock key><suffix> [arg]" on every server of s's lock. */
static void on_lock_servers(const th_stockd *s, const char *verb, long long item,
                            const char *suffix, long long arg)
{
    const th_redis *r[NODES];
    char key[DLOCK_KEY_MAX + 1];
    th_item_lock_key(item, key);
    for (int i = 0, n = servers_of(s, r); i < n; i++)
        if (arg)
            th_redis_int(r[i], "%s %s%s %lld", verb, key, suffix, arg);
        else
            th_redis_int(r[i], "%s %s%s", verb, key, suffix);
}

/* The fence the item's row carries, read from the group's database. */
static long long row_fence(long long item)
{
    char sql[96];
    snprintf(sql, sizeof(sql), "SELECT fence FROM items WHERE id = %lld", item);
    if (pg.pid)
        return th_pg_int(db, sql);
    sqlite3 *h = NULL;
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_busy_timeout(h, 5000);
    assert_int_equal(sqlite3_prepare_v2(h, sql, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    long long fence = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(h);
    return fence;
}

/* One unit of each of the n items, as /reduceStock (one item) or a cart. */
static void deduct(const th_stockd *s, const long long *items, int n, long expect)
{
    char body[256];
    if (n == 1) {
        snprintf(body, sizeof(body), "{\"itemId\":%lld,\"quantity\":1}", items[0]);
        json_decref(th_call(s, "POST", "/reduceStock", body, expect == 201 ? 200 : expect));
        return;
    }
    snprintf(body, sizeof(body), "{\"lines\":[{\"itemId\":%lld,\"quantity\":1},"
             "{\"itemId\":%lld,\"quantity\":1}]}", items[0], items[1]);
    json_decref(th_call(s, "POST", "/orders", body, expect));
}

/* The items' rows carry a token far ahead of Redis's clock, written by a
 * holder whose counter was set ahead as a clock stepped forward would set
 * it: each server's counter is put there, then s deducts one of each.
 * Returns the token written. */
static long long rows_from_the_future(const th_stockd *s, const long long *items, int n)
{
    const th_redis *r[NODES];
    servers_of(s, r);
    long long ahead = th_redis_now_us(r[0]) + AHEAD_US;
    for (int i = 0; i < n; i++)
        on_lock_servers(s, "SET", items[i], ":fence", ahead);
    deduct(s, items, n, 201);
    for (int i = 0; i < n; i++)
        assert_true(row_fence(items[i]) > ahead);
    return ahead;
}

/* The clock is back (real time) and the counters are gone: every server's
 * counter of each item is deleted (an eviction, an expiry while idle). */
static void counters_lost(const th_stockd *s, const long long *items, int n)
{
    for (int i = 0; i < n; i++)
        on_lock_servers(s, "DEL", items[i], ":fence", 0);
}

/* Whether s's log has a line about the row token row (rowFence=row), and
 * the first such line's msg is msg. */
static int logged(const th_stockd *s, const char *msg, long long row)
{
    char value[32];
    snprintf(value, sizeof(value), "%lld", row);
    char *log = th_read_file(s->log);
    th_logfmt first;
    int n = log ? th_log_find(log, "rowFence", value, &first) : 0;
    free(log);
    const char *said = n > 0 ? th_logfmt_get(&first, "msg", NULL) : NULL;
    return said && strcmp(said, msg) == 0;
}

/* s deducts one of each item at once, though their rows carry tokens
 * from the future (refused with 503 lock_lost until this was fixed), and
 * each row then carries a larger one; s says so in its log. */
static void serves_at_once(const th_stockd *s, const long long *items, int n, long long ahead)
{
    long long before[2], row[2];
    for (int i = 0; i < n; i++)
        before[i] = th_item_stock(&batched, items[i]), row[i] = row_fence(items[i]);
    int64_t t0 = th_now_ms();
    deduct(s, items, n, 201);
    print_message("served again after %lld ms\n", (long long)(th_now_ms() - t0));
    for (int i = 0; i < n; i++) {
        assert_int_equal(th_item_stock(&batched, items[i]), before[i] - 1);
        assert_true(row_fence(items[i]) > ahead + 1);
        assert_true(logged(s, "lock fence raised past the row's", row[i]));
    }
    deduct(s, items, n, 201); /* and goes on from the raised counter: no raise needed */
}

static void scenario(const th_stockd *s, int n)
{
    long long items[2] = {th_new_item(&batched, "stepped", 100),
                          th_new_item(&batched, "stepped too", 100)};
    long long ahead = rows_from_the_future(s, items, n);
    counters_lost(s, items, n);
    serves_at_once(s, items, n, ahead);
}

static void test_a_line_fenced_from_the_future_serves_at_once_batched(void **state)
{
    (void)state;
    scenario(&batched, 1);
}

static void test_a_line_fenced_from_the_future_serves_at_once_unbatched(void **state)
{
    (void)state;
    scenario(&unbatched, 1);
}

static void test_a_cart_fenced_from_the_future_serves_at_once(void **state)
{
    (void)state;
    scenario(&batched, 2);
    scenario(&unbatched, 2);
}

/* A Redis restarted without persistence loses every counter at once. */
static void test_after_redis_lost_everything_the_item_serves_at_once(void **state)
{
    (void)state;
    long long item = th_new_item(&batched, "flushed", 100);
    long long ahead = rows_from_the_future(&batched, &item, 1);
    assert_int_equal(th_redis_int(&one, "FLUSHALL"), 0);
    serves_at_once(&unbatched, &item, 1, ahead);
}

/* PUT /items/{id} writes the row with its lock's token too. */
static void test_a_stock_set_fenced_from_the_future_succeeds_at_once(void **state)
{
    (void)state;
    long long item = th_new_item(&batched, "set", 100);
    long long ahead = rows_from_the_future(&batched, &item, 1);
    counters_lost(&batched, &item, 1);
    char path[64];
    snprintf(path, sizeof(path), "/items/%lld", item);
    json_t *j = th_call(&batched, "PUT", path, "{\"stock\":70}", 200);
    assert_int_equal(th_jint(j, "stock"), 70);
    json_decref(j);
    assert_true(row_fence(item) > ahead + 1);
}

/* Over three servers: the raise goes to every server, and the fence that
 * a majority holds is the one used. */
static void test_over_a_quorum_a_line_and_a_cart_serve_at_once(void **state)
{
    (void)state;
    scenario(&q_batched, 1);
    scenario(&q_unbatched, 2);
}

/* A holder whose lock really moved on - its lease ran out and another
 * holder has the key - must stay refused: the raise is held up by a proxy
 * (a slow network) while the key is taken, and arrives to find the key
 * another's. It gets no fence, writes nothing, and raises no counter. */
static void stale_holder_scenario(const char *batch)
{
    th_proxy *p = th_proxy_start(one.port);
    assert_non_null(p);
    char port[16];
    snprintf(port, sizeof(port), "%d", th_proxy_port(p));
    const char *flags[] = {"--lease-ms", "12000", "--redis-timeout-ms", "2000", "--wait-ms",
                           "5000", "--busy-timeout-ms", "2000", "--batch", batch,
                           "--redis-port", port, NULL};
    th_stockd stale;
    assert_int_equal(th_stockd_start(&stale, &one, db, dir, flags), 0);
    long long item = th_new_item(&batched, "moved on", 100);
    long long ahead = rows_from_the_future(&batched, &item, 1);
    counters_lost(&batched, &item, 1);
    long long row = row_fence(item);
    th_proxy_delay_next(p, "*9\r\n$7\r\nEVALSHA", 1200); /* the raise: its only 9-part call */
    th_bg_reduce late = {.url = stale.url, .item = item};
    th_bg_reduce_start(&late);
    for (int64_t end = th_now_ms() + 10000; th_proxy_delayed(p) < 1;) {
        assert_true(th_now_ms() < end);
        th_sleep_ms(1);
    }
    char key[DLOCK_KEY_MAX + 1];
    th_item_lock_key(item, key);
    assert_int_equal(th_redis_int(&one, "SET %s intruder-token PX 10000", key), 0);
    th_bg_reduce_join(&late);
    if (late.status != 503 || strstr(late.body, "\"lock_lost\"") == NULL)
        fail_msg("the holder whose lock moved on was not refused: %ld %s", late.status,
                 late.body);
    assert_int_equal(th_item_stock(&batched, item), 99); /* only the first deduction */
    assert_int_equal(row_fence(item), row);
    assert_true(th_redis_int(&one, "GET %s:fence", key) < row); /* nothing raised */
    assert_true(row > ahead);
    assert_true(logged(&stale, "lock fence not raised", row));
    th_redis_int(&one, "DEL %s", key);
    assert_int_equal(th_stockd_stop_clean(&stale), 0);
    th_proxy_stop(p);
}

static void test_a_holder_whose_lock_moved_on_is_still_refused(void **state)
{
    (void)state;
    stale_holder_scenario("on");
    stale_holder_scenario("off");
}

int main(void)
{
    const struct CMUnitTest sqlite_tests[] = {
        cmocka_unit_test(test_a_line_fenced_from_the_future_serves_at_once_batched),
        cmocka_unit_test(test_a_line_fenced_from_the_future_serves_at_once_unbatched),
        cmocka_unit_test(test_a_cart_fenced_from_the_future_serves_at_once),
        cmocka_unit_test(test_after_redis_lost_everything_the_item_serves_at_once),
        cmocka_unit_test(test_a_stock_set_fenced_from_the_future_succeeds_at_once),
        cmocka_unit_test(test_over_a_quorum_a_line_and_a_cart_serve_at_once),
        cmocka_unit_test(test_a_holder_whose_lock_moved_on_is_still_refused),
    };
    const struct CMUnitTest pg_tests[] = {
        cmocka_unit_test(test_a_line_fenced_from_the_future_serves_at_once_batched),
        cmocka_unit_test(test_a_line_fenced_from_the_future_serves_at_once_unbatched),
        cmocka_unit_test(test_a_cart_fenced_from_the_future_serves_at_once),
        cmocka_unit_test(test_a_stock_set_fenced_from_the_future_succeeds_at_once),
    };
    int failed = cmocka_run_group_tests_name("clock step on SQLite", sqlite_tests, sqlite_setup,
                                             sqlite_teardown) +
                 cmocka_run_group_tests_name("clock step on PostgreSQL", pg_tests, pg_setup,
                                             pg_teardown);
    th_redis_stop(&one, 0);
    for (int i = 0; i < NODES; i++)
        th_redis_stop(&nodes[i], 0);
    return failed;
}
