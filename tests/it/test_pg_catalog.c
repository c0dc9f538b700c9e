/* test_pg_catalog.c - a stockd on PostgreSQL as an operator sets it up and
 * fills its catalog: the user's own session options in --db (a search_path)
 * kept beside stockd's, in both forms of --db; and items created and
 * restocked whose session is cut right after the server's COMMIT reply
 * (a proxy closes it there) answered as committed, with a requestId that
 * makes a retried POST /items create nothing twice. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "tests/support/calls.h"
#include "tests/support/harness.h"
#include "tests/support/pg.h"

static th_redis redis;
static th_pg pg;
static char dir[64];

static int group_setup(void **state)
{
    (void)state;
    if (th_tempdir("pg-catalog", dir, sizeof(dir)) != 0 || th_redis_start(&redis) != 0 ||
        th_pg_start(&pg) != 0)
        return -1;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    th_redis_stop(&redis, 0);
    th_pg_stop(&pg, SIGINT);
    return 0;
}

/* How many of stockd's tables schema holds, as url's database says. */
static long long tables_in(const char *url, const char *schema)
{
    char sql[256];
    snprintf(sql, sizeof(sql), "SELECT count(*) FROM pg_tables WHERE schemaname = '%s' AND "
             "tablename IN ('items', 'orders', 'order_lines', 'stockd_schema')", schema);
    return th_pg_int(url, sql);
}

/* A stockd on db (whose database url names, with a schema inv made
 * beforehand) sells from an item, and its tables are inv's alone. */
static void assert_tables_land_in_inv(const char *url, const char *db)
{
    th_stockd s;
    assert_int_equal(th_stockd_start(&s, &redis, db, dir, NULL), 0);
    long long item = th_new_item(&s, "in-inv", 5);
    char body[128];
    long long items[1] = {item};
    int qty[1] = {2};
    th_order_body(body, sizeof(body), items, qty, 1, "inv-order", 0);
    json_decref(th_call(&s, "POST", "/orders", body, 201));
    assert_int_equal(th_item_stock(&s, item), 3);
    assert_int_equal(th_stockd_stop_clean(&s), 0);
    assert_int_equal(tables_in(url, "inv"), 4);
    assert_int_equal(tables_in(url, "public"), 0);
    assert_int_equal(th_pg_int(url, "SELECT stock FROM inv.items WHERE name = 'in-inv'"), 3);
    assert_int_equal(th_pg_int(url, "SELECT count(*) FROM inv.orders WHERE request_id = "
                                    "'inv-order'"), 1);
}

/* ?options=-csearch_path%3Dinv in a URL: the migrations and every statement
 * run in schema inv, stockd's own options (its statement bound) beside. */
static void test_a_urls_search_path_option_is_kept(void **state)
{
    (void)state;
    char url[192], db[320];
    assert_int_equal(th_pg_create_db(&pg, "inv_url", url, sizeof(url)), 0);
    assert_int_equal(th_pg_exec(url, "CREATE SCHEMA inv"), 0);
    snprintf(db, sizeof(db), "%s?options=-csearch_path%%3Dinv", url);
    assert_tables_land_in_inv(url, db);
}

/* options='-c search_path=inv' in a key/value conninfo: the same. */
static void test_a_conninfos_search_path_option_is_kept(void **state)
{
    (void)state;
    char url[192], db[320];
    assert_int_equal(th_pg_create_db(&pg, "inv_kv", url, sizeof(url)), 0);
    assert_int_equal(th_pg_exec(url, "CREATE SCHEMA inv"), 0);
    snprintf(db, sizeof(db), "host=127.0.0.1 port=%d user=stock dbname=inv_kv "
             "options='-c search_path=inv'", pg.port);
    assert_tables_land_in_inv(url, db);
}

/* A fresh database name on pg behind a new proxy (*proxy, its URL in url),
 * and a stockd on it with extra flags (NULL-terminated, may be NULL). */
static void start_behind_proxy(const char *name, th_proxy **proxy, char *url, size_t size,
                               th_stockd *s, const char *const flags[])
{
    char db[256];
    assert_int_equal(th_pg_create_db(&pg, name, url, size), 0);
    *proxy = th_proxy_start(pg.port);
    assert_non_null(*proxy);
    snprintf(db, sizeof(db), "postgresql://stock@127.0.0.1:%d/%s", th_proxy_port(*proxy), name);
    assert_int_equal(th_stockd_start(s, &redis, db, dir, flags), 0);
}

