/* test_lg_history.c - the history check fed hand-made histories: the band at
 * its edges (a read on a bound passes, one unit beyond fails), stale and
 * impossible reads with the worst example and the request that bounds it, a
 * sale after a sold-out answer (and the reads and quantities that excuse
 * one), the outward rounding to buckets, the skips, carts, and a large
 * synthetic history that must run in linear time (no timing assert: a
 * quadratic check would not finish in the suite's time). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "loadgen/history.h"

#define MS 1000000LL

/* A hand-made run: one batch of records on item 0 (and item 1 in carts), with
 * their times, and reads. */
typedef struct fake {
    lg_rec *recs;
    lg_line *lines;
    int64_t *sent, *done;
    size_t n, nlines, cap;
    lg_reads reads;
    lg_batch batch;
    lg_history h;
    lg_finding f[4];
    int nf, violations;
} fake;

static fake *fake_new(size_t cap)
{
    fake *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->cap = cap;
    f->recs = calloc(cap, sizeof(*f->recs));
    f->lines = calloc(cap * 2, sizeof(*f->lines));
    f->sent = calloc(cap, sizeof(*f->sent));
    f->done = calloc(cap, sizeof(*f->done));
    assert_true(f->recs && f->lines && f->sent && f->done);
    return f;
}

static void fake_free(fake *f)
{
    lg_history_free(&f->h);
    lg_reads_free(&f->reads);
    free(f->recs);
    free(f->lines);
    free(f->sent);
    free(f->done);
    free(f);
}

/* A request for qty units of item 0 (and, when qty1 > 0, qty1 of item 1 in
 * the same cart), sent and answered at those ns, with that outcome. */
static size_t req2(fake *f, int outcome, int qty, int qty1, int64_t sent, int64_t done)
{
    lg_rec *r = &f->recs[f->n];
    r->first = (uint32_t)f->nlines;
    r->outcome = (uint8_t)outcome;
    r->nlines = 0;
    if (qty > 0)
        f->lines[f->nlines++] = (lg_line){.remaining = -1, .quantity = qty, .item = 0};
    if (qty1 > 0)
        f->lines[f->nlines++] = (lg_line){.remaining = -1, .quantity = qty1, .item = 1};
    r->nlines = (uint8_t)(f->nlines - r->first);
    f->sent[f->n] = sent;
    f->done[f->n] = done;
    return f->n++;
}

static size_t req(fake *f, int outcome, int qty, int64_t sent, int64_t done)
{
    return req2(f, outcome, qty, 0, sent, done);
}

static void rd(fake *f, int64_t t0, int64_t t1, long long stock)
{
    lg_read x = {t0, t1, stock};
    assert_int_equal(lg_reads_add(&f->reads, &x), 0);
}

/* Runs the check with buckets of bucket_ns (0: the default) and judges it. */
static void check_b(fake *f, long long initial, int64_t bucket_ns, const char *skip)
{
    f->batch = (lg_batch){f->recs, f->n, f->lines, f->nlines, f->sent, f->done};
    lg_history_in in = {.batches = &f->batch, .nbatch = 1, .item = 0, .id = 7,
                        .initial = initial, .reads = f->reads.r, .nreads = f->reads.n,
                        .failed = f->reads.failed, .interval_ms = 5, .run_id = "run",
                        .bucket_ns = bucket_ns, .skip = skip};
    lg_history_free(&f->h);
    assert_int_equal(lg_history_check(&in, &f->h), 0);
    f->nf = lg_history_judge(&f->h, f->f, 4, &f->violations);
}

static void check(fake *f, long long initial)
{
    check_b(f, initial, 0, NULL);
}

/* The history of the band test: stock 10; A 2 units ok (1-3 ms), B 3 units
 * ok (2-8 ms), C 1 unit undetermined (4-6 ms), D 1 unit refused (4-5 ms), E 4
 * units ok but sent after the read (7-9 ms). A read at 5.5-6.5 ms: invoked
 * before it ended A B C D (7 units), acknowledged before it began A (2):
 * the band is [3, 8]. */
