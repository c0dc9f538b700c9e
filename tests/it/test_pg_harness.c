/* test_pg_harness.c - the private PostgreSQL server the store's tests stand
 * on: it answers queries, makes fresh databases, keeps committed rows across
 * a fast shutdown, an immediate one and a killed postmaster, and asks only
 * stock_secret for a password. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>
#include <libpq-fe.h>

#include "tests/support/harness.h"
#include "tests/support/pg.h"

#define SKIP_REASON "PostgreSQL is not installed (make deps installs postgresql-15)"

static th_pg pg;

static int group_setup(void **state)
{
    (void)state;
    return th_pg_available() ? th_pg_start(&pg) : 0;
}

static int group_teardown(void **state)
{
    (void)state;
    th_pg_stop(&pg, SIGINT);
    return 0;
}

static void test_queries_and_fresh_databases(void **state)
{
    (void)state;
    if (!th_pg_available())
        th_skip(SKIP_REASON);
    assert_int_equal(th_pg_int(pg.url, "SELECT 41 + 1"), 42);
    assert_int_equal(th_pg_int(pg.url, "SELECT NULL"), -1);
    assert_int_equal(th_pg_int(pg.url, "SELECT 1 WHERE false"), -1);
    assert_int_equal(th_pg_int(pg.url, "SELECT * FROM no_such_table"), -2);
    assert_int_equal(th_pg_int(pg.url, "SELECT (current_setting('fsync') = 'off')::int"), 1);

    char url[192];
    assert_int_equal(th_pg_create_db(&pg, "harness_fresh", url, sizeof(url)), 0);
    assert_int_equal(th_pg_exec(url, "CREATE TABLE t (v int); INSERT INTO t VALUES (7)"), 0);
    assert_int_equal(th_pg_int(url, "SELECT v FROM t"), 7);
    assert_int_equal(th_pg_exec(url, "INSERT INTO no_such_table VALUES (1)"), -1);
    /* A second create starts from nothing, even with a session still open. */
    PGconn *open = PQconnectdb(url);
    assert_int_equal(PQstatus(open), CONNECTION_OK);
    assert_int_equal(th_pg_create_db(&pg, "harness_fresh", url, sizeof(url)), 0);
    assert_int_equal(th_pg_int(url, "SELECT (to_regclass('t') IS NULL)::int"), 1);
    PQfinish(open);
}

/* One row more in table t of the database stock, then the count. */
static long long add_row(void)
{
    assert_int_equal(th_pg_exec(pg.url, "CREATE TABLE IF NOT EXISTS t (v int);"
                                        "INSERT INTO t VALUES (1)"), 0);
    return th_pg_int(pg.url, "SELECT count(*) FROM t");
}

static void test_committed_rows_survive_every_kind_of_stop(void **state)
{
    (void)state;
    if (!th_pg_available())
        th_skip(SKIP_REASON);
    int port = pg.port;
    long long rows = add_row();
    static const int sigs[] = {SIGINT, SIGQUIT, SIGKILL};
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
        /* An open session: its backend must be gone before the next start. */
        PGconn *open = PQconnectdb(pg.url);
        assert_int_equal(PQstatus(open), CONNECTION_OK);
        th_pg_stop(&pg, sigs[i]);
        assert_int_equal(pg.pid, 0);
        assert_int_equal(th_connect(port), -1);
        PQfinish(open);
        assert_int_equal(th_pg_start(&pg), 0);
        assert_int_equal(pg.port, port);
        assert_int_equal(th_pg_int(pg.url, "SELECT count(*) FROM t"), rows);
        rows = add_row();
    }
}

static void test_only_the_secret_role_needs_a_password(void **state)
{
    (void)state;
    if (!th_pg_available())
        th_skip(SKIP_REASON);
    char with[192], without[192], wrong[192], own[192];
    snprintf(with, sizeof(with), "postgresql://stock_secret:%s@127.0.0.1:%d/stock", TH_PG_SECRET,
             pg.port);
    snprintf(without, sizeof(without), "postgresql://stock_secret@127.0.0.1:%d/stock", pg.port);
    snprintf(wrong, sizeof(wrong), "postgresql://stock_secret:nope@127.0.0.1:%d/stock", pg.port);
    assert_int_equal(th_pg_exec(with, "CREATE TABLE IF NOT EXISTS secret_t (v int);"
                                      "TRUNCATE secret_t; INSERT INTO secret_t VALUES (3)"), 0);
    assert_int_equal(th_pg_int(with, "SELECT v FROM secret_t"), 3);
    assert_int_equal(th_pg_exec(with, "DROP DATABASE IF EXISTS secret_own"), 0);
    assert_int_equal(th_pg_exec(with, "CREATE DATABASE secret_own"), 0);
    snprintf(own, sizeof(own), "postgresql://stock_secret:%s@127.0.0.1:%d/secret_own",
             TH_PG_SECRET, pg.port);
    assert_int_equal(th_pg_exec(own, "CREATE TABLE t (v int)"), 0);
    printf("two refused logins follow, as they should:\n");
    fflush(stdout);
    assert_int_equal(th_pg_int(without, "SELECT 1"), -2);
    assert_int_equal(th_pg_int(wrong, "SELECT 1"), -2);
    assert_int_equal(th_pg_int(pg.url, "SELECT 1"), 1); /* stock itself is trusted */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_queries_and_fresh_databases),
        cmocka_unit_test(test_committed_rows_survive_every_kind_of_stop),
        cmocka_unit_test(test_only_the_secret_role_needs_a_password),
    };
    return cmocka_run_group_tests_name("pg_harness", tests, group_setup, group_teardown);
}
