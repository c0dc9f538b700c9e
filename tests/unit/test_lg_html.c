/* test_lg_html.c - the pieces of loadgen's HTML report that need nothing
 * running: axis ticks, HdrHistogram's percentile axis, labels, escaping,
 * finite-only coordinates, the time series and the stock samples, a page
 * drawn from a hand-made report whose strings try to break out of it, a
 * latency curve as long as the longest report.c writes, and the history
 * check's reads against their band. */
#include <jansson.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "loadgen/html.h"
#include "loadgen/report.h"
#include "loadgen/sample.h"
#include "loadgen/series.h"
#include "loadgen/svg.h"

/* What fn wrote to a memory stream, NUL-terminated; the caller frees it. */
typedef struct mem {
    char *buf;
    size_t len;
    FILE *f;
} mem;

static FILE *mem_open(mem *m)
{
    m->f = open_memstream(&m->buf, &m->len);
    assert_non_null(m->f);
    return m->f;
}

static char *mem_close(mem *m)
{
    fclose(m->f);
    return m->buf;
}

static void test_ticks_are_whole_steps_and_the_axis_ends_on_one(void **state)
{
    (void)state;
    double t[16], lo = 0, hi = 937;
    int n = lg_svg_ticks(&lo, &hi, 6, t, 16);
    assert_int_equal(n, 6);
    assert_true(t[0] == 0 && t[1] == 200 && t[5] == 1000);
    assert_true(lo == 0 && hi == 1000);
    lo = -483, hi = 100; /* a ledger below zero: the axis goes down to a tick */
    n = lg_svg_ticks(&lo, &hi, 6, t, 16);
    assert_true(n >= 2 && n <= 6);
    assert_true(lo <= -483 && t[0] == lo && hi >= 100 && t[n - 1] == hi);
    lo = 0, hi = 0.0042;
    n = lg_svg_ticks(&lo, &hi, 6, t, 16);
    assert_true(n >= 2 && t[1] > 0 && hi >= 0.0042);
}

static void test_ticks_refuse_an_empty_or_endless_range(void **state)
{
    (void)state;
    double t[16], lo = 5, hi = 5;
    assert_int_equal(lg_svg_ticks(&lo, &hi, 6, t, 16), 0);
    lo = 0, hi = NAN;
    assert_int_equal(lg_svg_ticks(&lo, &hi, 6, t, 16), 0);
    lo = 0, hi = INFINITY;
    assert_int_equal(lg_svg_ticks(&lo, &hi, 6, t, 16), 0);
}

static void test_the_percentile_axis_is_log_of_one_over_one_minus_p(void **state)
{
    (void)state;
    assert_true(fabs(lg_svg_pct_x(0)) < 1e-12);
    assert_true(fabs(lg_svg_pct_x(50) - log10(2)) < 1e-12);
    assert_true(fabs(lg_svg_pct_x(90) - 1) < 1e-12);
    assert_true(fabs(lg_svg_pct_x(99.9) - 3) < 1e-9);
    assert_true(isinf(lg_svg_pct_x(100)));
    char buf[32];
    lg_svg_pct_label(0, buf, sizeof(buf));
    assert_string_equal(buf, "0%");
    lg_svg_pct_label(1, buf, sizeof(buf));
    assert_string_equal(buf, "90%");
    lg_svg_pct_label(2, buf, sizeof(buf));
    assert_string_equal(buf, "99%");
    lg_svg_pct_label(4, buf, sizeof(buf));
    assert_string_equal(buf, "99.99%");
}