static fake *band_history(long long stock)
{
    fake *f = fake_new(16);
    req(f, LG_OUT_OK, 2, 1 * MS, 3 * MS);
    req(f, LG_OUT_OK, 3, 2 * MS, 8 * MS);
    req(f, LG_OUT_TRANSPORT, 1, 4 * MS, 6 * MS);
    req(f, LG_OUT_INSUFFICIENT, 1, 4 * MS, 5 * MS);
    req(f, LG_OUT_OK, 4, 7 * MS, 9 * MS);
    rd(f, 5 * MS + MS / 2, 6 * MS + MS / 2, stock);
    check(f, 10);
    return f;
}

static void test_a_read_on_either_bound_passes(void **state)
{
    (void)state;
    for (long long v = 3; v <= 8; v++) {
        fake *f = band_history(v);
        assert_true(f->h.checked);
        assert_int_equal(f->h.reads, 1);
        assert_int_equal(f->h.lo[0], 3);
        assert_int_equal(f->h.hi[0], 8);
        assert_int_equal(f->h.bucket_ns, LG_HISTORY_BUCKET_NS);
        assert_int_equal(f->nf, 0);
        assert_int_equal(f->violations, 0);
        fake_free(f);
    }
}

static void test_one_unit_above_the_band_is_a_stale_read(void **state)
{
    (void)state;
    fake *f = band_history(9);
    assert_int_equal(f->h.stale_n, 1);
    assert_int_equal(f->h.stale_worst, 1);
    assert_int_equal(f->h.impossible_n, 0);
    assert_int_equal(f->nf, 1);
    assert_int_equal(f->violations, 1);
    assert_int_equal(f->f[0].kind, LG_V_STALE_READ);
    assert_int_equal(f->f[0].amount, 1);
    /* the request that bounds it: A, the last acknowledged before the read */
    assert_string_equal(f->h.stale.request, "run-0-0");
    assert_true(f->h.stale.sent_ns == 1 * MS && f->h.stale.done_ns == 3 * MS);
    assert_non_null(strstr(f->f[0].text, "item 7: 1 reads above the band"));
    assert_non_null(strstr(f->f[0].text, "read 9 at 5.5-6.5 ms, band [3, 8]"));
    assert_non_null(strstr(f->f[0].text, "run-0-0 (invoked 1.0 ms, acknowledged 3.0 ms)"));
    fake_free(f);
}

static void test_one_unit_below_the_band_is_an_impossible_read(void **state)
{
    (void)state;
    fake *f = band_history(2);
    assert_int_equal(f->h.impossible_n, 1);
    assert_int_equal(f->h.impossible_worst, 1);
    assert_int_equal(f->h.stale_n, 0);
    assert_int_equal(f->nf, 1);
    assert_int_equal(f->f[0].kind, LG_V_IMPOSSIBLE_READ);
    /* the last request invoked before the read ended: C or D (both at 4 ms) */
    assert_true(strcmp(f->h.impossible.request, "run-0-2") == 0 ||
                strcmp(f->h.impossible.request, "run-0-3") == 0);
    assert_non_null(strstr(f->f[0].text, "read 2 at 5.5-6.5 ms, band [3, 8]"));
    assert_non_null(strstr(f->f[0].text, "7 units invoked before it ended"));
    fake_free(f);
}

/* Of several reads outside, the count is all of them and the example the
 * worst; reads inside do not count. */
static void test_the_worst_read_is_the_example(void **state)
{
    (void)state;
    fake *f = fake_new(64);
    for (int i = 0; i < 10; i++) /* one unit acknowledged every 10 ms */
        req(f, LG_OUT_OK, 1, i * 10 * MS, i * 10 * MS + 2 * MS);
    rd(f, 25 * MS, 26 * MS, 7); /* band [7, 7]: 3 invoked, 3 acknowledged */
    rd(f, 45 * MS, 46 * MS, 8); /* band [5, 5]: 3 above */
    rd(f, 65 * MS, 66 * MS, 5); /* band [3, 3]: 2 above */
    rd(f, 85 * MS, 86 * MS, 0); /* band [1, 1]: 1 below */
    check(f, 10);
    assert_int_equal(f->h.lo[0], 7);
    assert_int_equal(f->h.hi[1], 5);
    assert_int_equal(f->h.stale_n, 2);
    assert_int_equal(f->h.stale_worst, 3);
    assert_int_equal(f->h.stale.read.stock, 8);
    assert_string_equal(f->h.stale.request, "run-0-4"); /* acknowledged at 42 ms */
    assert_int_equal(f->h.impossible_n, 1);
    assert_string_equal(f->h.impossible.request, "run-0-8"); /* invoked at 80 ms */
    assert_int_equal(f->nf, 2);
    assert_int_equal(f->violations, 2);
    fake_free(f);
}

