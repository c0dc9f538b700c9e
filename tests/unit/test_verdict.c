/* test_verdict.c - the checker fed hand-made runs: a clean flash sale, then
 * each way a broken service shows up (oversold, lost updates, stock leaks,
 * deductions nobody was told about, acknowledgements with no ledger row, false
 * refusals), and the undetermined answers that must not count as violations;
 * then carts over several items, whose orders must be all or nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "loadgen/verdict.h"

#define MAXR 2000
#define NITEMS 3
#define RUN_ID "run"

/* A hand-made run on NITEMS items: records 0..n-1 with requestIds
 * "run-0-<index>" (as the load names them, so the order examples name them
 * too), their lines, and a ledger per item. The single-item tests use item 0. */
typedef struct fake {
    lg_rec recs[MAXR];
    lg_line lines[MAXR * 2];
    size_t n, nlines;
    lg_ledger_row rows[NITEMS][MAXR];
    char ids[NITEMS][MAXR][32];
    size_t nrows[NITEMS];
    lg_item_check items[NITEMS];
    lg_item_check item; /* item 0 after check() */
    lg_order_check orders;
} fake;

static fake *fake_new(long long stock0)
{
    fake *f = calloc(1, sizeof(*f));
    for (int k = 0; k < NITEMS; k++) {
        lg_item_check_init(&f->items[k], 7 + k);
        f->items[k].stock0 = stock0;
    }
    return f;
}

/* An order of n lines: items[k] x qty[k], answered outcome with rem[k]
 * remaining (rem NULL: -1 each). Returns its index. */
static size_t add_order(fake *f, int outcome, int n, const int *items, const int *qty,
                        const long long *rem)
{
    lg_rec *r = &f->recs[f->n];
    r->first = (uint32_t)f->nlines;
    r->nlines = (uint8_t)n;
    r->outcome = (uint8_t)outcome;
    for (int k = 0; k < n; k++) {
        lg_line *l = &f->lines[f->nlines++];
        l->item = (uint32_t)items[k];
        l->quantity = qty[k];
        l->remaining = rem ? rem[k] : -1;
        l->seen = 0;
    }
    return f->n++;
}

static size_t add_rec(fake *f, int outcome, int quantity, long long remaining)
{
    return add_order(f, outcome, 1, (int[]){0}, (int[]){quantity}, (long long[]){remaining});
}

/* A ledger row on item for record i (or for no record of this run when i is -1). */
static void add_row_on(fake *f, int item, long i, long long quantity)
{
    size_t n = f->nrows[item]++;
    snprintf(f->ids[item][n], sizeof(f->ids[0][0]), i < 0 ? "other-%ld" : RUN_ID "-0-%ld",
             i < 0 ? (long)n : i);
    f->rows[item][n].request_id = f->ids[item][n];
    f->rows[item][n].quantity = quantity;
}

static void add_row(fake *f, long i, long long quantity)
{
    add_row_on(f, 0, i, quantity);
}

static lg_rec *lookup(void *arg, const char *rid, lg_line **lines)
{
    fake *f = arg;
    if (strncmp(rid, RUN_ID "-0-", 6) != 0)
        return NULL;
    size_t i = strtoul(rid + 6, NULL, 10);
    if (i >= f->n)
        return NULL;
    *lines = &f->lines[f->recs[i].first];
    return &f->recs[i];
}

static lg_batch batch_of(fake *f)
{
    lg_batch b = {f->recs, f->n, f->lines, f->nlines, NULL, NULL};
    return b;
}

/* Tallies the answers, sets every item's final state from stock1/sold1
 * (NULL: as before the run) and reconciles the ledgers of the items whose bit
 * is in ledger_mask, then the missing lines and the orders. */
static void reconcile(fake *f, const long long *stock1, const long long *sold1,
                      unsigned ledger_mask)
{
    lg_batch b = batch_of(f);
    assert_int_equal(lg_verdict_answers(f->items, NITEMS, &b, 1), 0);
    for (int k = 0; k < NITEMS; k++) {
        f->items[k].stock1 = stock1 ? stock1[k] : f->items[k].stock0;
        f->items[k].sold1 = sold1 ? sold1[k] : 0;
        if (ledger_mask & (1u << k))
            lg_verdict_ledger(&f->items[k], k, f->rows[k], f->nrows[k], lookup, f);
    }
    lg_verdict_missing(f->items, NITEMS, &b, 1);
    lg_verdict_orders(f->items, NITEMS, &b, 1, RUN_ID, &f->orders);
}

/* Runs the checker on item 0: answers, then (when ledger) rows, then missing;
 * returns the number of violations and fills out[]. */
