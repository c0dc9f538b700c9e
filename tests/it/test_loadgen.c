/* test_loadgen.c - build/loadgen end to end against a real redis-server and
 * real stockd replicas sharing one SQLite file: the hot, spread, renew,
 * interrupt and cart scenarios must PASS; the same hot and cart runs against
 * replicas without a lock must FAIL (the checker can fail); compare says so
 * side by side; set-up mistakes exit 2 with a message; and reservations
 * (confirmed, cancelled, left to lapse, a buyer's limit) PASS across three
 * replicas, one of them killed mid-run. The history check reads the item
 * while the load runs: nothing outside the band on the passing runs, stale
 * reads on the replicas without a lock. */
#include <jansson.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>

#include "tests/support/harness.h"

static th_redis redis;
static th_stockd locked[3]; /* --lock redis, lease 500 ms: renew works, interrupt needs more */
static th_stockd brief[2];  /* --lock redis, lease 300 ms x 2 renewals: holders get interrupted */
static th_stockd spinning[3];    /* as locked, but polling (--wait-mode spin, no batches) */
static th_stockd brief_spin[2];  /* as brief, polling */
static th_stockd unlocked[2]; /* --lock none: the race */
static th_stockd atomic_srv;
static th_stockd tight; /* --max-connections 40: a flash sale's buyers beyond get 503 */
static th_stockd plain; /* stockd's defaults: a flash sale of thousands on one replica */
static char dir[64], db[128], loadgen[256];

#define RUN_TIMEOUT_MS 60000 /* hang detection only */

static int start_all(th_stockd *s, int n, const char *const flags[])
{
    for (int i = 0; i < n; i++)
        if (th_stockd_start(&s[i], &redis, db, dir, flags) != 0)
            return -1;
    return 0;
}

static int group_setup(void **state)
{
    (void)state;
    curl_global_init(CURL_GLOBAL_ALL);
    snprintf(loadgen, sizeof(loadgen), "%s/loadgen", th_build_dir());
    if (th_tempdir("loadgen-it", dir, sizeof(dir)) != 0 || th_redis_start(&redis) != 0)
        return -1;
    snprintf(db, sizeof(db), "%s/stock.db", dir);
    const char *locked_flags[] = {"--allow-work-ms", "--lease-ms", "500", "--redis-timeout-ms",
                                  "80", "--retry-ms", "20", NULL};
    const char *brief_flags[] = {"--allow-work-ms", "--lease-ms", "500", "--redis-timeout-ms",
                                 "80", "--max-renewals", "2", NULL};
    const char *none_flags[] = {"--lock", "none", "--allow-work-ms", NULL};
    const char *atomic_flags[] = {"--lock", "atomic", NULL};
    const char *spin_flags[] = {"--allow-work-ms", "--lease-ms", "500", "--redis-timeout-ms",
                                "80", "--retry-ms", "20", "--wait-mode", "spin", "--batch",
                                "off", NULL};
    const char *brief_spin_flags[] = {"--allow-work-ms", "--lease-ms", "500",
                                      "--redis-timeout-ms", "80", "--max-renewals", "2",
                                      "--wait-mode", "spin", NULL};
    const char *tight_flags[] = {"--max-connections", "40", NULL};
    if (start_all(&tight, 1, tight_flags) || start_all(&plain, 1, (const char *[]){NULL}) ||
        start_all(locked, 3, locked_flags) || start_all(brief, 2, brief_flags) ||
        start_all(unlocked, 2, none_flags) || start_all(&atomic_srv, 1, atomic_flags) ||
        start_all(spinning, 3, spin_flags) || start_all(brief_spin, 2, brief_spin_flags))
        return -1;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    int rc = 0;
    for (int i = 0; i < 3; i++)
        rc |= th_stockd_stop_clean(&locked[i]) | th_stockd_stop_clean(&spinning[i]);
    for (int i = 0; i < 2; i++)
        rc |= th_stockd_stop_clean(&brief[i]) | th_stockd_stop_clean(&unlocked[i]) |
              th_stockd_stop_clean(&brief_spin[i]);
    rc |= th_stockd_stop_clean(&atomic_srv) | th_stockd_stop_clean(&tight) |
          th_stockd_stop_clean(&plain);
    th_redis_stop(&redis, 0);
    curl_global_cleanup();
    return rc;
}