static void test_numbers_get_short_labels(void **state)
{
    (void)state;
    char buf[32];
    const struct { double v; const char *want; } cases[] = {
        {0, "0"}, {0.25, "0.25"}, {12.5, "12.5"}, {980, "980"}, {1500, "1.5k"},
        {10000, "10k"}, {2e6, "2M"}, {-400, "-400"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        lg_svg_num(cases[i].v, buf, sizeof(buf));
        assert_string_equal(buf, cases[i].want);
    }
}

static void test_escaping_leaves_no_markup_and_no_control_bytes(void **state)
{
    (void)state;
    mem m;
    lg_svg_escape(mem_open(&m), "<script>a&b\"c'd\x01\n</script>");
    lg_svg_escape(m.f, NULL);
    char *out = mem_close(&m);
    assert_string_equal(out, "&lt;script&gt;a&amp;b&quot;c&#39;d  &lt;/script&gt;");
    free(out);
}

static void test_a_chart_maps_data_into_its_plot_area_and_skips_nan(void **state)
{
    (void)state;
    mem m;
    lg_chart c;
    lg_chart_begin(&c, mem_open(&m), 560, 290, 0, 10, 0, 100, "a \"chart\"");
    assert_true(lg_chart_x(&c, 0) == c.left && lg_chart_x(&c, 10) == c.right);
    assert_true(lg_chart_y(&c, 0) == c.bottom && lg_chart_y(&c, 100) == c.top);
    assert_true(c.left > 0 && c.right < 560 && c.top > 0 && c.bottom < 290);
    double xs[] = {0, NAN, 5, 10}, ys[] = {0, 50, INFINITY, 100};
    lg_chart_line(&c, xs, ys, 4, "#000", 1, NULL, 0);
    lg_chart_rect(&c, 0, 1, 0, NAN, "#000");
    lg_chart_end(&c);
    char *out = mem_close(&m);
    assert_null(strstr(out, "nan"));
    assert_null(strstr(out, "inf"));
    assert_non_null(strstr(out, "aria-label=\"a &quot;chart&quot;\""));
    assert_null(strstr(out, "<rect")); /* its only rectangle was not finite */
    assert_non_null(strstr(out, "L")); /* the two finite points made a line */
    free(out);
}

static void test_a_series_widens_its_buckets_instead_of_growing(void **state)
{
    (void)state;
    lg_series s, t;
    assert_int_equal(lg_series_init(&s), 0);
    assert_int_equal(lg_series_init(&t), 0);
    int64_t ms = 1000000;
    lg_series_add(&s, 0, LG_OUT_OK);
    lg_series_add(&s, 3 * ms, LG_OUT_INSUFFICIENT);
    assert_int_equal(s.n, 4);
    /* 2 s at 1 ms buckets would be 2000 of them: the width doubles to fit */
    lg_series_add(&s, 2000 * ms, LG_OUT_OK);
    assert_true(s.n <= LG_SERIES_MAX);
    assert_int_equal(s.width_ns, 4 * ms);
    assert_int_equal(lg_series_count(&s, 0, 1, LG_OUT_OK), 1);
    assert_int_equal(lg_series_count(&s, 0, 1, LG_OUT_INSUFFICIENT), 1);
    /* a finer series merges into the wider one bucket by bucket */
    lg_series_add(&t, 5 * ms, LG_OUT_OK);
    lg_series_merge(&s, &t);
    assert_int_equal(lg_series_count(&s, 1, 1, LG_OUT_OK), 1);
    assert_int_equal(lg_series_factor(&s, 100), 8); /* 501 buckets in groups of 8: 63 */
    uint64_t total = 0;
    for (size_t i = 0; i < (s.n + 7) / 8; i++)
        total += lg_series_count(&s, i, 8, LG_OUT_OK);
    assert_int_equal(total, 3);
    lg_series_free(&s);
    lg_series_free(&t);
}

static void test_samples_thin_out_evenly_and_keep_the_first(void **state)
{
    (void)state;
    lg_samples *s = malloc(sizeof(*s));
    assert_non_null(s);
    lg_samples_init(s, 7);
    for (int i = 0; i <= LG_SAMPLES_MAX; i++)
        lg_samples_add(s, i * 0.001, 1000 - i, i);
    assert_int_equal(s->n, LG_SAMPLES_MAX / 2 + 1);
    assert_int_equal(s->interval_ms, 2 * LG_SAMPLE_FIRST_MS);
    assert_true(s->s[0].t_s == 0 && s->s[0].stock == 1000);
    assert_int_equal(s->s[1].sold, 2); /* every other one kept */
    assert_int_equal(s->s[s->n - 1].sold, LG_SAMPLES_MAX);
    free(s);
}

/* A report whose every string tries to end the page early. */
static json_t *hostile_report(void)
{
    const char *evil = "<script>alert(1)</script><img src=x onerror=alert(2)>";
    json_t *lat = json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:[[f,i],[f,i]]}", "count",
                            2, "min", 1000, "max", 3000, "p50", 1000, "p90", 3000, "p99", 3000,
                            "p99.9", 3000, "mean", 2000, "percentiles", 0.0, 1000, 100.0, 3000);
    json_t *outs = json_pack("{s:i, s:i}", "ok", 1, "lock_timeout", 1);
    json_t *target = json_pack("{s:s, s:i, s:O, s:{s:O, s:O}}", "url",
                               "http://evil\"><script>x</script>", "requests", 2, "outcomes",
                               outs, "latencyUs", "all", lat, "ok", lat);
    json_t *doc = json_pack(
        "{s:s, s:i, s:f, s:i, s:o, s:{s:O, s:O}, s:[o], s:{s:s, s:i, s:i}, s:f, s:s,"
        " s:[{s:s, s:i, s:s}], s:[s], s:[], s:{s:s}, s:[{s:i, s:i, s:i, s:i}]}",
        "label", "", "requests", 2, "throughput", 4.0, "retries", 0, "outcomes", outs,
        "latencyUs", "all", lat, "ok", lat, "perTarget", target, "config", "scenario", evil,
        "concurrency", 1, "threads", 1, "elapsedSec", 0.5, "verdict", "FAIL", "violations",
        "kind", "oversold", "amount", 1, "text", evil, "expectationsUnmet", evil, "notes",
        "examples", "lock_timeout", evil, "items", "stockBefore", 1, "soldBefore", 0,
        "stockAfter", 0, "soldAfter", 2);
    json_decref(lat);
    return doc;
}

