/* test_postgres.c - three replicas on one PostgreSQL database, as on
 * several hosts: every lock mode under load (loadgen's verdict), the server
 * restarted mid-run (503 storage_unavailable while it is down, then back
 * without restarting stockd), replica 0's sessions killed mid-batch (no
 * partial commit), the row-lock mode's lock_timeout, a lock lost while
 * its holder's read waits (without fencing, only the last check stops the
 * write), and the start-up errors a user can make. The faults of a lock holder run on PostgreSQL in
 * test_faults.c; the store's own semantics in tests/unit/test_store.c. */
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
#include <libpq-fe.h>

#include "lock/dlock.h"
#include "tests/support/calls.h"
#include "tests/support/harness.h"
#include "tests/support/pg.h"
#include "tests/support/stack.h"

static th_redis redis;
static th_pg pg;
static char dir[64];

static char stockd_bin[128];

static const char *stockd_path(void)
{
    snprintf(stockd_bin, sizeof(stockd_bin), "%s/stockd", th_build_dir());
    return stockd_bin;
}

static int group_setup(void **state)
{
    (void)state;
    if (th_tempdir("postgres-it", dir, sizeof(dir)) != 0 || th_redis_start(&redis) != 0 ||
        th_pg_start(&pg) != 0)
        return -1;
    th_stack_use_pg(&pg);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    th_redis_stop(&redis, 0);
    th_pg_stop(&pg, SIGINT);
    return 0;
}

/* Every lock mode but none, 3 replicas, loadgen on all three: PASS. */
static void test_every_lock_mode_passes_on_three_replicas(void **state)
{
    (void)state;
    static const char *const modes[] = {"redis", "atomic", "db"};
    for (int m = 0; m < 3; m++) {
        const char *all[] = {"--lock", modes[m], NULL};
        char name[32], targets[600];
        th_stack s;
        snprintf(name, sizeof(name), "mode-%s", modes[m]);
        th_stack_start(&s, dir, &redis, name, all, NULL, 100000);
        snprintf(targets, sizeof(targets), "%s,%s", s.r[0].url, s.targets);
        pid_t lg = th_loadgen_start(&s, name, targets, "2s", "12", "0");
        th_loadgen_expect(&s, lg, name, 0);
        assert_true(th_loadgen_outcome(&s, name, "ok") > 0);
        th_stack_stop(&s);
    }
}

/* Until every replica's /health says 200 again, at most 20 s: 0, or -1. */
static int wait_until_healthy(const th_stack *s)
{
    for (int i = 0; i < TH_REPLICAS; i++) {
        char url[96];
        long status = 0;
        snprintf(url, sizeof(url), "%s/health", s->r[i].url);
        for (int64_t end = th_now_ms() + 20000; status != 200 && th_now_ms() < end;
             th_sleep_ms(status == 200 ? 0 : 50)) {
            th_resp r;
            th_http("GET", url, NULL, &r);
            status = r.status;
            th_resp_free(&r);
        }
        if (status != 200)
            return -1;
    }
    return 0;
}

/* PostgreSQL restarts mid-run: answers are 503 storage_unavailable while it
 * is down (never a half-written order: the verdict checks the ledger), and
 * the same replicas deduct again once it is back, reconnected in the
 * background. The run outlasts the restart: loadgen reads the ledger back
 * at its end. */
static void test_a_server_restart_mid_run(void **state)
{
    (void)state;
    th_stack s;
    th_stack_start(&s, dir, &redis, "pg-restart", NULL, NULL, 100000);
    pid_t lg = th_loadgen_start(&s, "pg-restart", s.targets, "8s", "12", "0");
    th_sleep_ms(1000);
    th_pg_stop(&pg, SIGINT);
    json_t *h = th_call(&s.r[1], "GET", "/health", NULL, 503);
    assert_non_null(strstr(th_jstr(h, "storage"), "cannot connect to PostgreSQL"));
    json_decref(h);
    th_sleep_ms(800);
    assert_int_equal(th_pg_start(&pg), 0);
    assert_int_equal(wait_until_healthy(&s), 0);
    th_loadgen_expect(&s, lg, "pg-restart", 0);
    assert_true(th_loadgen_outcome(&s, "pg-restart", "other_5xx") > 0); /* storage_unavailable */
    pid_t after = th_loadgen_start(&s, "pg-after", s.targets, "1s", "12", "0");
    th_loadgen_expect(&s, after, "pg-after", 0);
    assert_int_equal(th_loadgen_outcome(&s, "pg-after", "other_5xx"), 0);
    assert_true(th_loadgen_outcome(&s, "pg-after", "ok") > 0);
    json_decref(th_call(&s.r[1], "GET", "/health", NULL, 200));
    th_stack_stop(&s);
}