static int check(fake *f, long long stock1, long long sold1, int ledger, lg_finding *out,
                 int *nfind)
{
    long long st[NITEMS] = {stock1, f->items[1].stock0, f->items[2].stock0};
    long long so[NITEMS] = {sold1, 0, 0};
    reconcile(f, st, so, ledger ? 1u : 0u);
    f->item = f->items[0];
    int v;
    *nfind = lg_verdict_judge(&f->item, out, LG_FINDING_COUNT, &v);
    return v;
}

static const lg_finding *find(const lg_finding *out, int n, int kind)
{
    for (int i = 0; i < n; i++)
        if (out[i].kind == kind)
            return &out[i];
    return NULL;
}

/* The flash sale done right: 100 units sell one by one, 900 are refused. */
static fake *clean_sale(void)
{
    fake *f = fake_new(100);
    for (int i = 0; i < 100; i++)
        add_row(f, (long)add_rec(f, LG_OUT_OK, 1, 99 - i), 1);
    for (int i = 0; i < 900; i++)
        add_rec(f, LG_OUT_INSUFFICIENT, 1, 0);
    return f;
}

static void test_clean_flash_sale_passes_with_and_without_the_ledger(void **state)
{
    (void)state;
    lg_finding out[LG_FINDING_COUNT];
    int n;
    for (int ledger = 0; ledger <= 1; ledger++) {
        fake *f = clean_sale();
        assert_int_equal(check(f, 0, 100, ledger, out, &n), 0);
        assert_int_equal(n, 0);
        assert_int_equal(f->item.acked_qty, 100);
        assert_int_equal(f->item.refused_n, 900);
        assert_int_equal(f->item.matched_qty, ledger ? 100 : 0);
        free(f);
    }
}

static void test_negative_stock_is_oversold(void **state)
{
    (void)state;
    fake *f = fake_new(3);
    for (int i = 0; i < 5; i++)
        add_row(f, (long)add_rec(f, LG_OUT_OK, 1, 2 - i), 1);
    lg_finding out[LG_FINDING_COUNT];
    int n;
    assert_true(check(f, -2, 5, 1, out, &n) > 0);
    const lg_finding *x = find(out, n, LG_V_OVERSOLD);
    assert_non_null(x);
    assert_int_equal(x->amount, 2);
    assert_non_null(strstr(x->text, "oversold by 2"));
    assert_null(find(out, n, LG_V_LOST_UPDATES)); /* -2 + 5 == 3: the ledger agrees */
    free(f);
}

/* Mode none: 12 holders read the same 10, each writes 10 - 1 = 9 ... */
static void test_lost_updates_that_oversell_report_both(void **state)
{
    (void)state;
    fake *f = fake_new(10);
    for (int i = 0; i < 12; i++)
        add_row(f, (long)add_rec(f, LG_OUT_OK, 1, i < 6 ? 9 : 8), 1);
    lg_finding out[LG_FINDING_COUNT];
    int n;
    assert_true(check(f, 8, 12, 1, out, &n) >= 2);
    const lg_finding *over = find(out, n, LG_V_OVERSOLD), *lost = find(out, n, LG_V_LOST_UPDATES);
    assert_non_null(over);
    assert_int_equal(over->amount, 2); /* 12 acknowledged of 10 */
    assert_non_null(lost);
    assert_int_equal(lost->amount, 10); /* stock 8 + sold 12 - 10 */
    assert_int_equal(f->item.dup_remaining, 10);
    assert_non_null(strstr(lost->text, "lost updates 10"));
    free(f);
}

static void test_lost_update_without_oversell_is_still_caught(void **state)
{
    (void)state;
    fake *f = fake_new(100);
    long long rem[] = {99, 98, 98, 97}; /* two holders read 99 */
    for (int i = 0; i < 4; i++)
        add_row(f, (long)add_rec(f, LG_OUT_OK, 1, rem[i]), 1);
    lg_finding out[LG_FINDING_COUNT];
    int n;
    assert_int_equal(check(f, 97, 4, 1, out, &n), 1);
    const lg_finding *lost = find(out, n, LG_V_LOST_UPDATES);
    assert_non_null(lost);
    assert_int_equal(lost->amount, 1);
    assert_null(find(out, n, LG_V_OVERSOLD));
    free(f);
}

static void test_repeated_remaining_alone_is_a_lost_update(void **state)
{
    (void)state;
    /* the totals agree, but two answers claim the same remaining stock */
    fake *f = fake_new(10);
    add_row(f, (long)add_rec(f, LG_OUT_OK, 1, 9), 1);
    add_row(f, (long)add_rec(f, LG_OUT_OK, 1, 9), 1);
    lg_finding out[LG_FINDING_COUNT];
    int n;
    assert_int_equal(check(f, 8, 2, 1, out, &n), 1);
    assert_int_equal(find(out, n, LG_V_LOST_UPDATES)->amount, 1);
    free(f);
}