/* Only an ok acknowledges: a refused or undetermined answer before the read
 * leaves the top of the band where it was, and lowers only the bottom. */
static void test_only_an_ok_is_acknowledged(void **state)
{
    (void)state;
    fake *f = fake_new(8);
    req(f, LG_OUT_TRANSPORT, 2, 1 * MS, 2 * MS);
    req(f, LG_OUT_INSUFFICIENT, 1, 1 * MS, 2 * MS);
    req(f, LG_OUT_REFUSED, 1, 1 * MS, 2 * MS);
    rd(f, 5 * MS, 6 * MS, 10);
    check(f, 10);
    assert_int_equal(f->h.lo[0], 6);
    assert_int_equal(f->h.hi[0], 10);
    assert_int_equal(f->nf, 0);
    fake_free(f);
}

/* Only the item's lines count: a cart's line on another item adds nothing. */
static void test_only_the_sampled_items_lines_count(void **state)
{
    (void)state;
    fake *f = fake_new(8);
    req2(f, LG_OUT_OK, 2, 5, 1 * MS, 2 * MS);
    req2(f, LG_OUT_OK, 0, 5, 1 * MS, 2 * MS);
    rd(f, 5 * MS, 6 * MS, 8);
    check(f, 10);
    assert_int_equal(f->h.lo[0], 8);
    assert_int_equal(f->h.hi[0], 8);
    assert_int_equal(f->nf, 0);
    fake_free(f);
}

/* Bounds are rounded outward to whole buckets: an ok answered inside the
 * read's first bucket is not yet counted as acknowledged, a request sent inside
 * its last bucket is counted as invoked. A read stale by the exact times is
 * within the band of 10 ms buckets. */
static void test_bounds_are_rounded_outward_to_a_bucket(void **state)
{
    (void)state;
    fake *f = fake_new(8);
    req(f, LG_OUT_OK, 2, 11 * MS, 12 * MS); /* answered before the read began */
    req(f, LG_OUT_OK, 3, 17 * MS, 30 * MS); /* sent after the read ended */
    rd(f, 15 * MS, 16 * MS, 10);
    check_b(f, 10, 1 * MS, NULL);
    assert_int_equal(f->h.lo[0], 8);
    assert_int_equal(f->h.hi[0], 8);
    assert_int_equal(f->h.stale_n, 1);
    check_b(f, 10, 10 * MS, NULL);
    assert_int_equal(f->h.bucket_ns, 10 * MS);
    assert_int_equal(f->h.lo[0], 5);  /* the 17 ms request counts: same bucket as 16 ms */
    assert_int_equal(f->h.hi[0], 10); /* the 12 ms answer does not: same bucket as 15 ms */
    assert_int_equal(f->h.stale_n, 0);
    assert_int_equal(f->nf, 0);
    fake_free(f);
}

/* A run longer than the buckets allow at 1 ms gets wider buckets. */
static void test_a_long_run_widens_the_buckets(void **state)
{
    (void)state;
    fake *f = fake_new(4);
    int64_t end = (int64_t)LG_HISTORY_BUCKETS_MAX * 3 * MS;
    req(f, LG_OUT_OK, 1, 0, end);
    rd(f, end + MS, end + 2 * MS, 9);
    check(f, 10);
    assert_true(f->h.bucket_ns >= 3 * MS);
    assert_true((end + 2 * MS) / f->h.bucket_ns < LG_HISTORY_BUCKETS_MAX);
    assert_int_equal(f->nf, 0);
    fake_free(f);
}