/* doc's HTML page, whole (free it). */
static char *page_of(const json_t *doc)
{
    mem m;
    assert_int_equal(lg_html_write(mem_open(&m), doc), 0);
    return mem_close(&m);
}

static void test_a_page_escapes_every_string_of_the_report(void **state)
{
    (void)state;
    json_t *doc = hostile_report();
    assert_non_null(doc);
    char *page = page_of(doc);
    assert_null(strstr(page, "<script"));
    assert_null(strstr(page, "<img"));
    assert_null(strstr(page, "http://"));
    assert_non_null(strstr(page, "&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert_non_null(strstr(page, "<div class=\"word\">FAIL</div>"));
    /* a run without a timeline or stock samples says so instead of drawing */
    assert_non_null(strstr(page, "No item: nothing was sampled."));
    assert_non_null(strstr(page, "</html>"));
    free(page);
    json_decref(doc);
}

/* Verdicts come from loadgen's own JSON, but are escaped like every other
 * string: in the banner, the title, compare's chips, table and headings. */
static void test_a_page_escapes_the_verdicts_too(void **state)
{
    (void)state;
    const char *evil = "<b>FAIL</b>";
    json_t *run = hostile_report();
    json_object_set_new(run, "verdict", json_string(evil));
    json_t *run2 = json_deep_copy(run);
    json_object_set_new(run2, "label", json_string("none"));
    json_object_set_new(run2, "expectedToFail", json_true());
    json_t *cmp = json_pack("{s:s, s:s, s:[O, O]}", "scenario", "compare", "verdict", evil,
                            "runs", run, run2);
    const json_t *docs[] = {run, cmp};
    for (size_t i = 0; i < 2; i++) {
        char *page = page_of(docs[i]);
        assert_null(strstr(page, "<b>"));
        assert_non_null(strstr(page, "&lt;b&gt;FAIL&lt;/b&gt;"));
        free(page);
    }
    json_decref(cmp);
    json_decref(run2);
    json_decref(run);
}

/* The "percentiles" list of a count of 2^40 answers as report.c writes it
 * (LG_REPORT_PCT_STEPS per halving, then [100, max]): the main curve of the
 * latency chart has a point for each, the max included. */
