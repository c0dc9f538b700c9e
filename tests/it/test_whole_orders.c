/* test_whole_orders.c - an order is written whole or not at all, whatever
 * fails under it, on SQLite and on PostgreSQL: one statement of it inside
 * group commit's shared transaction (a trigger the test plants aborts every
 * line of quantity 777), single lines and carts, beside orders of its own
 * batch and batches of other items; the same order off the batch path (workMs,
 * --lock atomic, --lock db); and the shared COMMIT itself (a deferred check
 * fails on quantity 778). A failed order answers 500 storage_error and
 * leaves nothing: no order under its requestId, no order without lines,
 * every item's stock + sold as it started; its retry succeeds once the
 * fault is gone; the orders around it commit, and no order is acknowledged
 * that the ledger lacks; a retry that replayed its first attempt inside the
 * transaction that failed answers the failure too. And a savepoint an order
 * has its price on PostgreSQL: no transaction there holds more than 64
 * orders. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <libpq-fe.h>
#include <sqlite3.h>

#include "tests/support/calls.h"
#include "tests/support/harness.h"
#include "tests/support/pg.h"

#define BODY_MAX 512
#define ORDERS_MAX 6 /* the orders of one scenario */

static th_redis redis;
static th_pg pg;
static char dir[64];

/* Aborts the statement that writes a line of quantity 777, as SQLITE_FULL,
 * an I/O error or a constraint would fail one statement. */
static const char *const line_fault[2] = {
    "CREATE TRIGGER injected_fault BEFORE INSERT ON order_lines WHEN NEW.quantity = 777 "
    "BEGIN SELECT RAISE(ABORT, 'injected fault'); END",
    "CREATE FUNCTION injected_fault() RETURNS trigger LANGUAGE plpgsql AS "
    "$$ BEGIN RAISE EXCEPTION 'injected fault'; END $$; "
    "CREATE TRIGGER injected_fault BEFORE INSERT ON order_lines FOR EACH ROW "
    "WHEN (NEW.quantity = 777) EXECUTE FUNCTION injected_fault()"};
static const char *const line_fault_gone[2] = {
    "DROP TRIGGER injected_fault", "DROP TRIGGER injected_fault ON order_lines"};

/* Fails the COMMIT of a transaction that wrote a line of quantity 778, and
 * nothing before it: a deferred foreign key (SQLite), a deferred
 * constraint trigger (PostgreSQL). */
static const char *const commit_fault[2] = {
    "CREATE TABLE commit_fault (item INTEGER REFERENCES items (id) DEFERRABLE INITIALLY "
    "DEFERRED); CREATE TRIGGER commit_fault AFTER INSERT ON order_lines WHEN NEW.quantity = "
    "778 BEGIN INSERT INTO commit_fault VALUES (-1); END",
    "CREATE FUNCTION commit_fault() RETURNS trigger LANGUAGE plpgsql AS "
    "$$ BEGIN RAISE EXCEPTION 'injected commit fault'; END $$; "
    "CREATE CONSTRAINT TRIGGER commit_fault AFTER INSERT ON order_lines DEFERRABLE INITIALLY "
    "DEFERRED FOR EACH ROW WHEN (NEW.quantity = 778) EXECUTE FUNCTION commit_fault()"};

/* A test's database (SQLite or PostgreSQL, fresh) and its replicas: one in
 * redis mode (group commit, workMs allowed), one in atomic mode and, on
 * PostgreSQL, one in row-lock mode. */
struct setup {
    int pg;
    char db[256]; /* stockd's --db: the file or the URL */
    th_stockd redis, atomic, rows;
};

static int group_setup(void **state)
{
    (void)state;
    curl_global_init(CURL_GLOBAL_ALL);
    return th_tempdir("whole-orders-it", dir, sizeof(dir)) == 0 && th_redis_start(&redis) == 0 &&
                   th_pg_start(&pg) == 0
               ? 0
               : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    th_redis_stop(&redis, 0);
    th_pg_stop(&pg, SIGINT);
    return 0;
}

