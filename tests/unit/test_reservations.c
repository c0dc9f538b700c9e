/* test_reservations.c - the store's units that come back (issue 33), the
 * same tests on each backend (a real SQLite file, then a private
 * PostgreSQL server, a fresh database per test): reservations taken all or
 * nothing, their one fate (confirmed, cancelled, expired) decided by the
 * database's clock, a confirm racing the expiry, orders cancelled once with
 * their returns, per-buyer limits, the items' totals and their invariant,
 * and a database of the previous schema upgraded in place. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/time.h>
#include <time.h>

#include "server/store.h"
#include "tests/support/harness.h"
#include "tests/support/pg.h"


#define HOLD_LONG 600000 /* a hold no test outlives */

static store *open_store(const char *name)
{
    store_config cfg = {.db = name, .sync_full = 1, .busy_timeout_ms = 2000, .pool_size = 4,
                        .timeout_ms = 5000};
    char err[256];
    store *s;
    if (store_open(&cfg, &s, err, sizeof(err)) != STORE_OK) {
        fprintf(stderr, "store_open: %s\n", err);
        return NULL;
    }
    return s;
}

static int setup(void **state)
{
    if (th_backend_fresh("reserve-test") != 0)
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

static int64_t new_item(store_conn *c, int64_t stock, int64_t limit)
{
    store_item it;
    assert_int_equal(store_item_create(c, "widget", stock, NULL, limit, &it), STORE_OK);
    assert_int_equal(it.per_buyer_limit, limit);
    return it.id;
}

static store_item item(store_conn *c, int64_t id)
{
    store_item it;
    assert_int_equal(store_item_get(c, id, &it), STORE_OK);
    return it;
}

/* The item's totals, and the invariant they keep: what it was given
 * (created, and stock sets) is what is available, held, and sold less
 * what came back. */
static void assert_item(store_conn *c, int64_t id, int64_t stock, int64_t reserved, int64_t sold,
                        int64_t returned, int64_t given)
{
    store_item it = item(c, id);
    assert_int_equal(it.stock, stock);
    assert_int_equal(it.reserved, reserved);
    assert_int_equal(it.sold, sold);
    assert_int_equal(it.returned, returned);
    assert_int_equal(it.stock + it.reserved + it.sold - it.returned, given);
}

static int64_t now_ms(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A reservation of (item, quantity) pairs, unfenced. */
static store_new_reservation reservation(const char *request_id, const char *buyer,
                                         int64_t hold_ms, int nlines, const int64_t *pairs)
{
    store_new_reservation r = {.request_id = request_id, .buyer_id = buyer, .instance = "test",
                               .hold_ms = hold_ms, .nlines = nlines};
    for (int i = 0; i < nlines; i++)
        r.lines[i] = (store_line){pairs[2 * i], pairs[2 * i + 1], 0, {0, 0}};
    return r;
}

/* Reserves in a transaction of its own, as the service does. */
static int reserve(store_conn *c, const store_new_reservation *r, store_reservation *out)
{
    int rc = store_tx_begin(c);
    if (rc == STORE_OK)
        rc = store_tx_reserve(c, r, out);
    if (rc == STORE_OK)
        return store_tx_commit(c, NULL);
    store_tx_abort(c);
    return rc;
}

static int64_t reserve_one(store_conn *c, int64_t id, int64_t qty, const char *buyer,
                           int64_t hold_ms)
{
    int64_t pair[] = {id, qty};
    store_new_reservation r = reservation(NULL, buyer, hold_ms, 1, pair);
    store_reservation out;
    assert_int_equal(reserve(c, &r, &out), STORE_OK);
    return out.id;
}

static store_new_order order_of(const char *buyer, int64_t id, int64_t qty, int64_t remaining)
{
    store_new_order o = {.buyer_id = buyer, .instance = "test", .lock_mode = "atomic",
                         .nlines = 1};
    o.lines[0] = (store_line){id, qty, remaining, {0, 0}};
    return o;
}

/* An order's write as the atomic mode composes it: take, then the order. */
static int order(store_conn *c, const char *buyer, int64_t id, int64_t qty, store_order *out)
{
    int64_t left;
    int rc = store_tx_begin(c);
    if (rc == STORE_OK)
        rc = store_tx_take(c, id, qty, &left);
    store_new_order o = order_of(buyer, id, qty, left);
    if (rc == STORE_OK)
        rc = store_tx_add_order(c, &o, out);
    if (rc == STORE_OK)
        return store_tx_commit(c, NULL);
    store_tx_abort(c);
    return rc;
}

static int confirm(store_conn *c, int64_t id, store_reservation *res, store_order *o)
{
    store_new_order w = {.instance = "test", .lock_mode = "atomic"};
    int rc = store_tx_begin(c);
    if (rc == STORE_OK)
        rc = store_tx_reservation_confirm(c, id, &w, res, o);
    if (rc == STORE_OK)
        return store_tx_commit(c, NULL);
    store_tx_abort(c);
    return rc;
}

/* items[0..n) with their fences f (NULL, 0: unfenced). */
static int cancel_fenced(store_conn *c, int64_t id, const int64_t *items, const store_fence *f,
                         int n, store_reservation *res)
{
    int rc = store_tx_begin(c);
    if (rc == STORE_OK)
        rc = store_tx_reservation_cancel(c, id, items, f, n, res);
    if (rc == STORE_OK)
        return store_tx_commit(c, NULL);
    store_tx_abort(c);
    return rc;
}

static int cancel_order(store_conn *c, int64_t id, store_order *out)
{
    int rc = store_tx_begin(c);
    if (rc == STORE_OK)
        rc = store_tx_order_cancel(c, id, "cancel-1", "test", NULL, NULL, NULL, 0, out);
    if (rc == STORE_OK)
        return store_tx_commit(c, NULL);
    store_tx_abort(c);
    return rc;
}

/* The sweep's pass over every item (unfenced): how many it expired. */
static int sweep(store_conn *c, int64_t *lag)
{
    int64_t items[64], lags[64];
    int n, due, expired = 0;
    assert_int_equal(store_reservations_due(c, 64, items, 64, &n, &due), STORE_OK);
    if (n == 0)
        return 0;
    int rc = store_tx_begin(c);
    if (rc == STORE_OK)
        rc = store_tx_reservations_expire(c, items, NULL, n, 64, &expired, lags);
    if (rc == STORE_OK)
        rc = store_tx_commit(c, NULL);
    else
        store_tx_abort(c);
    assert_int_equal(rc, STORE_OK);
    if (lag && expired > 0)
        *lag = lags[0];
    return expired;
}

/* ---- reserve ---- */

static void test_a_reservation_takes_every_line_or_none(void **state)
{
    store_conn *c = conn(state);
    int64_t a = new_item(c, 5, 0), b = new_item(c, 1, 0);
    int64_t too_much[] = {a, 2, b, 2};
    store_new_reservation r = reservation(NULL, NULL, HOLD_LONG, 2, too_much);
    store_reservation out;
    assert_int_equal(reserve(c, &r, &out), STORE_ERR_INSUFFICIENT);
    assert_int_equal(out.nlines, 2); /* every line's stock, the short ones below quantity */
    assert_int_equal(out.lines[0].available, 5);
    assert_int_equal(out.lines[1].available, 1);
    assert_item(c, a, 5, 0, 0, 0, 5);
    assert_item(c, b, 1, 0, 0, 0, 1);

    int64_t fits[] = {a, 2, b, 1};
    r = reservation(NULL, NULL, HOLD_LONG, 2, fits);
    int64_t before = now_ms();
    assert_int_equal(reserve(c, &r, &out), STORE_OK);
    assert_true(out.id > 0);
    assert_int_equal(out.state, STORE_RES_HELD);
    assert_false(out.lapsed);
    assert_false(out.has_request_id);
    assert_string_equal(out.instance, "test");
    assert_true(out.expires_at_ms >= before + HOLD_LONG - 1000); /* the hosts' clocks agree */
    assert_true(out.expires_at_ms <= now_ms() + HOLD_LONG + 1000);
    assert_int_equal(out.nlines, 2);
    assert_int_equal(out.lines[0].item_id, a);
    assert_int_equal(out.lines[0].quantity, 2);
    assert_int_equal(out.lines[0].available, 3);
    assert_int_equal(out.lines[1].available, 0);
    assert_item(c, a, 3, 2, 0, 0, 5);
    assert_item(c, b, 0, 1, 0, 0, 1);
    int64_t held;
    assert_int_equal(store_reservations_held(c, &held), STORE_OK);
    assert_int_equal(held, 1);

    store_reservation got;
    assert_int_equal(store_reservation_get(c, out.id, &got), STORE_OK);
    assert_int_equal(got.expires_at_ms, out.expires_at_ms);
    assert_int_equal(got.nlines, 2);
    assert_int_equal(got.lines[1].item_id, b);
    assert_int_equal(store_reservation_get(c, out.id + 1, &got), STORE_ERR_NOT_FOUND);
    int64_t missing[] = {a, 1, 999, 1};
    r = reservation(NULL, NULL, HOLD_LONG, 2, missing);
    assert_int_equal(reserve(c, &r, &out), STORE_ERR_NOT_FOUND);
    assert_item(c, a, 3, 2, 0, 0, 5); /* the first line given back */
    store_put(*state, c);
}

static void test_a_reservations_request_id_is_used_once(void **state)
{
    store_conn *c = conn(state);
    int64_t a = new_item(c, 5, 0);
    int64_t pair[] = {a, 2};
    store_new_reservation r = reservation("res-1", "bob", HOLD_LONG, 1, pair);
    store_reservation first, again;
    assert_int_equal(reserve(c, &r, &first), STORE_OK);
    assert_true(first.has_request_id);
    assert_string_equal(first.request_id, "res-1");
    assert_string_equal(first.buyer_id, "bob");
    assert_int_equal(reserve(c, &r, &again), STORE_ERR_DUPLICATE);
    assert_int_equal(again.id, first.id);
    assert_int_equal(again.nlines, 1);
    assert_int_equal(again.lines[0].quantity, 2);
    assert_item(c, a, 3, 2, 0, 0, 5); /* taken once */
    /* the orders' requestIds are another namespace */
    store_order o;
    store_new_order w = order_of(NULL, a, 1, 2);
    w.request_id = "res-1";
    assert_int_equal(store_tx_begin(c), STORE_OK);
    assert_int_equal(store_tx_add_order(c, &w, &o), STORE_OK);
    assert_int_equal(store_tx_commit(c, NULL), STORE_OK);
    store_put(*state, c);
}

/* A fenced line writes its row only while the row carries its fence: a
 * newer holder's claim refuses it, and nothing is written. */
static void test_a_fenced_reservation_refused_by_a_newer_claim_writes_nothing(void **state)
{
    store_conn *c = conn(state);
    int64_t a = new_item(c, 5, 0), b = new_item(c, 5, 0), stock;
    store_fence f7 = {7, 0}, f9 = {9, 0};
    assert_int_equal(store_tx_begin(c), STORE_OK);
    assert_int_equal(store_stock_claim(c, a, &f7, &stock), STORE_OK);
    assert_int_equal(store_stock_claim(c, b, &f9, &stock), STORE_OK);
    assert_int_equal(store_tx_commit(c, NULL), STORE_OK);
    int64_t pairs[] = {a, 1, b, 1};
    store_new_reservation r = reservation(NULL, NULL, HOLD_LONG, 2, pairs);
    r.lines[0].fence = f7;
    r.lines[1].fence = f7; /* b carries 9 */
    store_reservation out;
    assert_int_equal(reserve(c, &r, &out), STORE_ERR_STALE);
    assert_int_equal(store_stale_token(c).fence, 9);
    assert_item(c, a, 5, 0, 0, 0, 5);
    assert_item(c, b, 5, 0, 0, 0, 5);
    r.lines[1].fence = f9;
    assert_int_equal(reserve(c, &r, &out), STORE_OK);
    /* the cancel's writes fenced as well, each line by its item's fence
     * (given here in another order than the lines: matched by item) */
    int64_t items[2] = {b, a};
    store_fence stale[2] = {{9, 0}, {6, 0}}, ours[2] = {{9, 0}, {7, 0}};
    assert_int_equal(cancel_fenced(c, out.id, items, stale, 2, &out), STORE_ERR_STALE);
    assert_item(c, a, 4, 1, 0, 0, 5);
    assert_int_equal(cancel_fenced(c, out.id, items, ours, 2, &out), STORE_OK);
    assert_item(c, a, 5, 0, 0, 0, 5);
    store_put(*state, c);
}

/* ---- one fate ---- */

static void test_a_confirm_turns_reserved_into_sold_once(void **state)
{
    store_conn *c = conn(state);
    int64_t a = new_item(c, 5, 0), b = new_item(c, 4, 0);
    int64_t pairs[] = {a, 2, b, 1};
    store_new_reservation r = reservation(NULL, "ann", HOLD_LONG, 2, pairs);
    store_reservation res;
    store_order o, again;
    assert_int_equal(reserve(c, &r, &res), STORE_OK);
    int64_t id = res.id;
    assert_int_equal(confirm(c, id, &res, &o), STORE_OK);
    assert_int_equal(res.state, STORE_RES_CONFIRMED);
    assert_int_equal(res.order_id, o.info.order_id);
    assert_int_equal(o.info.reservation_id, id);
    assert_true(o.info.has_buyer_id);
    assert_string_equal(o.info.buyer_id, "ann");
    assert_int_equal(o.nlines, 2);
    assert_int_equal(o.lines[0].remaining, 3); /* the stock the confirm leaves */
    assert_int_equal(o.lines[1].remaining, 3);
    assert_item(c, a, 3, 0, 2, 0, 5);
    assert_item(c, b, 3, 0, 1, 0, 4);
    assert_int_equal(item(c, a).line_count, 1);

    assert_int_equal(confirm(c, id, &res, &again), STORE_ERR_DUPLICATE); /* a replay */
    assert_int_equal(again.info.order_id, o.info.order_id);
    assert_int_equal(again.nlines, 2);
    assert_int_equal(res.state, STORE_RES_CONFIRMED);
    assert_int_equal(cancel_fenced(c, id, NULL, NULL, 0, &res), STORE_ERR_STATE);
    assert_int_equal(res.state, STORE_RES_CONFIRMED);
    assert_int_equal(store_reservation_extend(c, id, 1000, &res), STORE_ERR_STATE);
    assert_int_equal(res.state, STORE_RES_CONFIRMED);
    assert_item(c, a, 3, 0, 2, 0, 5);

    store_order read;
    assert_int_equal(store_order_get(c, o.info.order_id, &read), STORE_OK);
    assert_int_equal(read.info.reservation_id, id);
    assert_string_equal(read.info.buyer_id, "ann");
    assert_false(read.info.cancelled);
    assert_int_equal(store_reservation_get(c, id, &res), STORE_OK);
    assert_int_equal(res.order_id, o.info.order_id);
    assert_int_equal(confirm(c, id + 1, &res, &o), STORE_ERR_NOT_FOUND);
    int64_t held;
    assert_int_equal(store_reservations_held(c, &held), STORE_OK);
    assert_int_equal(held, 0);
    store_put(*state, c);
}

static void test_a_cancel_gives_the_units_back_once(void **state)
{
    store_conn *c = conn(state);
    int64_t a = new_item(c, 5, 0);
    int64_t id = reserve_one(c, a, 3, NULL, HOLD_LONG);
    store_reservation res;
    store_order o;
    assert_int_equal(cancel_fenced(c, id, NULL, NULL, 0, &res), STORE_OK);
    assert_int_equal(res.state, STORE_RES_CANCELLED);
    assert_int_equal(res.lines[0].available, 5);
    assert_item(c, a, 5, 0, 0, 0, 5);
    assert_int_equal(cancel_fenced(c, id, NULL, NULL, 0, &res), STORE_ERR_DUPLICATE); /* a replay */
    assert_int_equal(res.state, STORE_RES_CANCELLED);
    assert_item(c, a, 5, 0, 0, 0, 5);
    assert_int_equal(confirm(c, id, &res, &o), STORE_ERR_STATE);
    assert_int_equal(res.state, STORE_RES_CANCELLED);
    assert_int_equal(cancel_fenced(c, id + 1, NULL, NULL, 0, &res), STORE_ERR_NOT_FOUND);
    assert_int_equal(store_reservation_extend(c, id + 1, 1000, &res), STORE_ERR_NOT_FOUND);
    store_put(*state, c);
}

/* Lapsed is the database's clock's word: past expires_at nothing confirms,
 * cancels or extends it, and the sweep gives its units back, once. */
static void test_a_lapsed_reservation_is_refused_then_swept_once(void **state)
{
    store_conn *c = conn(state);
    int64_t a = new_item(c, 5, 2);
    int64_t id = reserve_one(c, a, 2, "cat", 30);
    store_reservation res;
    store_order o;
    sleep_ms(80);
    assert_int_equal(store_reservation_get(c, id, &res), STORE_OK);
    assert_int_equal(res.state, STORE_RES_HELD); /* as stored... */
    assert_true(res.lapsed);                     /* ...but past it */
    assert_int_equal(confirm(c, id, &res, &o), STORE_ERR_STATE);
    assert_true(res.lapsed);
    assert_int_equal(cancel_fenced(c, id, NULL, NULL, 0, &res), STORE_ERR_STATE);
    assert_int_equal(store_reservation_extend(c, id, HOLD_LONG, &res), STORE_ERR_STATE);
    assert_item(c, a, 3, 2, 0, 0, 5); /* still held until the sweep */
    int64_t held;
    assert_int_equal(store_reservations_held(c, &held), STORE_OK);
    assert_int_equal(held, 1);

    int64_t items[4];
    int n, due;
    assert_int_equal(store_reservations_due(c, 10, items, 4, &n, &due), STORE_OK);
    assert_int_equal(n, 1);
    assert_int_equal(due, 1);
    assert_int_equal(items[0], a);
    int64_t lag = -1;
    assert_int_equal(sweep(c, &lag), 1);
    assert_true(lag >= 50); /* it lapsed 30 ms in, 80 ms before */
    assert_item(c, a, 5, 0, 0, 0, 5);
    assert_int_equal(store_reservation_get(c, id, &res), STORE_OK);
    assert_int_equal(res.state, STORE_RES_EXPIRED);
    assert_false(res.lapsed);
    assert_int_equal(sweep(c, NULL), 0); /* once */
    assert_item(c, a, 5, 0, 0, 0, 5);
    assert_int_equal(confirm(c, id, &res, &o), STORE_ERR_STATE);
    assert_int_equal(res.state, STORE_RES_EXPIRED);
    assert_int_equal(cancel_fenced(c, id, NULL, NULL, 0, &res), STORE_ERR_STATE);
    /* the buyer's count went with it: the whole limit again */
    reserve_one(c, a, 2, "cat", HOLD_LONG);
    store_put(*state, c);
}

static void test_the_sweep_takes_only_the_lapsed_of_the_items_given(void **state)
{
    store_conn *c = conn(state);
    int64_t a = new_item(c, 5, 0), b = new_item(c, 5, 0);
    int64_t both[] = {a, 1, b, 1};
    store_new_reservation r = reservation(NULL, NULL, 30, 2, both);
    store_reservation res;
    assert_int_equal(reserve(c, &r, &res), STORE_OK);
    reserve_one(c, a, 1, NULL, 30);
    int64_t kept = reserve_one(c, a, 1, NULL, HOLD_LONG);
    sleep_ms(80);
    int expired;
    int64_t lags[8];
    store_fence fa = {0, 0};
    assert_int_equal(store_tx_begin(c), STORE_OK); /* a's lock alone: b's line is not ours */
    assert_int_equal(store_tx_reservations_expire(c, &a, &fa, 1, 8, &expired, lags), STORE_OK);
    assert_int_equal(store_tx_commit(c, NULL), STORE_OK);
    assert_int_equal(expired, 1);
    assert_item(c, a, 3, 2, 0, 0, 5);
    int64_t items[1];
    int n, due;
    assert_int_equal(store_reservations_due(c, 10, items, 1, &n, &due), STORE_OK);
    assert_int_equal(due, 0); /* its two items don't fit in one */
    assert_int_equal(sweep(c, NULL), 1);
    assert_item(c, a, 4, 1, 0, 0, 5);
    assert_item(c, b, 5, 0, 0, 0, 5);
    assert_int_equal(store_reservation_get(c, kept, &res), STORE_OK);
    assert_int_equal(res.state, STORE_RES_HELD);
    store_put(*state, c);
}

/* The sweep's writes are fenced too: under a token the row no longer
 * carries, nothing is given back (the caller rolls back) and the row's
 * token is told; under the row's own, the units come back. */
static void test_a_fenced_sweep_refused_by_a_newer_claim_gives_nothing_back(void **state)
{
    store_conn *c = conn(state);
    int64_t a = new_item(c, 5, 5), stock, lags[4];
    reserve_one(c, a, 2, "liz", 20);
    reserve_one(c, a, 1, "max", 20);
    store_fence f7 = {7, 0}, f6 = {6, 0};
    assert_int_equal(store_tx_begin(c), STORE_OK);
    assert_int_equal(store_stock_claim(c, a, &f7, &stock), STORE_OK);
    assert_int_equal(store_tx_commit(c, NULL), STORE_OK);
    sleep_ms(60);
    int expired;
    assert_int_equal(store_tx_begin(c), STORE_OK);
    assert_int_equal(store_tx_reservations_expire(c, &a, &f6, 1, 4, &expired, lags),
                     STORE_ERR_STALE);
    assert_int_equal(store_stale_token(c).fence, 7);
    store_tx_abort(c);
    assert_item(c, a, 2, 3, 0, 0, 5);
    assert_int_equal(store_tx_begin(c), STORE_OK);
    assert_int_equal(store_tx_reservations_expire(c, &a, &f7, 1, 4, &expired, lags), STORE_OK);
    assert_int_equal(store_tx_commit(c, NULL), STORE_OK);
    assert_int_equal(expired, 2);
    assert_true(lags[0] >= 20 && lags[1] >= 20);
    assert_item(c, a, 5, 0, 0, 0, 5);
    reserve_one(c, a, 5, "liz", HOLD_LONG); /* liz's 2 left her count */
    store_put(*state, c);
}

static void test_an_extend_moves_the_expiry_while_held(void **state)
{
    store_conn *c = conn(state);
    int64_t a = new_item(c, 5, 0);
    int64_t id = reserve_one(c, a, 1, NULL, 200);
    store_reservation res;
    store_order o;
    int64_t before = now_ms();
    assert_int_equal(store_reservation_extend(c, id, HOLD_LONG, &res), STORE_OK);
    assert_true(res.expires_at_ms >= before + HOLD_LONG - 1000);
    assert_int_equal(res.state, STORE_RES_HELD);
    sleep_ms(300);
    assert_int_equal(sweep(c, NULL), 0);
    assert_int_equal(confirm(c, id, &res, &o), STORE_OK);
    store_put(*state, c);
}

/* A confirm and the sweep, on two connections, at the moment it lapses:
 * exactly one of them wins, each time, and the units have one fate. */
struct racer {
    store *s;
    int64_t id;
    int rc;      /* the confirm's answer, or the sweep's count */
};

static void *confirm_run(void *arg)
{
    struct racer *r = arg;
    char err[256];
    store_conn *c;
    store_reservation res;
    store_order o;
    if (store_get(r->s, &c, err, sizeof(err)) != STORE_OK)
        return NULL;
    do
        r->rc = confirm(c, r->id, &res, &o);
    while (r->rc == STORE_ERR_BUSY);
    store_put(r->s, c);
    return NULL;
}

static void *sweep_run(void *arg)
{
    struct racer *r = arg;
    char err[256];
    store_conn *c;
    store_reservation res;
    if (store_get(r->s, &c, err, sizeof(err)) != STORE_OK)
        return NULL;
    int64_t end = now_ms() + 5000 * TH_SLOWER;
    r->rc = 0;
    do {
        int64_t items[4], lags[4];
        int n = 0, due, expired = 0;
        if (store_reservations_due(c, 4, items, 4, &n, &due) == STORE_OK && n > 0 &&
            store_tx_begin(c) == STORE_OK) {
            if (store_tx_reservations_expire(c, items, NULL, n, 4, &expired, lags) == STORE_OK &&
                store_tx_commit(c, NULL) == STORE_OK)
                r->rc += expired;
            else
                store_tx_abort(c);
        }
    } while (store_reservation_get(c, r->id, &res) == STORE_OK && res.state == STORE_RES_HELD &&
             now_ms() < end);
    store_put(r->s, c);
    return NULL;
}

static void test_a_confirm_racing_the_expiry_has_one_winner(void **state)
{
    store_conn *c = conn(state);
    int64_t a = new_item(c, 100, 0), sold = 0, confirmed = 0;
    for (int round = 0; round < 12; round++) {
        struct racer conf = {*state, 0, 0}, sw = {*state, 0, 0};
        conf.id = sw.id = reserve_one(c, a, 1, NULL, 20);
        sleep_ms(round % 4 * 7 + 5); /* around the moment it lapses */
        pthread_t t1, t2;
        pthread_create(&t1, NULL, confirm_run, &conf);
        pthread_create(&t2, NULL, sweep_run, &sw);
        pthread_join(t1, NULL);
        pthread_join(t2, NULL);
        store_reservation res;
        assert_int_equal(store_reservation_get(c, conf.id, &res), STORE_OK);
        if (conf.rc == STORE_OK) {
            assert_int_equal(res.state, STORE_RES_CONFIRMED);
            assert_int_equal(sw.rc, 0);
            sold++, confirmed++;
        } else {
            assert_int_equal(conf.rc, STORE_ERR_STATE);
            assert_int_equal(res.state, STORE_RES_EXPIRED);
            assert_int_equal(sw.rc, 1);
        }
        assert_item(c, a, 100 - sold, 0, sold, 0, 100);
    }
    print_message("confirmed %lld of 12 racing the sweep\n", (long long)confirmed);
    store_put(*state, c);
}

/* ---- returns ---- */

static void test_an_order_is_cancelled_once_with_its_returns(void **state)
{
    store_conn *c = conn(state);
    int64_t a = new_item(c, 10, 3);
    store_order o, out;
    assert_int_equal(order(c, "dan", a, 3, &o), STORE_OK);
    assert_true(o.info.has_buyer_id);
    assert_item(c, a, 7, 0, 3, 0, 10);
    assert_int_equal(order(c, "dan", a, 1, &out), STORE_ERR_BUYER_LIMIT);

    assert_int_equal(cancel_order(c, o.info.order_id, &out), STORE_OK);
    assert_true(out.info.cancelled);
    assert_int_equal(out.nlines, 1);
    assert_int_equal(out.lines[0].remaining, 10); /* the stock after its return */
    assert_item(c, a, 10, 0, 3, 3, 10);
    assert_int_equal(item(c, a).line_count, 1); /* the ledger only grew */

    assert_int_equal(store_tx_begin(c), STORE_OK);
    assert_int_equal(store_tx_order_cancel(c, o.info.order_id, "another", "test", NULL, NULL,
                                           NULL, 0, &out), STORE_ERR_DUPLICATE);
    store_tx_abort(c);
    assert_int_equal(out.lines[0].remaining, 10);
    assert_true(out.info.cancelled);
    assert_item(c, a, 10, 0, 3, 3, 10); /* once */
    assert_int_equal(store_order_get(c, o.info.order_id, &out), STORE_OK);
    assert_true(out.info.cancelled);
    assert_int_equal(cancel_order(c, o.info.order_id + 1, &out), STORE_ERR_NOT_FOUND);

    assert_int_equal(order(c, "dan", a, 3, &o), STORE_OK); /* the cancelled didn't count */
    assert_item(c, a, 7, 0, 6, 3, 10);
    store_put(*state, c);
}

struct canceller {
    store *s;
    int64_t order_id;
    int rc;
};

static void *cancel_run(void *arg)
{
    struct canceller *k = arg;
    char err[256];
    store_conn *c;
    store_order out;
    if (store_get(k->s, &c, err, sizeof(err)) != STORE_OK)
        return NULL;
    do
        k->rc = cancel_order(c, k->order_id, &out);
    while (k->rc == STORE_ERR_BUSY);
    store_put(k->s, c);
    return NULL;
}

/* Three cancels of one order at once (three replicas): one returns the
 * units, the others are told it was cancelled already. */
static void test_an_order_cancel_racing_itself_returns_once(void **state)
{
    store_conn *c = conn(state);
    int64_t a = new_item(c, 10, 0), b = new_item(c, 10, 0);
    for (int round = 0; round < 4; round++) {
        store_new_order w = {.buyer_id = "kim", .instance = "test", .lock_mode = "atomic",
                             .nlines = 2};
        int64_t left;
        store_order o;
        assert_int_equal(store_tx_begin(c), STORE_OK);
        assert_int_equal(store_tx_take(c, a, 1, &left), STORE_OK);
        w.lines[0] = (store_line){a, 1, left, {0, 0}};
        assert_int_equal(store_tx_take(c, b, 2, &left), STORE_OK);
        w.lines[1] = (store_line){b, 2, left, {0, 0}};
        assert_int_equal(store_tx_add_order(c, &w, &o), STORE_OK);
        assert_int_equal(store_tx_commit(c, NULL), STORE_OK);
        struct canceller k[3];
        pthread_t t[3];
        for (int i = 0; i < 3; i++) {
            k[i] = (struct canceller){*state, o.info.order_id, -100};
            pthread_create(&t[i], NULL, cancel_run, &k[i]);
        }
        int won = 0;
        for (int i = 0; i < 3; i++) {
            pthread_join(t[i], NULL);
            if (k[i].rc != STORE_OK)
                assert_int_equal(k[i].rc, STORE_ERR_DUPLICATE);
            won += k[i].rc == STORE_OK;
        }
        assert_int_equal(won, 1);
        assert_item(c, a, 10, 0, round + 1, round + 1, 10);
        assert_item(c, b, 10, 0, 2 * (round + 1), 2 * (round + 1), 10);
    }
    store_put(*state, c);
}

static void test_a_confirmed_order_cancelled_returns_its_units(void **state)
{
    store_conn *c = conn(state);
    int64_t a = new_item(c, 5, 2);
    int64_t id = reserve_one(c, a, 2, "eve", HOLD_LONG);
    store_reservation res;
    store_order o, out;
    assert_int_equal(confirm(c, id, &res, &o), STORE_OK);
    assert_int_equal(reserve(c, &(store_new_reservation){.buyer_id = "eve", .instance = "t",
                                                         .hold_ms = HOLD_LONG, .nlines = 1,
                                                         .lines = {{a, 1, 0, {0, 0}}}},
                             &res), STORE_ERR_BUYER_LIMIT); /* confirmed still counts */
    assert_int_equal(cancel_order(c, o.info.order_id, &out), STORE_OK);
    assert_item(c, a, 5, 0, 2, 2, 5);
    reserve_one(c, a, 2, "eve", HOLD_LONG);
    store_put(*state, c);
}

/* ---- per-buyer limits ---- */

static void test_a_buyers_held_and_bought_units_count_against_the_limit(void **state)
{
    store_conn *c = conn(state);
    int64_t a = new_item(c, 100, 3);
    int64_t pair[] = {a, 1};
    store_new_reservation r = reservation(NULL, NULL, HOLD_LONG, 1, pair);
    store_reservation res;
    store_order o;
    assert_int_equal(reserve(c, &r, &res), STORE_ERR_BUYER_REQUIRED);
    assert_int_equal(store_limit_item(c).item_id, a);
    assert_int_equal(store_limit_item(c).limit, 3);
    assert_int_equal(order(c, NULL, a, 1, &o), STORE_ERR_BUYER_REQUIRED);
    assert_int_equal(store_limit_item(c).item_id, a);
    assert_item(c, a, 100, 0, 0, 0, 100);

    int64_t held = reserve_one(c, a, 2, "fay", HOLD_LONG);
    assert_int_equal(order(c, "fay", a, 2, &o), STORE_ERR_BUYER_LIMIT);
    store_limit_info li = store_limit_item(c);
    assert_int_equal(li.item_id, a);
    assert_int_equal(li.limit, 3);
    assert_int_equal(li.had, 2);
    assert_int_equal(li.asked, 2);
    assert_item(c, a, 98, 2, 0, 0, 100); /* nothing written */
    assert_int_equal(order(c, "fay", a, 1, &o), STORE_OK);
    r = reservation(NULL, "fay", HOLD_LONG, 1, pair);
    assert_int_equal(reserve(c, &r, &res), STORE_ERR_BUYER_LIMIT);
    assert_int_equal(store_limit_item(c).had, 3);
    assert_int_equal(order(c, "gus", a, 3, &o), STORE_OK); /* a buyer of his own */
    /* cancelled: no longer counts */
    assert_int_equal(cancel_fenced(c, held, NULL, NULL, 0, &res), STORE_OK);
    assert_int_equal(order(c, "fay", a, 2, &o), STORE_OK);
    assert_item(c, a, 94, 0, 6, 0, 100);
    store_put(*state, c);
}

/* A cart refused for one line counts none of its lines: in the same
 * transaction the buyer still has the whole limit of the others, and
 * group commit's savepoint per order undoes nothing of the next. */
static void test_a_cart_refused_by_a_limit_counts_none_of_its_lines(void **state)
{
    store_conn *c = conn(state);
    int64_t a = new_item(c, 10, 2), b = new_item(c, 10, 1), left;
    store_new_order cart = {.buyer_id = "hal", .instance = "test", .lock_mode = "atomic",
                            .nlines = 2};
    cart.lines[0] = (store_line){a, 2, 8, {0, 0}};
    cart.lines[1] = (store_line){b, 2, 8, {0, 0}};
    store_order o;
    assert_int_equal(store_tx_begin(c), STORE_OK);
    assert_int_equal(store_tx_add_order(c, &cart, &o), STORE_ERR_BUYER_LIMIT);
    assert_int_equal(store_limit_item(c).item_id, b);
    assert_int_equal(store_tx_take(c, a, 2, &left), STORE_OK);
    store_new_order alone = order_of("hal", a, 2, left);
    assert_int_equal(store_tx_add_order(c, &alone, &o), STORE_OK); /* a's 2 not counted */
    assert_int_equal(store_tx_commit(c, NULL), STORE_OK);

    cart.buyer_id = alone.buyer_id = "ivy";
    assert_int_equal(store_tx_begin(c), STORE_OK);
    assert_int_equal(store_tx_savepoint(c), STORE_OK); /* as group commit places each order */
    assert_int_equal(store_tx_add_order(c, &cart, &o), STORE_ERR_BUYER_LIMIT);
    assert_int_equal(store_tx_rollback_to_savepoint(c), STORE_OK);
    assert_int_equal(store_tx_savepoint(c), STORE_OK);
    assert_int_equal(store_tx_take(c, a, 2, &left), STORE_OK);
    alone.lines[0].remaining = left;
    assert_int_equal(store_tx_add_order(c, &alone, &o), STORE_OK);
    assert_int_equal(store_tx_commit(c, NULL), STORE_OK);
    assert_item(c, a, 6, 0, 4, 0, 10);
    assert_item(c, b, 10, 0, 0, 0, 10);
    store_put(*state, c);
}

static void test_a_stock_set_keeps_or_changes_the_limit(void **state)
{
    store_conn *c = conn(state);
    int64_t a = new_item(c, 10, 4);
    store_item it;
    assert_int_equal(store_item_set_stock(c, a, 12, -1, NULL, NULL, &it), STORE_OK);
    assert_int_equal(it.per_buyer_limit, 4);
    assert_int_equal(it.stock, 12);
    assert_int_equal(store_item_set_stock(c, a, 12, 0, NULL, NULL, &it), STORE_OK);
    assert_int_equal(it.per_buyer_limit, 0);
    assert_int_equal(store_tx_begin(c), STORE_OK);
    assert_int_equal(store_tx_set_buyer_limit(c, a, 7), STORE_OK);
    assert_int_equal(store_tx_set_buyer_limit(c, a + 1, 7), STORE_ERR_NOT_FOUND);
    assert_int_equal(store_tx_commit(c, NULL), STORE_OK);
    assert_int_equal(item(c, a).per_buyer_limit, 7);
    store_item created;
    assert_int_equal(store_item_create(c, "w", 3, "item-1", 5, &created), STORE_OK);
    assert_int_equal(store_item_create(c, "w", 3, "item-1", 5, &it), STORE_ERR_DUPLICATE);
    assert_int_equal(it.id, created.id);
    assert_int_equal(it.per_buyer_limit, 5);
    store_put(*state, c);
}

/* ---- an upgrade in place ---- */

static void apply_file(sqlite3 *db, const char *file)
{
    char *sql = th_read_file(file);
    assert_non_null(sql);
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    free(sql);
}

/* A database of schema version 6, with an item and an order, opened: the
 * item reads as it was with nothing reserved, returned or limited, its
 * order with no buyer, and it takes reservations. */
static void test_a_database_of_the_previous_schema_is_upgraded_in_place(void **state)
{
    (void)state;
    char old[160];
    snprintf(old, sizeof(old), "%s/six.db", th_be.dir);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(old, &db), SQLITE_OK);
    static const char *const files[] = {"001_init", "002_handoff_seq", "003_orders_and_lines",
                                        "004_item_totals", "005_write_probe",
                                        "006_item_request_ids"};
    for (int i = 0; i < 6; i++) {
        char path[80];
        snprintf(path, sizeof(path), "schema/sqlite/%s.sql", files[i]);
        apply_file(db, path);
    }
    assert_int_equal(sqlite3_exec(db, "PRAGMA user_version = 6; "
                     "INSERT INTO items (name, stock, created_stock) VALUES ('old', 7, 9); "
                     "INSERT INTO orders (id, request_id, instance_id, lock_mode) "
                     "VALUES (4, 'r-4', 'a', 'redis'); "
                     "INSERT INTO order_lines (order_id, item_id, quantity, remaining) "
                     "VALUES (4, 1, 2, 7)", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);

    store *s = open_store(old);
    assert_non_null(s);
    char err[256];
    store_conn *c;
    assert_int_equal(store_get(s, &c, err, sizeof(err)), STORE_OK);
    assert_item(c, 1, 7, 0, 2, 0, 9);
    assert_int_equal(item(c, 1).per_buyer_limit, 0);
    store_order o;
    assert_int_equal(store_order_by_request(c, "r-4", &o), STORE_OK);
    assert_false(o.info.has_buyer_id);
    assert_int_equal(o.info.reservation_id, 0);
    assert_false(o.info.cancelled);
    int64_t id = reserve_one(c, 1, 3, NULL, HOLD_LONG);
    store_reservation res;
    assert_int_equal(confirm(c, id, &res, &o), STORE_OK);
    assert_int_equal(cancel_order(c, 4, &o), STORE_OK);
    assert_item(c, 1, 6, 0, 5, 2, 9);
    store_put(s, c);
    store_close(s);
}

/* The same on PostgreSQL: a database of schema version 5 (as a stockd of
 * the previous version left it) takes the new columns and tables in place. */
static void test_a_pg_database_of_the_previous_schema_is_upgraded_in_place(void **state)
{
    (void)state;
    char url[256];
    assert_int_equal(th_pg_create_db(&th_be.server, "five", url, sizeof(url)), 0);
    static const char *const files[] = {"001_init", "002_item_totals", "003_write_probe",
                                        "004_item_request_ids", "005_tx_marker"};
    assert_int_equal(th_pg_exec(url, "CREATE TABLE stockd_schema (version integer PRIMARY "
                                     "KEY, name text NOT NULL, applied_at timestamptz NOT "
                                     "NULL DEFAULT now())"), 0);
    for (int i = 0; i < 5; i++) {
        char path[80], sql[160];
        snprintf(path, sizeof(path), "schema/postgres/%s.sql", files[i]);
        char *text = th_read_file(path);
        assert_non_null(text);
        assert_int_equal(th_pg_exec(url, text), 0);
        free(text);
        snprintf(sql, sizeof(sql), "INSERT INTO stockd_schema (version, name) VALUES "
                 "(%d, '%s.sql')", i + 1, files[i]);
        assert_int_equal(th_pg_exec(url, sql), 0);
    }
    assert_int_equal(th_pg_exec(url, "INSERT INTO items (name, stock, created_stock) "
                                     "VALUES ('old', 7, 9); "
                                     "INSERT INTO orders (request_id, instance_id, lock_mode) "
                                     "VALUES ('r-4', 'a', 'redis'); "
                                     "INSERT INTO order_lines (order_id, item_id, quantity, "
                                     "remaining) VALUES (1, 1, 2, 7)"), 0);
    store *s = open_store(url);
    assert_non_null(s);
    char err[256];
    store_conn *c;
    assert_int_equal(store_get(s, &c, err, sizeof(err)), STORE_OK);
    assert_item(c, 1, 7, 0, 2, 0, 9);
    store_order o;
    assert_int_equal(store_order_by_request(c, "r-4", &o), STORE_OK);
    assert_false(o.info.has_buyer_id);
    assert_false(o.info.cancelled);
    int64_t id = reserve_one(c, 1, 3, NULL, HOLD_LONG);
    store_reservation res;
    assert_int_equal(confirm(c, id, &res, &o), STORE_OK);
    assert_int_equal(cancel_order(c, 1, &o), STORE_OK);
    assert_item(c, 1, 6, 0, 5, 2, 9);
    store_put(s, c);
    store_close(s);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
#define BOTH                                                                   \
    T(test_a_reservation_takes_every_line_or_none),                            \
    T(test_a_reservations_request_id_is_used_once),                            \
    T(test_a_fenced_reservation_refused_by_a_newer_claim_writes_nothing),      \
    T(test_a_confirm_turns_reserved_into_sold_once),                           \
    T(test_a_cancel_gives_the_units_back_once),                                \
    T(test_a_lapsed_reservation_is_refused_then_swept_once),                   \
    T(test_the_sweep_takes_only_the_lapsed_of_the_items_given),                \
    T(test_a_fenced_sweep_refused_by_a_newer_claim_gives_nothing_back),       \
    T(test_an_extend_moves_the_expiry_while_held),                             \
    T(test_a_confirm_racing_the_expiry_has_one_winner),                        \
    T(test_an_order_is_cancelled_once_with_its_returns),                       \
    T(test_an_order_cancel_racing_itself_returns_once),                        \
    T(test_a_confirmed_order_cancelled_returns_its_units),                     \
    T(test_a_buyers_held_and_bought_units_count_against_the_limit),            \
    T(test_a_cart_refused_by_a_limit_counts_none_of_its_lines),                \
    T(test_a_stock_set_keeps_or_changes_the_limit)
    const struct CMUnitTest sqlite_tests[] = {
        BOTH,
        T(test_a_database_of_the_previous_schema_is_upgraded_in_place),
    };
    const struct CMUnitTest pg_tests[] = {
        BOTH,
        T(test_a_pg_database_of_the_previous_schema_is_upgraded_in_place),
    };
    /* PostgreSQL is not optional: make deps installs it like redis-server */
    return cmocka_run_group_tests_name("reservations on SQLite", sqlite_tests, th_backend_sqlite,
                                       NULL) +
           cmocka_run_group_tests_name("reservations on PostgreSQL", pg_tests, th_backend_pg,
                                       th_backend_pg_end);
}
