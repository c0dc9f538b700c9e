/* test_group_commit.c - group commit across items, end to end: a real
 * redis-server, a real stockd and its SQLite file. Another connection holds
 * the database's write lock, so that the first deduction waits in its
 * transaction while the batches of other items queue behind it; they must
 * then share one transaction. A batch whose lock is lost while it waits is
 * answered lock_lost and left out, and the others still commit. Each order
 * of a shared transaction has its own log line with its own key and token.
 * A retry queued in its first attempt's batch is answered that order. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <sqlite3.h>

#include "lock/dlock.h"
#include "tests/support/calls.h"
#include "tests/support/harness.h"
#include "tests/support/logline.h"

enum { ITEMS = 6, STOCK = 100 };

static th_redis redis;
static char dir[64];

static int group_setup(void **state)
{
    (void)state;
    curl_global_init(CURL_GLOBAL_ALL);
    return th_tempdir("group-commit-it", dir, sizeof(dir)) == 0 && th_redis_start(&redis) == 0
               ? 0
               : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    th_redis_stop(&redis, 0);
    curl_global_cleanup();
    return 0;
}

/* A replica of its own database, whose requests wait up to 20 s for the
 * write lock the test holds. */
static void start_replica(th_stockd *s, const char *name)
{
    char db[128];
    snprintf(db, sizeof(db), "%s/%s.db", dir, name);
    const char *flags[] = {"--lease-ms", "600", "--redis-timeout-ms", "100", "--wait-ms", "5000",
                           "--busy-timeout-ms", "20000", "--instance-id", name, NULL};
    assert_int_equal(th_stockd_start(s, &redis, db, dir, flags), 0);
}

/* Deductions of one unit from items[0..n-1] on s, each on its own
 * connection; items[0] first, alone, so that it is the one that waits in its
 * transaction (the database is held) while the others queue behind it.
 * Returns once every item's lock is held. */
static void start_deductions(const th_stockd *s, const long long *items, th_bg_reduce *bg, int n)
{
    for (int i = 0; i < n; i++) {
        bg[i] = (th_bg_reduce){.url = s->url, .item = items[i]};
        th_bg_reduce_start(&bg[i]);
        assert_int_equal(th_wait_item_locked(&redis, items[i], 5000), 0);
    }
    th_sleep_ms(300); /* from its lock to the commit queue: microseconds */
}