/* "http://a,http://b" for the replicas in s. */
static const char *urls(const th_stockd *s, int n, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? "," : "", s[i].url);
    return buf;
}

typedef struct outcome {
    int status;  /* loadgen's exit status */
    char *text;  /* its stdout + stderr */
    json_t *json; /* its --json report, NULL when none was written */
} outcome;

/* Runs loadgen with args (NULL-terminated) plus --json; prints its output when
 * the exit status is not the expected one, so a failure explains itself. */
static outcome run_loadgen(int expect, const char *const args[])
{
    static int seq;
    char out[160], json_path[160];
    snprintf(out, sizeof(out), "%s/loadgen-%d.out", dir, seq);
    snprintf(json_path, sizeof(json_path), "%s/loadgen-%d.json", dir, seq++);
    const char *argv[48] = {loadgen, "--json", json_path};
    int n = 3;
    while (*args && n < 47)
        argv[n++] = *args++;
    argv[n] = NULL;
    outcome o = {th_run(argv, out, RUN_TIMEOUT_MS), th_read_file(out), NULL};
    o.json = json_load_file(json_path, 0, NULL);
    if (o.status != expect)
        fprintf(stderr, "loadgen exited %d, expected %d; its output:\n%s\n", o.status, expect,
                o.text ? o.text : "(none)");
    assert_non_null(o.text);
    return o;
}

static void outcome_free(outcome *o)
{
    free(o->text);
    json_decref(o->json);
}

static long long jint(json_t *j, const char *path)
{
    /* "a.b.c": nested object members */
    char key[64];
    for (const char *p = path; j && *p;) {
        size_t len = strcspn(p, ".");
        snprintf(key, sizeof(key), "%.*s", (int)len, p);
        j = json_object_get(j, key);
        p += len + (p[len] == '.');
    }
    assert_true(json_is_integer(j));
    return (long long)json_integer_value(j);
}

static json_t *first_item(json_t *report)
{
    json_t *item = json_array_get(json_object_get(report, "items"), 0);
    assert_non_null(item);
    return item;
}

/* The scenarios run against replicas in each wait mode: notify (the default,
 * with hand-off and group commit) and spin. */
/* 503s for a Redis slower than --redis-timeout-ms, a lock busy past
 * --wait-ms, a holder slowed past its renewals (interrupted, or its lease
 * lost) or a database busy past --busy-timeout-ms, which a loaded machine
 * may cause: they deduct nothing (the verdict checks the ledger). loadgen has
 * no outcome of its own for storage_busy: it is among other_5xx, counted as
 * busy (with_other) when the example loadgen kept of other_5xx is one. */
static long long busy_answers(json_t *report, int with_other)
{
    static const char *const kinds[] = {"redis_unavailable", "lock_timeout", "lock_interrupted",
                                        "lock_lost"};
    json_t *outcomes = json_object_get(report, "outcomes");
    long long busy = 0;
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
        busy += json_integer_value(json_object_get(outcomes, kinds[i]));
    const char *other = json_string_value(json_object_get(json_object_get(report, "examples"),
                                                          "other_5xx"));
    if (with_other && other && strstr(other, "storage_busy"))
        busy += json_integer_value(json_object_get(outcomes, "other_5xx"));
    if (busy)
        print_message("%lld answers were 503 for a busy Redis, lock or database\n", busy);
    return busy;
}

/* Why the history check did not run ("history.skipped"). */
static json_t *history_skipped(json_t *report)
{
    json_t *s = json_object_get(json_object_get(report, "history"), "skipped");
    assert_true(json_is_string(s));
    return s;
}

/* The history check ran on reads taken while the load ran and found none
 * outside the band, and no sale after a sold-out answer. */
static void assert_history_passed(json_t *report)
{
    json_t *h = json_object_get(report, "history");
    assert_non_null(h);
    assert_true(json_is_true(json_object_get(h, "checked")));
    assert_true(jint(report, "history.reads") > 0);
    assert_int_equal(jint(report, "history.bandChecks"), jint(report, "history.reads"));
    assert_int_equal(jint(report, "history.withinBand"), jint(report, "history.reads"));
    assert_int_equal(jint(report, "history.violations"), 0);
}