/* The sum over the stack's replicas of one series of /metrics. */
static double stack_metric(const th_stack *s, const char *name)
{
    double sum = 0;
    for (int i = 0; i < TH_REPLICAS; i++) {
        double v = th_metric(s->r[i].url, name);
        sum += v > 0 ? v : 0;
    }
    return sum;
}

/* Waits (up to 40 s, a hang bound) until the series reaches at least min. */
static void wait_metric(const th_stack *s, const char *name, double min)
{
    int64_t end = th_now_ms() + 40000;
    while (stack_metric(s, name) < min) {
        if (th_now_ms() > end)
            fail_msg("%s stayed below %g", name, min);
        th_sleep_ms(50);
    }
}

/* PostgreSQL is down when the load ends: loadgen's read-back is answered 503
 * storage_unavailable with Retry-After, asks again until it is back, and
 * gives its verdict, saying how long it waited (it used to give up at once
 * and lose the run's verdict). PostgreSQL stops at the load's first 200,
 * well inside its 3 s. Without a report file and without the history check
 * (--history-ms 0) loadgen reads the item only in its set-up and its
 * read-back, so a 503 on the item route is the read-back waiting. */
static void test_the_read_back_waits_for_a_database_that_comes_back(void **state)
{
    (void)state;
    th_stack s;
    th_stack_start(&s, dir, &redis, "pg-settle", NULL, NULL, 100000);
    char bin[160], item[32], out[160];
    snprintf(bin, sizeof(bin), "%s/loadgen", th_build_dir());
    snprintf(item, sizeof(item), "%lld", s.item);
    snprintf(out, sizeof(out), "%s/pg-settle.out", dir);
    const char *argv[] = {bin, "--target", s.targets, "--item", item, "-d", "3s", "-n", "0",
                          "-c", "4", "--settle-s", "60", "--history-ms", "0", NULL};
    pid_t lg = th_spawn(argv, out);
    wait_metric(&s, "stockd_http_requests_total{route=\"reduceStock\",status=\"200\"}", 1);
    th_pg_stop(&pg, SIGINT);
    wait_metric(&s, "stockd_http_requests_total{route=\"item\",status=\"503\"}", 1);
    th_sleep_ms(500);
    assert_int_equal(th_pg_start(&pg), 0);
    int status = th_wait(lg, 90000);
    char *text = th_read_file(out);
    if (status != 0)
        fail_msg("loadgen exited %d:\n%s", status, text ? text : "(no output)");
    assert_non_null(strstr(text, "VERDICT: PASS"));
    const char *waited = strstr(text, "read-back waited");
    assert_non_null(waited);
    print_message("%.*s\n", (int)strcspn(waited, "\n"), waited);
    assert_non_null(strstr(text, "storage_unavailable"));
    free(text);
    th_stack_stop(&s);
}

/* Replica 0's sessions are killed again and again while it commits
 * batches: each batch commits whole or not at all, and loadgen, which
 * checks every acknowledged deduction against the ledger, passes. */
static void test_sessions_killed_mid_batch_leave_no_partial_commit(void **state)
{
    (void)state;
    th_stack s;
    char targets[600];
    th_stack_start(&s, dir, &redis, "pg-kill", NULL, NULL, 100000);
    snprintf(targets, sizeof(targets), "%s,%s", s.r[0].url, s.targets);
    pid_t lg = th_loadgen_start(&s, "pg-kill", targets, "3s", "16", "0");
    char kill[300];
    snprintf(kill, sizeof(kill), "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
             "WHERE application_name = 'stockd' AND datname = 'pg_kill' AND pid <> "
             "pg_backend_pid()");
    long long killed = 0;
    for (int i = 0; i < 20; i++) {
        th_sleep_ms(100);
        long long n = th_pg_int(pg.url, kill);
        killed += n > 0 ? n : 0;
    }
    th_loadgen_expect(&s, lg, "pg-kill", 0);
    print_message("sessions killed: %lld; answers ok %lld, 5xx %lld\n", killed,
                  th_loadgen_outcome(&s, "pg-kill", "ok"),
                  th_loadgen_outcome(&s, "pg-kill", "other_5xx"));
    assert_true(killed > 0);
    assert_true(th_loadgen_outcome(&s, "pg-kill", "ok") > 0);
    th_stack_stop(&s);
}

#define ROW_WAIT_MS 1500

/* --lock db: a request that holds the row (workMs) makes another wait up to
 * --wait-ms, then 503 lock_timeout, nothing deducted. The wait is --wait-ms
 * as a whole, not a lock_timeout per lock (twice it behind another waiter):
 * its slack grows on a busy machine, up to three quarters of a wait. */