static void test_stock_falling_without_ledger_rows_is_a_leak(void **state)
{
    (void)state;
    fake *f = fake_new(50);
    add_row(f, (long)add_rec(f, LG_OUT_OK, 2, 48), 2);
    lg_finding out[LG_FINDING_COUNT];
    int n;
    assert_int_equal(check(f, 45, 2, 1, out, &n), 1);
    const lg_finding *leak = find(out, n, LG_V_STOCK_LEAK);
    assert_non_null(leak);
    assert_int_equal(leak->amount, 3);
    free(f);
}

static void test_interrupted_request_that_deducted_is_unacknowledged(void **state)
{
    (void)state;
    fake *f = fake_new(10);
    add_row(f, (long)add_rec(f, LG_OUT_OK, 1, 9), 1);
    add_row(f, (long)add_rec(f, LG_OUT_LOCK_INTERRUPTED, 1, -1), 1); /* said rolled back */
    add_rec(f, LG_OUT_LOCK_INTERRUPTED, 1, -1);                      /* and was */
    lg_finding out[LG_FINDING_COUNT];
    int n;
    assert_int_equal(check(f, 8, 2, 1, out, &n), 1);
    const lg_finding *x = find(out, n, LG_V_UNACKED);
    assert_non_null(x);
    assert_int_equal(x->amount, 1);
    assert_int_equal(f->item.refused_rows_by[LG_OUT_LOCK_INTERRUPTED], 1);
    assert_non_null(strstr(x->text, "1 answered lock_interrupted"));
    free(f);
}

static void test_foreign_and_duplicate_rows_are_unacknowledged(void **state)
{
    (void)state;
    fake *f = fake_new(10);
    long a = (long)add_rec(f, LG_OUT_OK, 2, 8);
    add_row(f, a, 2);
    add_row(f, a, 2);  /* the same requestId deducted twice */
    add_row(f, -1, 1); /* someone else's deduction */
    lg_finding out[LG_FINDING_COUNT];
    int n;
    assert_int_equal(check(f, 5, 5, 1, out, &n), 1);
    const lg_finding *x = find(out, n, LG_V_UNACKED);
    assert_int_equal(x->amount, 3);
    assert_int_equal(f->item.dup_rows, 1);
    assert_int_equal(f->item.foreign_rows, 1);
    free(f);
}

static void test_row_with_another_quantity_is_not_ours(void **state)
{
    (void)state;
    fake *f = fake_new(10);
    long a = (long)add_rec(f, LG_OUT_OK, 1, 9);
    add_row(f, a, 3);
    lg_finding out[LG_FINDING_COUNT];
    int n;
    assert_int_equal(check(f, 7, 3, 1, out, &n), 2);
    assert_int_equal(find(out, n, LG_V_UNACKED)->amount, 3);
    assert_int_equal(find(out, n, LG_V_UNRECORDED)->amount, 1);
    free(f);
}

static void test_acknowledged_deduction_missing_from_the_ledger(void **state)
{
    (void)state;
    fake *f = fake_new(10);
    add_row(f, (long)add_rec(f, LG_OUT_OK, 1, 9), 1);
    add_rec(f, LG_OUT_OK, 1, 8); /* answered 200, never written */
    lg_finding out[LG_FINDING_COUNT];
    int n;
    assert_int_equal(check(f, 9, 1, 1, out, &n), 2);
    const lg_finding *x = find(out, n, LG_V_UNRECORDED);
    assert_int_equal(x->amount, 1);
    assert_int_equal(f->item.missing_n, 1);
    /* 200s acknowledged 2 units but the stock fell by 1: nothing oversold */
    assert_null(find(out, n, LG_V_OVERSOLD));
    assert_non_null(find(out, n, LG_V_LOST_UPDATES)); /* 8 was reported but 9 stands */
    assert_non_null(strstr(find(out, n, LG_V_LOST_UPDATES)->text,
                           "lowest remaining acknowledged 8 vs final stock 9"));
    free(f);
}

static void test_committed_request_whose_answer_was_lost_is_only_a_note(void **state)
{
    (void)state;
    fake *f = fake_new(10);
    add_row(f, (long)add_rec(f, LG_OUT_OK, 1, 9), 1);
    add_row(f, (long)add_rec(f, LG_OUT_TRANSPORT, 1, -1), 1);
    add_rec(f, LG_OUT_MALFORMED, 1, -1); /* never reached the ledger */
    lg_finding out[LG_FINDING_COUNT];
    int n;
    assert_int_equal(check(f, 8, 2, 1, out, &n), 0);
    const lg_finding *x = find(out, n, LG_N_UNDETERMINED);
    assert_non_null(x);
    assert_false(x->violation);
    assert_int_equal(x->amount, 1);
    free(f);
}

