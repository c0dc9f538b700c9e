/* test_store.c - the store on both backends, the same tests on each: a real
 * SQLite file, then a private PostgreSQL server (a fresh database per test):
 * migrations, items, the ledger, idempotency, the three ways of writing,
 * fencing of stale holders, a savepoint per order, and a busy database. Then what only a server
 * has: replicas migrating at once, a bounded pool, row locks, a password,
 * and the server going away - restarted, a session killed mid-write, or a
 * COMMIT left in doubt (an order's, an item's, a stock set's), and the
 * markers that resolve it deleted once old. A COMMIT in doubt across a
 * failover: tests/it/test_pg_failover.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <glob.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>

#include "server/store.h"
#include "tests/support/harness.h"
#include "tests/support/pg.h"


/* Busy timeout 200 ms (SQLite's wait for the write lock; a server's wait
 * for a free connection), a pool of 4, statements bounded at 300 ms. */
static store_config config(const char *name)
{
    return (store_config){.db = name, .sync_full = 1, .busy_timeout_ms = 200, .pool_size = 4,
                          .timeout_ms = 300};
}

/* The store on name with statements bounded at timeout_ms. */
static store *open_store_bounded(const char *name, int timeout_ms)
{
    store_config cfg = config(name);
    cfg.timeout_ms = timeout_ms;
    char err[256];
    store *s;
    if (store_open(&cfg, &s, err, sizeof(err)) != STORE_OK) {
        fprintf(stderr, "store_open: %s\n", err);
        return NULL;
    }
    return s;
}

static store *open_store(const char *name)
{
    return open_store_bounded(name, config(name).timeout_ms);
}

static int setup(void **state)
{
    if (th_backend_fresh("store-test") != 0)
        return -1;
    return (*state = open_store(th_be.target)) ? 0 : -1;
}

static int teardown(void **state)
{
    store_close(*state);
    return 0;
}

static store_conn *conn(void **state)
{
    char err[256];
    store_conn *c;
    assert_int_equal(store_get(*state, &c, err, sizeof(err)), STORE_OK);
    return c;
}

static int64_t new_item(store_conn *c, int64_t stock)
{
    store_item it;
    assert_int_equal(store_item_create(c, "widget", stock, NULL, 0, &it), STORE_OK);
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

/* The schema files of a backend in the repository: the migrations a fresh
 * database gets, each once. */
static long long schema_files(const char *backend)
{
    char pattern[64];
    glob_t g;
    snprintf(pattern, sizeof(pattern), "schema/%s/*.sql", backend);
    assert_int_equal(glob(pattern, 0, NULL, &g), 0);
    long long n = (long long)g.gl_pathc;
    globfree(&g);
    return n;
}

static void test_reopening_applies_the_schema_once(void **state)
{
    store_conn *c = conn(state);
    new_item(c, 5);
    store_put(*state, c);
    store *again = open_store(th_be.target);
    assert_non_null(again);
    char err[256];
    assert_int_equal(store_get(again, &c, err, sizeof(err)), STORE_OK);
    store_item it;
    assert_int_equal(store_item_get(c, 1, &it), STORE_OK); /* data kept, no re-creation */
    store_put(again, c);
    store_close(again);
    if (th_be.on_pg) {
        assert_int_equal(th_pg_int(th_be.target, "SELECT count(*) FROM stockd_schema"),
                         schema_files("postgres"));
        return;
    }
    sqlite3 *db;
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_open(th_be.target, &db), SQLITE_OK);
    sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(st, 0), schema_files("sqlite"));
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
    assert_int_equal(store_item_set_stock(c, b, 9, -1, NULL, NULL, NULL), STORE_OK);
    assert_int_equal(store_item_get(c, b, &it), STORE_OK);
    assert_int_equal(it.stock, 9);
    assert_int_equal(store_item_set_stock(c, b + 100, 9, -1, NULL, NULL, NULL),
                     STORE_ERR_NOT_FOUND);
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

/* An item's requestId: the second creation under it writes nothing and
 * returns the first's item as it was created (its stock since set
 * elsewhere), whatever name and stock it came with (the service tells a
 * retry from another item); items without one are each new. A stock set
 * returns the item as it wrote it. */
