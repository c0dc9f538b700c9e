/* test_store.c - the SQLite store on a real database file: migrations, items,
 * the ledger, idempotency, the three ways of writing, fencing of stale
 * holders, and a busy database. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "server/store.h"
#include "tests/harness.h"

static char dir[64], path[128];

static int setup(void **state)
{
    static int n;
    if (!dir[0] && th_tempdir("store-test", dir, sizeof(dir)) != 0)
        return -1;
    snprintf(path, sizeof(path), "%s/t%d.db", dir, n++); /* a fresh file per test */
    store_config cfg = {path, 1, 200};
    char err[256];
    store *s;
    if (store_open(&cfg, &s, err, sizeof(err)) != STORE_OK) {
        fprintf(stderr, "store_open: %s\n", err);
        return -1;
    }
    *state = s;
    return 0;
}

static int teardown(void **state)
{
    store_close(*state);
    return 0;
}

static store_conn *conn(void **state)
{
    char err[256];
    store_conn *c = store_get(*state, err, sizeof(err));
    assert_non_null(c);
    return c;
}

static int64_t new_item(store_conn *c, int64_t stock)
{
    store_item it;
    assert_int_equal(store_item_create(c, "widget", stock, &it), STORE_OK);
    return it.id;
}

/* An order of one line that leaves new_stock, written under fence (0: none). */
static store_new_order deduction(int64_t item, int64_t qty, int64_t new_stock, int64_t fence,
                                 const char *request_id)
{
    store_new_order d = {.request_id = request_id, .instance = "test", .lock_mode = "redis",
                         .lock_token = fence ? "tok" : NULL, .nlines = 1};
    d.lines[0] = (store_line){item, qty, new_stock, {fence, 0}};
    return d;
}

/* The write half of read-modify-write, as the service composes it: the order
 * and the item's new stock (fenced when the line has a fence) in one
 * transaction that check may veto. */
static int deduct_write(store_conn *c, const store_new_order *d, store_order *out,
                        const store_commit_check *check)
{
    const store_line *l = &d->lines[0];
    int rc = store_tx_begin(c);
    if (rc == STORE_OK)
        rc = store_tx_add_order(c, d, out);
    if (rc == STORE_OK)
        rc = store_tx_set_stock(c, l->item_id, l->remaining, l->fence.fence ? &l->fence : NULL);
    if (rc == STORE_OK)
        return store_tx_commit(c, check);
    store_tx_abort(c);
    return rc;
}

/* The lock-free way, as the service composes it: replay check, conditional
 * take, the order with the stock left, one transaction. */
static int deduct_atomic(store_conn *c, store_new_order *d, store_order *out, int64_t *left,
                         const store_commit_check *check)
{
    int rc = store_tx_begin(c);
    if (rc == STORE_OK && d->request_id &&
        (rc = store_order_by_request(c, d->request_id, out)) != STORE_ERR_NOT_FOUND)
        rc = rc == STORE_OK ? STORE_ERR_DUPLICATE : rc;
    else if (rc == STORE_OK || rc == STORE_ERR_NOT_FOUND)
        rc = store_tx_take(c, d->lines[0].item_id, d->lines[0].quantity, left);
    if (rc == STORE_OK) {
        d->lines[0].remaining = *left;
        rc = store_tx_add_order(c, d, out);
    }
    if (rc == STORE_OK)
        return store_tx_commit(c, check);
    store_tx_abort(c);
    return rc;
}

static const store_fence *token(int64_t fence, int seq)
{
    static _Thread_local store_fence slots[4];
    static _Thread_local int next;
    store_fence *f = &slots[next++ % 4];
    f->fence = fence, f->seq = seq;
    return f;
}

static void test_reopening_applies_the_schema_once(void **state)
{
    store_conn *c = conn(state);
    new_item(c, 5);
    store_put(*state, c);
    store_config cfg = {path, 1, 200};
    char err[256];
    store *again;
    assert_int_equal(store_open(&cfg, &again, err, sizeof(err)), STORE_OK);
    c = store_get(again, err, sizeof(err));
    store_item it;
    assert_int_equal(store_item_get(c, 1, &it), STORE_OK); /* data kept, no re-creation */
    store_put(again, c);
    store_close(again);

    sqlite3 *db;
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_true(sqlite3_column_int(st, 0) >= 1);
    sqlite3_finalize(st);
    sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, NULL);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "wal");
    sqlite3_finalize(st);
    sqlite3_close(db);
}

