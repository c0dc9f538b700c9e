/* test_hist.c - the log-linear histogram: exact small values, bounded relative
 * error on large ones, percentiles by rank, merging, clamping. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "loadgen/hist.h"

static void test_empty_histogram_reports_zeros(void **state)
{
    (void)state;
    hist *h = hist_new();
    assert_non_null(h);
    assert_int_equal(hist_count(h), 0);
    assert_int_equal(hist_min(h), 0);
    assert_int_equal(hist_max(h), 0);
    assert_int_equal(hist_percentile(h, 50), 0);
    assert_true(hist_mean(h) == 0.0);
    hist_free(h);
}

static void test_small_values_are_exact_and_percentiles_go_by_rank(void **state)
{
    (void)state;
    hist *h = hist_new();
    for (uint64_t v = 100; v >= 1; v--) /* order must not matter */
        hist_record(h, v);
    assert_int_equal(hist_count(h), 100);
    assert_int_equal(hist_min(h), 1);
    assert_int_equal(hist_max(h), 100);
    assert_int_equal(hist_percentile(h, 50), 50);
    assert_int_equal(hist_percentile(h, 90), 90);
    assert_int_equal(hist_percentile(h, 99), 99);
    assert_int_equal(hist_percentile(h, 99.9), 100); /* rank ceil(99.9) = 100 */
    assert_int_equal(hist_percentile(h, 0), 1);
    assert_int_equal(hist_percentile(h, 100), 100);
    assert_true(hist_mean(h) == 50.5);
    hist_free(h);
}

static void test_one_outlier_shows_only_in_the_top_percentiles(void **state)
{
    (void)state;
    hist *h = hist_new();
    for (int i = 0; i < 999; i++)
        hist_record(h, 10);
    hist_record(h, 5000000);
    assert_int_equal(hist_percentile(h, 50), 10);
    assert_int_equal(hist_percentile(h, 99), 10);
    assert_int_equal(hist_percentile(h, 99.9), 10);   /* rank 999 */
    assert_int_equal(hist_percentile(h, 99.95), 5000000); /* clamped to the exact max */
    hist_free(h);
}

static void test_large_values_stay_within_one_percent(void **state)
{
    (void)state;
    hist *h = hist_new();
    /* 1 ms .. ~100 s in us, geometric: every magnitude is exercised */
    uint64_t vals[2000];
    int n = 0;
    for (double v = 1000; v < 1e8 && n < 2000; v *= 1.01)
        hist_record(h, vals[n++] = (uint64_t)v);
    for (int i = 1; i <= 99; i++) {
        double p = i;
        uint64_t rank = (uint64_t)((p / 100.0) * n + 0.999999);
        uint64_t exact = vals[rank - 1];
        uint64_t got = hist_percentile(h, p);
        double err = got > exact ? (double)(got - exact) / (double)exact
                                 : (double)(exact - got) / (double)exact;
        assert_true(err < 1.0 / 128);
    }
    hist_free(h);
}

static void test_merge_equals_recording_into_one(void **state)
{
    (void)state;
    hist *a = hist_new(), *b = hist_new(), *all = hist_new();
    for (uint64_t v = 1; v <= 50000; v += 7) {
        hist_record(v % 3 ? a : b, v * 13);
        hist_record(all, v * 13);
    }
    hist_merge(a, b);
    assert_int_equal(hist_count(a), hist_count(all));
    assert_int_equal(hist_min(a), hist_min(all));
    assert_int_equal(hist_max(a), hist_max(all));
    const double ps[] = {1, 25, 50, 75, 90, 99, 99.9, 99.99};
    for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++)
        assert_int_equal(hist_percentile(a, ps[i]), hist_percentile(all, ps[i]));
    assert_true(hist_mean(a) == hist_mean(all));
    hist_free(a);
    hist_free(b);
    hist_free(all);
}

static void test_merging_into_an_empty_histogram_keeps_the_min(void **state)
{
    (void)state;
    hist *empty = hist_new(), *src = hist_new();
    hist_record(src, 700);
    hist_record(src, 900);
    hist_merge(empty, src);
    assert_int_equal(hist_min(empty), 700);
    assert_int_equal(hist_max(empty), 900);
    hist_merge(src, empty); /* merging back doubles the counts */
    assert_int_equal(hist_count(src), 4);
    hist_free(empty);
    hist_free(src);
}

static void test_values_beyond_the_range_are_clamped(void **state)
{
    (void)state;
    hist *h = hist_new();
    hist_record(h, UINT64_MAX);
    hist_record(h, 0);
    assert_int_equal(hist_max(h), HIST_MAX_VALUE);
    assert_int_equal(hist_min(h), 0);
    assert_int_equal(hist_percentile(h, 100), HIST_MAX_VALUE);
    assert_int_equal(hist_percentile(h, 50), 0);
    hist_reset(h);
    assert_int_equal(hist_count(h), 0);
    hist_free(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_histogram_reports_zeros),
        cmocka_unit_test(test_small_values_are_exact_and_percentiles_go_by_rank),
        cmocka_unit_test(test_one_outlier_shows_only_in_the_top_percentiles),
        cmocka_unit_test(test_large_values_stay_within_one_percent),
        cmocka_unit_test(test_merge_equals_recording_into_one),
        cmocka_unit_test(test_merging_into_an_empty_histogram_keeps_the_min),
        cmocka_unit_test(test_values_beyond_the_range_are_clamped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
