/* test_lg_load.c - the load engine against the in-process fake stockd
 * (tests/support/fake.h), which produces what real stockd can't on demand: answers
 * cut after a commit (so --retry must replay the same requestId), chunked,
 * dribbled and close-delimited answers, connections the server closes, garbage,
 * answers slower than the timeout, a fixed service time for checking that
 * open-loop latency counts from the intended send time, and POST /orders carts
 * answered with their lines (or with the wrong ones); and the requests of an
 * --api profile, each with a head of its own. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "loadgen/load.h"
#include "tests/support/fake.h"

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static const long long item_ids[] = {11, 12, 13, 14, 15, 16, 17, 18};

/* A closed-loop configuration of n requests over the fakes. */
static lg_load_cfg cfg_for(lg_target *t, th_fake **fakes, int nfakes, long long n, int conc)
{
    for (int i = 0; i < nfakes; i++) {
        memset(&t[i], 0, sizeof(t[i]));
        snprintf(t[i].url, sizeof(t[i].url), "http://127.0.0.1:%d", fakes[i]->port);
    }
    lg_load_cfg c = {.targets = t, .ntargets = nfakes, .concurrency = conc, .threads = 2,
                     .requests = n, .timeout_ms = 5000,
                     .shape = {.item_ids = item_ids, .nitems = 3, .qmin = 1, .qmax = 3},
                     .run_id = "lgtest"};
    return c;
}

static void run_load(const lg_load_cfg *c, lg_result *res)
{
    lg_load *l;
    lg_err err;
    lg_err_clear(&err);
    assert_int_equal(lg_load_start(c, &l, &err), LG_OK);
    while (!lg_load_finished(l))
        sleep_ms(5);
    lg_progress p;
    lg_load_progress(l, &p);
    assert_int_equal(lg_load_join(l, res, &err), LG_OK);
    assert_int_equal(p.done, lg_tally_requests(&res->total));
}

static size_t all_recs(const lg_result *res, int outcome)
{
    size_t n = 0;
    for (int b = 0; b < res->nbatch; b++)
        for (size_t i = 0; i < res->batches[b].nrecs; i++)
            n += res->batches[b].recs[i].outcome == outcome;
    return n;
}

static void test_closed_loop_spreads_connections_over_targets(void **state)
{
    (void)state;
    th_fake *f[2] = {th_fake_start(TH_FAKE_OK, 0), th_fake_start(TH_FAKE_OK, 0)};
    lg_target t[2];
    lg_load_cfg c = cfg_for(t, f, 2, 300, 4);
    lg_result res;
    run_load(&c, &res);
    assert_int_equal(res.total.counts[LG_OUT_OK], 300);
    assert_int_equal(res.targets[0].counts[LG_OUT_OK] + res.targets[1].counts[LG_OUT_OK], 300);
    assert_true(res.targets[0].counts[LG_OUT_OK] > 0 && res.targets[1].counts[LG_OUT_OK] > 0);
    assert_int_equal(hist_count(res.total.all), 300);
    assert_int_equal(hist_count(res.total.ok), 300);
    assert_int_equal(all_recs(&res, LG_OUT_OK), 300);
    assert_int_equal(f[0]->nids + f[1]->nids, 300); /* every requestId distinct */
    assert_true(f[0]->nconns <= 2 && f[1]->nconns <= 2); /* keep-alive: one per connection */
    /* each id maps back to its record, whose item and quantity went out in the body */
    lg_line *lines;
    lg_rec *r = lg_result_find(&res, f[0]->ids[0], &lines);
    assert_non_null(r);
    assert_int_equal(r->outcome, LG_OUT_OK);
    assert_int_equal(r->nlines, 1);
    assert_true(lines[0].quantity >= 1 && lines[0].quantity <= 3);
    assert_int_equal(lines[0].remaining, f[0]->remaining_at[0]);
    assert_null(lg_result_find(&res, "lgtest-9-0", NULL));
    assert_null(lg_result_find(&res, "other-0-0", NULL));
    assert_null(lg_result_find(&res, "lgtest-0-0x", NULL));
    /* each request's invoke and completion, on the run's clock, in order */
    int64_t end = (int64_t)(res.elapsed_s * 1e9) + 1000;
    for (int b = 0; b < res.nbatch; b++)
        for (size_t i = 0; i < res.batches[b].nrecs; i++) {
            int64_t sent = res.batches[b].sent_ns[i], done = res.batches[b].done_ns[i];
            assert_true(0 <= sent && sent <= done && done <= end);
        }
    lg_result_free(&res);
    th_fake_stop(f[0]);
    th_fake_stop(f[1]);
}