static void test_totals_alone_allow_only_undetermined_extra_sales(void **state)
{
    (void)state;
    lg_finding out[LG_FINDING_COUNT];
    int n;
    fake *f = fake_new(10);
    add_rec(f, LG_OUT_OK, 1, 9);
    add_rec(f, LG_OUT_TRANSPORT, 2, -1);
    assert_int_equal(check(f, 7, 3, 0, out, &n), 0); /* the lost answer explains 2 */
    assert_int_equal(find(out, n, LG_N_UNDETERMINED)->amount, 2);
    free(f);

    f = fake_new(10);
    add_rec(f, LG_OUT_OK, 1, 9);
    add_rec(f, LG_OUT_TRANSPORT, 1, -1);
    assert_int_equal(check(f, 6, 4, 0, out, &n), 1); /* 3 extra, only 1 explicable */
    assert_int_equal(find(out, n, LG_V_UNACKED)->amount, 2);
    free(f);

    f = fake_new(10);
    add_rec(f, LG_OUT_OK, 1, 9);
    add_rec(f, LG_OUT_OK, 1, 8);
    assert_int_equal(check(f, 9, 1, 0, out, &n), 2); /* 2 acknowledged, 1 sold */
    assert_int_equal(find(out, n, LG_V_UNRECORDED)->amount, 1);
    free(f);
}

/* The outside verdict: item 0 read without a sold count (an --api profile). */
static int check_outside(fake *f, long long stock1, lg_finding *out, int *nfind)
{
    f->items[0].sold0 = -1;
    return check(f, stock1, -1, 0, out, nfind);
}

static void test_outside_clean_sale_passes(void **state)
{
    (void)state;
    lg_finding out[LG_FINDING_COUNT];
    int n;
    fake *f = clean_sale();
    assert_int_equal(check_outside(f, 0, out, &n), 0);
    assert_int_equal(n, 0);
    free(f);
    /* a service that says no remaining stock (-1 each) is no repeated remaining */
    f = fake_new(10);
    for (int i = 0; i < 4; i++)
        add_rec(f, LG_OUT_OK, 1, -1);
    assert_int_equal(check_outside(f, 6, out, &n), 0);
    assert_int_equal(n, 0);
    free(f);
}

static void test_outside_acknowledged_beyond_the_stock_is_oversold(void **state)
{
    (void)state;
    lg_finding out[LG_FINDING_COUNT];
    int n;
    fake *f = fake_new(10);
    for (int i = 0; i < 12; i++)
        add_rec(f, LG_OUT_OK, 1, -1);
    assert_true(check_outside(f, 0, out, &n) >= 1);
    assert_int_equal(find(out, n, LG_V_OVERSOLD)->amount, 2);
    assert_int_equal(find(out, n, LG_V_LOST_UPDATES)->amount, 2); /* 12 told, 10 taken */
    free(f);
    f = fake_new(10);
    add_rec(f, LG_OUT_TRANSPORT, 12, -1);
    assert_int_equal(check_outside(f, -2, out, &n), 1); /* stock below zero */
    assert_int_equal(find(out, n, LG_V_OVERSOLD)->amount, 2);
    free(f);
}

static void test_outside_acknowledged_units_the_stock_does_not_show_are_lost(void **state)
{
    (void)state;
    lg_finding out[LG_FINDING_COUNT];
    int n;
    fake *f = fake_new(10);
    for (int i = 0; i < 5; i++)
        add_rec(f, LG_OUT_OK, 1, -1);
    assert_int_equal(check_outside(f, 7, out, &n), 1); /* 5 acknowledged, stock fell 3 */
    assert_int_equal(n, 1);
    assert_int_equal(find(out, n, LG_V_LOST_UPDATES)->amount, 2);
    assert_non_null(strstr(out[0].text, "5 units acknowledged but the stock fell by 3"));
    free(f);
    /* a remaining stock two answers repeated is a lost update too */
    f = fake_new(10);
    add_rec(f, LG_OUT_OK, 1, 9);
    add_rec(f, LG_OUT_OK, 1, 9);
    assert_int_equal(check_outside(f, 8, out, &n), 1);
    assert_int_equal(find(out, n, LG_V_LOST_UPDATES)->amount, 1);
    free(f);
}

