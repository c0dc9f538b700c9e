/* test_lg_sale.c - a flash sale's records: each buyer's own source address,
 * the merge of several processes' buyers into one report (fates and
 * statuses summed, latencies merged, records the verdict can find by
 * requestId, never an unanswered buyer taken for ok), the descriptor check
 * that names --procs, and the process_* series read from /metrics. */
#include <arpa/inet.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "loadgen/flash.h"
#include "loadgen/sale.h"

static void test_every_buyer_leaves_from_its_own_loopback_address(void **state)
{
    (void)state;
    char first[INET_ADDRSTRLEN], last[INET_ADDRSTRLEN];
    struct sockaddr_in a, b;
    lg_sale_src(0, &a);
    inet_ntop(AF_INET, &a.sin_addr, first, sizeof(first));
    assert_string_equal(first, "127.1.0.1");
    assert_int_equal(a.sin_port, 0);
    lg_sale_src(253, &a);
    lg_sale_src(254, &b);
    inet_ntop(AF_INET, &a.sin_addr, first, sizeof(first));
    inet_ntop(AF_INET, &b.sin_addr, last, sizeof(last));
    assert_string_equal(first, "127.1.0.254");
    assert_string_equal(last, "127.1.1.1"); /* never .0 or .255 */
    lg_sale_src(49999, &a);
    uint32_t ip = ntohl(a.sin_addr.s_addr);
    assert_int_equal(ip >> 24, 127);
    assert_true((ip & 0xff) >= 1 && (ip & 0xff) <= 254);
    /* distinct for a 50,000-buyer sale */
    for (int g = 1; g < 50000; g += 97) {
        lg_sale_src(g - 1, &a);
        lg_sale_src(g, &b);
        assert_int_not_equal(a.sin_addr.s_addr, b.sin_addr.s_addr);
    }
}

static lg_buyer answered(int status, int outcome, long long remaining, uint32_t us)
{
    return (lg_buyer){.remaining = remaining, .latency_us = us, .status = (uint16_t)status,
                      .outcome = (uint8_t)outcome, .fate = LG_BUYER_ANSWERED};
}

static void test_parts_of_several_processes_merge_into_one_report(void **state)
{
    (void)state;
    lg_buyer p0[3] = {answered(200, LG_OUT_OK, 1, 1000), answered(409, LG_OUT_INSUFFICIENT, 0, 3000),
                      {.fate = LG_BUYER_UNANSWERED, .outcome = LG_OUT_TRANSPORT}};
    lg_buyer p1[2] = {answered(200, LG_OUT_OK, 0, 2000),
                      {.fate = LG_BUYER_CONNECT_FAILED, .outcome = LG_OUT_TRANSPORT}};
    lg_sale_part parts[2] = {{.first = 0, .n = 3, .fire_ns = 1000000000, .last_ns = 1003000000},
                             {.first = 3, .n = 2, .fire_ns = 1000500000, .last_ns = 1002500000}};
    lg_sale s;
    lg_result res;
    assert_int_equal(lg_sale_init(&s, 2), LG_OK);
    assert_int_equal(lg_sale_result_init(&res, "lgrun", 2, 2), LG_OK);
    assert_int_equal(lg_sale_merge(&s, &res, 0, &parts[0], p0, 1), LG_OK);
    assert_int_equal(lg_sale_merge(&s, &res, 1, &parts[1], p1, 1), LG_OK);

    assert_int_equal(s.fates[LG_BUYER_ANSWERED], 3);
    assert_int_equal(s.fates[LG_BUYER_UNANSWERED], 1);
    assert_int_equal(s.fates[LG_BUYER_CONNECT_FAILED], 1);
    assert_int_equal(lg_sale_unanswered(&s), 2);
    assert_int_equal(s.status[200], 2);
    assert_int_equal(s.status[409], 1);
    assert_int_equal(hist_count(s.fire), 3);
    assert_int_equal(hist_min(s.fire), 1000);
    assert_int_equal(hist_max(s.fire), 3000);

    assert_int_equal(res.total.counts[LG_OUT_OK], 2);
    assert_int_equal(res.total.counts[LG_OUT_INSUFFICIENT], 1);
    assert_int_equal(res.total.counts[LG_OUT_TRANSPORT], 2);
    /* buyer g talks to target g % 2: 0, 2, 4 to the first, 1, 3 to the second */
    assert_int_equal(lg_tally_requests(&res.targets[0]), 3);
    assert_int_equal(lg_tally_requests(&res.targets[1]), 2);
    assert_int_equal(res.start_ns, 1000000000);
    assert_true(res.elapsed_s > 0.0029 && res.elapsed_s < 0.0031);

    lg_line *lines;
    lg_rec *r = lg_result_find(&res, "lgrun-1-0", &lines);
    assert_non_null(r);
    assert_int_equal(r->outcome, LG_OUT_OK);
    assert_int_equal(lines[0].remaining, 0);
    assert_int_equal(lines[0].quantity, 1);
    assert_int_equal(lg_result_find(&res, "lgrun-0-2", NULL)->outcome, LG_OUT_TRANSPORT);
    assert_null(lg_result_find(&res, "lgrun-1-2", NULL));
    lg_result_free(&res);
    lg_sale_free(&s);
}

