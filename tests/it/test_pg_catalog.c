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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_urls_search_path_option_is_kept),
        cmocka_unit_test(test_a_conninfos_search_path_option_is_kept),
    };
    return cmocka_run_group_tests_name("pg_catalog", tests, group_setup, group_teardown);
}
