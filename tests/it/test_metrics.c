/* test_metrics.c - the series an operator reads first, checked against what
 * the test did: request latency per route, lock hold time, the group-commit
 * batch size, and the process_* series, on a real stockd with a real
 * redis-server. (That a real Prometheus accepts and scrapes them is
 * test_prometheus.c's part.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <signal.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <curl/curl.h>

#include "tests/support/calls.h"
#include "tests/support/harness.h"

enum { SEQUENTIAL = 20, SLOW_WORK_MS = 300 };

static th_redis redis;
static th_stockd replica;
static char dir[64];
static time_t started;

static int group_setup(void **state)
{
    (void)state;
    curl_global_init(CURL_GLOBAL_ALL);
    if (th_tempdir("metrics-it", dir, sizeof(dir)) != 0 || th_redis_start(&redis) != 0)
        return -1;
    char db[128];
    snprintf(db, sizeof(db), "%s/stock.db", dir);
    started = time(NULL);
    const char *flags[] = {"--allow-work-ms", NULL};
    return th_stockd_start(&replica, &redis, db, dir, flags);
}

static int group_teardown(void **state)
{
    (void)state;
    th_stockd_stop(&replica, SIGTERM);
    th_redis_stop(&redis, 0);
    curl_global_cleanup();
    return 0;
}

/* A labelled series: name{labels} (labels without braces). */
static double series(const char *name, const char *labels)
{
    char full[192];
    snprintf(full, sizeof(full), "%s{%s}", name, labels);
    return th_metric(replica.url, full);
}

static void deduct(long long item, int work_ms)
{
    char body[256];
    assert_int_equal(th_reduce(replica.url, item, 1, work_ms, body, sizeof(body)), 200);
}

static void test_latency_hold_and_batch_count_each_request(void **state)
{
    (void)state;
    long long item = th_new_item(&replica, "metered", 100);
    const char *route = "route=\"reduceStock\"";
    double requests = series("stockd_http_request_duration_seconds_count", route);
    double holds = th_metric(replica.url, "stockd_lock_hold_seconds_count");
    double batched = th_metric(replica.url, "stockd_batch_orders_sum");
    assert_true(requests >= 0 && holds >= 0 && batched >= 0);

    for (int i = 0; i < SEQUENTIAL; i++) /* one at a time: each its own hold and batch */
        deduct(item, 0);
    assert_true(series("stockd_http_request_duration_seconds_count", route) ==
                requests + SEQUENTIAL);
    assert_true(th_metric(replica.url, "stockd_lock_hold_seconds_count") == holds + SEQUENTIAL);
    assert_true(th_metric(replica.url, "stockd_batch_orders_sum") == batched + SEQUENTIAL);
    assert_true(th_metric(replica.url, "stockd_batch_orders_count") >= SEQUENTIAL);
}

/* One hold of 300 ms lands above the 0.25 s bound, and in the sums. (Not
 * "at most 0.5 s": a loaded machine may stretch the claim and the commit.) */
static void test_a_slow_hold_lands_in_its_bucket(void **state)
{
    (void)state;
    long long item = th_new_item(&replica, "slow", 10);
    double below = series("stockd_lock_hold_seconds_bucket", "le=\"0.25\"");
    double all = series("stockd_lock_hold_seconds_bucket", "le=\"+Inf\"");
    double hold_sum = th_metric(replica.url, "stockd_lock_hold_seconds_sum");
    double latency_sum = series("stockd_http_request_duration_seconds_sum", "route=\"reduceStock\"");
    deduct(item, SLOW_WORK_MS);
    assert_true(series("stockd_lock_hold_seconds_bucket", "le=\"0.25\"") == below);
    assert_true(series("stockd_lock_hold_seconds_bucket", "le=\"+Inf\"") == all + 1);
    assert_true(th_metric(replica.url, "stockd_lock_hold_seconds_sum") - hold_sum >= 0.3);
    assert_true(series("stockd_http_request_duration_seconds_sum", "route=\"reduceStock\"") -
                    latency_sum >= 0.3);
}

/* The process_* series agree with what /proc says from outside. */
static void test_process_series_describe_the_process(void **state)
{
    (void)state;
    double cpu = th_metric(replica.url, "process_cpu_seconds_total");
    long cpu_ms = th_cpu_ms(replica.pid);
    assert_true(cpu >= 0 && cpu_ms >= 0);
    assert_true(cpu <= cpu_ms / 1000.0 + 0.05 && cpu >= cpu_ms / 1000.0 - 0.5);

    double rss = th_metric(replica.url, "process_resident_memory_bytes");
    long rss_kb = th_rss_kb(replica.pid);
    assert_true(rss > 0.5 * rss_kb * 1024.0 && rss < 2.0 * rss_kb * 1024.0);
    assert_true(th_metric(replica.url, "process_virtual_memory_bytes") >= rss);

    double start = th_metric(replica.url, "process_start_time_seconds");
    assert_true(start >= (double)started - 2 && start <= (double)time(NULL) + 1);

    double fds = th_metric(replica.url, "process_open_fds");
    double max_fds = th_metric(replica.url, "process_max_fds");
    assert_true(fds >= 4 && fds < max_fds); /* std streams, the listener, Redis, SQLite */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_latency_hold_and_batch_count_each_request),
        cmocka_unit_test(test_a_slow_hold_lands_in_its_bucket),
        cmocka_unit_test(test_process_series_describe_the_process),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
