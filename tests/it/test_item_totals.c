/* test_item_totals.c - an item's sold and orderCount, kept on its row (not
 * summed from the ledger on every read), equal the ledger's SUM and COUNT:
 * on a database made by the schema before them (the migration fills them in
 * from the orders already there), then after a mixed load through every
 * lock mode and path at once - group commit of single lines and of carts,
 * one order at a time, the atomic mode, PostgreSQL's row locks - with
 * refusals, sell-outs and stock sets by PUT. SQLite, then PostgreSQL; the
 * ledger is read straight from the database. */
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
#include <sqlite3.h>

#include "tests/support/calls.h"
#include "tests/support/harness.h"
#include "tests/support/pg.h"
#include "tests/support/stack.h"

#define REPLICAS_MAX 4

static th_redis redis;
static th_pg pg;
static char dir[64];
static th_stockd r[REPLICAS_MAX];

static int group_setup(void **state)
{
    (void)state;
    return th_tempdir("totals-it", dir, sizeof(dir)) == 0 && th_redis_start(&redis) == 0 &&
                   th_pg_start(&pg) == 0
               ? 0
               : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    th_pg_stop(&pg, SIGINT);
    th_redis_stop(&redis, 0);
    return 0;
}

static int test_teardown(void **state)
{
    (void)state;
    for (int i = 0; i < REPLICAS_MAX; i++)
        if (r[i].pid > 0)
            th_stockd_stop(&r[i], SIGTERM);
    return 0;
}

/* The orders a database of the previous schema holds: item 1 sold 2 + 3 + 5
 * in three orders (the last a cart with item 2, which sold 4), item 3 none. */
#define OLD_LEDGER                                                                          \
    "INSERT INTO items (name, stock) VALUES ('one', 90), ('two', 46), ('three', 7);"         \
    "INSERT INTO orders (request_id, instance_id, lock_mode) VALUES ('o-1', 'old', 'redis'),"\
    " (NULL, 'old', 'atomic'), ('o-3', 'old', 'redis');"                                     \
    "INSERT INTO order_lines (order_id, item_id, quantity, remaining) VALUES (1, 1, 2, 98),"  \
    " (2, 1, 3, 95), (3, 1, 5, 90), (3, 2, 4, 46);"

/* Runs sql on the SQLite file db. */
static void sqlite_exec(const char *db, const char *sql)
{
    sqlite3 *h;
    assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
    if (sqlite3_exec(h, sql, NULL, NULL, NULL) != SQLITE_OK)
        fail_msg("%s: %s", sql, sqlite3_errmsg(h));
    sqlite3_close(h);
}

/* Runs the repository's schema file on db (a SQLite file, or a URL). */
static void apply_schema_file(const char *db, int on_pg, const char *file)
{
    char *sql = th_read_file(file);
    assert_non_null(sql);
    if (on_pg)
        assert_int_equal(th_pg_exec(db, sql), 0);
    else
        sqlite_exec(db, sql);
    free(sql);
}

/* A database as the schema before the totals left it, with OLD_LEDGER. */
static void make_old_database(const char *db, int on_pg)
{
    if (on_pg) {
        apply_schema_file(db, 1, "schema/postgres/001_init.sql");
        /* what stockd's migrate() records, as it did for that file */
        assert_int_equal(th_pg_exec(db, "CREATE TABLE stockd_schema (version integer PRIMARY KEY, "
                                        "name text NOT NULL, applied_at timestamptz NOT NULL "
                                        "DEFAULT now()); INSERT INTO stockd_schema (version, "
                                        "name) VALUES (1, '001_init.sql'); " OLD_LEDGER),
                         0);
        return;
    }
    apply_schema_file(db, 0, "schema/sqlite/001_init.sql");
    apply_schema_file(db, 0, "schema/sqlite/002_handoff_seq.sql");
    apply_schema_file(db, 0, "schema/sqlite/003_orders_and_lines.sql");
    sqlite_exec(db, "PRAGMA user_version = 3; " OLD_LEDGER);
}

/* One integer from db: the first column of sql's first row, where sql's %s
 * stands for item (bound on SQLite, written in on PostgreSQL). */
static long long db_int(const char *db, int on_pg, const char *sql, long long item)
{
    char text[320], num[24];
    snprintf(num, sizeof(num), "%lld", item);
    snprintf(text, sizeof(text), sql, on_pg ? num : "?1");
    if (on_pg)
        return th_pg_int(db, text);
    sqlite3 *h;
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_busy_timeout(h, 5000);
    assert_int_equal(sqlite3_prepare_v2(h, text, -1, &st, NULL), SQLITE_OK);
    sqlite3_bind_int64(st, 1, item);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    long long v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(h);
    return v;
}

/* Every item: what the service answers, and what its row holds, equal the
 * ledger's SUM and COUNT. Returns how many items were checked. */