static void test_the_latency_curve_keeps_every_point_up_to_the_max(void **state)
{
    (void)state;
    json_t *doc = hostile_report();
    json_t *lat = json_object_get(json_object_get(doc, "latencyUs"), "all");
    double count = 1099511627776.0; /* 2^40 */
    json_t *pts = json_array();
    for (int i = 0; pow(2, (double)i / LG_REPORT_PCT_STEPS) <= count; i++)
        json_array_append_new(pts, json_pack("[f, i]",
                                             100 * (1 - pow(0.5, (double)i / LG_REPORT_PCT_STEPS)),
                                             1000 + i));
    json_array_append_new(pts, json_pack("[f, i]", 100.0, 3000));
    size_t npts = json_array_size(pts);
    assert_true(npts <= LG_REPORT_PCT_POINTS_MAX);
    json_object_set_new(lat, "percentiles", pts);
    json_object_set_new(lat, "count", json_real(count));
    char *page = page_of(doc);
    char *chart = strstr(page, "aria-label=\"latency by percentile\"");
    assert_non_null(chart);
    char *path = strstr(chart, "stroke-width=\"2.2\""); /* all answers */
    assert_non_null(path);
    size_t segments = 0;
    for (const char *c = strstr(path, " d=\"") + 4; *c != '"'; c++)
        segments += *c == 'L';
    assert_int_equal(segments + 1, npts);
    free(page);
    json_decref(doc);
}

/* A flash sale's report draws its own section: each buyer's fate, the status
 * mix, the fire's and /health's latencies with the failed probes, and each
 * replica's peaks (a replica never read shows "-", its URL escaped). */
static void test_a_flash_sale_draws_its_section(void **state)
{
    (void)state;
    json_t *doc = hostile_report();
    json_t *lat = json_deep_copy(json_object_get(json_object_get(doc, "latencyUs"), "all"));
    json_object_set_new(
        doc, "flash",
        json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:{s:i, s:i, s:i}, s:O, s:O, s:i,"
                  " s:[{s:s, s:i, s:i, s:i}, {s:s, s:n, s:n, s:n}]}",
                  "buyers", 3000, "procs", 3, "answered", 2998, "connectFailed", 1,
                  "closedUnanswered", 1, "timedOut", 0, "notFired", 0, "status", "200", 500,
                  "409", 2490, "503", 8, "fireLatency", lat, "health", lat, "healthFailed", 7,
                  "peaks", "url", "http://r1<b>", "threads", 21, "rssBytes", 94371840, "openFds",
                  1040, "url", "http://r2", "threads", "rssBytes", "openFds"));
    json_decref(lat);
    char *page = page_of(doc);
    char *sec = strstr(page, "<h2>Flash sale</h2>");
    assert_non_null(sec);
    assert_non_null(strstr(sec, "3000 buyers, a connection each from 3 processes"));
    assert_non_null(strstr(sec, "<td>closed unanswered</td><td>1</td>"));
    assert_non_null(strstr(sec, "<td>409</td><td>2490</td>"));
    assert_non_null(strstr(sec, "<td>503</td><td>8</td>"));
    assert_non_null(strstr(sec, "<td>GET /health meanwhile</td><td>2</td>"));
    assert_non_null(strstr(sec, "without a 200 in time: 7"));
    assert_non_null(strstr(sec, "<td>r1&lt;b&gt;</td><td>90 MiB</td>"));
    assert_non_null(strstr(sec, "<td>r2</td><td>-</td>"));
    assert_null(strstr(page, "<b>"));
    free(page);
    json_decref(doc);
}

