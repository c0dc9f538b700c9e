/* test_report.c - loadgen --html as a person sees it: build/loadgen runs
 * against a real redis-server and real stockd replicas, its page is checked
 * as text (self-contained, the verdict, a chart per figure, the same data as
 * --json) and then rendered by headless Chromium (scripts/screenshot.sh) to a
 * PNG that must have the window's size, look like a report (many colours, the
 * verdict's banner colour), and have caused no console message. A planted
 * SVG error proves the console check can fail. */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "loadgen/sample.h"
#include "tests/support/harness.h"
#include "tests/support/png.h"

static th_redis redis;
static th_stockd locked[3]; /* --lock redis */
static th_stockd unlocked;  /* --lock none: the race */
static th_stockd atomic_srv;
static char dir[64], db[128], loadgen[256];

#define RUN_TIMEOUT_MS 60000   /* hang detection only */
#define SHOT_TIMEOUT_MS 90000  /* the script bounds Chromium at 60 s itself */
#define SHOT_W 1200
#define SHOT_H 1400
/* a run this long saw the sampler try a read, however busy the machine */
#define MID_RUN_SAMPLE_MS (2 * LG_SAMPLE_TIMEOUT_MS)
#define PASS_GREEN 0x1e8a4cu   /* the banners' colours in loadgen/html.c */
#define FAIL_RED 0xc0392bu

static int group_setup(void **state)
{
    (void)state;
    snprintf(loadgen, sizeof(loadgen), "%s/loadgen", th_build_dir());
    if (th_tempdir("report-it", dir, sizeof(dir)) != 0 || th_redis_start(&redis) != 0)
        return -1;
    snprintf(db, sizeof(db), "%s/stock.db", dir);
    const char *lock_flags[] = {"--allow-work-ms", NULL};
    const char *none_flags[] = {"--lock", "none", "--allow-work-ms", NULL};
    const char *atomic_flags[] = {"--lock", "atomic", "--allow-work-ms", NULL};
    for (int i = 0; i < 3; i++)
        if (th_stockd_start(&locked[i], &redis, db, dir, lock_flags) != 0)
            return -1;
    if (th_stockd_start(&unlocked, &redis, db, dir, none_flags) != 0 ||
        th_stockd_start(&atomic_srv, &redis, db, dir, atomic_flags) != 0)
        return -1;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    int rc = th_stockd_stop_clean(&unlocked) | th_stockd_stop_clean(&atomic_srv);
    for (int i = 0; i < 3; i++)
        rc |= th_stockd_stop_clean(&locked[i]);
    th_redis_stop(&redis, 0);
    return rc;
}

typedef struct report {
    char html_path[160], png_path[160];
    char *html;   /* the page */
    json_t *json; /* the --json report of the same run */
} report;

/* Runs loadgen with args plus --json and --html into dir/<name>.*, expecting
 * exit status expect; the output explains a failure. */
static void run_report(report *r, const char *name, int expect, const char *const args[])
{
    char out[160], json_path[160];
    snprintf(out, sizeof(out), "%s/%s.out", dir, name);
    snprintf(json_path, sizeof(json_path), "%s/%s.json", dir, name);
    snprintf(r->html_path, sizeof(r->html_path), "%s/%s.html", dir, name);
    snprintf(r->png_path, sizeof(r->png_path), "%s/%s.png", dir, name);
    const char *argv[32] = {loadgen, "--json", json_path, "--html", r->html_path};
    int n = 5;
    while (*args && n < 31)
        argv[n++] = *args++;
    int status = th_run(argv, out, RUN_TIMEOUT_MS);
    if (status != expect) {
        char *text = th_read_file(out);
        fprintf(stderr, "loadgen exited %d, expected %d:\n%s\n", status, expect,
                text ? text : "(no output)");
        free(text);
    }
    assert_int_equal(status, expect);
    r->html = th_read_file(r->html_path);
    r->json = json_load_file(json_path, 0, NULL);
    assert_non_null(r->html);
    assert_non_null(r->json);
}