static void test_the_row_lock_mode_times_out_with_503(void **state)
{
    (void)state;
    char wait[16];
    snprintf(wait, sizeof(wait), "%d", ROW_WAIT_MS);
    const char *all[] = {"--lock", "db", "--wait-ms", wait, NULL};
    th_stack s;
    th_stack_start(&s, dir, &redis, "row-lock", all, NULL, 10);
    th_bg_reduce holder = {.url = s.r[0].url, .item = s.item, .work_ms = ROW_WAIT_MS + 2500};
    th_bg_reduce_start(&holder);
    th_sleep_ms(500);
    char body[96], said[64];
    snprintf(body, sizeof(body), "{\"itemId\":%lld,\"quantity\":1}", s.item);
    int64_t t0 = th_now_ms();
    json_t *j = th_call(&s.r[1], "POST", "/reduceStock", body, 503);
    int64_t took = th_now_ms() - t0;
    print_message("--wait-ms %d behind a held row: 503 after %lld ms\n", ROW_WAIT_MS,
                  (long long)took);
    assert_string_equal(th_jstr(j, "error"), "lock_timeout");
    snprintf(said, sizeof(said), "stayed locked for %d ms", ROW_WAIT_MS);
    assert_non_null(strstr(th_jstr(j, "message"), said));
    json_decref(j);
    int slack = ROW_WAIT_MS / 4 * TH_SLOWER;
    assert_true(took < ROW_WAIT_MS + (slack < ROW_WAIT_MS * 3 / 4 ? slack : ROW_WAIT_MS * 3 / 4));
    th_bg_reduce_join(&holder);
    assert_int_equal(holder.status, 200);
    assert_int_equal(th_stack_stock(&s), 9); /* the holder's unit only */
    th_stack_stop(&s);
}

/* --lock db: a stock set on a row an order holds (its work) waits for the
 * row as memory, tried again on a timer, and sets the stock once the order
 * committed; past --wait-ms it is answered lock_timeout. */
static void test_a_stock_set_waits_for_a_held_row_without_a_thread(void **state)
{
    (void)state;
    const char *all[] = {"--lock", "db", "--allow-work-ms", "--wait-ms", "5000", NULL};
    th_stack s;
    th_stack_start(&s, dir, &redis, "row-put", all, NULL, 10);
    th_bg_reduce holder = {.url = s.r[0].url, .item = s.item, .work_ms = 1000};
    th_bg_reduce_start(&holder);
    th_sleep_ms(300);
    char path[64];
    snprintf(path, sizeof(path), "/items/%lld", s.item);
    json_t *j = th_call(&s.r[0], "PUT", path, "{\"stock\":50}", 200);
    assert_int_equal(th_jint(j, "stock"), 50);
    json_decref(j);
    th_bg_reduce_join(&holder);
    assert_int_equal(holder.status, 200);
    assert_int_equal(th_stack_stock(&s), 50); /* the holder's unit, then the stock set */
    th_stack_stop(&s);
}

/* --lock db with work holds a store connection across its work (its rows'
 * locks live in its transaction). With a pool of 4 (2 service threads, one
 * for /health, one to hold) five such orders take turns to hold one,
 * waiting for their turn as memory: every one is placed, and the replica
 * answers reads meanwhile (no thread waits for a connection). */
static void test_row_lock_orders_take_turns_to_hold_a_connection(void **state)
{
    (void)state;
    const char *all[] = {"--lock", "db", "--db-pool", "4", "--allow-work-ms",
                         "--busy-timeout-ms", "5000", NULL};
    th_stack s;
    th_stack_start(&s, dir, &redis, "turns", all, NULL, 10);
    th_bg_reduce held[5];
    for (int i = 0; i < 5; i++) {
        held[i] = (th_bg_reduce){.url = s.r[0].url, .item = s.item, .work_ms = 200};
        th_bg_reduce_start(&held[i]);
    }
    th_wait_inflight(&s.r[0], 5);
    char path[64];
    snprintf(path, sizeof(path), "/items/%lld", s.item);
    json_decref(th_call(&s.r[0], "GET", path, NULL, 200));
    for (int i = 0; i < 5; i++) {
        th_bg_reduce_join(&held[i]);
        if (held[i].status != 200)
            fail_msg("order %d: %ld %s", i, held[i].status, held[i].body);
    }
    assert_int_equal(th_stack_stock(&s), 5);
    th_stack_stop(&s);
}

/* Without fencing, a holder's last dlock_check before its write is all that
 * stops it once its lock is gone. Here the lock is taken from it while its
 * read of the stock waits for the items table, which another session holds,
 * for longer than a lease (1 s): by then its renewal found the key taken
 * or, on a machine too busy to renew, its local deadline passed. The order
 * must be refused lock_lost and write nothing. Not batched: one order. */
