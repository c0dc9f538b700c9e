/* test_prometheus.c - stockd's /metrics as Prometheus reads it. A replica
 * busy with hot, renewed, interrupted, timed-out and refused requests answers
 * a text that `promtool check metrics` (Debian's prometheus package) passes
 * without a word, and that passes the checks promtool leaves out
 * (tests/support/promtext.h) - both of which fail on a broken text; it has every
 * family docker/prometheus/rules.yml and the dashboards use. Then a real
 * prometheus on a free loopback port, with those rules, scrapes two replicas
 * through a loadgen run: the series exist, every rule evaluates, the
 * acknowledged deductions it counts are exactly loadgen's, and a killed
 * replica shows as up == 0 with its alert pending. */
#include <ctype.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "tests/support/calls.h"
#include "tests/support/harness.h"
#include "tests/support/promtext.h"

#define RULES "docker/prometheus/rules.yml"
#define JOB "stockd" /* the scrape job rules.yml's alerts select, as prometheus.yml names it */
#define WAIT_MS 30000 /* for Prometheus to start, scrape, evaluate: only a hang bound */

static th_redis redis;
static th_stockd replica[2];
static char dir[64];
static pid_t prom_pid; /* the prometheus of the running test, 0 when none */
static char prom_url[64];

/* Lease 600 ms, renewed every 200 ms: 500 ms of work is renewed, more than
 * 800 ms is interrupted (3 renewals at most); a lock wait gives up after
 * 300 ms. */
static int group_setup(void **state)
{
    (void)state;
    char db[128];
    const char *flags[] = {"--allow-work-ms", "--lease-ms", "600", "--redis-timeout-ms", "100",
                           "--max-renewals", "3", "--wait-ms", "300", "--retry-ms", "20", NULL};
    if (th_tempdir("prometheus-it", dir, sizeof(dir)) != 0 || th_redis_start(&redis) != 0)
        return -1;
    snprintf(db, sizeof(db), "%s/stock.db", dir);
    for (int i = 0; i < 2; i++)
        if (th_stockd_start(&replica[i], &redis, db, dir, flags) != 0)
            return -1;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    int rc = th_stockd_stop_clean(&replica[0]) | th_stockd_stop_clean(&replica[1]);
    th_redis_stop(&redis, 0);
    return rc;
}

/* Skips the running test unless cmd is installed; make deps installs both
 * promtool and prometheus (Debian's prometheus package). */
static void need(const char *cmd)
{
    if (!th_have(cmd))
        th_skip("%s is not installed (make deps installs Debian's prometheus package)", cmd);
}

/* GET base/metrics; the caller frees the text. */
static char *metrics_of(const th_stockd *s)
{
    char url[128];
    th_resp r;
    snprintf(url, sizeof(url), "%s/metrics", s->url);
    th_http("GET", url, NULL, &r);
    if (r.status != 200)
        fail_msg("GET %s: status %ld %s", url, r.status, r.error);
    return r.body; /* owned by the caller now */
}

/* Runs loadgen with args (NULL-terminated) and --json into dir/<name>.json,
 * and fails the test unless its verdict is PASS. Returns its outcomes.ok. */
static long long loadgen_ok(const char *name, const char *const args[])
{
    char bin[256], json[160], out[160];
    snprintf(bin, sizeof(bin), "%s/loadgen", th_build_dir());
    snprintf(json, sizeof(json), "%s/%s.json", dir, name);
    snprintf(out, sizeof(out), "%s/%s.out", dir, name);
    const char *argv[32] = {bin, "--json", json};
    int n = 3;
    while (*args && n < 31)
        argv[n++] = *args++;
    argv[n] = NULL;
    int status = th_run(argv, out, 120000);
    if (status != 0) {
        char *text = th_read_file(out);
        printf("loadgen %s output:\n%s\n", name, text ? text : "(none)");
        free(text);
        fail_msg("loadgen %s exited %d, expected 0 (its output is above)", name, status);
    }
    json_t *report = json_load_file(json, 0, NULL);
    json_t *ok = json_object_get(json_object_get(report, "outcomes"), "ok");
    assert_true(json_is_integer(ok));
    long long v = json_integer_value(ok);
    json_decref(report);
    return v;
}