/* Runs c (with 2 retries) against f, which drops every first answer after
 * committing: each request must be resent once and committed once. */
static void assert_retries_commit_once(th_fake *f, lg_load_cfg *c)
{
    c->retries = 2;
    lg_result res;
    run_load(c, &res);
    assert_int_equal(res.total.counts[LG_OUT_OK], c->requests); /* the replayed answers */
    assert_int_equal(res.total.retries, c->requests);
    assert_int_equal(f->nids, c->requests);
    for (int i = 0; i < f->nids; i++)
        assert_int_equal(f->commits[i], 1);
    lg_result_free(&res);
}

/* An --api profile whose head is each request's own: the item (a string id,
 * URL-escaped) in the path, the request id in a header and the body. */
static const char api_profile[] =
    "{\"headers\": {\"X-Run\": \"t\"},"
    " \"buy\": {\"path\": \"/p/{item}/buy\", \"headers\": {\"Idempotency-Key\": \"{request}\"},"
    "   \"body\": {\"requestId\": \"{request}\", \"quantity\": \"{quantity}\","
    "            \"sku\": \"{item}\"}},"
    " \"answers\": [{\"status\": [200], \"class\": \"ok\", \"remaining\": \"/remaining\"}],"
    " \"read\": {\"path\": \"/p/{item}\", \"stock\": \"/stock\"}}";

static lg_profile *api_cfg(lg_load_cfg *c, const lg_profile_id *ids)
{
    lg_profile *p = NULL;
    lg_err err;
    assert_int_equal(lg_profile_parse("t.json", api_profile, strlen(api_profile), &p, &err),
                     LG_OK);
    c->shape.api = p;
    c->shape.api_ids = ids;
    return p;
}

static void test_an_api_profile_renders_each_request_and_reads_its_answers(void **state)
{
    (void)state;
    th_fake *f = th_fake_start(TH_FAKE_OK, 0);
    lg_target t[1];
    lg_load_cfg c = cfg_for(t, &f, 1, 300, 4);
    const lg_profile_id ids[3] = {{1, (char *)"sku 1/a"}, {2, (char *)"sku-2"}, {3, NULL}};
    lg_profile *p = api_cfg(&c, ids);
    lg_result res;
    run_load(&c, &res);
    assert_int_equal(res.total.counts[LG_OUT_OK], 300);
    assert_int_equal(f->nids, 300);
    for (int b = 0; b < res.nbatch; b++)
        for (size_t i = 0; i < res.batches[b].nrecs; i++)
            assert_true(lg_rec_lines(&res.batches[b], &res.batches[b].recs[i])->remaining >= 0);
    lg_result_free(&res);
    th_fake_stop(f);
    /* a resend after a lost answer carries the same request id: committed once */
    f = th_fake_start(TH_FAKE_DROP_FIRST, 0);
    c = cfg_for(t, &f, 1, 40, 4);
    c.shape.api = p;
    c.shape.api_ids = ids;
    assert_retries_commit_once(f, &c);
    th_fake_stop(f);
    lg_profile_free(p);
}

static void test_retry_resends_the_same_request_id_and_counts_it_once(void **state)
{
    (void)state;
    th_fake *f = th_fake_start(TH_FAKE_DROP_FIRST, 0);
    lg_target t[1];
    lg_load_cfg c = cfg_for(t, &f, 1, 40, 4);
    assert_retries_commit_once(f, &c);
    th_fake_stop(f);
}

static void test_without_retry_a_dropped_answer_is_a_transport_error(void **state)
{
    (void)state;
    th_fake *f = th_fake_start(TH_FAKE_DROP_FIRST, 0);
    lg_target t[1];
    lg_load_cfg c = cfg_for(t, &f, 1, 20, 2);
    lg_result res;
    run_load(&c, &res);
    assert_int_equal(res.total.counts[LG_OUT_TRANSPORT], 20);
    assert_int_equal(all_recs(&res, LG_OUT_TRANSPORT), 20);
    assert_int_equal(hist_count(res.total.all), 0); /* no answer, no latency */
    assert_true(res.example[LG_OUT_TRANSPORT][0] != '\0');
    lg_result_free(&res);
    th_fake_stop(f);
}