static void test_a_sale_after_a_sold_out_answer_fails(void **state)
{
    (void)state;
    fake *f = fake_new(8);
    req(f, LG_OUT_OK, 3, 1 * MS, 2 * MS);
    req(f, LG_OUT_INSUFFICIENT, 2, 3 * MS, 5 * MS); /* sold out for 2 */
    req(f, LG_OUT_OK, 2, 8 * MS, 9 * MS);           /* yet 2 sold after */
    req(f, LG_OUT_OK, 3, 8 * MS, 9 * MS);           /* and 3 */
    rd(f, 6 * MS, 7 * MS, 1);
    check(f, 4);
    assert_int_equal(f->h.sold_after_n, 2);
    assert_int_equal(f->h.sold_after_units, 5);
    assert_string_equal(f->h.sale.sold_out, "run-0-1");
    assert_int_equal(f->h.sale.sold_out_qty, 2);
    assert_true(strcmp(f->h.sale.ok, "run-0-2") == 0 || strcmp(f->h.sale.ok, "run-0-3") == 0);
    int found = 0;
    for (int i = 0; i < f->nf; i++)
        if (f->f[i].kind == LG_V_SOLD_AFTER_SOLD_OUT) {
            found = 1;
            assert_int_equal(f->f[i].amount, 2);
            assert_non_null(strstr(f->f[i].text, "after run-0-1 (2 units sold out"));
        }
    assert_true(found);
    fake_free(f);
}

/* What excuses a sale after a sold-out: a smaller quantity, a read showing the
 * stock back, or an ok sent before the sold-out was answered (or within its
 * bucket). */
static void test_what_a_sale_after_sold_out_needs(void **state)
{
    (void)state;
    fake *f = fake_new(8);
    req(f, LG_OUT_INSUFFICIENT, 2, 3 * MS, 5 * MS);
    req(f, LG_OUT_OK, 1, 8 * MS, 9 * MS); /* less than was short */
    req(f, LG_OUT_OK, 2, 4 * MS, 9 * MS); /* sent before the sold-out came */
    req(f, LG_OUT_OK, 2, 5 * MS + MS / 2, 9 * MS); /* in its bucket */
    req(f, LG_OUT_TRANSPORT, 5, 8 * MS, 9 * MS);   /* not an ok */
    check(f, 10);
    assert_true(f->h.checked == 0); /* no reads */
    rd(f, 1 * MS, 2 * MS, 10);
    check(f, 10);
    assert_int_equal(f->h.sold_after_n, 0);
    /* an ok of 2 after it, but a read after the sold-out shows 2 back */
    req(f, LG_OUT_OK, 2, 8 * MS, 9 * MS);
    rd(f, 6 * MS, 7 * MS, 2);
    check(f, 10);
    assert_int_equal(f->h.sold_after_n, 0);
    fake_free(f);
    /* the same without that read fails */
    f = fake_new(8);
    req(f, LG_OUT_INSUFFICIENT, 2, 3 * MS, 5 * MS);
    req(f, LG_OUT_OK, 2, 8 * MS, 9 * MS);
    rd(f, 6 * MS, 7 * MS, 1);
    check(f, 10);
    assert_int_equal(f->h.sold_after_n, 1);
    fake_free(f);
}

/* A request neither ok nor sold out that completed between a sold-out's
 * invoke and an ok's invoke may have given units back (a service that takes
 * them, fails, and puts them back): it excuses that sold-out, and only it. */