static void test_a_reserve_run_draws_available_reserved_and_sold(void **state)
{
    (void)state;
    json_t *doc = hostile_report();
    json_object_set_new(doc, "stock",
                        json_pack("{s:i, s:[f,f,f], s:[i,i,i], s:[i,i,i], s:[n,i,i]}", "itemId", 7,
                                  "tMs", 0.0, 10.0, 3100.0, "stock", 3, 0, 1, "sold", 0, 1, 2,
                                  "reserved", 2, 0));
    /* a sale of orders alone: its stockd reports reserved (0), nothing to draw */
    char *page = page_of(doc);
    assert_null(strstr(page, "Available, reserved and sold over time"));
    free(page);
    json_object_set_new(doc, "reservations", json_object());
    page = page_of(doc);
    char *fig = strstr(page, "Available, reserved and sold over time");
    assert_non_null(fig);
    assert_non_null(strstr(fig, ">reserved</span>"));
    assert_null(strstr(page, "NaN"));
    free(page);
    json_object_del(json_object_get(doc, "stock"), "reserved"); /* a run before reservations */
    page = page_of(doc);
    assert_null(strstr(page, "Available, reserved and sold over time"));
    free(page);
    json_decref(doc);
}

/* The history check's reads against their band, the read above it marked
 * stale, the one below impossible; no chart when the check did not run. */
static void test_a_history_draws_the_reads_against_their_band(void **state)
{
    (void)state;
    json_t *doc = hostile_report();
    char *page = page_of(doc);
    assert_null(strstr(page, "Reads against the history"));
    free(page);
    json_object_set_new(
        doc, "history",
        json_pack("{s:b, s:i, s:i, s:i, s:i, s:i, s:{s:[f,f,f,f], s:[f,f,f,f], s:[i,i,i,i], "
                  "s:[i,i,i,i], s:[i,i,i,i]}}",
                  "checked", 1, "itemId", 7, "intervalMs", 5, "reads", 4, "stale", 1,
                  "impossible", 1, "series", "t0Ms", 1.0, 6.0, 11.0, 16.0, "t1Ms", 2.0, 7.0,
                  12.0, 17.0, "stock", 100, 99, 90, 70, "low", 95, 90, 85, 80, "high", 100, 96,
                  92, 88));
    page = page_of(doc);
    char *fig = strstr(page, "Reads against the history");
    assert_non_null(fig);
    char *end = strstr(fig, "</figure>");
    assert_non_null(end);
    *end = '\0'; /* this figure only: the outcome bars share the colours */
    assert_non_null(strstr(fig, "1 above, 1 below"));
    assert_non_null(strstr(fig, "fill=\"#d43d51\"")); /* the stale read's mark */
    assert_non_null(strstr(fig, "fill=\"#8e44ad\"")); /* the impossible one's */
    assert_null(strstr(page, "NaN"));
    free(page);
    json_decref(doc);
}

static void test_an_error_document_becomes_a_page_that_says_so(void **state)
{
    (void)state;
    json_t *doc = json_pack("{s:s}", "error", "POST http://127.0.0.1:1/items: refused <b>");
    char *page = page_of(doc);
    assert_non_null(strstr(page, "ERROR"));
    assert_non_null(strstr(page, "POST 127.0.0.1:1/items: refused &lt;b&gt;"));
    free(page);
    json_decref(doc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ticks_are_whole_steps_and_the_axis_ends_on_one),
        cmocka_unit_test(test_ticks_refuse_an_empty_or_endless_range),
        cmocka_unit_test(test_the_percentile_axis_is_log_of_one_over_one_minus_p),
        cmocka_unit_test(test_numbers_get_short_labels),
        cmocka_unit_test(test_escaping_leaves_no_markup_and_no_control_bytes),
        cmocka_unit_test(test_a_chart_maps_data_into_its_plot_area_and_skips_nan),
        cmocka_unit_test(test_a_series_widens_its_buckets_instead_of_growing),
        cmocka_unit_test(test_samples_thin_out_evenly_and_keep_the_first),
        cmocka_unit_test(test_a_page_escapes_every_string_of_the_report),
        cmocka_unit_test(test_a_page_escapes_the_verdicts_too),
        cmocka_unit_test(test_the_latency_curve_keeps_every_point_up_to_the_max),
        cmocka_unit_test(test_a_flash_sale_draws_its_section),
        cmocka_unit_test(test_a_reserve_run_draws_available_reserved_and_sold),
        cmocka_unit_test(test_a_history_draws_the_reads_against_their_band),
        cmocka_unit_test(test_an_error_document_becomes_a_page_that_says_so),
    };
    return cmocka_run_group_tests_name("lg_html", tests, NULL, NULL);
}