static void hot_sells_exactly_the_stock(const th_stockd *replicas)
{
    char t[512];
    outcome o = run_loadgen(0, (const char *[]){"--scenario", "hot", "--target",
                                                urls(replicas, 3, t, sizeof(t)), NULL});
    assert_int_equal(o.status, 0);
    assert_non_null(strstr(o.text, "VERDICT: PASS"));
    assert_string_equal(json_string_value(json_object_get(o.json, "verdict")), "PASS");
    assert_int_equal(jint(o.json, "outcomes.ok"), 100);
    /* the rest refused for stock, or busy (the verdict checks the ledger) */
    long long busy = busy_answers(o.json, 1);
    assert_int_equal(jint(o.json, "outcomes.insufficient_stock") + busy, 900);
    assert_true(jint(o.json, "outcomes.insufficient_stock") > 0);
    assert_int_equal(jint(first_item(o.json), "stockAfter"), 0);
    assert_int_equal(jint(first_item(o.json), "soldAfter"), 100);
    json_t *targets = json_object_get(o.json, "perTarget");
    assert_int_equal(json_array_size(targets), 3);
    for (size_t i = 0; i < 3; i++) /* every replica took part */
        assert_true(jint(json_array_get(targets, i), "requests") > 0);
    assert_history_passed(o.json);
    outcome_free(&o);
}

static void spread_passes(const th_stockd *replicas)
{
    char t[512];
    outcome o = run_loadgen(0, (const char *[]){"-s", "spread", "-n", "1500", "--items", "20",
                                                "--target", urls(replicas, 3, t, sizeof(t)),
                                                NULL});
    assert_int_equal(o.status, 0);
    /* as in hot: a loaded machine may turn a few into 503s that deduct nothing */
    if (jint(o.json, "outcomes.ok") + busy_answers(o.json, 1) != 1500) {
        char *all = json_dumps(json_object_get(o.json, "outcomes"), JSON_COMPACT);
        char *ex = json_dumps(json_object_get(o.json, "examples"), JSON_COMPACT);
        fail_msg("of 1500 requests, not ok nor busy: %s; examples %s", all, ex);
    }
    assert_int_equal(json_array_size(json_object_get(o.json, "items")), 20);
    outcome_free(&o);
}

/* 2500 deductions of one item leave more ledger rows than stockd answers in
 * one page (1000): the verdict reads them all, page after page. */
static void test_a_ledger_longer_than_a_page_is_read_in_pages(void **state)
{
    (void)state;
    char t[512];
    outcome o = run_loadgen(0, (const char *[]){"-n", "2500", "--items", "1", "--stock", "5000",
                                                "--target", urls(locked, 3, t, sizeof(t)), NULL});
    assert_int_equal(o.status, 0);
    assert_int_equal(jint(o.json, "outcomes.ok"), 2500);
    assert_int_equal(jint(first_item(o.json), "ledgerRows"), 2500);
    assert_true(json_is_true(json_object_get(first_item(o.json), "ledgerChecked")));
    outcome_free(&o);
}

static void renew_passes(const th_stockd *replicas)
{
    char t[512];
    outcome o = run_loadgen(0, (const char *[]){"-s", "renew", "--work-ms", "1200", "--target",
                                                urls(replicas, 3, t, sizeof(t)), NULL});
    assert_int_equal(o.status, 0);
    assert_int_equal(jint(o.json, "outcomes.ok"), 16);
    assert_true(jint(o.json, "latencyUs.ok.min") >= 1200000);
    outcome_free(&o);
}

static void interrupt_passes_and_nothing_interrupted_deducted(const th_stockd *replicas)
{
    char t[512];
    outcome o = run_loadgen(0, (const char *[]){"-s", "interrupt", "--work-ms", "2000",
                                                "--target", urls(replicas, 2, t, sizeof(t)),
                                                NULL});
    assert_int_equal(o.status, 0);
    assert_int_equal(jint(o.json, "outcomes.lock_interrupted"), 16);
    json_t *items = json_object_get(o.json, "items");
    for (size_t i = 0; i < json_array_size(items); i++) {
        json_t *it = json_array_get(items, i);
        assert_int_equal(jint(it, "soldAfter"), jint(it, "soldBefore"));
        assert_true(json_is_true(json_object_get(it, "ledgerChecked")));
    }
    outcome_free(&o);
}