/* A lock holder that outlasts the wait of a request for the same item: the
 * request gives up (503 lock_timeout). workMs keeps both out of group
 * commit's batches, so the second really waits for the lock. */
static void lock_timeout_on(const th_stockd *s, long long item)
{
    /* 600 ms: the 300 ms wait ends inside it even when the waiter starts
     * late, and it ends before the interrupt (after 3 renewals of a 600 ms
     * lease: about 800 ms) */
    th_bg_reduce holder = {.url = s->url, .item = item, .work_ms = 600};
    assert_int_equal(th_wait_item_unlocked(&redis, item, 5000), 0); /* the order before's */
    th_bg_reduce_start(&holder);
    assert_int_equal(th_wait_item_locked(&redis, item, 5000), 0);
    char body[512];
    assert_int_equal(th_reduce(s->url, item, 1, 1, body, sizeof(body)), 503);
    assert_non_null(strstr(body, "\"lock_timeout\""));
    th_bg_reduce_join(&holder);
    assert_int_equal(holder.status, 200);
}

/* Every kind of answer that leaves a trace in /metrics, on replica s. */
static void busy(const th_stockd *s)
{
    char body[512];
    loadgen_ok("busy-hot", (const char *[]){"-s", "hot", "-n", "300", "-c", "16", "--target",
                                            s->url, NULL});
    long long item = th_new_item(s, "busy", 10), other = th_new_item(s, "busy-2", 10);
    assert_int_equal(th_reduce(s->url, item, 1, 500, NULL, 0), 200); /* renewed twice */
    assert_int_equal(th_reduce(s->url, item, 1, 3000, body, sizeof(body)), 503);
    assert_non_null(strstr(body, "\"lock_interrupted\""));
    lock_timeout_on(s, item);
    assert_int_equal(th_reduce(s->url, item, 100, 0, NULL, 0), 409); /* insufficient */
    assert_int_equal(th_reduce(s->url, 999999, 1, 0, NULL, 0), 404); /* no such item */
    char order[160];
    snprintf(order, sizeof(order),
             "{\"lines\":[{\"itemId\":%lld,\"quantity\":1},{\"itemId\":%lld,\"quantity\":2}]}",
             item, other);
    json_decref(th_call(s, "POST", "/orders", order, 201)); /* a multi-lock */
    json_decref(th_call(s, "POST", "/reduceStock", "{\"itemId\":", 400));
    json_decref(th_call(s, "POST", "/reduceStock", "{\"itemId\":0,\"quantity\":1}", 400));
    json_decref(th_call(s, "GET", "/nowhere", NULL, 404));
    json_decref(th_call(s, "GET", "/reduceStock", NULL, 405));
    json_decref(th_call(s, "GET", "/health", NULL, 200));
}

/* Runs promtool check metrics on text; its exit status, and what it
 * printed into out (NUL-terminated, may be cut). */