static void test_a_failed_request_between_excuses_a_sold_out(void **state)
{
    (void)state;
    fake *f = fake_new(8);
    req(f, LG_OUT_INSUFFICIENT, 2, 3 * MS, 5 * MS);
    req(f, LG_OUT_UNKNOWN, 2, 2 * MS, 6 * MS); /* completed after the sold-out's invoke */
    req(f, LG_OUT_OK, 2, 8 * MS, 9 * MS);
    rd(f, 1 * MS, 2 * MS, 10);
    check(f, 10);
    assert_int_equal(f->h.sold_after_n, 0);
    f->done[1] = 2 * MS + MS / 2; /* before the sold-out's invoke: no excuse */
    check(f, 10);
    assert_int_equal(f->h.sold_after_n, 1);
    f->done[1] = 10 * MS; /* after the ok's invoke: no excuse either */
    check(f, 10);
    assert_int_equal(f->h.sold_after_n, 1);
    fake_free(f);
    /* two sold-outs: the first excused, the second not; the example is the second */
    f = fake_new(8);
    req(f, LG_OUT_INSUFFICIENT, 2, 3 * MS, 4 * MS);
    req(f, LG_OUT_TRANSPORT, 2, 1 * MS, 5 * MS);
    req(f, LG_OUT_INSUFFICIENT, 2, 6 * MS, 7 * MS);
    req(f, LG_OUT_OK, 2, 9 * MS, 10 * MS);
    rd(f, 1 * MS, 2 * MS, 10);
    check(f, 10);
    assert_int_equal(f->h.sold_after_n, 1);
    assert_string_equal(f->h.sale.sold_out, "run-0-2");
    assert_string_equal(f->h.sale.ok, "run-0-3");
    fake_free(f);
}

/* A cart's sold-out counts for the item only when it named the item's line
 * short (a remaining on it). */
static void test_a_carts_sold_out_counts_when_it_named_the_line(void **state)
{
    (void)state;
    fake *f = fake_new(8);
    size_t i = req2(f, LG_OUT_INSUFFICIENT, 2, 1, 3 * MS, 5 * MS); /* item 1 was short */
    req(f, LG_OUT_OK, 2, 8 * MS, 9 * MS);
    rd(f, 6 * MS, 7 * MS, 1);
    check(f, 10);
    assert_int_equal(f->h.sold_after_n, 0);
    f->lines[f->recs[i].first].remaining = 1; /* item 0 named short, 1 left */
    check(f, 10);
    assert_int_equal(f->h.sold_after_n, 1);
    fake_free(f);
}

static void test_the_check_is_skipped_and_says_why(void **state)
{
    (void)state;
    fake *f = fake_new(4);
    req(f, LG_OUT_OK, 1, 1 * MS, 2 * MS);
    check(f, 10);
    assert_false(f->h.checked);
    assert_non_null(strstr(f->h.skipped, "no read"));
    assert_int_equal(f->nf, 0);
    rd(f, 5 * MS, 6 * MS, 100); /* far above: would fail if checked */
    check_b(f, 10, 0, "reservations give units back");
    assert_false(f->h.checked);
    assert_string_equal(f->h.skipped, "reservations give units back");
    assert_null(f->h.lo);
    assert_int_equal(f->nf, 0);
    /* records without times (a flash sale) */
    f->batch = (lg_batch){f->recs, f->n, f->lines, f->nlines, NULL, NULL};
    lg_history_in in = {.batches = &f->batch, .nbatch = 1, .initial = 10,
                        .reads = f->reads.r, .nreads = f->reads.n};
    lg_history_free(&f->h);
    assert_int_equal(lg_history_check(&in, &f->h), 0);
    assert_false(f->h.checked);
    assert_non_null(strstr(f->h.skipped, "no request times"));
    fake_free(f);
}

/* No memory for the check (a history too large to band): skipped, saying
 * so, and no error: the run keeps its verdict. ASan and TSan refuse such a
 * request outright rather than answering NULL, so it is left out there. */
static void test_no_memory_skips_the_check_saying_so(void **state)
{
    (void)state;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    skip();
#else
    fake *f = fake_new(4);
    req(f, LG_OUT_OK, 1, 1 * MS, 2 * MS);
    rd(f, 5 * MS, 6 * MS, 9);
    f->batch = (lg_batch){f->recs, f->n, f->lines, f->nlines, f->sent, f->done};
    lg_history_in in = {.batches = &f->batch, .nbatch = 1, .initial = 10,
                        .reads = f->reads.r, .nreads = (size_t)1 << 58};
    assert_int_equal(lg_history_check(&in, &f->h), 0);
    assert_false(f->h.checked);
    assert_non_null(strstr(f->h.skipped, "out of memory for the check"));
    assert_null(f->h.lo);
    assert_int_equal(lg_history_judge(&f->h, f->f, 4, NULL), 0);
    fake_free(f);
#endif
}