static void test_a_part_that_never_fired_counts_no_buyer_as_ok(void **state)
{
    (void)state;
    lg_buyer zeroes[2];
    memset(zeroes, 0, sizeof(zeroes)); /* what a child that died leaves in shared memory */
    lg_sale_part part = {.first = 0, .n = 2};
    snprintf(part.error, sizeof(part.error), "process 0: out of memory");
    lg_sale s;
    lg_result res;
    assert_int_equal(lg_sale_init(&s, 1), LG_OK);
    assert_int_equal(lg_sale_result_init(&res, "lgrun", 1, 1), LG_OK);
    assert_int_equal(lg_sale_merge(&s, &res, 0, &part, zeroes, 1), LG_OK);
    assert_int_equal(s.fates[LG_BUYER_NOT_FIRED], 2);
    assert_int_equal(res.total.counts[LG_OUT_OK], 0);
    assert_int_equal(res.total.counts[LG_OUT_TRANSPORT], 2);
    assert_int_equal(res.batches[0].recs[1].outcome, LG_OUT_TRANSPORT);
    assert_string_equal(s.error, "process 0: out of memory");
    assert_true(res.elapsed_s == 0);
    lg_result_free(&res);
    lg_sale_free(&s);
}

static void test_process_series_are_read_and_kept_at_their_peak(void **state)
{
    (void)state;
    const char *before = "# HELP process_threads Threads.\n# TYPE process_threads gauge\n"
                         "process_threads 1007\nprocess_resident_memory_bytes 1.4e+08\n"
                         "process_open_fds 1030\nprocess_threads_other 5\n";
    const char *after = "process_threads 9\nprocess_resident_memory_bytes 9437184\n";
    double v;
    assert_int_equal(lg_sale_metric(before, "process_threads", &v), 1);
    assert_true(v == 1007);
    assert_int_equal(lg_sale_metric(before, "process_max_fds", &v), 0);
    assert_int_equal(lg_sale_metric("process_threads{x=\"1\"} 3\n", "process_threads", &v), 0);
    lg_sale s;
    assert_int_equal(lg_sale_init(&s, 1), LG_OK);
    assert_int_equal(s.peaks[0].threads, -1); /* n/a until read */
    lg_sale_peak_from(&s, 0, before);
    lg_sale_peak_from(&s, 0, after);
    assert_int_equal(s.peaks[0].threads, 1007);
    assert_int_equal(s.peaks[0].rss_bytes, 140000000);
    assert_int_equal(s.peaks[0].open_fds, 1030);
    lg_sale_peak_from(&s, 0, "process_resident_memory_bytes 1000\n");
    /* a replica without process_threads (stockd before the lead's change) says n/a */
    lg_sale t;
    assert_int_equal(lg_sale_init(&t, 1), LG_OK);
    lg_sale_peak_from(&t, 0, "process_resident_memory_bytes 1000\n");
    assert_int_equal(t.peaks[0].threads, -1);
    assert_int_equal(t.peaks[0].rss_bytes, 1000);
    lg_sale_free(&s);
    lg_sale_free(&t);
}

static void test_more_buyers_than_descriptors_is_a_usage_error_naming_procs(void **state)
{
    (void)state;
    assert_int_equal(lg_flash_capacity(20000), 20000 - LG_FLASH_FD_RESERVE);
    assert_int_equal(lg_flash_capacity(10), 0);
    lg_sale s;
    lg_err err;
    assert_int_equal(lg_sale_init(&s, 1), LG_OK);
    lg_err_clear(&err);
    assert_int_equal(lg_flash_limits(10, 1, &s, &err), LG_OK);
    assert_true(s.nofile >= s.nofile_was); /* raised to the hard limit, never lowered */
    int cap = lg_flash_capacity(s.nofile);
    if (cap < 1000000 - 1) {
        assert_int_equal(lg_flash_limits(1000000, 1, &s, &err), LG_ERR_USAGE);
        assert_non_null(strstr(err.msg, "--procs"));
        assert_non_null(strstr(err.msg, "RLIMIT_NOFILE"));
    }
    lg_sale_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_buyer_leaves_from_its_own_loopback_address),
        cmocka_unit_test(test_parts_of_several_processes_merge_into_one_report),
        cmocka_unit_test(test_a_part_that_never_fired_counts_no_buyer_as_ok),
        cmocka_unit_test(test_process_series_are_read_and_kept_at_their_peak),
        cmocka_unit_test(test_more_buyers_than_descriptors_is_a_usage_error_naming_procs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