static void start(struct setup *t, int on_pg, const char *name)
{
    t->pg = on_pg;
    if (on_pg)
        assert_int_equal(th_pg_create_db(&pg, name, t->db, sizeof(t->db)), 0);
    else
        snprintf(t->db, sizeof(t->db), "%s/%s.db", dir, name);
    /* generous: the test holds the database and a lock for a second or two */
    const char *flags[] = {"--lease-ms", "3000", "--redis-timeout-ms", "100", "--wait-ms",
                           "10000", "--retry-ms", "20", "--busy-timeout-ms", "20000",
                           "--db-timeout-ms", "30000", "--allow-work-ms", NULL};
    const char *atomic[] = {"--lock", "atomic", "--busy-timeout-ms", "20000", NULL};
    const char *rows[] = {"--lock", "db", NULL};
    assert_int_equal(th_stockd_start(&t->redis, &redis, t->db, dir, flags), 0);
    assert_int_equal(th_stockd_start(&t->atomic, NULL, t->db, dir, atomic), 0);
    if (on_pg)
        assert_int_equal(th_stockd_start(&t->rows, NULL, t->db, dir, rows), 0);
}

static void stop(struct setup *t)
{
    assert_int_equal(th_stockd_stop_clean(&t->redis), 0);
    assert_int_equal(th_stockd_stop_clean(&t->atomic), 0);
    if (t->pg)
        assert_int_equal(th_stockd_stop_clean(&t->rows), 0);
}

/* ---- the database, from beside the replicas ---- */

static void db_exec(const struct setup *t, const char *sql)
{
    if (t->pg) {
        assert_int_equal(th_pg_exec(t->db, sql), 0);
        return;
    }
    sqlite3 *h;
    char *err = NULL;
    assert_int_equal(sqlite3_open(t->db, &h), SQLITE_OK);
    sqlite3_busy_timeout(h, 10000);
    if (sqlite3_exec(h, sql, NULL, NULL, &err) != SQLITE_OK)
        fail_msg("%s: %s", sql, err);
    sqlite3_close(h);
}