#define BOTH_MODES(name, fn, notify_replicas, spin_replicas)                                  \
    static void test_##name##_notify(void **state)                                            \
    {                                                                                          \
        (void)state;                                                                           \
        fn(notify_replicas);                                                                   \
    }                                                                                          \
    static void test_##name##_spin(void **state)                                              \
    {                                                                                          \
        (void)state;                                                                           \
        fn(spin_replicas);                                                                     \
    }
BOTH_MODES(hot_scenario_sells_exactly_the_stock_across_three_replicas, hot_sells_exactly_the_stock,
           locked, spinning)
BOTH_MODES(spread_scenario_passes, spread_passes, locked, spinning)
BOTH_MODES(renew_scenario_passes_with_work_longer_than_the_lease, renew_passes, locked, spinning)
BOTH_MODES(interrupt_scenario_passes_and_no_interrupted_holder_deducted,
           interrupt_passes_and_nothing_interrupted_deducted, brief, brief_spin)

static void test_interrupt_scenario_fails_when_nothing_was_interrupted(void **state)
{
    (void)state;
    /* the long-lease replicas renew through 400 ms: the scenario proved nothing */
    outcome o = run_loadgen(1, (const char *[]){"-s", "interrupt", "--work-ms", "400", "-n",
                                                "4", "--target", locked[0].url, NULL});
    assert_int_equal(o.status, 1);
    assert_non_null(strstr(o.text, "expectation not met: interrupt: no lock_interrupted"));
    outcome_free(&o);
}

static void test_checker_fails_replicas_without_a_lock(void **state)
{
    (void)state;
    char t[512];
    outcome o = run_loadgen(1, (const char *[]){"-s", "hot", "--work-ms", "5", "-n", "400",
                                                "--target", urls(unlocked, 2, t, sizeof(t)),
                                                NULL});
    assert_int_equal(o.status, 1);
    assert_non_null(strstr(o.text, "VERDICT: FAIL"));
    assert_non_null(strstr(o.text, "oversold by"));
    assert_non_null(strstr(o.text, "lost updates"));
    json_t *v = json_object_get(o.json, "violations");
    assert_true(json_array_size(v) >= 2);
    assert_true(jint(first_item(o.json), "acknowledged") > 100); /* more 200s than stock */
    /* once more than the stock was acknowledged, every read (never below 0) is
     * above initial - acknowledged: reads no request history explains */
    assert_true(jint(o.json, "history.stale") > 0);
    assert_non_null(strstr(o.text, "reads above the band"));
    int stale = 0;
    for (size_t i = 0; i < json_array_size(v); i++)
        stale += strcmp(json_string_value(json_object_get(json_array_get(v, i), "kind")),
                        "stale_reads") == 0;
    assert_int_equal(stale, 1);
    outcome_free(&o);
}

/* A cart run that passed: every order checked against the ledger, none
 * applied in part, and per item sold equal to the acknowledged lines. */
static void assert_carts_pass(const outcome *o)
{
    assert_int_equal(o->status, 0);
    assert_non_null(strstr(o->text, "VERDICT: PASS"));
    json_t *orders = json_object_get(o->json, "orders");
    assert_non_null(orders);
    assert_int_equal(jint(orders, "orders"), 1000);
    assert_int_equal(jint(orders, "checked"), 1000);
    assert_true(jint(orders, "lines") > 1000); /* carts of 1-5 lines */
    assert_int_equal(jint(orders, "acknowledged"), jint(o->json, "outcomes.ok"));
    assert_true(jint(o->json, "outcomes.ok") > 0);
    assert_true(jint(o->json, "outcomes.insufficient_stock") > 0);
    assert_int_equal(jint(orders, "partiallyApplied"), 0);
    json_t *items = json_object_get(o->json, "items");
    assert_int_equal(json_array_size(items), 8);
    for (size_t i = 0; i < json_array_size(items); i++) {
        json_t *it = json_array_get(items, i);
        assert_int_equal(jint(it, "soldAfter") - jint(it, "soldBefore"), jint(it, "acknowledged"));
        assert_true(json_is_true(json_object_get(it, "ledgerChecked")));
    }
    assert_history_passed(o->json);
}