static void test_garbage_answers_are_counted_not_fatal(void **state)
{
    (void)state;
    th_fake *f = th_fake_start(TH_FAKE_GARBAGE, 0);
    lg_target t[1];
    lg_load_cfg c = cfg_for(t, &f, 1, 30, 3);
    lg_result res;
    run_load(&c, &res);
    assert_int_equal(res.total.counts[LG_OUT_MALFORMED], 20);
    assert_int_equal(res.total.counts[LG_OUT_OTHER_5XX], 10);
    assert_int_equal(res.total.counts[LG_OUT_OK], 0);
    assert_non_null(strstr(res.example[LG_OUT_MALFORMED], "/reduceStock"));
    lg_result_free(&res);
    th_fake_stop(f);
}

static void test_slow_answers_time_out(void **state)
{
    (void)state;
    th_fake *f = th_fake_start(TH_FAKE_OK, 400);
    lg_target t[1];
    lg_load_cfg c = cfg_for(t, &f, 1, 4, 2);
    c.timeout_ms = 100;
    lg_result res;
    run_load(&c, &res);
    assert_int_equal(res.total.counts[LG_OUT_TRANSPORT], 4);
    assert_non_null(strstr(res.example[LG_OUT_TRANSPORT], "timed out"));
    lg_result_free(&res);
    th_fake_stop(f);
}

/* 2 connections scheduled every 10 ms each, 50 ms of service: requests fall
 * further behind their schedule, and the latency must say so (wrk2's point).
 * The bounds follow from the server's sleeps, not from machine speed. */
static void test_open_loop_latency_counts_from_the_intended_send_time(void **state)
{
    (void)state;
    th_fake *f = th_fake_start(TH_FAKE_OK, 50);
    lg_target t[1];
    lg_load_cfg c = cfg_for(t, &f, 1, 20, 2);
    c.rate = 200;
    c.threads = 1;
    lg_result res;
    run_load(&c, &res);
    assert_int_equal(res.total.counts[LG_OUT_OK], 20);
    /* the 10th request of a connection was due at 90 ms, answered at >= 500 ms */
    assert_true(hist_max(res.total.ok) >= 400000);
    assert_true(hist_min(res.total.ok) >= 50000);
    lg_result_free(&res);

    c.rate = 0; /* closed loop: each request only waits for its own service */
    run_load(&c, &res);
    assert_true(hist_percentile(res.total.ok, 50) < hist_max(res.total.ok) + 1);
    assert_true(hist_min(res.total.ok) >= 50000);
    lg_result_free(&res);
    th_fake_stop(f);
}

static void test_open_loop_paces_a_fast_server(void **state)
{
    (void)state;
    th_fake *f = th_fake_start(TH_FAKE_OK, 0);
    lg_target t[1];
    lg_load_cfg c = cfg_for(t, &f, 1, 30, 3);
    c.rate = 100; /* 30 requests at 100/s: at least 0.29 s whatever the machine */
    lg_result res;
    run_load(&c, &res);
    assert_int_equal(res.total.counts[LG_OUT_OK], 30);
    assert_true(res.elapsed_s >= 0.28);
    lg_result_free(&res);
    th_fake_stop(f);
}

static void test_duration_bounds_a_run_without_a_request_limit(void **state)
{
    (void)state;
    th_fake *f = th_fake_start(TH_FAKE_OK, 1);
    lg_target t[1];
    lg_load_cfg c = cfg_for(t, &f, 1, 0, 2);
    c.duration_s = 0.2;
    lg_result res;
    run_load(&c, &res);
    assert_true(res.total.counts[LG_OUT_OK] > 0);
    assert_true(res.elapsed_s >= 0.19 && res.elapsed_s < 10);
    lg_result_free(&res);
    th_fake_stop(f);
}

static void test_hard_stop_abandons_requests_in_flight(void **state)
{
    (void)state;
    th_fake *f = th_fake_start(TH_FAKE_OK, 3000);
    lg_target t[1];
    lg_load_cfg c = cfg_for(t, &f, 1, 100, 4);
    lg_load *l;
    lg_err err;
    assert_int_equal(lg_load_start(&c, &l, &err), LG_OK);
    sleep_ms(100);
    lg_load_stop(l, 1);
    lg_load_stop(l, 1); /* a graceful stop would wait 3 s; hard does not */
    lg_load_stop(l, 2);
    for (int i = 0; i < 200 && !lg_load_finished(l); i++)
        sleep_ms(10);
    assert_true(lg_load_finished(l));
    lg_result res;
    assert_int_equal(lg_load_join(l, &res, &err), LG_OK);
    assert_int_equal(res.total.counts[LG_OUT_TRANSPORT], 4);
    assert_non_null(strstr(res.example[LG_OUT_TRANSPORT], "stopped"));
    lg_result_free(&res);
    th_fake_stop(f);
}