/* The first column of sql's first row. */
static long long db_int(const struct setup *t, const char *sql)
{
    if (t->pg) {
        long long v = th_pg_int(t->db, sql);
        assert_true(v >= 0);
        return v;
    }
    sqlite3 *h;
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_open_v2(t->db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_busy_timeout(h, 10000);
    assert_int_equal(sqlite3_prepare_v2(h, sql, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    long long v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(h);
    return v;
}

/* The database's writes held by another session until release: SQLite's
 * write lock; on PostgreSQL the items table, so that a transaction waits at
 * its first claim of a row, as it waits at BEGIN on SQLite. */
struct hold {
    sqlite3 *sq;
    PGconn *pg;
};

static struct hold hold_writes(const struct setup *t)
{
    struct hold h = {0};
    if (t->pg) {
        h.pg = PQconnectdb(t->db);
        PGresult *r = PQexec(h.pg, "BEGIN; LOCK TABLE items IN EXCLUSIVE MODE");
        if (PQresultStatus(r) != PGRES_COMMAND_OK)
            fail_msg("hold %s: %s", t->db, PQerrorMessage(h.pg));
        PQclear(r);
        return h;
    }
    assert_int_equal(sqlite3_open(t->db, &h.sq), SQLITE_OK);
    sqlite3_busy_timeout(h.sq, 10000);
    assert_int_equal(sqlite3_exec(h.sq, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
    return h;
}

static void release_writes(struct hold *h)
{
    if (h->pg) {
        PQclear(PQexec(h->pg, "ROLLBACK"));
        PQfinish(h->pg);
        return;
    }
    assert_int_equal(sqlite3_exec(h->sq, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(h->sq);
}

/* ---- orders, queued as the test wants them ---- */

static void hold_lock(long long item) { assert_int_equal(th_hold_item_lock(&redis, item), 0); }

static void release_lock(long long item)
{
    assert_int_equal(th_release_item_lock(&redis, item), 0);
}

/* The orders bodies[1..n] (of one item, `item`) as one batch, in one
 * transaction with the order bodies[n + 1] (of another item, `other`):
 * item's orders queue while the test holds its lock; the plug order
 * bodies[0] (of a third item, `plug`) then waits inside a transaction
 * while the test holds the database's writes; item's batch and other's
 * queue for the next transaction meanwhile. bg[i] answers bodies[i]. */
static void shared_transaction(const struct setup *t, const long long ids[3],
                               char bodies[][BODY_MAX], int n, th_bg_reduce *bg)
{
    long long plug = ids[0], item = ids[1], other = ids[2];
    hold_lock(item);
    for (int i = 1; i <= n; i++)
        th_bg_order_queued(&t->redis, &bg[i], bodies[i], i - 1);
    struct hold h = hold_writes(t);
    th_bg_order_queued(&t->redis, &bg[0], bodies[0], n);
    assert_int_equal(th_wait_item_locked(&redis, plug, 5000 * TH_SLOWER), 0);
    th_sleep_ms(300 * TH_SLOWER); /* from its lock into its transaction: microseconds */
    release_lock(item);
    assert_int_equal(th_wait_item_locked(&redis, item, 5000 * TH_SLOWER), 0);
    th_bg_order_queued(&t->redis, &bg[n + 1], bodies[n + 1], n + 1);
    assert_int_equal(th_wait_item_locked(&redis, other, 5000 * TH_SLOWER), 0);
    th_sleep_ms(300 * TH_SLOWER); /* both batches queued for the transaction */
    release_writes(&h);
    for (int i = 0; i < n + 2; i++)
        th_bg_reduce_join(&bg[i]);
    /* the plug's transaction, then one for both batches; item's orders in one */
    assert_int_equal(th_metric(t->redis.url, "stockd_commit_batches_count"), 2);
    assert_int_equal(th_metric(t->redis.url, "stockd_commit_batches_sum"), 3);
    assert_int_equal(th_metric(t->redis.url, "stockd_batch_orders_count"), 3);
}

/* The carts bodies[1..n-1] as one batch: the first, bodies[0], leads a
 * batch of its own and waits for its items' locks (the test holds
 * `held`'s), while the others queue for the next batch. */
static void cart_batch(const struct setup *t, long long held, char bodies[][BODY_MAX], int n,
                       th_bg_reduce *bg)
{
    hold_lock(held);
    th_bg_order_queued(&t->redis, &bg[0], bodies[0], 0);
    th_sleep_ms(300 * TH_SLOWER); /* it has taken its batch of one */
    for (int i = 1; i < n; i++)
        th_bg_order_queued(&t->redis, &bg[i], bodies[i], i);
    th_sleep_ms(300 * TH_SLOWER);
    release_lock(held);
    for (int i = 0; i < n; i++)
        th_bg_reduce_join(&bg[i]);
    assert_int_equal(th_metric(t->redis.url, "stockd_batch_orders_count"), 2);
    assert_int_equal(th_metric(t->redis.url, "stockd_batch_orders_sum"), n);
}

/* ---- what the answers and the ledger must say ---- */

/* bg was answered status, and with error code err when that is given. */
static void expect_answer(const th_bg_reduce *bg, long status, const char *err)
{
    char code[64];
    snprintf(code, sizeof(code), "\"%s\"", err ? err : "");
    if (bg->status != status || (err && strstr(bg->body, code) == NULL))
        fail_msg("%s: %ld %s (want %ld %s)", bg->order, bg->status, bg->body, status,
                 err ? err : "");
}

/* Every order answered 2xx is in the ledger, with as many lines as it has. */
static void expect_acknowledged_in_ledger(const struct setup *t, const th_bg_reduce *bg, int n)
{
    for (int i = 0; i < n; i++) {
        if (bg[i].status != 200 && bg[i].status != 201)
            continue;
        json_t *j = json_loads(bg[i].body, 0, NULL);
        char path[48];
        snprintf(path, sizeof(path), "/orders/%lld", th_jint(j, "orderId"));
        json_t *o = th_call(&t->redis, "GET", path, NULL, 200);
        assert_int_equal(json_array_size(json_object_get(o, "lines")),
                         json_array_size(json_object_get(j, "lines")));
        json_decref(o);
        json_decref(j);
    }
}

/* Nothing of the failed orders (their requestIds, rids[0..nrids-1]) and
 * nothing half written: no order without lines, `orders` orders in all,
 * and each item's stock + sold what it was at the start. */
static void expect_whole(const struct setup *t, const char *const *rids, int nrids,
                         long long orders, const long long *items, const long long *initial,
                         int nitems)
{
    char sql[160];
    for (int i = 0; i < nrids; i++) {
        snprintf(sql, sizeof(sql), "SELECT count(*) FROM orders WHERE request_id = '%s'",
                 rids[i]);
        if (db_int(t, sql) != 0)
            fail_msg("an order of the failed request %s is in the ledger", rids[i]);
    }
    assert_int_equal(db_int(t, "SELECT count(*) FROM orders o WHERE NOT EXISTS (SELECT 1 "
                               "FROM order_lines l WHERE l.order_id = o.id)"), 0);
    assert_int_equal(db_int(t, "SELECT count(*) FROM orders"), orders);
    for (int i = 0; i < nitems; i++) {
        char path[48];
        snprintf(path, sizeof(path), "/items/%lld", items[i]);
        json_t *j = th_call(&t->redis, "GET", path, NULL, 200);
        if (th_jint(j, "stock") + th_jint(j, "sold") != initial[i])
            fail_msg("item %lld: stock %lld + sold %lld != %lld", items[i], th_jint(j, "stock"),
                     th_jint(j, "sold"), initial[i]);
        json_decref(j);
    }
}

/* The order (items x qty, n lines) off the batch path, requestId
 * <prefix>-<path>: under the Redis lock with workMs, in atomic mode and,
 * on PostgreSQL, under row locks; each answered expect. */
static void off_batch(const struct setup *t, const long long *items, const int *qty, int n,
                      const char *prefix, long expect)
{
    const th_stockd *via[3] = {&t->redis, &t->atomic, &t->rows};
    static const char *const path[3] = {"work", "atomic", "rows"};
    for (int k = 0; k < (t->pg ? 3 : 2); k++) {
        char rid[64], body[BODY_MAX];
        snprintf(rid, sizeof(rid), "%s-%s", prefix, path[k]);
        th_order_body(body, sizeof(body), items, qty, n, rid, k == 0);
        json_t *j = th_call(via[k], "POST", "/orders", body, expect);
        if (expect == 500)
            assert_string_equal(th_jstr(j, "error"), "storage_error");
        json_decref(j);
    }
}

/* ---- the tests ---- */

/* A single line that fails in a batch of three, whose transaction also
 * holds another item's batch. */
static void a_failed_line_leaves_nothing(int on_pg)
{
    struct setup t;
    start(&t, on_pg, on_pg ? "single_pg" : "single");
    long long ids[3], initial[3] = {100, 5000, 100};
    for (int i = 0; i < 3; i++)
        ids[i] = th_new_item(&t.redis, "whole", initial[i]);
    db_exec(&t, line_fault[on_pg]);
    char bodies[ORDERS_MAX][BODY_MAX];
    th_bg_reduce bg[ORDERS_MAX];
    th_order_body(bodies[0], BODY_MAX, &ids[0], (int[]){1}, 1, NULL, 0);
    th_order_body(bodies[1], BODY_MAX, &ids[1], (int[]){5}, 1, "before", 0);
    th_order_body(bodies[2], BODY_MAX, &ids[1], (int[]){777}, 1, "half", 0);
    th_order_body(bodies[3], BODY_MAX, &ids[1], (int[]){5}, 1, "after", 0);
    th_order_body(bodies[4], BODY_MAX, &ids[2], (int[]){5}, 1, "other", 0);
    shared_transaction(&t, ids, bodies, 3, bg);
    for (int i = 0; i < 5; i++)
        expect_answer(&bg[i], i == 2 ? 500 : 201, i == 2 ? "storage_error" : NULL);
    expect_acknowledged_in_ledger(&t, bg, 5);
    off_batch(&t, &ids[1], (int[]){777}, 1, "half", 500);
    const char *failed[] = {"half", "half-work", "half-atomic", "half-rows"};
    expect_whole(&t, failed, on_pg ? 4 : 3, 4, ids, initial, 3);
    db_exec(&t, line_fault_gone[on_pg]);
    json_decref(th_call(&t.redis, "POST", "/orders", bodies[2], 201)); /* not 409 */
    off_batch(&t, &ids[1], (int[]){777}, 1, "half", 201);
    expect_whole(&t, NULL, 0, on_pg ? 8 : 7, ids, initial, 3);
    stop(&t);
}

/* A cart whose second line fails, between two carts of the same batch. */
static void a_failed_cart_leaves_nothing(int on_pg)
{
    struct setup t;
    start(&t, on_pg, on_pg ? "cart_pg" : "cart");
    long long ids[2], back[2], initial[2] = {5000, 5000};
    for (int i = 0; i < 2; i++)
        ids[i] = th_new_item(&t.redis, "whole", initial[i]);
    back[0] = ids[1], back[1] = ids[0];
    db_exec(&t, line_fault[on_pg]);
    char bodies[ORDERS_MAX][BODY_MAX];
    th_bg_reduce bg[ORDERS_MAX];
    th_order_body(bodies[0], BODY_MAX, ids, (int[]){1, 1}, 2, NULL, 0);
    th_order_body(bodies[1], BODY_MAX, ids, (int[]){5, 5}, 2, "cart-before", 0);
    th_order_body(bodies[2], BODY_MAX, ids, (int[]){5, 777}, 2, "cart-half", 0);
    th_order_body(bodies[3], BODY_MAX, back, (int[]){5, 5}, 2, "cart-after", 0);
    cart_batch(&t, ids[0], bodies, 4, bg);
    for (int i = 0; i < 4; i++)
        expect_answer(&bg[i], i == 2 ? 500 : 201, i == 2 ? "storage_error" : NULL);
    expect_acknowledged_in_ledger(&t, bg, 4);
    off_batch(&t, ids, (int[]){5, 777}, 2, "cart-half", 500);
    const char *failed[] = {"cart-half", "cart-half-work", "cart-half-atomic",
                            "cart-half-rows"};
    expect_whole(&t, failed, on_pg ? 4 : 3, 3, ids, initial, 2);
    db_exec(&t, line_fault_gone[on_pg]);
    json_decref(th_call(&t.redis, "POST", "/orders", bodies[2], 201)); /* not 409 */
    off_batch(&t, ids, (int[]){5, 777}, 2, "cart-half", 201);
    expect_whole(&t, NULL, 0, on_pg ? 7 : 6, ids, initial, 2);
    stop(&t);
}

/* One of item 1's orders in a batch (rids and quantities of bodies 1-3;
 * 778 units fail the COMMIT) in a shared transaction with item 0's and item
 * 2's: item 0's order leads alone and is placed, every order of the failed
 * transaction is answered 500, none is in the ledger (their requestIds,
 * failed[0..nfailed-1]). */
static void a_commit_fails(int on_pg, const char *name, const char *const rids[3],
                           const int qty[3], const char *const *failed, int nfailed)
{
    struct setup t;
    start(&t, on_pg, name);
    long long ids[3], initial[3] = {100, 1000, 100};
    for (int i = 0; i < 3; i++)
        ids[i] = th_new_item(&t.redis, "whole", initial[i]);
    db_exec(&t, commit_fault[on_pg]);
    char bodies[ORDERS_MAX][BODY_MAX];
    th_bg_reduce bg[ORDERS_MAX];
    th_order_body(bodies[0], BODY_MAX, &ids[0], (int[]){1}, 1, NULL, 0);
    for (int i = 0; i < 3; i++)
        th_order_body(bodies[i + 1], BODY_MAX, &ids[1], &qty[i], 1, rids[i], 0);
    th_order_body(bodies[4], BODY_MAX, &ids[2], (int[]){5}, 1, "commit-other", 0);
    shared_transaction(&t, ids, bodies, 3, bg);
    expect_answer(&bg[0], 201, NULL);
    for (int i = 1; i < 5; i++)
        expect_answer(&bg[i], 500, "storage_error");
    expect_acknowledged_in_ledger(&t, bg, 5);
    expect_whole(&t, failed, nfailed, 1, ids, initial, 3);
    stop(&t);
}

/* The shared transaction's COMMIT fails: every order in it is answered
 * 500, none is acknowledged, none is in the ledger. */
static void a_failed_commit_acknowledges_nothing(int on_pg)
{
    const char *rids[] = {"commit-before", "commit-fails", "commit-after"};
    const char *failed[] = {"commit-before", "commit-fails", "commit-after", "commit-other"};
    a_commit_fails(on_pg, on_pg ? "commit_pg" : "commit", rids, (int[]){5, 778, 5}, failed, 4);
}

/* A retry queued in its first attempt's batch replays the order that attempt
 * placed in the same transaction; when that transaction's COMMIT fails, the
 * order is gone, and the retry must answer the failure too, never a replay
 * of an order the ledger lacks. */
static void a_retry_in_a_rolled_back_transaction_is_no_replay(int on_pg)
{
    const char *rids[] = {"retried", "retried", "commit-fails"};
    const char *failed[] = {"retried", "commit-fails", "commit-other"};
    a_commit_fails(on_pg, on_pg ? "retry_pg" : "retry", rids, (int[]){5, 5, 778}, failed, 3);
}

#define CAP_ITEMS 4
#define CAP_ORDERS 20 /* a batch of each item */

/* Every session of stockd on db open: at least n. */
/* Waits until n requests are in flight on s: queued in their items' queues
 * (as memory: a waiting order holds no session). */
static void wait_in_flight(const th_stockd *s, int n)
{
    for (int64_t end = th_now_ms() + 60000;
         th_metric(s->url, "stockd_inflight_requests") < n; th_sleep_ms(20))
        if (th_now_ms() > end)
            fail_msg("fewer than %d requests in flight after 60 s", n);
}

/* PostgreSQL keeps the ids of 64 subtransactions a transaction in shared
 * memory, and group commit takes a savepoint an order: past 64, every
 * other session's snapshot looks in pg_subtrans while it runs. Four items'
 * batches of 20 orders queue for one transaction (the orders queue while
 * the test holds the items' locks, the batches while a plug order's
 * transaction waits for the database's writes): three batches go in one
 * transaction, the fourth in the next, and every order is answered. */
static void test_postgres_a_transaction_holds_at_most_64_orders(void **state)
{
    (void)state;
    struct setup t = {.pg = 1};
    assert_int_equal(th_pg_create_db(&pg, "cap_pg", t.db, sizeof(t.db)), 0);
    const char *flags[] = {"--wait-ms", "60000", "--busy-timeout-ms",
                           "60000", "--db-timeout-ms", "60000", NULL};
    assert_int_equal(th_stockd_start(&t.redis, &redis, t.db, dir, flags), 0);
    long long plug = th_new_item(&t.redis, "plug", 10), items[CAP_ITEMS];
    static char bodies[CAP_ITEMS * CAP_ORDERS + 1][BODY_MAX];
    static th_bg_reduce bg[CAP_ITEMS * CAP_ORDERS + 1];
    int n = 0;
    for (int k = 0; k < CAP_ITEMS; k++) {
        hold_lock(items[k] = th_new_item(&t.redis, "capped", 1000));
        for (int j = 0; j < CAP_ORDERS; j++, n++) {
            th_order_body(bodies[n], BODY_MAX, &items[k], (int[]){1}, 1, NULL, 0);
            th_bg_order_queued(&t.redis, &bg[n], bodies[n], n);
        }
    }
    wait_in_flight(&t.redis, n);
    th_sleep_ms(300 * TH_SLOWER); /* from a session into its item's queue: microseconds */
    struct hold h = hold_writes(&t);
    th_order_body(bodies[n], BODY_MAX, &plug, (int[]){1}, 1, NULL, 0);
    th_bg_order_queued(&t.redis, &bg[n], bodies[n], n);
    assert_int_equal(th_wait_item_locked(&redis, plug, 5000 * TH_SLOWER), 0);
    for (int k = 0; k < CAP_ITEMS; k++) {
        release_lock(items[k]);
        assert_int_equal(th_wait_item_locked(&redis, items[k], 5000 * TH_SLOWER), 0);
    }
    th_sleep_ms(300 * TH_SLOWER); /* every batch queued for the transaction */
    release_writes(&h);
    for (int i = 0; i <= n; i++) {
        th_bg_reduce_join(&bg[i]);
        expect_answer(&bg[i], 201, NULL);
    }
    double txs = th_metric(t.redis.url, "stockd_commit_orders_count");
    print_message("%g transactions for %d orders\n", txs, n + 1);
    assert_int_equal(th_metric(t.redis.url, "stockd_commit_orders_sum"), n + 1);
    assert_true(txs >= 3);
    assert_int_equal(th_metric(t.redis.url, "stockd_commit_orders_bucket{le=\"64\"}"), txs);
    assert_int_equal(th_stockd_stop_clean(&t.redis), 0);
}

static void test_sqlite_a_failed_line_in_a_batch_leaves_nothing(void **state)
{
    (void)state;
    a_failed_line_leaves_nothing(0);
}

static void test_postgres_a_failed_line_in_a_batch_leaves_nothing(void **state)
{
    (void)state;
    a_failed_line_leaves_nothing(1);
}

static void test_sqlite_a_failed_cart_in_a_batch_leaves_nothing(void **state)
{
    (void)state;
    a_failed_cart_leaves_nothing(0);
}

static void test_postgres_a_failed_cart_in_a_batch_leaves_nothing(void **state)
{
    (void)state;
    a_failed_cart_leaves_nothing(1);
}

static void test_sqlite_a_failed_group_commit_acknowledges_nothing(void **state)
{
    (void)state;
    a_failed_commit_acknowledges_nothing(0);
}

static void test_postgres_a_failed_group_commit_acknowledges_nothing(void **state)
{
    (void)state;
    a_failed_commit_acknowledges_nothing(1);
}

static void test_sqlite_a_retry_in_a_rolled_back_transaction_is_no_replay(void **state)
{
    (void)state;
    a_retry_in_a_rolled_back_transaction_is_no_replay(0);
}

static void test_postgres_a_retry_in_a_rolled_back_transaction_is_no_replay(void **state)
{
    (void)state;
    a_retry_in_a_rolled_back_transaction_is_no_replay(1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sqlite_a_failed_line_in_a_batch_leaves_nothing),
        cmocka_unit_test(test_postgres_a_failed_line_in_a_batch_leaves_nothing),
        cmocka_unit_test(test_sqlite_a_failed_cart_in_a_batch_leaves_nothing),
        cmocka_unit_test(test_postgres_a_failed_cart_in_a_batch_leaves_nothing),
        cmocka_unit_test(test_sqlite_a_failed_group_commit_acknowledges_nothing),
        cmocka_unit_test(test_postgres_a_failed_group_commit_acknowledges_nothing),
        cmocka_unit_test(test_sqlite_a_retry_in_a_rolled_back_transaction_is_no_replay),
        cmocka_unit_test(test_postgres_a_retry_in_a_rolled_back_transaction_is_no_replay),
        cmocka_unit_test(test_postgres_a_transaction_holds_at_most_64_orders),
    };
    return cmocka_run_group_tests_name("whole orders", tests, group_setup, group_teardown);
}