static void test_outside_a_fall_nobody_was_told_of_is_unexplained(void **state)
{
    (void)state;
    lg_finding out[LG_FINDING_COUNT];
    int n;
    fake *f = fake_new(10);
    add_rec(f, LG_OUT_OK, 2, -1);
    add_rec(f, LG_OUT_UNKNOWN, 1, -1);
    add_rec(f, LG_OUT_REFUSED, 3, -1);
    assert_int_equal(check_outside(f, 5, out, &n), 1); /* fell 5: 2 told, 1 may be */
    assert_int_equal(find(out, n, LG_V_UNEXPLAINED)->amount, 2);
    free(f);
    f = fake_new(10);
    add_rec(f, LG_OUT_OK, 2, -1);
    add_rec(f, LG_OUT_UNKNOWN, 1, -1);
    assert_int_equal(check_outside(f, 7, out, &n), 0); /* the unknown answer explains 1 */
    assert_int_equal(find(out, n, LG_N_UNDETERMINED)->amount, 1);
    free(f);
}

static void test_refusal_while_stock_remained_is_false(void **state)
{
    (void)state;
    lg_finding out[LG_FINDING_COUNT];
    int n;
    fake *f = fake_new(3);
    add_rec(f, LG_OUT_INSUFFICIENT, 2, 3); /* "3 left, you asked 2: no" */
    assert_int_equal(check(f, 3, 0, 1, out, &n), 1);
    assert_int_equal(find(out, n, LG_V_FALSE_REFUSAL)->amount, 1);
    free(f);

    f = fake_new(5);
    add_rec(f, LG_OUT_INSUFFICIENT, 2, 1); /* "1 left" ... yet 5 remain at the end */
    assert_int_equal(check(f, 5, 0, 1, out, &n), 1);
    assert_non_null(strstr(find(out, n, LG_V_FALSE_REFUSAL)->text, "below the final stock 5"));
    free(f);

    f = fake_new(5);
    add_rec(f, LG_OUT_INSUFFICIENT, 2, -1); /* no remaining in the answer: nothing to judge */
    assert_int_equal(check(f, 5, 0, 1, out, &n), 0);
    free(f);
}

static void test_records_are_tallied_per_item_and_strays_ignored(void **state)
{
    (void)state;
    lg_item_check items[2];
    lg_item_check_init(&items[0], 1);
    lg_item_check_init(&items[1], 2);
    /* remaining, quantity, item: item 9 is no item of the run */
    lg_line la[] = {{5, 1, 0, 0}, {4, 1, 1, 0}, {4, 1, 9, 0}};
    lg_rec a[] = {{0, 1, LG_OUT_OK}, {1, 1, LG_OUT_OK}, {2, 1, LG_OUT_OK}};
    lg_line lb[] = {{4, 3, 1, 0}, {-1, 1, 0, 0}};
    lg_rec b[] = {{0, 1, LG_OUT_OK}, {1, 1, LG_OUT_LOCK_TIMEOUT}};
    lg_batch batches[] = {{a, 3, la, 3, NULL, NULL}, {b, 2, lb, 2, NULL, NULL}};
    assert_int_equal(lg_verdict_answers(items, 2, batches, 2), 0);
    assert_int_equal(items[0].acked_qty, 1);
    assert_int_equal(items[0].refused_n, 1);
    assert_int_equal(items[1].acked_qty, 4);
    assert_int_equal(items[1].dup_remaining, 1); /* remaining 4 twice, across threads */
    assert_int_equal(items[0].dup_remaining, 0);
}

/* Judges every item and the orders; returns the violations, fills out[]. */
static int judge_run(fake *f, lg_finding *out, int *nfind)
{
    int n = 0, violations = 0, v;
    for (int k = 0; k < NITEMS; k++) {
        n += lg_verdict_judge(&f->items[k], out + n, LG_FINDING_COUNT, &v);
        violations += v;
    }
    n += lg_verdict_judge_orders(&f->orders, out + n, LG_FINDING_COUNT, &v);
    *nfind = n;
    return violations + v;
}

#define ALL_LEDGERS 7u
#define FINDINGS_MAX ((NITEMS + 1) * LG_FINDING_COUNT)

/* Carts over three items of stock 10, all or nothing: two acknowledged, one
 * refused for item 2 (short), one lock_timeout. */