static void test_items_are_created_read_and_listed(void **state)
{
    store_conn *c = conn(state);
    store_item it;
    int64_t a = new_item(c, 5), b = new_item(c, 0);
    assert_int_equal(store_item_get(c, a, &it), STORE_OK);
    assert_string_equal(it.name, "widget");
    assert_int_equal(it.stock, 5);
    assert_int_equal(it.sold, 0);
    assert_int_equal(store_item_get(c, b + 100, &it), STORE_ERR_NOT_FOUND);
    assert_int_equal(store_item_set_stock(c, b, 9, NULL, NULL), STORE_OK);
    assert_int_equal(store_item_get(c, b, &it), STORE_OK);
    assert_int_equal(it.stock, 9);
    assert_int_equal(store_item_set_stock(c, b + 100, 9, NULL, NULL), STORE_ERR_NOT_FOUND);
    store_put(*state, c);
}

static void test_deduction_writes_stock_and_ledger_together(void **state)
{
    store_conn *c = conn(state);
    int64_t id = new_item(c, 10);
    store_new_order d = deduction(id, 3, 7, 0, "req-1");
    store_order o;
    assert_int_equal(deduct_write(c, &d, &o, NULL), STORE_OK);
    assert_true(o.info.order_id > 0);
    assert_int_equal(o.lines[0].remaining, 7);
    store_item it;
    assert_int_equal(store_item_get(c, id, &it), STORE_OK);
    assert_int_equal(it.stock, 7);
    assert_int_equal(it.sold, 3);
    assert_int_equal(it.line_count, 1);
    store_order found;
    assert_int_equal(store_order_by_request(c, "req-1", &found), STORE_OK);
    assert_int_equal(found.info.order_id, o.info.order_id);
    assert_int_equal(found.lines[0].quantity, 3);
    assert_string_equal(found.info.instance, "test");
    assert_int_equal(store_order_by_request(c, "nope", &found), STORE_ERR_NOT_FOUND);
    store_put(*state, c);
}

static void test_same_request_id_is_written_once(void **state)
{
    store_conn *c = conn(state);
    int64_t id = new_item(c, 10);
    store_new_order d = deduction(id, 2, 8, 0, "once");
    store_order first, second;
    assert_int_equal(deduct_write(c, &d, &first, NULL), STORE_OK);
    d.lines[0].remaining = 6;
    assert_int_equal(deduct_write(c, &d, &second, NULL), STORE_ERR_DUPLICATE);
    assert_int_equal(second.info.order_id, first.info.order_id);
    assert_int_equal(deduct_atomic(c, &d, &second, &(int64_t){0}, NULL), STORE_ERR_DUPLICATE);
    store_item it;
    assert_int_equal(store_item_get(c, id, &it), STORE_OK);
    assert_int_equal(it.stock, 8);
    assert_int_equal(it.line_count, 1);
    store_put(*state, c);
}

static void test_atomic_deduction_never_goes_below_zero(void **state)
{
    store_conn *c = conn(state);
    int64_t id = new_item(c, 5);
    store_new_order d = deduction(id, 3, 0, 0, NULL);
    store_order o;
    int64_t left = -1;
    assert_int_equal(deduct_atomic(c, &d, &o, &left, NULL), STORE_OK);
    assert_int_equal(left, 2);
    assert_int_equal(o.lines[0].remaining, 2);
    assert_int_equal(deduct_atomic(c, &d, &o, &left, NULL), STORE_ERR_INSUFFICIENT);
    assert_int_equal(left, 2);
    d.lines[0].item_id = id + 100;
    assert_int_equal(deduct_atomic(c, &d, &o, &left, NULL), STORE_ERR_NOT_FOUND);
    store_item it;
    assert_int_equal(store_item_get(c, id, &it), STORE_OK);
    assert_int_equal(it.stock, 2);
    assert_int_equal(it.sold, 3);
    store_put(*state, c);
}