/* The write lock of database db, taken by another connection. */
static sqlite3 *lock_database(const char *db)
{
    sqlite3 *other;
    assert_int_equal(sqlite3_open(db, &other), SQLITE_OK);
    sqlite3_busy_timeout(other, 5000);
    assert_int_equal(sqlite3_exec(other, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
    return other;
}

static void unlock_database(sqlite3 *other)
{
    assert_int_equal(sqlite3_exec(other, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(other);
}

static long long stock_of(const th_stockd *s, long long id)
{
    char path[64];
    snprintf(path, sizeof(path), "/items/%lld", id);
    json_t *j = th_call(s, "GET", path, NULL, 200);
    long long stock = th_jint(j, "stock");
    json_decref(j);
    return stock;
}

/* The replica's one log line for the order on item (sent without a
 * requestId): outcome, the item's key and the token its lock held. */
static void expect_order_line(const th_stockd *s, long long item, const char *outcome)
{
    char *log = th_read_file(s->log), id[24], key[DLOCK_KEY_MAX + 1];
    th_logfmt l;
    snprintf(id, sizeof(id), "%lld", item);
    assert_int_equal(th_log_find(log, "items", id, &l), 1);
    assert_string_equal(th_logfmt_get(&l, "outcome", NULL), outcome);
    int found;
    assert_null(th_logfmt_get(&l, "requestId", &found)); /* requestId=-: none was sent */
    assert_true(found);
    assert_string_equal(th_logfmt_get(&l, "keys", NULL), th_item_lock_key(item, key));
    assert_true(atoll(th_logfmt_get(&l, "fences", NULL)) > 0);
    free(log);
}

static void test_batches_of_different_items_share_one_transaction(void **state)
{
    (void)state;
    th_stockd s;
    start_replica(&s, "shared");
    long long items[ITEMS];
    for (int i = 0; i < ITEMS; i++)
        items[i] = th_new_item(&s, "spread item", STOCK);
    char db[128];
    snprintf(db, sizeof(db), "%s/shared.db", dir);
    sqlite3 *other = lock_database(db);
    th_bg_reduce bg[ITEMS];
    start_deductions(&s, items, bg, ITEMS);
    unlock_database(other);
    for (int i = 0; i < ITEMS; i++) {
        th_bg_reduce_join(&bg[i]);
        if (bg[i].status != 200)
            fail_msg("item %lld: %ld %s", items[i], bg[i].status, bg[i].body);
        assert_int_equal(stock_of(&s, items[i]), STOCK - 1);
    }
    /* the first alone, then every other item's batch in one transaction */
    assert_true(th_metric(s.url, "stockd_commit_batches_count") == 2);
    assert_true(th_metric(s.url, "stockd_commit_batches_sum") == ITEMS);
    assert_int_equal(th_stockd_stop_clean(&s), 0);
    for (int i = 0; i < ITEMS; i++)
        expect_order_line(&s, items[i], "ok");
}

static void test_a_batch_whose_lock_is_lost_is_left_out_and_the_others_commit(void **state)
{
    (void)state;
    th_stockd s;
    start_replica(&s, "lost");
    long long items[3];
    for (int i = 0; i < 3; i++)
        items[i] = th_new_item(&s, "spread item", STOCK);
    char db[128], cmd[64], key[DLOCK_KEY_MAX + 1];
    snprintf(db, sizeof(db), "%s/lost.db", dir);
    sqlite3 *other = lock_database(db);
    th_bg_reduce bg[3];
    start_deductions(&s, items, bg, 3);
    /* items[1]'s lease is taken from under its holder, which is queued for
     * the commit; its next renewal (every lease / 3) finds it gone */
    snprintf(cmd, sizeof(cmd), "DEL %s", th_item_lock_key(items[1], key));
    assert_int_equal(th_redis_int(&redis, cmd), 1);
    th_sleep_ms(600);
    unlock_database(other);
    for (int i = 0; i < 3; i++)
        th_bg_reduce_join(&bg[i]);
    assert_int_equal(bg[0].status, 200);
    assert_int_equal(bg[2].status, 200);
    if (bg[1].status != 503 || strstr(bg[1].body, "\"lock_lost\"") == NULL)
        fail_msg("the batch whose lock was lost was answered %ld %s", bg[1].status, bg[1].body);
    assert_int_equal(stock_of(&s, items[0]), STOCK - 1);
    assert_int_equal(stock_of(&s, items[1]), STOCK); /* nothing of it written */
    assert_int_equal(stock_of(&s, items[2]), STOCK - 1);
    /* and it was in the same transaction as items[2]'s */
    assert_true(th_metric(s.url, "stockd_commit_batches_sum") == 3);
    assert_true(th_metric(s.url, "stockd_commit_batches_count") == 2);
    assert_int_equal(th_stockd_stop_clean(&s), 0);
    expect_order_line(&s, items[0], "ok");
    expect_order_line(&s, items[1], "lock_lost"); /* with the token its lock had held */
    expect_order_line(&s, items[2], "ok");
}

/* A retry sent while its first attempt still waits lands in the same
 * batch: looked up by its requestId inside the transaction, it is answered
 * the first attempt's order, although that took the last units (checked
 * against the stock first, it would be refused insufficient_stock). */
static void test_a_retry_in_its_first_attempts_batch_is_a_replay(void **state)
{
    (void)state;
    th_stockd s;
    start_replica(&s, "retry");
    long long item = th_new_item(&s, "last units", 5);
    char body[256];
    th_order_body(body, sizeof(body), &item, (int[]){5}, 1, "last-units", 0);
    th_bg_reduce bg[2];
    assert_int_equal(th_hold_item_lock(&redis, item), 0); /* both queue behind it */
    for (int i = 0; i < 2; i++)
        th_bg_order_queued(&s, &bg[i], body, i);
    th_sleep_ms(300);
    assert_int_equal(th_release_item_lock(&redis, item), 0);
    for (int i = 0; i < 2; i++)
        th_bg_reduce_join(&bg[i]);
    assert_true(th_metric(s.url, "stockd_batch_orders_count") == 1); /* one batch of both */
    /* in flight in the order sent, they may still join the batch the other
     * way round: whichever came first places the order, the other replays it */
    int f = bg[0].status == 201 ? 0 : 1;
    if (bg[f].status != 201 || bg[!f].status != 200 || !strstr(bg[!f].body, "\"replayed\":true"))
        fail_msg("answers %ld %s and %ld %s", bg[0].status, bg[0].body, bg[1].status,
                 bg[1].body);
    json_t *first = json_loads(bg[f].body, 0, NULL), *retry = json_loads(bg[!f].body, 0, NULL);
    assert_int_equal(th_jint(retry, "orderId"), th_jint(first, "orderId"));
    json_decref(first);
    json_decref(retry);
    assert_int_equal(stock_of(&s, item), 0);
    assert_int_equal(th_stockd_stop_clean(&s), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batches_of_different_items_share_one_transaction),
        cmocka_unit_test(test_a_batch_whose_lock_is_lost_is_left_out_and_the_others_commit),
        cmocka_unit_test(test_a_retry_in_its_first_attempts_batch_is_a_replay),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