static void test_cart_scenario_passes_across_three_replicas(void **state)
{
    (void)state;
    char t[512];
    outcome o = run_loadgen(0, (const char *[]){"--scenario", "cart", "--target",
                                                urls(locked, 3, t, sizeof(t)), NULL});
    assert_carts_pass(&o);
    outcome_free(&o);
}

static void test_cart_scenario_passes_against_atomic(void **state)
{
    (void)state;
    outcome o = run_loadgen(0, (const char *[]){"-s", "cart", "--target", atomic_srv.url, NULL});
    assert_carts_pass(&o);
    outcome_free(&o);
}

/* GET /items/{id} answered by a replica so far. */
static double item_reads(const th_stockd *s)
{
    return th_metric(s->url, "stockd_http_requests_total{route=\"item\",status=\"200\"}");
}

/* The stock sampler reads the item only for a report that shows it or for
 * the history check: a run without --json or --html and with --history-ms 0
 * reads it just before and after the load. */
static void test_the_stock_is_sampled_only_for_a_report(void **state)
{
    (void)state;
    const char *args[] = {"-n", "300", "--rate", "1000", "--items", "1", "--target",
                          atomic_srv.url, NULL};
    double before = item_reads(&atomic_srv);
    outcome o = run_loadgen(0, args); /* with --json: a read about every 5 ms */
    outcome_free(&o);
    double sampled = item_reads(&atomic_srv) - before;
    char out[160];
    snprintf(out, sizeof(out), "%s/loadgen-unsampled.out", dir);
    const char *argv[] = {loadgen, "-n", "300", "--rate", "1000", "--items", "1",
                          "--history-ms", "0", "--target", atomic_srv.url, NULL};
    before = item_reads(&atomic_srv);
    assert_int_equal(th_run(argv, out, RUN_TIMEOUT_MS), 0);
    double unsampled = item_reads(&atomic_srv) - before;
    print_message("item reads in a 0.3 s run: with a report %.0f, without %.0f\n", sampled,
                  unsampled);
    assert_true(unsampled <= 4);
    assert_true(sampled >= unsampled + 10);
}

/* Without a lock, carts that read an item's stock at the same time overwrite
 * each other's deduction; a little work widens that window. */
static void test_cart_scenario_fails_replicas_without_a_lock(void **state)
{
    (void)state;
    char t[512];
    outcome o = run_loadgen(1, (const char *[]){"-s", "cart", "--work-ms", "5", "--target",
                                                urls(unlocked, 2, t, sizeof(t)), NULL});
    assert_int_equal(o.status, 1);
    assert_non_null(strstr(o.text, "VERDICT: FAIL"));
    assert_non_null(strstr(o.text, "lost updates"));
    json_t *v = json_object_get(o.json, "violations");
    int lost = 0;
    for (size_t i = 0; i < json_array_size(v); i++)
        lost += strcmp(json_string_value(json_object_get(json_array_get(v, i), "kind")),
                       "lost_updates") == 0;
    assert_true(lost > 0);
    outcome_free(&o);
}

static void test_compare_puts_the_modes_side_by_side_and_names_none_failing(void **state)
{
    (void)state;
    char r[128], n[128], a[128];
    snprintf(r, sizeof(r), "redis=%s", locked[0].url);
    snprintf(n, sizeof(n), "none=%s", unlocked[0].url);
    snprintf(a, sizeof(a), "atomic=%s", atomic_srv.url);
    outcome o = run_loadgen(0, (const char *[]){"-s", "compare", "-n", "300", "--target", r,
                                                "--target", n, "--target", a, NULL});
    assert_int_equal(o.status, 0);
    assert_non_null(strstr(o.text, "none: FAIL, as expected"));
    assert_non_null(strstr(o.text, "throughput req/s"));
    json_t *runs = json_object_get(o.json, "runs");
    assert_int_equal(json_array_size(runs), 3);
    const char *want[] = {"PASS", "FAIL", "PASS"};
    for (size_t i = 0; i < 3; i++)
        assert_string_equal(
            json_string_value(json_object_get(json_array_get(runs, i), "verdict")), want[i]);
    outcome_free(&o);
}