/* The failure fencing exists for: holder A (fence 10) reads, stalls past its
 * lease; B (fence 11) takes the lock and reads; A wakes and writes; B writes.
 * Without the claim, A's write lands and B's overwrites it: one sale lost. */
static void test_stale_holder_cannot_write_after_newer_holder_read(void **state)
{
    store_conn *c = conn(state);
    int64_t id = new_item(c, 10), stock_a, stock_b;
    assert_int_equal(store_stock_claim(c, id, token(10, 0), &stock_a), STORE_OK);
    assert_int_equal(store_stock_claim(c, id, token(11, 0), &stock_b), STORE_OK);
    assert_int_equal(stock_a, 10);
    assert_int_equal(stock_b, 10);

    store_new_order a = deduction(id, 1, stock_a - 1, 10, NULL);
    store_order o;
    assert_int_equal(deduct_write(c, &a, &o, NULL), STORE_ERR_STALE);
    assert_non_null(strstr(store_errstr(c), "newer"));
    store_new_order b = deduction(id, 1, stock_b - 1, 11, NULL);
    assert_int_equal(deduct_write(c, &b, &o, NULL), STORE_OK);

    store_item it;
    assert_int_equal(store_item_get(c, id, &it), STORE_OK);
    assert_int_equal(it.stock + it.sold, 10); /* nothing lost */
    assert_int_equal(it.line_count, 1);
    /* an older token can't even claim the row any more */
    assert_int_equal(store_stock_claim(c, id, token(10, 0), &stock_a), STORE_ERR_STALE);
    assert_int_equal(store_item_set_stock(c, id, 50, token(10, 5), NULL), STORE_ERR_STALE);
    assert_int_equal(store_item_set_stock(c, id, 50, token(12, 0), NULL), STORE_OK);
    assert_int_equal(store_stock_claim(c, id + 100, token(13, 0), &stock_a), STORE_ERR_NOT_FOUND);
    store_put(*state, c);
}

/* Hand-offs share a lease's fence; the seq orders its holders. */
static void test_handed_off_holders_are_ordered_by_seq(void **state)
{
    store_conn *c = conn(state);
    int64_t id = new_item(c, 10), stock;
    store_order o;
    assert_int_equal(store_stock_claim(c, id, token(20, 0), &stock), STORE_OK);
    store_new_order d = deduction(id, 1, stock - 1, 20, NULL);
    assert_int_equal(deduct_write(c, &d, &o, NULL), STORE_OK);
    assert_int_equal(store_stock_claim(c, id, token(20, 1), &stock), STORE_OK); /* next holder */
    d = deduction(id, 1, stock - 1, 20, NULL);
    d.lines[0].fence.seq = 1;
    assert_int_equal(deduct_write(c, &d, &o, NULL), STORE_OK);
    assert_int_equal(o.lines[0].fence.seq, 1);
    d.lines[0].fence.seq = 0; /* the first holder, late: its claim was superseded */
    assert_int_equal(deduct_write(c, &d, &o, NULL), STORE_ERR_STALE);
    assert_int_equal(store_stock_claim(c, id, token(20, 1), &stock), STORE_ERR_STALE);
    assert_int_equal(store_stock_claim(c, id, token(21, 0), &stock), STORE_OK); /* new lease */
    store_item it;
    assert_int_equal(store_item_get(c, id, &it), STORE_OK);
    assert_int_equal(it.stock, 8);
    assert_int_equal(it.sold, 2);
    store_put(*state, c);
}

static void test_unfenced_read_modify_write_loses_updates(void **state)
{
    /* what mode none does, and why the lock is needed at all */
    store_conn *c = conn(state);
    int64_t id = new_item(c, 10), s1, s2;
    assert_int_equal(store_stock_read(c, id, &s1), STORE_OK);
    assert_int_equal(store_stock_read(c, id, &s2), STORE_OK);
    store_new_order d1 = deduction(id, 1, s1 - 1, 0, NULL), d2 = deduction(id, 1, s2 - 1, 0, NULL);
    store_order o;
    assert_int_equal(deduct_write(c, &d1, &o, NULL), STORE_OK);
    assert_int_equal(deduct_write(c, &d2, &o, NULL), STORE_OK);
    store_item it;
    assert_int_equal(store_item_get(c, id, &it), STORE_OK);
    assert_int_equal(it.stock, 9);
    assert_int_equal(it.sold, 2); /* stock + sold = 11: one update lost */
    store_put(*state, c);
}