static void test_raw_mode_gets_a_path_and_keeps_no_records(void **state)
{
    (void)state;
    th_fake *f = th_fake_start(TH_FAKE_OK, 0);
    lg_target t[1];
    lg_load_cfg c = cfg_for(t, &f, 1, 50, 2);
    c.raw = 1;
    c.path = "/health";
    c.shape.item_ids = NULL;
    c.shape.nitems = 0;
    lg_result res;
    run_load(&c, &res);
    assert_int_equal(res.total.counts[LG_OUT_OK] + res.total.counts[LG_OUT_OTHER_5XX], 50);
    assert_true(res.total.counts[LG_OUT_OTHER_5XX] >= 24); /* every other answer is a 503 */
    assert_int_equal(res.batches[0].nrecs + res.batches[1].nrecs, 0);
    assert_int_equal(f->nids, 0);
    lg_result_free(&res);
    th_fake_stop(f);
}

/* n carts of 1-5 lines over the fake's 8 items. */
static lg_load_cfg cart_cfg(lg_target *t, th_fake **f, long long n)
{
    lg_load_cfg c = cfg_for(t, f, 1, n, 4);
    c.shape.nitems = 8;
    c.shape.lmin = 1;
    c.shape.lmax = 5;
    return c;
}

static void test_carts_go_to_orders_with_distinct_items_and_read_back_per_line(void **state)
{
    (void)state;
    th_fake *f = th_fake_start(TH_FAKE_OK, 0);
    lg_target t[1];
    lg_load_cfg c = cart_cfg(t, &f, 300);
    lg_result res;
    run_load(&c, &res);
    assert_int_equal(res.total.counts[LG_OUT_OK], 300);
    assert_int_equal(f->orders, 300);
    assert_int_equal(f->dup_items, 0);
    int sizes[6] = {0};
    size_t lines = 0;
    for (int b = 0; b < res.nbatch; b++)
        for (size_t i = 0; i < res.batches[b].nrecs; i++) {
            const lg_rec *r = &res.batches[b].recs[i];
            const lg_line *l = lg_rec_lines(&res.batches[b], r);
            assert_true(r->nlines >= 1 && r->nlines <= 5);
            sizes[r->nlines]++;
            lines += r->nlines;
            for (int k = 0; k < r->nlines; k++) {
                assert_true(l[k].item < 8 && l[k].quantity >= 1 && l[k].quantity <= 3);
                assert_true(l[k].remaining >= 0); /* the 201 said it, line by line */
            }
        }
    assert_int_equal(lines, (size_t)f->order_lines);
    for (int n = 1; n <= 5; n++) /* 300 draws: each size shows up */
        assert_true(sizes[n] > 0);
    lg_result_free(&res);
    th_fake_stop(f);
}

static void test_retry_replays_a_cart_whose_answer_was_cut_off(void **state)
{
    (void)state;
    th_fake *f = th_fake_start(TH_FAKE_DROP_FIRST, 0);
    lg_target t[1];
    lg_load_cfg c = cart_cfg(t, &f, 40);
    assert_retries_commit_once(f, &c);
    assert_int_equal(f->orders, 40);
    th_fake_stop(f);
}

static void test_order_answer_missing_a_line_is_malformed(void **state)
{
    (void)state;
    th_fake *f = th_fake_start(TH_FAKE_WRONG_LINES, 0);
    lg_target t[1];
    lg_load_cfg c = cart_cfg(t, &f, 30);
    lg_result res;
    run_load(&c, &res);
    assert_int_equal(res.total.counts[LG_OUT_MALFORMED], 30);
    assert_non_null(strstr(res.example[LG_OUT_MALFORMED], "/orders: order answer without"));
    lg_result_free(&res);
    th_fake_stop(f);
}

/* Every request of c against a fake in mode: answered OK and committed once,
 * with no retry spent. Returns how many requests the fake got beyond n (sent
 * again on a new connection). */