static void test_raw_mode_measures_a_path_without_a_verdict(void **state)
{
    (void)state;
    outcome o = run_loadgen(0, (const char *[]){"--get", "/health", "-n", "200", "-c", "4",
                                                "--target", locked[1].url, NULL});
    assert_int_equal(o.status, 0);
    assert_int_equal(jint(o.json, "outcomes.ok"), 200);
    assert_true(json_is_null(json_object_get(o.json, "verdict")));
    assert_null(strstr(o.text, "VERDICT"));
    outcome_free(&o);
}

static void test_set_up_errors_exit_2_with_a_message(void **state)
{
    (void)state;
    char nowhere[64];
    snprintf(nowhere, sizeof(nowhere), "http://127.0.0.1:%d", th_free_port());
    outcome o = run_loadgen(2, (const char *[]){"--target", nowhere, NULL});
    assert_int_equal(o.status, 2);
    assert_non_null(strstr(o.text, "/items"));
    outcome_free(&o);
    o = run_loadgen(2, (const char *[]){"--item", "999999", "--target", locked[0].url, NULL});
    assert_int_equal(o.status, 2);
    assert_non_null(strstr(o.text, "item_not_found"));
    outcome_free(&o);
    o = run_loadgen(2, (const char *[]){"--concurrency", "0", "--target", locked[0].url, NULL});
    assert_int_equal(o.status, 2);
    assert_non_null(strstr(o.text, "--concurrency"));
    outcome_free(&o);
}

/* The flash sale's own part of the report. */
static long long flash(json_t *report, const char *key)
{
    char path[64];
    snprintf(path, sizeof(path), "flash.%s", key);
    return jint(report, path);
}

static void test_flash_sale_answers_every_buyer_and_sells_exactly_the_stock(void **state)
{
    (void)state;
    char t[512];
    outcome o = run_loadgen(0, (const char *[]){"-s", "flash", "--buyers", "300", "--procs",
                                                "2", "--stock", "100", "--target",
                                                urls(locked, 3, t, sizeof(t)), NULL});
    assert_int_equal(o.status, 0);
    assert_non_null(strstr(o.text, "VERDICT: PASS"));
    assert_non_null(strstr(o.text, "300 buyers over 2 processes"));
    assert_int_equal(flash(o.json, "answered"), 300);
    assert_int_equal(flash(o.json, "connectFailed") + flash(o.json, "closedUnanswered") +
                         flash(o.json, "timedOut") + flash(o.json, "notFired"), 0);
    long long ok = jint(o.json, "outcomes.ok");
    long long refused = jint(o.json, "outcomes.insufficient_stock");
    assert_int_equal(ok + refused + busy_answers(o.json, 1), 300);
    assert_true(refused > 0);
    assert_int_equal(jint(first_item(o.json), "soldAfter"), ok);
    assert_int_equal(jint(first_item(o.json), "stockAfter"), 100 - ok);
    json_t *status = json_object_get(json_object_get(o.json, "flash"), "status");
    assert_int_equal(json_integer_value(json_object_get(status, "200")), ok);
    assert_int_equal(json_integer_value(json_object_get(status, "409")), refused);
    json_t *peaks = json_object_get(json_object_get(o.json, "flash"), "peaks");
    assert_int_equal(json_array_size(peaks), 3);
    for (size_t i = 0; i < 3; i++) /* read from each replica's /metrics during the sale */
        assert_true(jint(json_array_get(peaks, i), "rssBytes") > 0);
    assert_true(jint(o.json, "flash.health.count") > 0);
    outcome_free(&o);
}

/* A few thousand buyers on one replica with its defaults: every one is
 * answered, the ledger is exact, and the replica's threads stay where they
 * were (a waiting buyer is a suspended connection, not a thread): at most
 * 2 x cores + 16, read from its process_threads during the sale. */