static int promtool_check(const char *text, const char *name, char *out, size_t size)
{
    char in[160], printed[160];
    snprintf(in, sizeof(in), "%s/%s.txt", dir, name);
    snprintf(printed, sizeof(printed), "%s/%s.promtool", dir, name);
    FILE *f = fopen(in, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    const char *argv[] = {"/bin/sh", "-c", "exec promtool check metrics <\"$1\"", "sh", in, NULL};
    int status = th_run(argv, printed, 60000);
    char *said = th_read_file(printed);
    snprintf(out, size, "%s", said ? said : "");
    free(said);
    return status;
}

static void test_a_busy_replica_passes_promtool_check_metrics_without_a_warning(void **state)
{
    (void)state;
    need("promtool");
    busy(&replica[0]);
    char *text = metrics_of(&replica[0]);
    /* the traffic left its marks: the check ran on more than empty families */
    assert_non_null(strstr(text, "stockd_http_requests_total{route="));
    assert_true(th_metric(replica[0].url, "stockd_lock_renewals_total") >= 2);
    assert_true(th_metric(replica[0].url, "stockd_lock_interrupts_total") >= 1);
    assert_true(th_metric(replica[0].url, "stockd_lock_wait_timeouts_total") >= 1);
    char said[4096], why[4096];
    int status = promtool_check(text, "busy", said, sizeof(said));
    if (status != 0 || said[0])
        fail_msg("promtool check metrics exited %d and said:\n%s", status, said);
    int problems = th_promtext_problems(text, why, sizeof(why));
    if (problems != 0)
        fail_msg("%d problems promtool does not look for:\n%s", problems, why);
    free(text);
}

/* The checks above can fail: a text with a family without HELP, a counter
 * without _total, a unit abbreviation, and a histogram whose buckets shrink
 * and that lacks +Inf and _sum. */
static void test_the_checks_fail_on_a_broken_text(void **state)
{
    (void)state;
    need("promtool");
    const char *broken = "# TYPE stockd_nohelp_total counter\nstockd_nohelp_total 1\n"
                         "# HELP stockd_things Things.\n# TYPE stockd_things counter\n"
                         "stockd_things 2\n"
                         "# HELP stockd_wait_ms Waits.\n# TYPE stockd_wait_ms histogram\n"
                         "stockd_wait_ms_bucket{le=\"1\"} 5\nstockd_wait_ms_bucket{le=\"2\"} 3\n"
                         "stockd_wait_ms_count 5\nstockd_stray 1\n";
    char said[4096], why[4096];
    assert_int_not_equal(promtool_check(broken, "broken", said, sizeof(said)), 0);
    assert_non_null(strstr(said, "stockd_nohelp_total no help text"));
    assert_non_null(strstr(said, "stockd_things counter metrics should have \"_total\" suffix"));
    assert_non_null(strstr(said, "stockd_wait_ms metric names should not contain abbreviated"));
    assert_int_equal(th_promtext_problems(broken, why, sizeof(why)), 6);
    const char *expected[] = {"stockd_nohelp_total (line 1) has no HELP",
                              "counter stockd_things: the name does not end in _total",
                              "le=\"2\" 3 below the bucket before (5): not cumulative",
                              "no bucket le=\"+Inf\"", "no stockd_wait_ms_sum",
                              "stockd_stray outside its family", NULL};
    for (int i = 0; expected[i]; i++)
        if (strstr(why, expected[i]) == NULL)
            fail_msg("the checks did not report \"%s\"; they said:\n%s", expected[i], why);
}

/* Adds name to the space-separated list missing unless text has its family
 * or the list names it already. */
static void want_family(const char *text, const char *name, char *missing, size_t size)
{
    char word[160];
    snprintf(word, sizeof(word), " %s ", name);
    if (!th_promtext_has_family(text, name) && strstr(missing, word) == NULL)
        snprintf(missing + strlen(missing), size - strlen(missing), "%s", word + 1);
}

/* Every stockd_* and process_* family rules.yml reads (a histogram by its
 * _bucket series), and those issue 17 adds for dashboards. */
static void test_metrics_has_every_family_the_rules_and_dashboards_use(void **state)
{
    (void)state;
    static const char *const dashboards[] = {
        "stockd_http_request_duration_seconds", "stockd_lock_hold_seconds", "stockd_batch_orders",
        "process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds",
        "process_max_fds", "process_start_time_seconds", "process_virtual_memory_bytes", NULL};
    char *rules = th_read_file(RULES), *text = metrics_of(&replica[0]);
    assert_non_null(rules);
    char missing[2048] = " ", name[128];
    for (const char *p = rules; *p; p++) {
        int at_word = p == rules || !(p[-1] == '_' || p[-1] == ':' || isalnum((unsigned char)p[-1]));
        if (!at_word || (strncmp(p, "stockd_", 7) != 0 && strncmp(p, "process_", 8) != 0))
            continue;
        size_t n = strspn(p, "abcdefghijklmnopqrstuvwxyz0123456789_");
        snprintf(name, sizeof(name), "%.*s", (int)n, p);
        if (n > 7 && strcmp(name + n - 7, "_bucket") == 0)
            name[n - 7] = '\0';
        want_family(text, name, missing, sizeof(missing));
        p += n - 1;
    }
    for (int i = 0; dashboards[i]; i++)
        want_family(text, dashboards[i], missing, sizeof(missing));
    if (strcmp(missing, " ") != 0)
        fail_msg("/metrics lacks the families (HELP, TYPE and a sample):%s", missing);
    free(rules);
    free(text);
}

/* Wall-clock seconds, as Prometheus stamps its samples. */
static double unix_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* s percent-encoded for a query string into out. */
static void url_encode(const char *s, char *out, size_t size)
{
    size_t used = 0;
    for (; *s && used + 4 < size; s++) {
        unsigned char ch = (unsigned char)*s;
        if (isalnum(ch) || strchr("-_.~", ch))
            out[used++] = (char)ch;
        else
            used += (size_t)snprintf(out + used, size - used, "%%%02X", ch);
    }
    out[used] = '\0';
}

/* GET prom_url + path: the answer's "data" (the caller owns it) when it says
 * "status":"success"; NULL otherwise (transport error, a bad query). */
static json_t *prom_get(const char *path)
{
    char url[4096];
    th_resp r;
    snprintf(url, sizeof(url), "%s%s", prom_url, path);
    th_http("GET", url, NULL, &r);
    json_t *answer = json_loads(r.body, 0, NULL);
    json_t *data = json_incref(json_object_get(answer, "data"));
    if (strcmp(th_jstr(answer, "status"), "success") != 0) {
        printf("GET %s: status %ld %s %.500s\n", path, r.status, r.error, r.body);
        json_decref(data);
        data = NULL;
    }
    json_decref(answer);
    th_resp_free(&r);
    return data;
}

/* An instant query (printf-style) now: its result vector, or NULL. */
static json_t *prom_query(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static json_t *prom_query(const char *fmt, ...)
{
    char expr[1024], encoded[3072], path[3200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(expr, sizeof(expr), fmt, ap);
    va_end(ap);
    url_encode(expr, encoded, sizeof(encoded));
    snprintf(path, sizeof(path), "/api/v1/query?query=%s", encoded);
    json_t *data = prom_get(path);
    json_t *result = json_incref(json_object_get(data, "result"));
    json_decref(data);
    return result;
}

/* Waits until the query expr has at least want series; fails the test after
 * WAIT_MS. Returns the result (the caller owns it). */
static json_t *prom_wait(size_t want, const char *expr)
{
    for (int64_t end = th_now_ms() + WAIT_MS;; th_sleep_ms(200)) {
        json_t *result = prom_query("%s", expr);
        if (json_array_size(result) >= want)
            return result;
        json_decref(result);
        if (th_now_ms() >= end)
            fail_msg("Prometheus: %s never had %zu series in %d ms", expr, want, WAIT_MS);
    }
}

/* The value of series i of a result, NAN when there is none. */
static double value_of(json_t *result, size_t i)
{
    json_t *v = json_array_get(json_object_get(json_array_get(result, i), "value"), 1);
    return json_is_string(v) ? strtod(json_string_value(v), NULL) : NAN;
}

/* Starts prometheus on a free loopback port with a 1 s scrape and rule
 * interval over the replicas in targets (job JOB) and the rules of RULES, and
 * waits until it is ready. Its data and log go to dir. */
static void prom_start(const th_stockd *targets, int n)
{
    char rules[PATH_MAX], config[160], log[160], flag[3][256];
    assert_non_null(realpath(RULES, rules));
    snprintf(config, sizeof(config), "%s/prometheus.yml", dir);
    snprintf(log, sizeof(log), "%s/prometheus.log", dir);
    FILE *f = fopen(config, "w");
    assert_non_null(f);
    fprintf(f, "global: {scrape_interval: 1s, evaluation_interval: 1s}\nrule_files: [\"%s\"]\n"
               "scrape_configs:\n  - job_name: %s\n    static_configs:\n      - targets: [",
            rules, JOB);
    for (int i = 0; i < n; i++)
        fprintf(f, "%s\"127.0.0.1:%d\"", i ? ", " : "", targets[i].port);
    fprintf(f, "]\n");
    fclose(f);
    int port = th_free_port();
    snprintf(prom_url, sizeof(prom_url), "http://127.0.0.1:%d", port);
    snprintf(flag[0], sizeof(flag[0]), "--config.file=%s", config);
    snprintf(flag[1], sizeof(flag[1]), "--storage.tsdb.path=%s/tsdb", dir);
    snprintf(flag[2], sizeof(flag[2]), "--web.listen-address=127.0.0.1:%d", port);
    const char *argv[] = {"prometheus", flag[0], flag[1], flag[2], NULL};
    prom_pid = th_spawn(argv, log);
    assert_true(prom_pid > 0);
    char url[128];
    snprintf(url, sizeof(url), "%s/-/ready", prom_url);
    for (int64_t end = th_now_ms() + WAIT_MS; th_now_ms() < end; th_sleep_ms(100)) {
        th_resp r;
        th_http("GET", url, NULL, &r);
        th_resp_free(&r);
        if (r.status == 200)
            return;
        char st = th_proc_state(prom_pid);
        if (st == 0 || st == 'Z')
            break;
    }
    char *text = th_read_file(log);
    printf("prometheus log:\n%s\n", text ? text : "(none)");
    free(text);
    fail_msg("prometheus did not get ready on port %d (its log is above)", port);
}

/* Per-test teardown: stops the test's prometheus by its PID, also when the
 * test failed. */
static int prom_stop(void **state)
{
    (void)state;
    if (prom_pid <= 0)
        return 0;
    int status = th_signal(prom_pid, SIGTERM, 15000);
    prom_pid = 0;
    if (status != 0)
        fprintf(stderr, "prometheus exited %d on SIGTERM (see %s/prometheus.log)\n", status, dir);
    return status == 0 ? 0 : -1;
}

/* The acknowledged deductions of every replica, as Prometheus has them from
 * scrapes that began after t (wall-clock seconds): each includes whatever
 * was deducted before t. */
static double ok_orders_scraped_after(double t, int replicas)
{
    char expr[160];
    snprintf(expr, sizeof(expr), "timestamp(stockd_orders_total{outcome=\"ok\"}) > %.3f", t);
    json_decref(prom_wait((size_t)replicas, expr));
    json_t *sum = prom_query("sum(stockd_orders_total{outcome=\"ok\"})");
    double v = value_of(sum, 0);
    json_decref(sum);
    return v;
}

/* Series of the scraped metrics, one per replica each: those missing go to
 * missing (" name (N replicas)" each), for the test to fail on once it has
 * checked the rest. */
static void series_of_every_replica(int replicas, char *missing, size_t size)
{
    static const char *const names[] = {"up", "stockd_orders_total",
                                        "stockd_lock_wait_seconds_bucket",
                                        "stockd_http_request_duration_seconds_bucket",
                                        "process_cpu_seconds_total", NULL};
    missing[0] = '\0';
    for (int i = 0; names[i]; i++) {
        json_t *r = prom_query("count by (instance) (%s{job=\"%s\"})", names[i], JOB);
        if (json_array_size(r) != (size_t)replicas)
            snprintf(missing + strlen(missing), size - strlen(missing), " %s (%zu replicas)",
                     names[i], json_array_size(r));
        json_decref(r);
    }
}

/* Every rule of RULES loaded and evaluated without an error, and the
 * recording rules over the lock and the orders made a series per replica. */
static void assert_rules_evaluate(int replicas)
{
    char expr[128];
    snprintf(expr, sizeof(expr), "instance:stockd_lock_wait_seconds:p99_1m");
    json_decref(prom_wait((size_t)replicas, expr));
    snprintf(expr, sizeof(expr), "instance:stockd_orders_ok:rate1m > 0");
    json_decref(prom_wait((size_t)replicas, expr));
    char *text = th_read_file(RULES);
    int in_file = 0, loaded = 0;
    for (const char *p = text; p && (p = strstr(p, "\n      - ")) != NULL; p++)
        in_file += strncmp(p + 9, "record:", 7) == 0 || strncmp(p + 9, "alert:", 6) == 0;
    free(text);
    json_t *data = prom_get("/api/v1/rules");
    json_t *groups = json_object_get(data, "groups"), *group, *rule;
    size_t g, k;
    json_array_foreach(groups, g, group) {
        json_array_foreach(json_object_get(group, "rules"), k, rule) {
            loaded++;
            if (strcmp(th_jstr(rule, "health"), "ok") != 0)
                fail_msg("rule %s: health %s: %s", th_jstr(rule, "name"),
                         th_jstr(rule, "health"), th_jstr(rule, "lastError"));
        }
    }
    json_decref(data);
    assert_true(in_file > 0);
    assert_int_equal(loaded, in_file);
}

static void test_prometheus_scrapes_two_replicas_and_counts_what_loadgen_counted(void **state)
{
    (void)state;
    need("prometheus");
    prom_start(replica, 2);
    char expr[160], targets[160];
    snprintf(expr, sizeof(expr), "up{job=\"%s\"} == 1", JOB);
    json_decref(prom_wait(2, expr));

    double before = ok_orders_scraped_after(unix_now(), 2);
    snprintf(targets, sizeof(targets), "%s,%s", replica[0].url, replica[1].url);
    long long ok = loadgen_ok("scraped-hot", (const char *[]){"-s", "hot", "-n", "400", "--stock",
                                                               "250", "-c", "16", "--target",
                                                               targets, NULL});
    assert_int_equal(ok, 250); /* the stock, sold out by 400 requests */
    double after = ok_orders_scraped_after(unix_now(), 2);
    if (after - before != (double)ok) /* counts, not rates: exact */
        fail_msg("Prometheus counts %.0f - %.0f = %.0f acknowledged deductions, loadgen %lld",
                 after, before, after - before, ok);

    char missing[512];
    series_of_every_replica(2, missing, sizeof(missing)); /* before one is killed */
    assert_rules_evaluate(2);

    /* A replica killed: its target is down, and its alert pending (for 30 s). */
    int port = replica[1].port;
    th_stockd_stop(&replica[1], SIGKILL);
    snprintf(expr, sizeof(expr), "up{job=\"%s\",instance=\"127.0.0.1:%d\"} == 0", JOB, port);
    json_decref(prom_wait(1, expr));
    snprintf(expr, sizeof(expr), "ALERTS{alertname=\"StockdReplicaDown\",instance=\"127.0.0.1:%d\"}",
             port);
    json_decref(prom_wait(1, expr));
    if (missing[0])
        fail_msg("Prometheus lacks series of 2 replicas:%s", missing);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_busy_replica_passes_promtool_check_metrics_without_a_warning),
        cmocka_unit_test(test_the_checks_fail_on_a_broken_text),
        cmocka_unit_test(test_metrics_has_every_family_the_rules_and_dashboards_use),
        cmocka_unit_test_teardown(
            test_prometheus_scrapes_two_replicas_and_counts_what_loadgen_counted, prom_stop),
    };
    return cmocka_run_group_tests_name("prometheus", tests, group_setup, group_teardown);
}