static int assert_all_ok_once(int mode, long long n, int carts)
{
    th_fake *f = th_fake_start(mode, 0);
    lg_target t[1];
    lg_load_cfg c = carts ? cart_cfg(t, &f, n) : cfg_for(t, &f, 1, n, 4);
    c.retries = 2; /* must stay unused */
    lg_result res;
    run_load(&c, &res);
    assert_int_equal(res.total.counts[LG_OUT_OK], n);
    assert_int_equal(all_recs(&res, LG_OUT_OK), n);
    assert_int_equal(res.total.retries, 0);
    assert_int_equal(f->nids, n);
    for (int i = 0; i < f->nids; i++)
        assert_int_equal(f->commits[i], 1);
    lg_line *lines;
    assert_non_null(lg_result_find(&res, f->ids[0], &lines));
    assert_true(lines[0].remaining >= 0); /* the body was read, not only the status */
    lg_result_free(&res);
    int again = f->served - (int)n;
    th_fake_stop(f);
    return again;
}

static void test_chunked_and_dribbled_answers_are_read_whole(void **state)
{
    (void)state;
    assert_int_equal(assert_all_ok_once(TH_FAKE_CHUNKED, 100, 0), 0);
    assert_int_equal(assert_all_ok_once(TH_FAKE_CHUNKED, 60, 1), 0);
    assert_int_equal(assert_all_ok_once(TH_FAKE_DRIBBLE, 40, 0), 0);
    assert_int_equal(assert_all_ok_once(TH_FAKE_DRIBBLE, 20, 1), 0);
}

static void test_connections_the_server_closes_after_an_answer_are_made_again(void **state)
{
    (void)state;
    /* a request written to a connection the server had closed never reached it */
    assert_int_equal(assert_all_ok_once(TH_FAKE_CLOSE_EACH, 100, 0), 0);
    assert_int_equal(assert_all_ok_once(TH_FAKE_CLOSE_DELIMITED, 100, 0), 0);
    assert_int_equal(assert_all_ok_once(TH_FAKE_CLOSE_DELIMITED, 40, 1), 0);
}

/* The fake closes every connection's second request without a byte, after
 * committing it: sent again once on a new connection, it is answered as a
 * replay, so each request counts once and commits once. */
static void test_a_reused_connection_closed_without_an_answer_is_sent_again_once(void **state)
{
    (void)state;
    assert_true(assert_all_ok_once(TH_FAKE_SILENT_REUSED, 100, 0) > 0);
    assert_true(assert_all_ok_once(TH_FAKE_SILENT_REUSED, 40, 1) > 0);
}

/* ... but one that gave part of an answer back is not: the server may have
 * acted on it, and only --retry's resend (counted as such) may follow. */
static void test_a_reused_connection_cut_mid_answer_is_not_sent_again(void **state)
{
    (void)state;
    th_fake *f = th_fake_start(TH_FAKE_CUT_REUSED, 0);
    lg_target t[1];
    lg_load_cfg c = cfg_for(t, &f, 1, 40, 2);
    lg_result res;
    run_load(&c, &res);
    assert_int_equal(f->served, 40);
    assert_true(res.total.counts[LG_OUT_TRANSPORT] >= 10); /* every other one, at least */
    assert_int_equal(res.total.counts[LG_OUT_OK] + res.total.counts[LG_OUT_TRANSPORT], 40);
    assert_int_equal(all_recs(&res, LG_OUT_TRANSPORT), res.total.counts[LG_OUT_TRANSPORT]);
    lg_result_free(&res);
    th_fake_stop(f);
}

static void test_an_answer_cut_in_its_head_or_chunks_is_a_transport_error(void **state)
{
    (void)state;
    const int modes[] = {TH_FAKE_CUT_HEADERS, TH_FAKE_CUT_CHUNKED};
    for (int m = 0; m < 2; m++) {
        th_fake *f = th_fake_start(modes[m], 0);
        lg_target t[1];
        lg_load_cfg c = cfg_for(t, &f, 1, 20, 2);
        lg_result res;
        run_load(&c, &res);
        assert_int_equal(res.total.counts[LG_OUT_TRANSPORT], 20);
        assert_int_equal(all_recs(&res, LG_OUT_TRANSPORT), 20); /* undetermined, never ok */
        assert_int_equal(f->served, 20);                         /* and never sent twice */
        assert_non_null(strstr(res.example[LG_OUT_TRANSPORT], "closed after"));
        lg_result_free(&res);
        th_fake_stop(f);
        f = th_fake_start(modes[m], 0); /* --retry: replayed, answered whole */
        c = cfg_for(t, &f, 1, 30, 2);
        assert_retries_commit_once(f, &c);
        th_fake_stop(f);
    }
}