static void test_flash_sale_of_thousands_on_one_replica_holds_no_thread_per_buyer(void **state)
{
    (void)state;
    outcome o = run_loadgen(0, (const char *[]){"-s", "flash", "--buyers", "3000", "--stock",
                                                "500", "--target", plain.url, NULL});
    assert_int_equal(o.status, 0);
    assert_non_null(strstr(o.text, "VERDICT: PASS"));
    assert_int_equal(flash(o.json, "answered"), 3000);
    long long ok = jint(o.json, "outcomes.ok");
    assert_int_equal(ok + jint(o.json, "outcomes.insufficient_stock") + busy_answers(o.json, 1),
                     3000);
    assert_int_equal(jint(first_item(o.json), "soldAfter"), ok);
    assert_int_equal(jint(first_item(o.json), "stockAfter"), 500 - ok);
    json_t *peaks = json_object_get(json_object_get(o.json, "flash"), "peaks");
    long long threads = jint(json_array_get(peaks, 0), "threads");
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (threads <= 0 || threads > 2 * cores + 16)
        fail_msg("the replica's threads at the peak: %lld (at most %ld)", threads,
                 2 * cores + 16);
    outcome_free(&o);
}

/* Past --max-connections a buyer is answered, not cut off: 503
 * too_many_connections with Retry-After, and the sale still sells exactly
 * its stock to those let in. */
static void test_flash_sale_past_the_connection_limit_answers_every_buyer(void **state)
{
    (void)state;
    outcome o = run_loadgen(0, (const char *[]){"-s", "flash", "--buyers", "120", "--stock",
                                                "20", "--timeout-ms", "20000", "--target",
                                                tight.url, NULL});
    assert_int_equal(o.status, 0);
    assert_int_equal(flash(o.json, "answered"), 120);
    assert_int_equal(jint(o.json, "outcomes.transport_error"), 0);
    json_t *status = json_object_get(json_object_get(o.json, "flash"), "status");
    long long turned_away = json_integer_value(json_object_get(status, "503"));
    assert_true(turned_away > 0); /* 40 connections at most: the rest were told to retry */
    assert_int_equal(jint(o.json, "outcomes.other_5xx") + busy_answers(o.json, 0), turned_away);
    assert_int_equal(jint(o.json, "outcomes.ok"), 20);
    assert_int_equal(jint(first_item(o.json), "soldAfter"), 20);
    outcome_free(&o);
}

/* The reservation's numbers a reserve run's report gives, checked against
 * each other: every held one read back with one end, and the units sold
 * are the confirmed ones'. */
static void reservations_add_up(json_t *report, long long stock)
{
    json_t *r = json_object_get(report, "reservations");
    assert_non_null(r);
    long long held = jint(r, "held"), confirmed = jint(r, "confirmed");
    assert_true(confirmed > 0);
    assert_true(jint(r, "cancelled") > 0);
    assert_true(jint(r, "expired") > 0);
    assert_int_equal(jint(r, "stillHeld"), 0);
    assert_int_equal(confirmed + jint(r, "cancelled") + jint(r, "expired") + jint(r, "unread"),
                     held);
    assert_int_equal(jint(r, "sold"), confirmed); /* one unit each */
    assert_int_equal(jint(r, "after.reserved"), 0);
    assert_int_equal(jint(r, "after.available") + jint(r, "after.sold"), stock);
    assert_true(jint(r, "refused.insufficientStock") > 0);
    assert_non_null(json_object_get(json_object_get(report, "stock"), "reserved"));
}

/* Buyers reserve across three replicas, confirm and cancel on another one than
 * they reserved on, and walk away; 20 buyerIds with a limit of 2 each, so
 * some are refused for it. Lapsed units must be back within holdMs + 1 s. */
static void test_reserve_scenario_passes_across_three_replicas(void **state)
{
    (void)state;
    char t[512];
    outcome o = run_loadgen(0, (const char *[]){"-s", "reserve", "-n", "600", "--stock", "30",
                                                "--hold-ms", "1000", "--rate", "200",
                                                "--buyer-ids", "20", "--per-buyer-limit", "2",
                                                "--target", urls(locked, 3, t, sizeof(t)),
                                                NULL});
    assert_int_equal(o.status, 0);
    assert_non_null(strstr(o.text, "VERDICT: PASS"));
    reservations_add_up(o.json, 30);
    assert_true(jint(o.json, "reservations.refused.buyerLimit") > 0);
    /* cancels and lapses give units back: no history check, and the report says why */
    assert_non_null(strstr(json_string_value(history_skipped(o.json)), "give units back"));
    outcome_free(&o);
}