static void test_locked_database_reports_busy_and_writes_nothing(void **state)
{
    store_conn *c = conn(state);
    int64_t id = new_item(c, 10);
    sqlite3 *other;
    assert_int_equal(sqlite3_open(path, &other), SQLITE_OK);
    assert_int_equal(sqlite3_exec(other, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
    store_new_order d = deduction(id, 1, 9, 0, NULL);
    store_order o;
    int64_t t0 = th_now_ms();
    assert_int_equal(deduct_write(c, &d, &o, NULL), STORE_ERR_BUSY); /* after the 200 ms timeout */
    assert_true(th_now_ms() - t0 >= 150);
    assert_int_equal(sqlite3_exec(other, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(other);
    store_item it;
    assert_int_equal(store_item_get(c, id, &it), STORE_OK);
    assert_int_equal(it.stock, 10);
    assert_int_equal(it.line_count, 0);
    assert_int_equal(deduct_write(c, &d, &o, NULL), STORE_OK); /* and works again after */
    store_put(*state, c);
}

static void count_line(const store_order_info *o, const store_line *l, void *arg)
{
    (void)o, (void)l;
    ++*(int *)arg;
}

static void test_orders_listing_honours_limit(void **state)
{
    store_conn *c = conn(state);
    int64_t id = new_item(c, 10);
    store_order o;
    for (int i = 0; i < 5; i++) {
        store_new_order d = deduction(id, 1, 9 - i, 0, NULL);
        assert_int_equal(deduct_write(c, &d, &o, NULL), STORE_OK);
    }
    int n = 0;
    assert_int_equal(store_lines_of_item(c, id, 0, 3, count_line, &n), STORE_OK);
    assert_int_equal(n, 3);
    n = 0;
    assert_int_equal(store_lines_of_item(c, id, 0, 100, count_line, &n), STORE_OK);
    assert_int_equal(n, 5);
    store_put(*state, c);
}

struct ids {
    int64_t id[16];
    int n;
};

static void collect_line(const store_order_info *o, const store_line *l, void *arg)
{
    struct ids *ids = arg;
    (void)l;
    ids->id[ids->n++] = o->order_id;
}

static void collect_item(const store_item *it, void *arg)
{
    struct ids *ids = arg;
    ids->id[ids->n++] = it->id;
}

/* Orders page newest first below a cursor; items page in id order above one. */
static void test_listings_page_on_from_a_cursor(void **state)
{
    store_conn *c = conn(state);
    int64_t id = new_item(c, 10), other = new_item(c, 10);
    store_order o[6];
    for (int i = 0; i < 6; i++) {
        store_new_order d = deduction(i % 2 ? other : id, 1, 9 - i / 2, 0, NULL);
        assert_int_equal(deduct_write(c, &d, &o[i], NULL), STORE_OK);
    }
    struct ids page = {0};
    assert_int_equal(store_lines_of_item(c, id, o[4].info.order_id, 10, collect_line, &page),
                     STORE_OK);
    assert_int_equal(page.n, 2); /* o[2] and o[0], newest first; none of the other item */
    assert_int_equal(page.id[0], o[2].info.order_id);
    assert_int_equal(page.id[1], o[0].info.order_id);
    page.n = 0;
    assert_int_equal(store_item_list(c, id, 10, collect_item, &page), STORE_OK);
    assert_int_equal(page.n, 1);
    assert_int_equal(page.id[0], other);
    store_put(*state, c);
}

static int never(void *arg)
{
    ++*(int *)arg;
    return 0;
}

/* The caller's last word comes inside the transaction, and a no writes nothing. */
static void test_a_vetoed_commit_writes_nothing(void **state)
{
    store_conn *c = conn(state);
    int64_t id = new_item(c, 10);
    int asked = 0;
    store_commit_check veto = {never, &asked};
    store_new_order d = deduction(id, 3, 7, 0, "req-vetoed");
    store_order o;
    int64_t left;
    assert_int_equal(deduct_write(c, &d, &o, &veto), STORE_ERR_VETOED);
    assert_int_equal(deduct_atomic(c, &d, &o, &left, &veto), STORE_ERR_VETOED);
    assert_int_equal(store_item_set_stock(c, id, 1, NULL, &veto), STORE_ERR_VETOED);
    assert_int_equal(asked, 3);
    store_item it;
    assert_int_equal(store_item_get(c, id, &it), STORE_OK);
    assert_int_equal(it.stock, 10);
    assert_int_equal(it.line_count, 0);
    assert_int_equal(store_order_by_request(c, "req-vetoed", &o), STORE_ERR_NOT_FOUND);
    store_put(*state, c);
}

/* Runs a schema file of the repository on db. */
static void apply_file(sqlite3 *db, const char *file)
{
    char *sql = th_read_file(file);
    assert_non_null(sql);
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    free(sql);
}

/* A database of the days when every deduction was a row of its own
 * (schema version 2): opening it splits each into an order and its line,
 * with the same ids, and nothing is lost. */
static void test_old_deductions_become_orders_with_one_line(void **state)
{
    (void)state;
    char old[160];
    snprintf(old, sizeof(old), "%s/old.db", dir);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(old, &db), SQLITE_OK);
    apply_file(db, "schema/sqlite/001_init.sql");
    apply_file(db, "schema/sqlite/002_handoff_seq.sql");
    assert_int_equal(sqlite3_exec(db, "PRAGMA user_version = 2; "
                     "INSERT INTO items (name, stock) VALUES ('old', 7); "
                     "INSERT INTO deductions (id, item_id, quantity, remaining, request_id, "
                     "instance_id, lock_mode, fence, fence_seq) VALUES "
                     "(5, 1, 2, 8, 'r-5', 'a', 'redis', 40, 1), (9, 1, 1, 7, NULL, 'b', 'none', "
                     "NULL, NULL)", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);

    store_config cfg = {old, 1, 200};
    char err[256];
    store *s;
    assert_int_equal(store_open(&cfg, &s, err, sizeof(err)), STORE_OK);
    store_conn *c = store_get(s, err, sizeof(err));
    store_order o;
    assert_int_equal(store_order_by_request(c, "r-5", &o), STORE_OK);
    assert_int_equal(o.info.order_id, 5);
    assert_string_equal(o.info.instance, "a");
    assert_int_equal(o.nlines, 1);
    assert_int_equal(o.lines[0].quantity, 2);
    assert_int_equal(o.lines[0].remaining, 8);
    assert_int_equal(o.lines[0].fence.fence, 40);
    assert_int_equal(o.lines[0].fence.seq, 1);
    store_item it;
    assert_int_equal(store_item_get(c, 1, &it), STORE_OK);
    assert_int_equal(it.sold, 3);
    assert_int_equal(it.line_count, 2);
    struct ids page = {0};
    assert_int_equal(store_lines_of_item(c, 1, 0, 10, collect_line, &page), STORE_OK);
    assert_int_equal(page.n, 2);
    assert_int_equal(page.id[0], 9);
    store_put(s, c);
    store_close(s);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_reopening_applies_the_schema_once),
        T(test_items_are_created_read_and_listed),
        T(test_deduction_writes_stock_and_ledger_together),
        T(test_same_request_id_is_written_once),
        T(test_atomic_deduction_never_goes_below_zero),
        T(test_stale_holder_cannot_write_after_newer_holder_read),
        T(test_handed_off_holders_are_ordered_by_seq),
        T(test_unfenced_read_modify_write_loses_updates),
        T(test_locked_database_reports_busy_and_writes_nothing),
        T(test_orders_listing_honours_limit),
        T(test_listings_page_on_from_a_cursor),
        T(test_a_vetoed_commit_writes_nothing),
        T(test_old_deductions_become_orders_with_one_line),
    };
    return cmocka_run_group_tests_name("store", tests, NULL, NULL);
}