/* An answer that keeps coming, one byte every 50 ms, still times out at the
 * attempt's deadline: a timeout is not a time without bytes. */
static void test_a_dribbling_answer_times_out_by_its_deadline(void **state)
{
    (void)state;
    th_fake *f = th_fake_start(TH_FAKE_SLOW_DRIBBLE, 50);
    lg_target t[1];
    lg_load_cfg c = cfg_for(t, &f, 1, 4, 2);
    c.timeout_ms = 300;
    lg_result res;
    run_load(&c, &res);
    assert_int_equal(res.total.counts[LG_OUT_TRANSPORT], 4);
    assert_non_null(strstr(res.example[LG_OUT_TRANSPORT], "timed out after 300 ms"));
    assert_true(res.elapsed_s < 4); /* whole answers would take 5 s each */
    lg_result_free(&res);
    th_fake_stop(f);
}

static void test_a_refused_connection_is_a_transport_error(void **state)
{
    (void)state;
    th_fake *f = th_fake_start(TH_FAKE_OK, 0);
    lg_target t[1];
    lg_load_cfg c = cfg_for(t, &f, 1, 10, 2);
    th_fake_stop(f); /* its port now refuses */
    lg_result res;
    run_load(&c, &res);
    assert_int_equal(res.total.counts[LG_OUT_TRANSPORT], 10);
    assert_non_null(strstr(res.example[LG_OUT_TRANSPORT], "connect"));
    lg_result_free(&res);
}

static void test_inconsistent_configuration_is_refused(void **state)
{
    (void)state;
    lg_target t[1] = {{"", "http://127.0.0.1:9"}};
    lg_load_cfg c = {.targets = t, .ntargets = 1, .concurrency = 1, .threads = 2,
                     .requests = 1, .timeout_ms = 10,
                     .shape = {.item_ids = item_ids, .nitems = 1, .qmin = 1, .qmax = 1},
                     .run_id = "x"};
    lg_load *l = (lg_load *)&c;
    lg_err err;
    assert_int_equal(lg_load_start(&c, &l, &err), LG_ERR_USAGE);
    assert_null(l);
    c.threads = 1;
    c.shape.lmin = c.shape.lmax = 2; /* a cart of 2 distinct items out of 1 */
    assert_int_equal(lg_load_start(&c, &l, &err), LG_ERR_USAGE);
    assert_null(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_closed_loop_spreads_connections_over_targets),
        cmocka_unit_test(test_an_api_profile_renders_each_request_and_reads_its_answers),
        cmocka_unit_test(test_retry_resends_the_same_request_id_and_counts_it_once),
        cmocka_unit_test(test_without_retry_a_dropped_answer_is_a_transport_error),
        cmocka_unit_test(test_garbage_answers_are_counted_not_fatal),
        cmocka_unit_test(test_slow_answers_time_out),
        cmocka_unit_test(test_open_loop_latency_counts_from_the_intended_send_time),
        cmocka_unit_test(test_open_loop_paces_a_fast_server),
        cmocka_unit_test(test_duration_bounds_a_run_without_a_request_limit),
        cmocka_unit_test(test_hard_stop_abandons_requests_in_flight),
        cmocka_unit_test(test_raw_mode_gets_a_path_and_keeps_no_records),
        cmocka_unit_test(test_carts_go_to_orders_with_distinct_items_and_read_back_per_line),
        cmocka_unit_test(test_retry_replays_a_cart_whose_answer_was_cut_off),
        cmocka_unit_test(test_order_answer_missing_a_line_is_malformed),
        cmocka_unit_test(test_chunked_and_dribbled_answers_are_read_whole),
        cmocka_unit_test(test_connections_the_server_closes_after_an_answer_are_made_again),
        cmocka_unit_test(test_a_reused_connection_closed_without_an_answer_is_sent_again_once),
        cmocka_unit_test(test_a_reused_connection_cut_mid_answer_is_not_sent_again),
        cmocka_unit_test(test_an_answer_cut_in_its_head_or_chunks_is_a_transport_error),
        cmocka_unit_test(test_a_dribbling_answer_times_out_by_its_deadline),
        cmocka_unit_test(test_a_refused_connection_is_a_transport_error),
        cmocka_unit_test(test_inconsistent_configuration_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