/* Past max reads kept, every other one is dropped and then only every 2nd
 * kept, and so on: at most max reads, each a real one, spread evenly. */
static void test_reads_past_the_cap_are_thinned_evenly(void **state)
{
    (void)state;
    lg_reads rs = {.max = 8};
    for (int64_t i = 0; i < 100; i++) {
        lg_read x = {i, i, 100 - i};
        assert_int_equal(lg_reads_add(&rs, &x), 0);
        assert_true(rs.n <= 8);
    }
    assert_int_equal(rs.every, 16); /* 100 reads into 8: 1 in 16 (7 kept) */
    assert_int_equal(rs.n, 7);
    for (size_t j = 0; j < rs.n; j++)
        assert_int_equal(rs.r[j].t0_ns, (int64_t)j * rs.every);
    assert_int_equal(rs.failed, 0);
    lg_reads_free(&rs);
}

/* A million requests and 200 000 reads over 100 s of a service that is
 * right: nothing found. Linear, so it takes well under a second; a check
 * quadratic in either would not finish. */
static void test_a_large_history_is_checked_in_linear_time(void **state)
{
    (void)state;
    size_t n = 1000000;
    fake *f = fake_new(n);
    long long initial = 5000000, applied = 0;
    size_t nr = 200000;
    int64_t span = 100000 * MS, step = span / (int64_t)n;
    /* request k: sent at k*step, applied at k*step + step/2, answered 3 steps later */
    for (size_t k = 0; k < n; k++) {
        int64_t t = (int64_t)k * step;
        req(f, k % 7 == 3 ? LG_OUT_TRANSPORT : LG_OUT_OK, 1 + (int)(k % 5), t, t + 3 * step);
    }
    size_t k = 0;
    for (size_t i = 0; i < nr; i++) { /* a read sees every deduction applied by its middle */
        int64_t t0 = (int64_t)i * (span / (int64_t)nr), t1 = t0 + MS / 2, mid = (t0 + t1) / 2;
        while (k < n && (int64_t)k * step + step / 2 <= mid)
            applied += f->lines[f->recs[k++].first].quantity;
        rd(f, t0, t1, initial - applied);
    }
    check(f, initial);
    assert_true(f->h.checked);
    assert_int_equal(f->h.reads, nr);
    assert_int_equal(f->h.stale_n, 0);
    assert_int_equal(f->h.impossible_n, 0);
    assert_int_equal(f->nf, 0);
    /* and one read gone stale by a single unit is found among them */
    f->reads.r[nr / 2].stock = f->h.hi[nr / 2] + 1;
    check(f, initial);
    assert_int_equal(f->h.stale_n, 1);
    fake_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_failed_request_between_excuses_a_sold_out),
        cmocka_unit_test(test_no_memory_skips_the_check_saying_so),
        cmocka_unit_test(test_reads_past_the_cap_are_thinned_evenly),
        cmocka_unit_test(test_a_read_on_either_bound_passes),
        cmocka_unit_test(test_one_unit_above_the_band_is_a_stale_read),
        cmocka_unit_test(test_one_unit_below_the_band_is_an_impossible_read),
        cmocka_unit_test(test_the_worst_read_is_the_example),
        cmocka_unit_test(test_only_an_ok_is_acknowledged),
        cmocka_unit_test(test_only_the_sampled_items_lines_count),
        cmocka_unit_test(test_bounds_are_rounded_outward_to_a_bucket),
        cmocka_unit_test(test_a_long_run_widens_the_buckets),
        cmocka_unit_test(test_a_sale_after_a_sold_out_answer_fails),
        cmocka_unit_test(test_what_a_sale_after_sold_out_needs),
        cmocka_unit_test(test_a_carts_sold_out_counts_when_it_named_the_line),
        cmocka_unit_test(test_the_check_is_skipped_and_says_why),
        cmocka_unit_test(test_a_large_history_is_checked_in_linear_time),
    };
    return cmocka_run_group_tests_name("lg_history", tests, NULL, NULL);
}
