/* test_verdict.c - the checker fed hand-made runs: a clean flash sale, then
 * each way a broken service shows up (oversold, lost updates, stock leaks,
 * deductions nobody was told about, acknowledgements with no ledger row, false
 * refusals), and the undetermined answers that must not count as violations. */
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

/* A hand-made run on one item: records r0..rN-1, requestIds "r<index>". */
typedef struct fake {
    lg_rec recs[MAXR];
    size_t n;
    lg_ledger_row rows[MAXR];
    char ids[MAXR][32];
    size_t nrows;
    lg_item_check item;
} fake;

static fake *fake_new(long long stock0)
{
    fake *f = calloc(1, sizeof(*f));
    lg_item_check_init(&f->item, 7);
    f->item.stock0 = stock0;
    return f;
}

static size_t add_rec(fake *f, int outcome, int quantity, long long remaining)
{
    lg_rec r = {.remaining = remaining, .quantity = quantity, .item = 0,
                .outcome = (uint8_t)outcome, .seen = 0};
    f->recs[f->n] = r;
    return f->n++;
}

/* A ledger row for record i (or for no record of this run when i is -1). */
static void add_row(fake *f, long i, long long quantity)
{
    snprintf(f->ids[f->nrows], sizeof(f->ids[0]), i < 0 ? "other-%ld" : "r%ld",
             i < 0 ? (long)f->nrows : i);
    f->rows[f->nrows].request_id = f->ids[f->nrows];
    f->rows[f->nrows].quantity = quantity;
    f->nrows++;
}

static lg_rec *lookup(void *arg, const char *rid)
{
    fake *f = arg;
    if (rid[0] != 'r')
        return NULL;
    size_t i = strtoul(rid + 1, NULL, 10);
    return i < f->n ? &f->recs[i] : NULL;
}

/* Runs the checker: answers, then (when ledger) rows, then missing; returns
 * the number of violations and fills out[]. */
static int check(fake *f, long long stock1, long long sold1, int ledger, lg_finding *out,
                 int *nfind)
{
    lg_rec *batch = f->recs;
    size_t n = f->n;
    assert_int_equal(lg_verdict_answers(&f->item, 1, &batch, &n, 1), 0);
    f->item.stock1 = stock1;
    f->item.sold1 = sold1;
    if (ledger) {
        lg_verdict_ledger(&f->item, 0, f->rows, f->nrows, lookup, f);
        lg_verdict_missing(&f->item, 1, &batch, &n, 1);
    }
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
    lg_rec a[] = {{5, 1, 0, LG_OUT_OK, 0}, {4, 1, 1, LG_OUT_OK, 0}, {4, 1, 9, LG_OUT_OK, 0}};
    lg_rec b[] = {{4, 3, 1, LG_OUT_OK, 0}, {-1, 1, 0, LG_OUT_LOCK_TIMEOUT, 0}};
    lg_rec *batches[] = {a, b};
    size_t sizes[] = {3, 2};
    assert_int_equal(lg_verdict_answers(items, 2, batches, sizes, 2), 0);
    assert_int_equal(items[0].acked_qty, 1);
    assert_int_equal(items[0].refused_n, 1);
    assert_int_equal(items[1].acked_qty, 4);
    assert_int_equal(items[1].dup_remaining, 1); /* remaining 4 twice, across threads */
    assert_int_equal(items[0].dup_remaining, 0);
}

static void test_finding_names_are_stable(void **state)
{
    (void)state;
    assert_string_equal(lg_finding_name(LG_V_OVERSOLD), "oversold");
    assert_string_equal(lg_finding_name(LG_V_LOST_UPDATES), "lost_updates");
    assert_string_equal(lg_finding_name(LG_V_UNACKED), "unacknowledged_deductions");
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
        cmocka_unit_test(test_refusal_while_stock_remained_is_false),
        cmocka_unit_test(test_records_are_tallied_per_item_and_strays_ignored),
        cmocka_unit_test(test_finding_names_are_stable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