static fake *clean_carts(void)
{
    fake *f = fake_new(10);
    size_t a = add_order(f, LG_OUT_OK, 3, (int[]){0, 1, 2}, (int[]){2, 1, 4},
                         (long long[]){8, 9, 6});
    size_t b = add_order(f, LG_OUT_OK, 2, (int[]){2, 0}, (int[]){5, 3}, (long long[]){1, 5});
    add_order(f, LG_OUT_INSUFFICIENT, 2, (int[]){1, 2}, (int[]){1, 3}, (long long[]){-1, 1});
    add_order(f, LG_OUT_LOCK_TIMEOUT, 1, (int[]){1}, (int[]){2}, NULL);
    add_row_on(f, 0, (long)a, 2);
    add_row_on(f, 1, (long)a, 1);
    add_row_on(f, 2, (long)a, 4);
    add_row_on(f, 2, (long)b, 5);
    add_row_on(f, 0, (long)b, 3);
    return f;
}

static void test_carts_applied_all_or_nothing_pass(void **state)
{
    (void)state;
    fake *f = clean_carts();
    reconcile(f, (long long[]){5, 9, 1}, (long long[]){5, 1, 9}, ALL_LEDGERS);
    lg_finding out[FINDINGS_MAX];
    int n;
    assert_int_equal(judge_run(f, out, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(f->orders.orders, 4);
    assert_int_equal(f->orders.lines, 8);
    assert_int_equal(f->orders.acked, 2);
    assert_int_equal(f->orders.checked, 4);
    /* per item, sold equals the acknowledged lines */
    assert_int_equal(f->items[0].acked_qty, 5);
    assert_int_equal(f->items[2].acked_qty, 9);
    assert_int_equal(f->items[2].matched_qty, 9);
    assert_int_equal(f->items[1].refused_n, 2);
    free(f);
}

static void test_acknowledged_cart_with_a_line_missing_is_partial(void **state)
{
    (void)state;
    fake *f = fake_new(10);
    size_t a = add_order(f, LG_OUT_OK, 3, (int[]){0, 1, 2}, (int[]){1, 1, 1},
                         (long long[]){9, 9, 9});
    add_row_on(f, 0, (long)a, 1);
    add_row_on(f, 2, (long)a, 1); /* item 1's line was never written */
    reconcile(f, (long long[]){9, 10, 9}, (long long[]){1, 0, 1}, ALL_LEDGERS);
    lg_finding out[FINDINGS_MAX];
    int n;
    assert_true(judge_run(f, out, &n) >= 3);
    const lg_finding *partial = find(out, n, LG_V_PARTIAL_ORDERS);
    assert_non_null(partial);
    assert_int_equal(partial->amount, 1);
    assert_non_null(strstr(partial->text, "orders: 1 partially applied"));
    assert_non_null(strstr(partial->text, "run-0-0 answered ok, 2 of 3 lines in the ledger"));
    const lg_finding *missing = find(out, n, LG_V_ACKED_MISSING_LINES);
    assert_non_null(missing);
    assert_non_null(strstr(missing->text, "1 acknowledged orders miss 1 lines"));
    assert_int_equal(f->items[1].missing_qty, 1); /* and item 1 says it per unit */
    free(f);
}

static void test_acknowledged_cart_with_no_line_at_all_is_missing_not_partial(void **state)
{
    (void)state;
    fake *f = fake_new(10);
    add_order(f, LG_OUT_OK, 2, (int[]){0, 1}, (int[]){1, 1}, (long long[]){9, 9});
    reconcile(f, NULL, NULL, ALL_LEDGERS);
    lg_finding out[FINDINGS_MAX];
    int n;
    judge_run(f, out, &n);
    assert_null(find(out, n, LG_V_PARTIAL_ORDERS));
    assert_int_equal(find(out, n, LG_V_ACKED_MISSING_LINES)->amount, 1);
    assert_int_equal(f->orders.acked_missing_lines, 2);
    free(f);
}

static void test_refused_cart_that_left_lines_is_a_violation(void **state)
{
    (void)state;
    fake *f = fake_new(10);
    size_t a = add_order(f, LG_OUT_LOCK_LOST, 2, (int[]){0, 1}, (int[]){2, 3}, NULL);
    size_t b = add_order(f, LG_OUT_INSUFFICIENT, 2, (int[]){1, 2}, (int[]){1, 1},
                         (long long[]){-1, 0});
    add_row_on(f, 0, (long)a, 2);
    add_row_on(f, 1, (long)a, 3); /* all of a: applied whole, yet answered lock_lost */
    add_row_on(f, 1, (long)b, 1); /* one of b: applied in part, and refused */
    reconcile(f, (long long[]){8, 6, 10}, (long long[]){2, 4, 0}, ALL_LEDGERS);
    lg_finding out[FINDINGS_MAX];
    int n;
    assert_true(judge_run(f, out, &n) > 0);
    const lg_finding *refused = find(out, n, LG_V_REFUSED_WITH_LINES);
    assert_int_equal(refused->amount, 2);
    assert_non_null(strstr(refused->text, "2 refused or failed orders left 3 lines"));
    assert_non_null(strstr(refused->text, "run-0-0 answered lock_lost, 2 of 2 lines"));
    const lg_finding *partial = find(out, n, LG_V_PARTIAL_ORDERS);
    assert_int_equal(partial->amount, 1);
    assert_non_null(strstr(partial->text, "run-0-1 answered insufficient_stock, 1 of 2"));
    assert_non_null(find(out, n, LG_V_UNACKED)); /* the rows, per item */
    free(f);
}

static void test_cart_whose_answer_was_lost_must_still_be_all_or_nothing(void **state)
{
    (void)state;
    fake *f = fake_new(10);
    size_t whole = add_order(f, LG_OUT_TRANSPORT, 2, (int[]){0, 1}, (int[]){1, 1}, NULL);
    size_t part = add_order(f, LG_OUT_MALFORMED, 2, (int[]){0, 2}, (int[]){1, 1}, NULL);
    add_order(f, LG_OUT_TRANSPORT, 2, (int[]){1, 2}, (int[]){1, 1}, NULL); /* not applied */
    add_row_on(f, 0, (long)whole, 1);
    add_row_on(f, 1, (long)whole, 1);
    add_row_on(f, 2, (long)part, 1);
    reconcile(f, (long long[]){9, 9, 9}, (long long[]){1, 1, 1}, ALL_LEDGERS);
    lg_finding out[FINDINGS_MAX];
    int n;
    assert_int_equal(judge_run(f, out, &n), 1);
    assert_int_equal(find(out, n, LG_V_PARTIAL_ORDERS)->amount, 1);
    assert_non_null(strstr(find(out, n, LG_V_PARTIAL_ORDERS)->text, "run-0-1 answered malformed"));
    assert_non_null(find(out, n, LG_N_UNDETERMINED)); /* the rest is only a note */
    free(f);
}

static void test_cart_on_an_item_whose_ledger_was_not_read_is_not_judged(void **state)
{
    (void)state;
    fake *f = fake_new(10);
    size_t a = add_order(f, LG_OUT_OK, 2, (int[]){0, 2}, (int[]){1, 1}, (long long[]){9, 9});
    add_order(f, LG_OUT_OK, 1, (int[]){0}, (int[]){1}, (long long[]){8});
    add_row_on(f, 0, (long)a, 1);
    add_row_on(f, 0, 1, 1);
    reconcile(f, (long long[]){8, 10, 9}, (long long[]){2, 0, 1}, 3u); /* item 2 unread */
    lg_finding out[FINDINGS_MAX];
    int n;
    assert_int_equal(judge_run(f, out, &n), 0);
    assert_int_equal(f->orders.checked, 1);
    assert_int_equal(f->orders.orders, 2);
    free(f);
}

static void test_short_lines_a_refused_cart_names_are_checked(void **state)
{
    (void)state;
    fake *f = fake_new(10);
    /* "item 1 has 5 left, you asked 2": a refusal that contradicts itself */
    add_order(f, LG_OUT_INSUFFICIENT, 2, (int[]){0, 1}, (int[]){4, 2}, (long long[]){-1, 5});
    /* "item 2 has 1 left", yet 10 remain at the end; item 0 was not named */
    add_order(f, LG_OUT_INSUFFICIENT, 2, (int[]){0, 2}, (int[]){4, 3}, (long long[]){-1, 1});
    reconcile(f, NULL, NULL, ALL_LEDGERS);
    lg_finding out[FINDINGS_MAX];
    int n;
    assert_int_equal(judge_run(f, out, &n), 2);
    const lg_finding *x = find(out, n, LG_V_FALSE_REFUSAL);
    assert_non_null(strstr(x->text, "item 8: false refusals: 1 "));
    assert_int_equal(f->items[0].bad_409 + f->items[0].min_409_remaining, -1); /* no claim */
    assert_non_null(strstr(out[1].text, "item 9: false refusals: 0 "));
    assert_non_null(strstr(out[1].text, "below the final stock 10"));
    free(f);
}

static void test_carts_racing_on_an_item_show_lost_updates(void **state)
{
    (void)state;
    fake *f = fake_new(10);
    /* no lock: both read item 1 at 10 and wrote 10 - 2 */
    size_t a = add_order(f, LG_OUT_OK, 2, (int[]){0, 1}, (int[]){1, 2}, (long long[]){9, 8});
    size_t b = add_order(f, LG_OUT_OK, 2, (int[]){1, 2}, (int[]){2, 1}, (long long[]){8, 9});
    add_row_on(f, 0, (long)a, 1);
    add_row_on(f, 1, (long)a, 2);
    add_row_on(f, 1, (long)b, 2);
    add_row_on(f, 2, (long)b, 1);
    reconcile(f, (long long[]){9, 8, 9}, (long long[]){1, 4, 1}, ALL_LEDGERS);
    lg_finding out[FINDINGS_MAX];
    int n;
    assert_int_equal(judge_run(f, out, &n), 1);
    assert_non_null(strstr(find(out, n, LG_V_LOST_UPDATES)->text, "item 8: lost updates 2"));
    assert_int_equal(f->orders.partial_n, 0); /* every order whole: the race is per item */
    free(f);
}

static void test_row_on_an_item_the_cart_did_not_ask_is_foreign(void **state)
{
    (void)state;
    fake *f = fake_new(10);
    size_t a = add_order(f, LG_OUT_OK, 1, (int[]){0}, (int[]){1}, (long long[]){9});
    add_row_on(f, 0, (long)a, 1);
    add_row_on(f, 1, (long)a, 1); /* the order has no line on item 1 */
    reconcile(f, (long long[]){9, 9, 10}, (long long[]){1, 1, 0}, ALL_LEDGERS);
    assert_int_equal(f->items[1].foreign_rows, 1);
    assert_int_equal(f->orders.partial_n, 0);
    free(f);
}

static void test_finding_names_are_stable(void **state)
{
    (void)state;
    assert_string_equal(lg_finding_name(LG_V_OVERSOLD), "oversold");
    assert_string_equal(lg_finding_name(LG_V_LOST_UPDATES), "lost_updates");
    assert_string_equal(lg_finding_name(LG_V_UNACKED), "unacknowledged_deductions");
    assert_string_equal(lg_finding_name(LG_V_PARTIAL_ORDERS), "partially_applied_orders");
    assert_string_equal(lg_finding_name(LG_V_ACKED_MISSING_LINES),
                        "acknowledged_orders_missing_lines");
    assert_string_equal(lg_finding_name(LG_V_REFUSED_WITH_LINES), "refused_orders_with_lines");
    assert_string_equal(lg_finding_name(LG_N_UNDETERMINED), "undetermined");
    assert_string_equal(lg_finding_name(99), "unknown");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clean_flash_sale_passes_with_and_without_the_ledger),
        cmocka_unit_test(test_negative_stock_is_oversold),
        cmocka_unit_test(test_lost_updates_that_oversell_report_both),
        cmocka_unit_test(test_lost_update_without_oversell_is_still_caught),
        cmocka_unit_test(test_repeated_remaining_alone_is_a_lost_update),
        cmocka_unit_test(test_stock_falling_without_ledger_rows_is_a_leak),
        cmocka_unit_test(test_interrupted_request_that_deducted_is_unacknowledged),
        cmocka_unit_test(test_foreign_and_duplicate_rows_are_unacknowledged),
        cmocka_unit_test(test_row_with_another_quantity_is_not_ours),
        cmocka_unit_test(test_acknowledged_deduction_missing_from_the_ledger),
        cmocka_unit_test(test_committed_request_whose_answer_was_lost_is_only_a_note),
        cmocka_unit_test(test_totals_alone_allow_only_undetermined_extra_sales),
        cmocka_unit_test(test_outside_clean_sale_passes),
        cmocka_unit_test(test_outside_acknowledged_beyond_the_stock_is_oversold),
        cmocka_unit_test(test_outside_acknowledged_units_the_stock_does_not_show_are_lost),
        cmocka_unit_test(test_outside_a_fall_nobody_was_told_of_is_unexplained),
        cmocka_unit_test(test_refusal_while_stock_remained_is_false),
        cmocka_unit_test(test_records_are_tallied_per_item_and_strays_ignored),
        cmocka_unit_test(test_carts_applied_all_or_nothing_pass),
        cmocka_unit_test(test_acknowledged_cart_with_a_line_missing_is_partial),
        cmocka_unit_test(test_acknowledged_cart_with_no_line_at_all_is_missing_not_partial),
        cmocka_unit_test(test_refused_cart_that_left_lines_is_a_violation),
        cmocka_unit_test(test_cart_whose_answer_was_lost_must_still_be_all_or_nothing),
        cmocka_unit_test(test_cart_on_an_item_whose_ledger_was_not_read_is_not_judged),
        cmocka_unit_test(test_short_lines_a_refused_cart_names_are_checked),
        cmocka_unit_test(test_carts_racing_on_an_item_show_lost_updates),
        cmocka_unit_test(test_row_on_an_item_the_cart_did_not_ask_is_foreign),
        cmocka_unit_test(test_finding_names_are_stable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