static void test_an_items_request_id_creates_it_once(void **state)
{
    store_conn *c = conn(state);
    store_item first, again, set, plain[2];
    assert_int_equal(store_item_create(c, "keyed", 5, "item-once", 0, &first), STORE_OK);
    assert_string_equal(first.name, "keyed");
    assert_int_equal(first.stock, 5);
    assert_int_equal(store_item_set_stock(c, first.id, 9, -1, NULL, NULL, &set), STORE_OK);
    assert_int_equal(set.id, first.id);
    assert_int_equal(set.stock, 9);
    assert_int_equal(store_item_create(c, "keyed", 5, "item-once", 0, &again), STORE_ERR_DUPLICATE);
    assert_int_equal(again.id, first.id);
    assert_string_equal(again.name, "keyed");
    assert_int_equal(again.stock, 5);
    assert_int_equal(store_item_create(c, "other", 7, "item-once", 0, &again), STORE_ERR_DUPLICATE);
    assert_int_equal(again.id, first.id);
    assert_string_equal(again.name, "keyed");
    assert_int_equal(again.stock, 5);
    for (int i = 0; i < 2; i++)
        assert_int_equal(store_item_create(c, "keyed", 5, NULL, 0, &plain[i]), STORE_OK);
    assert_true(plain[0].id != first.id && plain[1].id != plain[0].id);
    assert_int_equal(store_item_get(c, first.id, &set), STORE_OK);
    assert_int_equal(set.stock, 9);
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
    assert_int_equal(store_item_set_stock(c, id, 50, -1, token(10, 5), NULL, NULL),
                     STORE_ERR_STALE);
    assert_int_equal(store_item_set_stock(c, id, 50, -1, token(12, 0), NULL, NULL), STORE_OK);
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

/* A refusal carries the token on the row: what a holder whose lock is
 * still its own raises its fence above (dlock_fence_raise) when fences went
 * back - a claim, a claimed write and a fenced stock set alike. */
static void test_a_refusal_carries_the_rows_token(void **state)
{
    store_conn *c = conn(state);
    int64_t id = new_item(c, 10), stock, ahead = 1796000000000000;
    store_order o;
    assert_int_equal(store_stock_claim(c, id, token(ahead, 3), &stock), STORE_OK);
    assert_int_equal(store_stock_claim(c, id, token(ahead - 7, 0), &stock), STORE_ERR_STALE);
    assert_int_equal(store_stale_token(c).fence, ahead);
    assert_int_equal(store_stale_token(c).seq, 3);
    assert_int_equal(store_item_set_stock(c, id, 50, -1, token(ahead, 2), NULL, NULL),
                     STORE_ERR_STALE);
    assert_int_equal(store_stale_token(c).fence, ahead);
    assert_int_equal(store_stale_token(c).seq, 3);
    store_new_order d = deduction(id, 1, 9, ahead - 7, NULL);
    assert_int_equal(deduct_write(c, &d, &o, NULL), STORE_ERR_STALE);
    assert_int_equal(store_stale_token(c).fence, ahead);
    assert_non_null(strstr(store_errstr(c), "1796000000000000, 3"));
    /* above it, the claim and the write go through */
    assert_int_equal(store_stock_claim(c, id, token(ahead + 1, 0), &stock), STORE_OK);
    d = deduction(id, 1, stock - 1, ahead + 1, NULL);
    assert_int_equal(deduct_write(c, &d, &o, NULL), STORE_OK);
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

/* Another session that holds the write lock of the database (SQLite) or
 * of the item's row (PostgreSQL) until locker_end. */
struct locker {
    sqlite3 *sq;
    PGconn *pg;
};

static struct locker locker_begin(int64_t item)
{
    struct locker l = {0};
    char sql[96];
    if (th_be.on_pg) {
        l.pg = PQconnectdb(th_be.target);
        assert_int_equal(PQstatus(l.pg), CONNECTION_OK);
        snprintf(sql, sizeof(sql), "BEGIN; SELECT 1 FROM items WHERE id = %lld FOR UPDATE",
                 (long long)item);
        PQclear(PQexec(l.pg, sql));
    } else {
        assert_int_equal(sqlite3_open(th_be.target, &l.sq), SQLITE_OK);
        assert_int_equal(sqlite3_exec(l.sq, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
    }
    return l;
}

static void locker_end(struct locker *l)
{
    if (l->pg)
        PQfinish(l->pg); /* its transaction ends with it */
    if (l->sq) {
        assert_int_equal(sqlite3_exec(l->sq, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
        sqlite3_close(l->sq);
    }
}

static void test_locked_database_reports_busy_and_writes_nothing(void **state)
{
    store_conn *c = conn(state);
    int64_t id = new_item(c, 10);
    struct locker other = locker_begin(id);
    store_new_order d = deduction(id, 1, 9, 0, NULL);
    store_order o;
    int64_t t0 = th_now_ms();
    /* after the busy timeout (SQLite) or the statement timeout (PostgreSQL) */
    assert_int_equal(deduct_write(c, &d, &o, NULL), STORE_ERR_BUSY);
    assert_true(th_now_ms() - t0 >= 150);
    locker_end(&other);
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
    assert_int_equal(store_item_set_stock(c, id, 1, -1, NULL, &veto, NULL), STORE_ERR_VETOED);
    assert_int_equal(asked, 3);
    store_item it;
    assert_int_equal(store_item_get(c, id, &it), STORE_OK);
    assert_int_equal(it.stock, 10);
    assert_int_equal(it.line_count, 0);
    assert_int_equal(store_order_by_request(c, "req-vetoed", &o), STORE_ERR_NOT_FOUND);
    store_put(*state, c);
}

/* An order that fails half way (its second line names no item) goes back
 * to the savepoint taken before it: nothing of it stays, and the
 * transaction, shared with the orders before and after it, commits them. */
static void test_a_savepoint_undoes_a_failed_order_alone(void **state)
{
    store_conn *c = conn(state);
    int64_t id = new_item(c, 10);
    store_new_order first = deduction(id, 1, 9, 0, "sp-first");
    store_new_order half = deduction(id, 2, 7, 0, "sp-half");
    store_new_order last = deduction(id, 3, 6, 0, "sp-last");
    half.nlines = 2;
    half.lines[1] = (store_line){id + 1000, 1, 0, {0, 0}};
    store_order o;
    assert_int_equal(store_tx_begin(c), STORE_OK);
    assert_int_equal(store_tx_rollback_to_savepoint(c), STORE_ERR_IO); /* none yet */
    assert_int_equal(store_tx_savepoint(c), STORE_OK);
    assert_int_equal(store_tx_add_order(c, &first, &o), STORE_OK);
    assert_int_equal(store_tx_savepoint(c), STORE_OK);
    assert_int_equal(store_tx_add_order(c, &half, &o), STORE_ERR_IO);
    assert_int_equal(store_tx_rollback_to_savepoint(c), STORE_OK);
    assert_int_equal(store_tx_savepoint(c), STORE_OK);
    assert_int_equal(store_tx_add_order(c, &last, &o), STORE_OK);
    assert_int_equal(store_tx_set_stock(c, id, 6, NULL), STORE_OK);
    assert_int_equal(store_tx_commit(c, NULL), STORE_OK);
    store_item it;
    assert_int_equal(store_item_get(c, id, &it), STORE_OK);
    assert_int_equal(it.stock, 6);
    assert_int_equal(it.sold, 4);
    assert_int_equal(it.line_count, 2);
    assert_int_equal(store_order_by_request(c, "sp-half", &o), STORE_ERR_NOT_FOUND);
    assert_int_equal(store_order_by_request(c, "sp-last", &o), STORE_OK);
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
    snprintf(old, sizeof(old), "%s/old.db", th_be.dir);
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

    store *s = open_store(old);
    assert_non_null(s);
    char err[256];
    store_conn *c;
    assert_int_equal(store_get(s, &c, err, sizeof(err)), STORE_OK);
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

/* ---- what only a database server has ---- */

struct opener {
    const char *url;
    store *s;
};

static void *open_run(void *arg)
{
    struct opener *o = arg;
    o->s = open_store(o->url);
    return NULL;
}

/* Four replicas start at once on an empty database: each file is applied
 * once (the advisory lock), and every replica opens. */
static void test_replicas_starting_together_migrate_once(void **state)
{
    (void)state;
    char url[256];
    assert_int_equal(th_pg_create_db(&th_be.server, "together", url, sizeof(url)), 0);
    pthread_t t[4];
    struct opener o[4];
    for (int i = 0; i < 4; i++) {
        o[i] = (struct opener){url, NULL};
        pthread_create(&t[i], NULL, open_run, &o[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        assert_non_null(o[i].s);
        store_close(o[i].s);
    }
    assert_int_equal(th_pg_int(url, "SELECT count(*) FROM stockd_schema"),
                     schema_files("postgres"));
    assert_int_equal(th_pg_int(url, "SELECT count(*) FROM items"), 0);
}

static void test_a_full_pool_answers_busy(void **state)
{
    store_conn *c[4], *more;
    char err[256];
    for (int i = 0; i < 4; i++)
        c[i] = conn(state);
    int64_t t0 = th_now_ms();
    assert_int_equal(store_get(*state, &more, err, sizeof(err)), STORE_ERR_BUSY);
    assert_true(th_now_ms() - t0 >= 150); /* it waited the busy timeout */
    assert_non_null(strstr(err, "all 4 PostgreSQL connections"));
    store_put(*state, c[0]);
    assert_int_equal(store_get(*state, &more, err, sizeof(err)), STORE_OK);
    assert_ptr_equal(more, c[0]); /* the one given back */
    store_put(*state, more);
    for (int i = 1; i < 4; i++)
        store_put(*state, c[i]);
}

static void test_a_row_lock_waits_then_times_out(void **state)
{
    assert_true(store_has_row_locks(*state));
    store_conn *c = conn(state);
    int64_t id = new_item(c, 10), stock = -1;
    struct locker other = locker_begin(id);
    assert_int_equal(store_tx_begin(c), STORE_OK);
    int64_t t0 = th_now_ms();
    assert_int_equal(store_tx_lock_stock(c, id, 200, &stock), STORE_ERR_LOCK_TIMEOUT);
    assert_true(th_now_ms() - t0 >= 150);
    assert_non_null(strstr(store_errstr(c), "stayed locked for 200 ms"));
    store_tx_abort(c);
    locker_end(&other);
    assert_int_equal(store_tx_begin(c), STORE_OK);
    assert_int_equal(store_tx_lock_stock(c, id, 200, &stock), STORE_OK);
    assert_int_equal(stock, 10);
    assert_int_equal(store_tx_lock_stock(c, 999, 200, &stock), STORE_ERR_NOT_FOUND);
    store_tx_abort(c);
    store_put(*state, c);
}

#define ROW_WAIT_MS 3000

/* A wait for a row is bounded as a whole. Behind another waiter, which
 * holds the row's tuple lock while it waits for the holder, PostgreSQL's
 * lock_timeout counts twice: the tuple lock until that waiter gives up,
 * then the holder's transaction - about twice the wait, where statements
 * are bounded longer than it. The slack past one wait grows on a busy
 * machine (the timeouts are the server's: its timers may fire late), up to
 * three quarters of a wait: short of twice. */
static void test_a_row_lock_wait_is_bounded_as_a_whole(void **state)
{
    (void)state;
    store *st = open_store_bounded(th_be.target, ROW_WAIT_MS * 3);
    assert_non_null(st);
    store_conn *c = conn((void **)&st);
    int64_t id = new_item(c, 10), stock = -1;
    struct locker holder = locker_begin(id);
    PGconn *ahead = PQconnectdb(th_be.target);
    char sql[160];
    assert_int_equal(PQstatus(ahead), CONNECTION_OK);
    snprintf(sql, sizeof(sql), "BEGIN; SET LOCAL lock_timeout = %d; SELECT 1 FROM items "
             "WHERE id = %lld FOR UPDATE", ROW_WAIT_MS, (long long)id);
    assert_int_equal(PQsendQuery(ahead, sql), 1);
    snprintf(sql, sizeof(sql), "SELECT count(*) FROM pg_stat_activity WHERE pid = %d AND "
             "wait_event_type = 'Lock'", PQbackendPID(ahead));
    long long waiting = 0;
    for (int64_t end = th_now_ms() + 10000; waiting != 1 && th_now_ms() < end; th_sleep_ms(10))
        waiting = th_pg_int(th_be.target, sql);
    assert_int_equal(store_tx_begin(c), STORE_OK);
    int64_t t0 = th_now_ms();
    int rc = store_tx_lock_stock(c, id, ROW_WAIT_MS, &stock);
    int64_t took = th_now_ms() - t0;
    print_message("a row wait of %d ms behind another waiter took %lld ms\n", ROW_WAIT_MS,
                  (long long)took);
    for (PGresult *r; (r = PQgetResult(ahead)) != NULL;)
        PQclear(r);
    PQfinish(ahead);
    store_tx_abort(c);
    locker_end(&holder);
    store_put(st, c);
    store_close(st);
    assert_int_equal(waiting, 1);
    assert_int_equal(rc, STORE_ERR_LOCK_TIMEOUT);
    int slack = ROW_WAIT_MS / 4 * TH_SLOWER;
    assert_true(took < ROW_WAIT_MS + (slack < ROW_WAIT_MS * 3 / 4 ? slack : ROW_WAIT_MS * 3 / 4));
}

/* The role stock_secret must authenticate: without the password the store
 * does not open (and says why without any password in it); with it, it does.
 * A refusal is STORE_ERR_IO, not UNAVAILABLE: waiting would not mend it. */
static void test_a_password_from_the_config_is_used(void **state)
{
    (void)state;
    char url[256];
    assert_int_equal(th_pg_exec(th_be.server.url, "DROP DATABASE IF EXISTS secret"), 0);
    assert_int_equal(th_pg_exec(th_be.server.url, "CREATE DATABASE secret OWNER stock_secret"), 0);
    snprintf(url, sizeof(url), "postgresql://stock_secret@127.0.0.1:%d/secret", th_be.server.port);
    store_config cfg = config(url);
    char err[256];
    store *s;
    assert_int_equal(store_open(&cfg, &s, err, sizeof(err)), STORE_ERR_IO);
    assert_non_null(strstr(err, "password"));
    cfg.password = "wrong";
    assert_int_equal(store_open(&cfg, &s, err, sizeof(err)), STORE_ERR_IO);
    assert_non_null(strstr(err, "password authentication failed"));
    assert_null(strstr(err, "wrong"));
    assert_null(strstr(err, "28P01")); /* the SQLSTATE it was told by stays out */
    cfg.password = TH_PG_SECRET;
    assert_int_equal(store_open(&cfg, &s, err, sizeof(err)), STORE_OK);
    store_close(s);
    snprintf(url, sizeof(url), "postgresql://stock@127.0.0.1:%d/nosuchdb", th_be.server.port);
    cfg = config(url);
    assert_int_equal(store_open(&cfg, &s, err, sizeof(err)), STORE_ERR_IO);
    assert_non_null(strstr(err, "\"nosuchdb\" does not exist"));
}

/* The server stops under an open store: 503 material (UNAVAILABLE), both for
 * a pooled session and inside a transaction, nothing half-written; after
 * the failed connect, at once and saying so; once it is back, the same
 * store works again, reconnected in the background. */
static void test_a_restarted_server_answers_unavailable_then_recovers(void **state)
{
    store_conn *c = conn(state), *in_tx = conn(state);
    int64_t id = new_item(c, 10);
    store_put(*state, c);
    store_new_order d = deduction(id, 1, 9, 0, "before-restart");
    store_order o;
    assert_int_equal(store_tx_begin(in_tx), STORE_OK);
    assert_int_equal(store_tx_add_order(in_tx, &d, &o), STORE_OK);
    th_pg_stop(&th_be.server, SIGINT);
    assert_int_equal(store_tx_set_stock(in_tx, id, 9, NULL), STORE_ERR_UNAVAILABLE);
    store_tx_abort(in_tx);
    store_put(*state, in_tx);
    char err[256];
    assert_int_equal(store_get(*state, &c, err, sizeof(err)), STORE_ERR_UNAVAILABLE);
    assert_non_null(strstr(err, "cannot connect to PostgreSQL"));
    assert_int_equal(store_get(*state, &c, err, sizeof(err)), STORE_ERR_UNAVAILABLE);
    assert_non_null(strstr(err, "cannot connect to PostgreSQL"));
    assert_non_null(strstr(err, "reconnecting in the background"));
    assert_int_equal(th_pg_start(&th_be.server), 0);
    int rc = STORE_ERR_UNAVAILABLE;
    for (int64_t end = th_now_ms() + 10000; rc == STORE_ERR_UNAVAILABLE && th_now_ms() < end;
         th_sleep_ms(rc == STORE_OK ? 0 : 20))
        rc = store_get(*state, &c, err, sizeof(err));
    assert_int_equal(rc, STORE_OK);
    store_item it;
    assert_int_equal(store_item_get(c, id, &it), STORE_OK);
    assert_int_equal(it.stock, 10);
    assert_int_equal(it.line_count, 0);
    assert_int_equal(deduct_write(c, &d, &o, NULL), STORE_OK);
    store_put(*state, c);
}

/* A session killed (pg_terminate_backend) after the order's writes and
 * before COMMIT: the commit fails, the store makes sure nothing was
 * written, and says so. */
static void test_a_session_killed_mid_transaction_writes_nothing(void **state)
{
    store_conn *c = conn(state);
    int64_t id = new_item(c, 10);
    store_new_order d = deduction(id, 3, 7, 0, "killed");
    store_order o;
    assert_int_equal(store_tx_begin(c), STORE_OK);
    assert_int_equal(store_tx_add_order(c, &d, &o), STORE_OK);
    assert_int_equal(store_tx_set_stock(c, id, 7, NULL), STORE_OK);
    assert_int_equal(th_pg_int(th_be.target, "SELECT count(*) FROM (SELECT "
                               "pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                               "application_name = 'stockd' AND "
                               "state = 'idle in transaction') t"), 1);
    th_sleep_ms(100);
    assert_int_equal(store_tx_commit(c, NULL), STORE_ERR_UNAVAILABLE);
    assert_non_null(strstr(store_errstr(c), "nothing was written"));
    store_item it;
    assert_int_equal(store_item_get(c, id, &it), STORE_OK); /* the session is back */
    assert_int_equal(it.stock, 10);
    assert_int_equal(it.line_count, 0);
    assert_int_equal(store_order_by_request(c, "killed", &o), STORE_ERR_NOT_FOUND);
    store_put(*state, c);
}

struct racer {
    store_conn *c;
    store_new_order d;
    store_order o;
    int rc;
};

static void *race_run(void *arg)
{
    struct racer *r = arg;
    r->rc = store_tx_begin(r->c);
    if (r->rc == STORE_OK)
        r->rc = store_tx_add_order(r->c, &r->d, &r->o);
    return NULL;
}

/* Two replicas write the same requestId at once: the second waits for the
 * first's transaction and then finds its order (DUPLICATE), no error. */
static void test_a_request_id_raced_by_two_sessions_is_written_once(void **state)
{
    store_conn *c = conn(state);
    int64_t id = new_item(c, 10);
    store_new_order d = deduction(id, 1, 9, 0, "raced");
    store_order first;
    assert_int_equal(store_tx_begin(c), STORE_OK);
    assert_int_equal(store_tx_add_order(c, &d, &first), STORE_OK);
    struct racer r = {.c = conn(state), .d = d};
    pthread_t t;
    pthread_create(&t, NULL, race_run, &r);
    th_sleep_ms(200); /* the second waits on the first's row */
    assert_int_equal(store_tx_set_stock(c, id, 9, NULL), STORE_OK);
    assert_int_equal(store_tx_commit(c, NULL), STORE_OK);
    pthread_join(t, NULL);
    assert_int_equal(r.rc, STORE_ERR_DUPLICATE);
    assert_int_equal(r.o.info.order_id, first.info.order_id);
    assert_int_equal(store_tx_commit(r.c, NULL), STORE_OK); /* the transaction is still fine */
    store_put(*state, r.c);
    store_item it;
    assert_int_equal(store_item_get(c, id, &it), STORE_OK);
    assert_int_equal(it.line_count, 1);
    store_put(*state, c);
}

#define ITEM_RACERS 4 /* the pool's size: each on a session of its own */

struct item_racer {
    store_conn *c;
    store_item it;
    int rc;
};

static void *item_race_run(void *arg)
{
    struct item_racer *r = arg;
    r->rc = store_item_create(r->c, "raced", 3, "item-raced", 0, &r->it);
    return NULL;
}

/* Replicas create an item under one requestId at once: however they
 * interleave, one creates it and every other finds it (DUPLICATE, the same
 * id), none fails; one row. */
static void test_an_items_request_id_raced_by_sessions_creates_it_once(void **state)
{
    struct item_racer r[ITEM_RACERS];
    pthread_t t[ITEM_RACERS];
    for (int i = 0; i < ITEM_RACERS; i++) {
        r[i] = (struct item_racer){.c = conn(state)};
        pthread_create(&t[i], NULL, item_race_run, &r[i]);
    }
    int made = 0;
    for (int i = 0; i < ITEM_RACERS; i++) {
        pthread_join(t[i], NULL);
        made += r[i].rc == STORE_OK;
        if (r[i].rc != STORE_OK && r[i].rc != STORE_ERR_DUPLICATE)
            fail_msg("racer %d: %d %s", i, r[i].rc, store_errstr(r[i].c));
    }
    assert_int_equal(made, 1);
    for (int i = 0; i < ITEM_RACERS; i++) {
        assert_int_equal(r[i].it.id, r[0].it.id);
        store_put(*state, r[i].c);
    }
    assert_int_equal(th_pg_int(th_be.target, "SELECT count(*) FROM items"), 1);
}

/* A write whose COMMIT is to wait (run on its own thread): the order
 * transaction open on c committed, an item created, or a stock set. */
struct committer {
    store_conn *c;
    int (*run)(struct committer *m);
    int64_t id; /* the item written to */
    store_item it; /* the item created */
    int rc;
};

static void *commit_run(void *arg)
{
    struct committer *m = arg;
    m->rc = m->run(m);
    return NULL;
}

static int commit_open(struct committer *m) { return store_tx_commit(m->c, NULL); }
static int create_item(struct committer *m)
{
    return store_item_create(m->c, "doubt", 7, NULL, 0, &m->it);
}
static int set_stock(struct committer *m)
{
    return store_item_set_stock(m->c, m->id, 50, -1, NULL, NULL, NULL);
}

/* With a synchronous standby that does not exist, COMMIT commits locally,
 * then waits for it, and is not yet visible: m's write is started on
 * thread t. Returns the waiting backend's pid, or 0 when none waited
 * within 5 s. */
static int commit_into_a_wait(struct committer *m, pthread_t *t)
{
    assert_int_equal(th_pg_exec(th_be.server.url, "ALTER SYSTEM SET synchronous_standby_names = "
                                            "'nobody'"), 0);
    assert_int_equal(th_pg_exec(th_be.server.url, "SELECT pg_reload_conf()"), 0);
    th_sleep_ms(200);
    m->rc = -100;
    pthread_create(t, NULL, commit_run, m);
    long long pid = -1;
    for (int64_t end = th_now_ms() + 5000; pid < 0 && th_now_ms() < end; th_sleep_ms(20))
        pid = th_pg_int(th_be.server.url, "SELECT pid FROM pg_stat_activity WHERE wait_event = "
                                    "'SyncRep'");
    return pid > 0 ? (int)pid : 0;
}

/* The order transaction a COMMIT in doubt is about: an order of 2 of item
 * id under request_id, open on c, to be committed by m. */
static struct committer order_to_commit(store_conn *c, int64_t id, const char *request_id,
                                        store_order *o)
{
    store_new_order d = deduction(id, 2, 8, 0, request_id);
    assert_int_equal(store_tx_begin(c), STORE_OK);
    assert_int_equal(store_tx_add_order(c, &d, o), STORE_OK);
    assert_int_equal(store_tx_set_stock(c, id, 8, NULL), STORE_OK);
    return (struct committer){.c = c, .run = commit_open};
}

/* The standby is wished for no more (a backend still waiting goes on). */
static void forget_the_standby(void)
{
    assert_int_equal(th_pg_exec(th_be.server.url, "ALTER SYSTEM RESET synchronous_standby_names"),
                     0);
    assert_int_equal(th_pg_exec(th_be.server.url, "SELECT pg_reload_conf()"), 0);
}

/* m's COMMIT, waiting for the standby, loses its answer: its session is
 * terminated. Returns how many sessions were. */
static long long commit_loses_its_answer(struct committer *m)
{
    pthread_t t;
    int pid = commit_into_a_wait(m, &t);
    long long killed = pid ? th_pg_int(th_be.server.url, "SELECT count(pg_terminate_backend(pid)) "
                                                   "FROM pg_stat_activity WHERE wait_event = "
                                                   "'SyncRep'") : 0;
    forget_the_standby();
    pthread_join(t, NULL);
    return killed;
}

/* A COMMIT that happened but whose answer never came: the session is
 * terminated while COMMIT waits for the standby. The store must find the
 * order and answer STORE_OK - not a failure for an order that was written. */
static void test_a_commit_whose_answer_was_lost_is_found(void **state)
{
    store_conn *c = conn(state);
    int64_t id = new_item(c, 10);
    store_order o;
    struct committer m = order_to_commit(c, id, "in-doubt", &o);
    assert_int_equal(commit_loses_its_answer(&m), 1);
    assert_int_equal(m.rc, STORE_OK);
    store_order found;
    assert_int_equal(store_order_by_request(c, "in-doubt", &found), STORE_OK);
    assert_int_equal(found.info.order_id, o.info.order_id);
    store_put(*state, c);
}

/* An item's INSERT, its commit's answer lost the same way: the item was
 * created, and the store says so (STORE_OK with the item) rather than
 * "nothing written", after which a client would create it twice. */
static void test_an_item_whose_commit_answer_was_lost_is_found(void **state)
{
    struct committer m = {.c = conn(state), .run = create_item};
    assert_int_equal(commit_loses_its_answer(&m), 1);
    assert_int_equal(m.rc, STORE_OK);
    assert_true(m.it.id > 0);
    assert_int_equal(m.it.stock, 7);
    assert_int_equal(th_pg_int(th_be.target, "SELECT count(*) FROM items WHERE name = 'doubt'"), 1);
    store_put(*state, m.c);
}

/* A stock set (PUT), the same way: it has no order to look for, and was
 * still found written. */
static void test_a_stock_set_whose_commit_answer_was_lost_is_found(void **state)
{
    store_conn *c = conn(state);
    struct committer m = {.c = c, .run = set_stock, .id = new_item(c, 10)};
    assert_int_equal(commit_loses_its_answer(&m), 1);
    assert_int_equal(m.rc, STORE_OK);
    assert_int_equal(store_item_get(c, m.id, &m.it), STORE_OK);
    assert_int_equal(m.it.stock, 50);
    store_put(*state, c);
}

/* m's COMMIT, its backend stopped (SIGSTOP) while it waits: no answer comes
 * (the store gives up after its timeout), and terminating the backend does
 * nothing while it is stopped. The commit is done and lands once the
 * backend runs again (SIGCONT, once m's thread has its answer). */
static void commit_stays_stopped(struct committer *m)
{
    pthread_t t;
    int pid = commit_into_a_wait(m, &t);
    if (pid)
        kill(pid, SIGSTOP);
    forget_the_standby();
    pthread_join(t, NULL);
    if (pid)
        kill(pid, SIGCONT);
    assert_true(pid > 0);
}

/* Its order is not visible while the backend is stopped, yet its commit
 * lands afterwards: the store must not call it unwritten, but in doubt.
 * Statements bounded at 3 s, as a terminate's wait of 2 s fits in. */
static void test_a_commit_whose_session_stays_stopped_is_in_doubt(void **state)
{
    (void)state;
    store *st = open_store_bounded(th_be.target, 3000);
    assert_non_null(st);
    store_conn *c = conn((void **)&st);
    int64_t id = new_item(c, 10);
    store_order o, found;
    struct committer m = order_to_commit(c, id, "stopped", &o);
    commit_stays_stopped(&m);
    assert_int_equal(m.rc, STORE_ERR_IN_DOUBT);
    assert_non_null(strstr(store_errstr(c), "may yet commit"));
    int rc = STORE_ERR_NOT_FOUND; /* the backend, running again, ends its commit */
    for (int64_t end = th_now_ms() + 5000; rc == STORE_ERR_NOT_FOUND && th_now_ms() < end;
         th_sleep_ms(rc == STORE_OK ? 0 : 50))
        rc = store_order_by_request(c, "stopped", &found);
    assert_int_equal(rc, STORE_OK);
    assert_int_equal(found.info.order_id, o.info.order_id);
    store_put(st, c);
    store_close(st);
}

/* An item's, the same way: in doubt too, with the id it has if it was
 * created - which it was, once the backend runs again. */
static void test_an_item_whose_session_stays_stopped_is_in_doubt(void **state)
{
    (void)state;
    store *st = open_store_bounded(th_be.target, 3000);
    assert_non_null(st);
    struct committer m = {.c = conn((void **)&st), .run = create_item};
    commit_stays_stopped(&m);
    assert_int_equal(m.rc, STORE_ERR_IN_DOUBT);
    assert_true(m.it.id > 0);
    int rc = STORE_ERR_NOT_FOUND;
    store_item it;
    for (int64_t end = th_now_ms() + 5000; rc == STORE_ERR_NOT_FOUND && th_now_ms() < end;
         th_sleep_ms(rc == STORE_OK ? 0 : 50))
        rc = store_item_get(m.c, m.it.id, &it);
    assert_int_equal(rc, STORE_OK);
    assert_string_equal(it.name, "doubt");
    store_put(st, m.c);
    store_close(st);
}

struct resumer {
    int pid, after_ms;
};

static void *resume_run(void *arg)
{
    struct resumer *r = arg;
    th_sleep_ms(r->after_ms);
    kill(r->pid, SIGCONT);
    return NULL;
}

/* Stopped the same way, but running again a second later, while the store
 * still looks: it then ends (terminated), its commit visible, and the store
 * answers STORE_OK. */
static void test_a_commit_whose_session_resumes_is_found(void **state)
{
    store_conn *c = conn(state);
    int64_t id = new_item(c, 10);
    store_order o, found;
    struct committer m = order_to_commit(c, id, "resumed", &o);
    pthread_t t, resume;
    int pid = commit_into_a_wait(&m, &t);
    struct resumer r = {pid, 1500};
    if (pid) {
        kill(pid, SIGSTOP);
        pthread_create(&resume, NULL, resume_run, &r);
    }
    forget_the_standby();
    pthread_join(t, NULL);
    if (pid)
        pthread_join(resume, NULL);
    assert_true(pid > 0);
    assert_int_equal(m.rc, STORE_OK);
    assert_int_equal(store_order_by_request(c, "resumed", &found), STORE_OK);
    assert_int_equal(found.info.order_id, o.info.order_id);
    store_put(*state, c);
}

/* A COMMIT that waits for a synchronous standby that never confirms: its
 * answer does not come in time and the session is dropped. Its commit is
 * in the primary's WAL, and terminating its backend would make it visible
 * there alone, lost by a failover to that standby: the store must leave it
 * waiting and answer in doubt - not written, not unwritten. Once no
 * standby is wished for any more, the order lands. */
static void test_a_commit_its_standby_never_confirms_is_in_doubt(void **state)
{
    store_conn *c = conn(state);
    int64_t id = new_item(c, 10);
    store_order o, found;
    struct committer m = order_to_commit(c, id, "unconfirmed", &o);
    pthread_t t;
    assert_true(commit_into_a_wait(&m, &t) > 0);
    pthread_join(t, NULL);
    long long waiting = th_pg_int(th_be.server.url, "SELECT count(*) FROM pg_stat_activity WHERE "
                                              "wait_event = 'SyncRep'");
    forget_the_standby();
    assert_int_equal(m.rc, STORE_ERR_IN_DOUBT);
    assert_non_null(strstr(store_errstr(c), "synchronous standby"));
    assert_int_equal(waiting, 1); /* left waiting, not terminated */
    int rc = STORE_ERR_NOT_FOUND;
    for (int64_t end = th_now_ms() + 5000; rc == STORE_ERR_NOT_FOUND && th_now_ms() < end;
         th_sleep_ms(rc == STORE_OK ? 0 : 50))
        rc = store_order_by_request(c, "unconfirmed", &found);
    assert_int_equal(rc, STORE_OK);
    store_put(*state, c);
}

/* A COMMIT its backend never runs: the backend is stopped with the order's
 * transaction open, COMMIT is sent, and the server crashes (that backend
 * and the postmaster killed) and is started again - a new postmaster on
 * the same timeline, whose crash recovery has no commit of the order. The
 * old session died with the old server, so the store can tell: "nothing
 * was written", not in doubt (and never committed). */
static void test_a_commit_lost_in_a_crash_is_found_unwritten(void **state)
{
    store_conn *c = conn(state);
    int64_t id = new_item(c, 10);
    store_order o, found;
    struct committer m = order_to_commit(c, id, "crashed", &o);
    long long pid = th_pg_int(th_be.target, "SELECT pid FROM pg_stat_activity WHERE "
                              "application_name = 'stockd' AND state = 'idle in transaction'");
    assert_true(pid > 0);
    kill((pid_t)pid, SIGSTOP);
    pthread_t t;
    pthread_create(&t, NULL, commit_run, &m);
    th_sleep_ms(200); /* COMMIT sent, and unread */
    kill((pid_t)pid, SIGKILL);
    th_pg_stop(&th_be.server, SIGKILL);
    assert_int_equal(th_pg_start(&th_be.server), 0);
    pthread_join(t, NULL);
    assert_int_equal(m.rc, STORE_ERR_UNAVAILABLE);
    assert_non_null(strstr(store_errstr(c), "nothing was written"));
    assert_int_equal(store_order_by_request(c, "crashed", &found), STORE_ERR_NOT_FOUND);
    store_put(*state, c);
}

/* Every transaction writes a marker a COMMIT in doubt is resolved by;
 * later transactions delete those older than ten minutes (a session's
 * first does), and keep the younger ones. */
static void test_old_commit_markers_are_deleted_and_young_ones_kept(void **state)
{
    assert_int_equal(th_pg_exec(th_be.target, "INSERT INTO tx_marker (written_at) SELECT now() - "
                                        "interval '11 minutes' FROM generate_series(1, 3); "
                                        "INSERT INTO tx_marker (written_at) VALUES "
                                        "(now() - interval '9 minutes')"), 0);
    store_conn *c = conn(state);
    new_item(c, 10);
    new_item(c, 10);
    store_put(*state, c);
    assert_int_equal(th_pg_int(th_be.target, "SELECT count(*) FROM tx_marker WHERE written_at < "
                                       "now() - interval '10 minutes'"), 0);
    assert_int_equal(th_pg_int(th_be.target, "SELECT count(*) FROM tx_marker WHERE written_at < "
                                       "now() - interval '1 minute'"), 1);
    assert_int_equal(th_pg_int(th_be.target, "SELECT count(*) FROM tx_marker WHERE written_at > "
                                       "now() - interval '1 minute'"), 2);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
#define BOTH                                                         \
    T(test_reopening_applies_the_schema_once),                       \
    T(test_items_are_created_read_and_listed),                       \
    T(test_deduction_writes_stock_and_ledger_together),              \
    T(test_same_request_id_is_written_once),                         \
    T(test_an_items_request_id_creates_it_once),                     \
    T(test_atomic_deduction_never_goes_below_zero),                  \
    T(test_stale_holder_cannot_write_after_newer_holder_read),       \
    T(test_handed_off_holders_are_ordered_by_seq),                   \
    T(test_a_refusal_carries_the_rows_token),                        \
    T(test_unfenced_read_modify_write_loses_updates),                \
    T(test_locked_database_reports_busy_and_writes_nothing),         \
    T(test_orders_listing_honours_limit),                            \
    T(test_listings_page_on_from_a_cursor),                          \
    T(test_a_vetoed_commit_writes_nothing),                          \
    T(test_a_savepoint_undoes_a_failed_order_alone)
    const struct CMUnitTest sqlite_tests[] = {
        BOTH,
        T(test_old_deductions_become_orders_with_one_line),
    };
    const struct CMUnitTest pg_tests[] = {
        BOTH,
        T(test_replicas_starting_together_migrate_once),
        T(test_a_full_pool_answers_busy),
        T(test_a_row_lock_waits_then_times_out),
        T(test_a_row_lock_wait_is_bounded_as_a_whole),
        T(test_a_password_from_the_config_is_used),
        T(test_a_restarted_server_answers_unavailable_then_recovers),
        T(test_a_session_killed_mid_transaction_writes_nothing),
        T(test_a_commit_whose_answer_was_lost_is_found),
        T(test_an_item_whose_commit_answer_was_lost_is_found),
        T(test_a_stock_set_whose_commit_answer_was_lost_is_found),
        T(test_a_commit_whose_session_stays_stopped_is_in_doubt),
        T(test_an_item_whose_session_stays_stopped_is_in_doubt),
        T(test_a_commit_whose_session_resumes_is_found),
        T(test_a_commit_its_standby_never_confirms_is_in_doubt),
        T(test_a_commit_lost_in_a_crash_is_found_unwritten),
        T(test_old_commit_markers_are_deleted_and_young_ones_kept),
        T(test_a_request_id_raced_by_two_sessions_is_written_once),
        T(test_an_items_request_id_raced_by_sessions_creates_it_once),
    };
    /* PostgreSQL is not optional: make deps installs it like redis-server */
    return cmocka_run_group_tests_name("store on SQLite", sqlite_tests, th_backend_sqlite, NULL) +
           cmocka_run_group_tests_name("store on PostgreSQL", pg_tests, th_backend_pg,
                                       th_backend_pg_end);
}