static void report_free(report *r)
{
    free(r->html);
    json_decref(r->json);
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* Self-contained: nothing to run, nothing to fetch, no URL at all. */
static void assert_self_contained(const char *html)
{
    static const char *const banned[] = {"<script", "http://", "https://", "src=", "href=",
                                         "url(", "@import", "<link", "<iframe", "<img", "nan\""};
    for (size_t i = 0; i < sizeof(banned) / sizeof(banned[0]); i++)
        if (strstr(html, banned[i])) {
            fprintf(stderr, "the page holds \"%s\"\n", banned[i]);
            fail();
        }
    assert_true(strncmp(html, "<!DOCTYPE html>", 15) == 0);
    assert_non_null(strstr(html, "</html>"));
}

/* Renders page in Chromium to png; fails the test unless the PNG has the
 * window's size; returns how many console messages the page caused (their
 * lines printed), so a caller can expect some. */
static int render(const char *page, const char *png, th_png *img)
{
    char w[16], h[16], log[192];
    snprintf(w, sizeof(w), "%d", SHOT_W);
    snprintf(h, sizeof(h), "%d", SHOT_H);
    snprintf(log, sizeof(log), "%s.log", png);
    remove(png);
    const char *argv[] = {"/bin/sh", "scripts/screenshot.sh", page, png, w, h, NULL};
    int status = th_run(argv, log, SHOT_TIMEOUT_MS);
    char *text = th_read_file(log);
    if (status != 0)
        fprintf(stderr, "screenshot.sh exited %d:\n%s\n", status, text ? text : "");
    assert_int_equal(status, 0);
    int console = 0;
    for (char *line = text ? strtok(text, "\n") : NULL; line; line = strtok(NULL, "\n"))
        if (strstr(line, ":CONSOLE")) {
            fprintf(stderr, "console: %s\n", line);
            console++;
        }
    free(text);
    char why[256];
    if (th_png_read(png, img, why, sizeof(why)) != 0) {
        fprintf(stderr, "%s\n", why);
        fail();
    }
    assert_int_equal(img->width, SHOT_W);
    assert_int_equal(img->height, SHOT_H);
    return console;
}

/* The page rendered as a report: no console message, not blank (text and
 * charts give hundreds of colours), and the banner in the verdict's colour. */
static void assert_renders(const report *r, unsigned banner)
{
    th_png img;
    assert_int_equal(render(r->html_path, r->png_path, &img), 0);
    size_t colors = th_png_colors(&img);
    double share = th_png_share(&img, banner, 2);
    if (colors < 200 || share < 0.01)
        fprintf(stderr, "%s: %zu colours, %.2f %% in the banner's colour\n", r->png_path, colors,
                share * 100);
    assert_true(colors >= 200);
    assert_true(share >= 0.01);
    th_png_free(&img);
}

/* The stock samples of --json: read before and after the run and, when the
 * run lasted long enough that even a starved sampler thread got to try, also
 * by the sampler (answered or given up on); in time order, the read-back last
 * (the chart draws them as a step line, which must not go back). A short run
 * on a busy machine may have no read in between: that is no failure. */
static void assert_samples_in_time_order(const json_t *doc)
{
    const json_t *stock = json_object_get(doc, "stock"), *t = json_object_get(stock, "tMs");
    size_t n = json_array_size(t);
    double elapsed_ms = json_number_value(json_object_get(doc, "elapsedSec")) * 1e3;
    assert_true(n >= 2);
    if (elapsed_ms >= MID_RUN_SAMPLE_MS) {
        json_int_t failed = json_integer_value(json_object_get(stock, "failedReads"));
        assert_true((json_int_t)n - 2 + failed >= 1);
    }
    for (size_t i = 1; i < n; i++)
        if (json_number_value(json_array_get(t, i)) < json_number_value(json_array_get(t, i - 1)))
            fail_msg("stock sample %zu at %.3f ms comes before sample %zu at %.3f ms", i,
                     json_number_value(json_array_get(t, i)), i - 1,
                     json_number_value(json_array_get(t, i - 1)));
    assert_true(json_number_value(json_array_get(t, n - 1)) >= elapsed_ms);
}

static void test_a_hot_run_renders_as_a_passing_report(void **state)
{
    (void)state;
    char targets[256];
    snprintf(targets, sizeof(targets), "%s,%s,%s", locked[0].url, locked[1].url, locked[2].url);
    report r;
    run_report(&r, "hot", 0, (const char *[]){"-s", "hot", "--target", targets, NULL});
    assert_self_contained(r.html);
    /* throughput, latency, stock, the reads against the history's band, outcomes */
    assert_int_equal(count(r.html, "<svg"), 5);
    assert_int_equal(count(r.html, "<figure>"), 5);
    assert_non_null(strstr(r.html, "Reads against the history"));
    assert_non_null(strstr(r.html, "<div class=\"word\">PASS</div>"));
    assert_string_equal(json_string_value(json_object_get(r.json, "verdict")), "PASS");
    /* the page shows what --json holds: each replica, the item sampled */
    char item[64];
    snprintf(item, sizeof(item), "item %lld,",
             (long long)json_integer_value(json_object_get(json_object_get(r.json, "stock"),
                                                           "itemId")));
    assert_non_null(strstr(r.html, item));
    for (int i = 0; i < 3; i++)
        assert_non_null(strstr(r.html, locked[i].url + strlen("http://")));
    assert_samples_in_time_order(r.json);
    assert_renders(&r, PASS_GREEN);
    report_free(&r);
}

static void test_compare_draws_the_modes_side_by_side(void **state)
{
    (void)state;
    char red[96], none[96], atom[96];
    snprintf(red, sizeof(red), "redis=%s", locked[0].url);
    snprintf(none, sizeof(none), "none=%s", unlocked.url);
    snprintf(atom, sizeof(atom), "atomic=%s", atomic_srv.url);
    report r;
    run_report(&r, "compare", 0,
               (const char *[]){"-s", "compare", "-n", "400", "--work-ms", "5", "--target", red,
                                "--target", none, "--target", atom, NULL});
    assert_self_contained(r.html);
    assert_int_equal(count(r.html, "<svg"), 4);
    /* one latency curve per mode, each in its mode's colour, in one chart */
    const char *lat = strstr(r.html, "aria-label=\"latency by percentile\"");
    assert_non_null(lat);
    char *end = strstr(lat, "</svg>");
    assert_non_null(end);
    *end = '\0';
    assert_int_equal(count(lat, "stroke=\"#2f6fbf\""), 1); /* redis */
    assert_int_equal(count(lat, "stroke=\"#d64541\""), 1); /* none */
    assert_int_equal(count(lat, "stroke=\"#2e9d5b\""), 1); /* atomic */
    *end = '<';
    assert_non_null(strstr(r.html, "none FAIL, as expected without a lock"));
    assert_non_null(strstr(r.html, "oversold by"));
    assert_renders(&r, PASS_GREEN);
    report_free(&r);
}

static void test_a_failed_run_renders_red_with_what_broke(void **state)
{
    (void)state;
    report r;
    run_report(&r, "none", 1,
               (const char *[]){"-s", "hot", "-n", "300", "--work-ms", "5", "--target",
                                unlocked.url, NULL});
    assert_self_contained(r.html);
    assert_non_null(strstr(r.html, "<div class=\"word\">FAIL</div>"));
    assert_non_null(strstr(r.html, "oversold by"));
    assert_renders(&r, FAIL_RED);
    report_free(&r);
}

/* The console check sees what a broken chart causes: without this, a check
 * that never finds anything would pass every page. */
static void test_the_console_check_sees_a_planted_svg_error(void **state)
{
    (void)state;
    char page[160], png[160];
    snprintf(page, sizeof(page), "%s/planted.html", dir);
    snprintf(png, sizeof(png), "%s/planted.png", dir);
    FILE *f = fopen(page, "w");
    assert_non_null(f);
    fputs("<!DOCTYPE html><html><body><svg viewBox=\"0 0 10 10\"><path d=\"M NaN 0 L 5 5\"/>"
          "</svg></body></html>\n", f);
    fclose(f);
    th_png img;
    assert_true(render(page, png, &img) >= 1);
    th_png_free(&img);
}

static void test_a_page_that_cannot_be_written_is_a_usage_error(void **state)
{
    (void)state;
    char out[160];
    snprintf(out, sizeof(out), "%s/nowhere.out", dir);
    const char *argv[] = {loadgen, "--html", "/nonexistent/dir/report.html", "--target",
                          locked[0].url, NULL};
    assert_int_equal(th_run(argv, out, RUN_TIMEOUT_MS), 2);
    char *text = th_read_file(out);
    assert_non_null(text);
    assert_non_null(strstr(text, "/nonexistent/dir/report.html"));
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_hot_run_renders_as_a_passing_report),
        cmocka_unit_test(test_compare_draws_the_modes_side_by_side),
        cmocka_unit_test(test_a_failed_run_renders_red_with_what_broke),
        cmocka_unit_test(test_the_console_check_sees_a_planted_svg_error),
        cmocka_unit_test(test_a_page_that_cannot_be_written_is_a_usage_error),
    };
    return cmocka_run_group_tests_name("report", tests, group_setup, group_teardown);
}