/* The items named name in url's database. */
static long long items_named(const char *url, const char *name)
{
    char sql[160];
    snprintf(sql, sizeof(sql), "SELECT count(*) FROM items WHERE name = '%s'", name);
    return th_pg_int(url, sql);
}

/* POST /items whose session is cut right after the server's COMMIT reply:
 * answered 201 with the item (it comes back from the INSERT, inside the
 * transaction; nothing is read after COMMIT), not 503 "nothing written".
 * Its retry with the same requestId is answered 200, replayed, with the
 * same item, and makes no second one; the requestId with another body is
 * refused 409 and writes nothing. */
static void test_an_item_whose_session_is_cut_after_commit_is_answered_created(void **state)
{
    (void)state;
    th_proxy *proxy;
    th_stockd s;
    char url[192];
    const char *body = "{\"name\":\"dup-me\",\"stock\":5,\"requestId\":\"create-1\"}";
    start_behind_proxy("cut_create", &proxy, url, sizeof(url), &s, NULL);
    th_proxy_cut_after(proxy, "COMMIT");
    json_t *made = th_call(&s, "POST", "/items", body, 201);
    assert_int_equal(th_proxy_cuts(proxy), 1);
    assert_string_equal(th_jstr(made, "name"), "dup-me");
    assert_int_equal(th_jint(made, "stock"), 5);
    assert_string_equal(th_jstr(made, "requestId"), "create-1");
    assert_true(json_is_false(json_object_get(made, "replayed")));
    json_t *again = th_call(&s, "POST", "/items", body, 200);
    assert_int_equal(th_jint(again, "id"), th_jint(made, "id"));
    assert_int_equal(th_jint(again, "stock"), 5);
    assert_true(json_is_true(json_object_get(again, "replayed")));
    json_t *other = th_call(&s, "POST", "/items", "{\"name\":\"dup-me\",\"stock\":6,"
                            "\"requestId\":\"create-1\"}", 409);
    assert_string_equal(th_jstr(other, "error"), "request_id_conflict");
    assert_int_equal(items_named(url, "dup-me"), 1);
    assert_int_equal(th_pg_int(url, "SELECT count(*) FROM items"), 1);
    json_decref(made);
    json_decref(again);
    json_decref(other);
    assert_int_equal(th_stockd_stop_clean(&s), 0);
    th_proxy_stop(proxy);
}

/* PUT /items/{id} whose session is cut right after the COMMIT reply, in
 * lock mode mode: answered 200 with the stock it set (the item is read
 * inside the transaction), and that stock is the row's. */
static void assert_stock_set_survives_a_cut(const char *name, const char *mode)
{
    th_proxy *proxy;
    th_stockd s;
    char url[192], path[64], sql[96];
    const char *flags[] = {"--lock", mode, NULL};
    start_behind_proxy(name, &proxy, url, sizeof(url), &s, flags);
    long long item = th_new_item(&s, "restock", 5);
    snprintf(path, sizeof(path), "/items/%lld", item);
    th_proxy_cut_after(proxy, "COMMIT");
    json_t *set = th_call(&s, "PUT", path, "{\"stock\":40}", 200);
    assert_int_equal(th_proxy_cuts(proxy), 1);
    assert_int_equal(th_jint(set, "id"), item);
    assert_int_equal(th_jint(set, "stock"), 40);
    json_decref(set);
    snprintf(sql, sizeof(sql), "SELECT stock FROM items WHERE id = %lld", item);
    assert_int_equal(th_pg_int(url, sql), 40);
    assert_int_equal(th_item_stock(&s, item), 40); /* and the pool's next session serves */
    assert_int_equal(th_stockd_stop_clean(&s), 0);
    th_proxy_stop(proxy);
}

static void test_a_stock_set_whose_session_is_cut_after_commit_is_answered_set(void **state)
{
    (void)state;
    assert_stock_set_survives_a_cut("cut_set_redis", "redis");
    assert_stock_set_survives_a_cut("cut_set_db", "db");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_urls_search_path_option_is_kept),
        cmocka_unit_test(test_a_conninfos_search_path_option_is_kept),
        cmocka_unit_test(test_an_item_whose_session_is_cut_after_commit_is_answered_created),
        cmocka_unit_test(test_a_stock_set_whose_session_is_cut_after_commit_is_answered_set),
    };
    return cmocka_run_group_tests_name("pg_catalog", tests, group_setup, group_teardown);
}