static int check_every_item(const char *db, int on_pg)
{
    json_t *list = th_call(&r[0], "GET", "/items", NULL, 200);
    json_t *items = json_object_get(list, "items"), *it;
    size_t i;
    json_array_foreach(items, i, it) {
        long long id = th_jint(it, "id"), sold = th_jint(it, "sold");
        long long sum = db_int(db, on_pg, "SELECT COALESCE(SUM(quantity), 0) FROM order_lines "
                                          "WHERE item_id = %s", id);
        long long count = db_int(db, on_pg, "SELECT COUNT(*) FROM order_lines WHERE item_id = "
                                            "%s", id);
        char path[64];
        snprintf(path, sizeof(path), "/items/%lld?limit=0", id);
        json_t *one = th_call(&r[0], "GET", path, NULL, 200);
        if (sold != sum || th_jint(one, "sold") != sum || th_jint(one, "orderCount") != count)
            fail_msg("item %lld: sold %lld (listed) / %lld, orderCount %lld; the ledger sums "
                     "to %lld in %lld lines", id, sold, th_jint(one, "sold"),
                     th_jint(one, "orderCount"), sum, count);
        json_decref(one);
        assert_int_equal(db_int(db, on_pg, "SELECT sold FROM items WHERE id = %s", id), sum);
        assert_int_equal(db_int(db, on_pg, "SELECT line_count FROM items WHERE id = %s", id),
                         count);
    }
    int n = (int)json_array_size(items);
    json_decref(list);
    return n;
}

#define LOAD_ITEMS 3 /* fresh items per loadgen run */

/* One loadgen per replica at once, each on fresh items of its own (lock
 * modes must not share items: an atomic deduction does not wait for the
 * Redis lock), carts of 1-3 lines whose small stock sells out (refusals,
 * orders rolled back whole): every run PASS. */
static void run_load(const char *round, int n)
{
    char bin[128], names[REPLICAS_MAX][32], json[REPLICAS_MAX][160], out[160], items[8];
    pid_t pids[REPLICAS_MAX];
    snprintf(items, sizeof(items), "%d", LOAD_ITEMS);
    snprintf(bin, sizeof(bin), "%s/loadgen", th_build_dir());
    for (int i = 0; i < n; i++) {
        snprintf(names[i], sizeof(names[i]), "%s-%d", round, i);
        snprintf(json[i], sizeof(json[i]), "%s/%s.json", dir, names[i]);
        snprintf(out, sizeof(out), "%s/%s.out", dir, names[i]);
        const char *argv[] = {bin, "--target", r[i].url, "--items", items, "--cart-lines", "1-3",
                              "--stock", "200", "-n", "0", "-d", "3s", "-c", "6", "--json",
                              json[i], "--timeout-ms", "20000", NULL};
        pids[i] = th_spawn(argv, out);
    }
    th_stack s = {.dir = dir};
    for (int i = 0; i < n; i++) {
        th_loadgen_expect(&s, pids[i], names[i], 0);
        assert_true(th_loadgen_outcome(&s, names[i], "ok") > 0);
    }
}

static void totals_scenario(int on_pg)
{
    char db[256];
    const char *name = on_pg ? "totals_pg" : "totals_sqlite";
    if (on_pg)
        assert_int_equal(th_pg_create_db(&pg, name, db, sizeof(db)), 0);
    else
        snprintf(db, sizeof(db), "%s/%s.db", dir, name);
    make_old_database(db, on_pg);
    static const char *const modes[][5] = {{"--lock", "redis", NULL},
                                           {"--lock", "redis", "--batch", "off", NULL},
                                           {"--lock", "atomic", NULL},
                                           {"--lock", "db", NULL}};
    int n = on_pg ? 4 : 3; /* row locks: PostgreSQL's only */
    for (int i = 0; i < n; i++) {
        const char *flags[12] = {"--busy-timeout-ms", "3000", "--wait-ms", "8000"};
        for (int k = 0; modes[i][k]; k++)
            flags[4 + k] = modes[i][k];
        assert_int_equal(th_stockd_start(&r[i], &redis, db, dir, flags), 0);
    }
    assert_int_equal(check_every_item(db, on_pg), 3); /* the migration's totals */
    json_t *one = th_call(&r[1], "GET", "/items/1", NULL, 200);
    assert_int_equal(th_jint(one, "sold"), 10);
    assert_int_equal(th_jint(one, "orderCount"), 3);
    json_decref(one);

    run_load(on_pg ? "pg" : "sqlite", n);
    for (int i = 0; i < n; i++) { /* a restock by PUT through each replica leaves sold */
        char path[32];
        snprintf(path, sizeof(path), "/items/%d", 4 + i * LOAD_ITEMS);
        json_t *set = th_call(&r[i], "PUT", path, "{\"stock\":1000}", 200);
        assert_int_equal(th_jint(set, "stock"), 1000);
        json_decref(set);
    }
    run_load(on_pg ? "pg-again" : "sqlite-again", n);
    assert_int_equal(check_every_item(db, on_pg), 3 + 2 * n * LOAD_ITEMS);
}

static void test_sqlite_item_totals_equal_the_ledger_after_migration_and_load(void **state)
{
    (void)state;
    totals_scenario(0);
}

static void test_postgres_item_totals_equal_the_ledger_after_migration_and_load(void **state)
{
    (void)state;
    totals_scenario(1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_sqlite_item_totals_equal_the_ledger_after_migration_and_load,
                                  test_teardown),
        cmocka_unit_test_teardown(
            test_postgres_item_totals_equal_the_ledger_after_migration_and_load, test_teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