/* Three replicas of a short lease (so the sweep and the items' locks a dead
 * one held pass on within 1 s), one killed with SIGKILL while the buyers
 * reserve: its buyers' requests go again to another replica, and every
 * reservation still ends once, the lapsed ones on time. */
static void test_reserve_scenario_passes_with_a_replica_killed_mid_run(void **state)
{
    (void)state;
    th_stockd r[3];
    const char *flags[] = {"--lease-ms", "500", "--redis-timeout-ms", "80", NULL};
    assert_int_equal(start_all(r, 3, flags), 0);
    char t[512], json_path[160], log[160];
    snprintf(json_path, sizeof(json_path), "%s/reserve-kill.json", dir);
    snprintf(log, sizeof(log), "%s/reserve-kill.log", dir);
    const char *argv[] = {loadgen, "-s", "reserve", "-n", "900", "--stock", "40", "--hold-ms",
                          "1000", "--rate", "300", "--timeout-ms", "2000", "--json", json_path,
                          "--target", urls(r, 3, t, sizeof(t)), NULL};
    pid_t pid = th_spawn(argv, log);
    assert_true(pid > 0);
    th_sleep_ms(1200); /* a third of the way: buyers on every replica */
    th_stockd_stop(&r[0], SIGKILL);
    int status = th_wait(pid, RUN_TIMEOUT_MS);
    json_t *report = json_load_file(json_path, 0, NULL);
    if (status != 0) {
        char *text = th_read_file(log);
        fprintf(stderr, "loadgen exited %d; its log:\n%s\n", status, text ? text : "(none)");
        free(text);
    }
    assert_int_equal(status, 0);
    assert_non_null(report);
    reservations_add_up(report, 40);
    assert_int_equal(jint(report, "reservations.unknown"), 0); /* retried elsewhere */
    assert_true(jint(report, "retries") > 0); /* the dead replica's buyers went elsewhere */
    json_decref(report);
    assert_int_equal(th_stockd_stop_clean(&r[1]) | th_stockd_stop_clean(&r[2]), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_stock_is_sampled_only_for_a_report),
        cmocka_unit_test(test_hot_scenario_sells_exactly_the_stock_across_three_replicas_notify),
        cmocka_unit_test(test_hot_scenario_sells_exactly_the_stock_across_three_replicas_spin),
        cmocka_unit_test(test_spread_scenario_passes_notify),
        cmocka_unit_test(test_spread_scenario_passes_spin),
        cmocka_unit_test(test_a_ledger_longer_than_a_page_is_read_in_pages),
        cmocka_unit_test(test_renew_scenario_passes_with_work_longer_than_the_lease_notify),
        cmocka_unit_test(test_renew_scenario_passes_with_work_longer_than_the_lease_spin),
        cmocka_unit_test(test_interrupt_scenario_passes_and_no_interrupted_holder_deducted_notify),
        cmocka_unit_test(test_interrupt_scenario_passes_and_no_interrupted_holder_deducted_spin),
        cmocka_unit_test(test_interrupt_scenario_fails_when_nothing_was_interrupted),
        cmocka_unit_test(test_checker_fails_replicas_without_a_lock),
        cmocka_unit_test(test_cart_scenario_passes_across_three_replicas),
        cmocka_unit_test(test_cart_scenario_passes_against_atomic),
        cmocka_unit_test(test_cart_scenario_fails_replicas_without_a_lock),
        cmocka_unit_test(test_compare_puts_the_modes_side_by_side_and_names_none_failing),
        cmocka_unit_test(test_raw_mode_measures_a_path_without_a_verdict),
        cmocka_unit_test(test_set_up_errors_exit_2_with_a_message),
        cmocka_unit_test(test_flash_sale_answers_every_buyer_and_sells_exactly_the_stock),
        cmocka_unit_test(test_flash_sale_of_thousands_on_one_replica_holds_no_thread_per_buyer),
        cmocka_unit_test(test_flash_sale_past_the_connection_limit_answers_every_buyer),
        cmocka_unit_test(test_reserve_scenario_passes_across_three_replicas),
        cmocka_unit_test(test_reserve_scenario_passes_with_a_replica_killed_mid_run),
    };
    return cmocka_run_group_tests_name("loadgen", tests, group_setup, group_teardown);
}