static void test_a_lock_lost_during_the_read_stops_the_write_without_fencing(void **state)
{
    (void)state;
    const char *all[] = {"--no-fencing", "--batch", "off", "--db-timeout-ms", "30000", NULL};
    th_stack s;
    th_stack_start(&s, dir, &redis, "last-check", all, NULL, 10);
    th_bg_reduce bg = {.url = s.r[0].url, .item = s.item};
    th_bg_reduce_start(&bg); /* the replica now knows the item: no read before the lock */
    th_bg_reduce_join(&bg);
    assert_int_equal(bg.status, 200);
    PGconn *other = PQconnectdb(s.db);
    PQclear(PQexec(other, "BEGIN; LOCK TABLE items IN ACCESS EXCLUSIVE MODE"));
    assert_int_equal(PQtransactionStatus(other), PQTRANS_INTRANS);
    assert_int_equal(th_wait_item_unlocked(&redis, s.item, 5000), 0); /* the order before's */
    th_bg_reduce_start(&bg);
    assert_int_equal(th_wait_item_locked(&redis, s.item, 5000), 0);
    char key[DLOCK_KEY_MAX + 1], cmd[96];
    snprintf(cmd, sizeof(cmd), "SET %s nobody PX 30000", th_item_lock_key(s.item, key));
    assert_int_equal(th_redis_int(&redis, cmd), 0);
    th_sleep_ms(1500);
    PQclear(PQexec(other, "ROLLBACK"));
    PQfinish(other);
    th_bg_reduce_join(&bg);
    if (bg.status != 503 || strstr(bg.body, "\"lock_lost\"") == NULL)
        fail_msg("a holder that lost its lock before its write: %ld %s", bg.status, bg.body);
    assert_int_equal(th_stack_stock(&s), 9);
    assert_int_equal(th_release_item_lock(&redis, s.item), 0);
    th_stack_stop(&s);
}

/* What a user can get wrong at start-up: each stops stockd with a message
 * that says what to do, and no password in it. */
static void test_start_up_errors_are_clear(void **state)
{
    (void)state;
    char db[160], url[256], log[128], secret[128];
    snprintf(db, sizeof(db), "%s/rowlock.db", dir);
    snprintf(log, sizeof(log), "%s/start-up.log", dir);
    const char *sqlite_db[] = {stockd_path(), "--db", db, "--lock", "db", NULL};
    assert_int_equal(th_run(sqlite_db, log, 10000), 1);
    char *out = th_read_file(log);
    assert_non_null(strstr(out, "--lock db needs a database with row locks: PostgreSQL"));
    free(out);

    snprintf(url, sizeof(url), "postgresql://stock_secret:%s@127.0.0.1:%d/nosuchdb",
             TH_PG_SECRET, pg.port);
    snprintf(log, sizeof(log), "%s/start-up-2.log", dir);
    const char *no_db[] = {stockd_path(), "--db", url, "--lock", "atomic", NULL};
    assert_int_equal(th_run(no_db, log, 10000), 1);
    out = th_read_file(log);
    assert_non_null(strstr(out, "nosuchdb"));
    assert_null(strstr(out, TH_PG_SECRET)); /* the URL is logged without its password */
    free(out);

    snprintf(secret, sizeof(secret), "%s/db-password", dir);
    FILE *f = fopen(secret, "w");
    fputs("wrong\n", f);
    fclose(f);
    snprintf(url, sizeof(url), "postgresql://stock_secret@127.0.0.1:%d/stock", pg.port);
    snprintf(log, sizeof(log), "%s/start-up-3.log", dir);
    const char *bad_pw[] = {stockd_path(), "--db", url, "--db-password-file", secret,
                            "--lock", "atomic", NULL};
    assert_int_equal(th_run(bad_pw, log, 10000), 1);
    out = th_read_file(log);
    assert_non_null(strstr(out, "password authentication failed"));
    assert_null(strstr(out, "wrong"));
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_lock_mode_passes_on_three_replicas),
        cmocka_unit_test(test_a_server_restart_mid_run),
        cmocka_unit_test(test_the_read_back_waits_for_a_database_that_comes_back),
        cmocka_unit_test(test_sessions_killed_mid_batch_leave_no_partial_commit),
        cmocka_unit_test(test_the_row_lock_mode_times_out_with_503),
        cmocka_unit_test(test_row_lock_orders_take_turns_to_hold_a_connection),
        cmocka_unit_test(test_a_stock_set_waits_for_a_held_row_without_a_thread),
        cmocka_unit_test(test_a_lock_lost_during_the_read_stops_the_write_without_fencing),
        cmocka_unit_test(test_start_up_errors_are_clear),
    };
    return cmocka_run_group_tests_name("postgres", tests, group_setup, group_teardown);
}
