/* test_lg_load.c - the load engine against an in-process fake HTTP server that
 * produces what real stockd can't on demand: connections dropped after a
 * commit (so --retry must replay the same requestId), garbage answers, answers
 * slower than the timeout, a fixed service time for checking that open-loop
 * latency counts from the intended send time, and POST /orders carts answered
 * with their lines (or with the wrong ones). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <jansson.h>

#include "loadgen/load.h"

enum mode { MODE_OK, MODE_DROP_FIRST, MODE_GARBAGE, MODE_WRONG_LINES };

#define MAX_IDS 4096
#define MAX_CONNS 64

typedef struct fake {
    int lfd, port, mode, delay_ms;
    pthread_t acceptor;
    pthread_mutex_t mu; /* guards everything below */
    char ids[MAX_IDS][48];
    int commits[MAX_IDS];
    long long remaining_at[MAX_IDS];
    char *order_answer[MAX_IDS]; /* an order's first answer, for replays */
    int nids, served;
    long long stock;
    int orders, order_lines, dup_items; /* carts committed, their lines, carts repeating an item */
    int fds[MAX_CONNS];
    pthread_t threads[MAX_CONNS];
    int nconns;
} fake;

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int reply(int fd, int status, const char *body)
{
    char buf[4096];
    int n = snprintf(buf, sizeof(buf),
                     "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %zu"
                     "\r\n\r\n%s", status, strlen(body), body);
    return send(fd, buf, (size_t)n, MSG_NOSIGNAL) == n ? 0 : -1;
}

/* Reads one request (headers and Content-Length body) into buf. */
static int read_request(int fd, char *buf, size_t size)
{
    size_t got = 0;
    for (;;) {
        char *end = got ? strstr(buf, "\r\n\r\n") : NULL;
        if (end) {
            const char *cl = strcasestr(buf, "Content-Length:");
            size_t want = (size_t)(end + 4 - buf) + (cl ? strtoul(cl + 15, NULL, 10) : 0);
            if (got >= want)
                return 0;
        }
        ssize_t n = recv(fd, buf + got, size - 1 - got, 0);
        if (n <= 0)
            return -1;
        got += (size_t)n;
        buf[got] = '\0';
    }
}

/* Commits requestId once (a replay answers the first result); -1 = drop the connection. */
static int answer_reduce(fake *f, int fd, const char *req)
{
    const char *rid = strstr(req, "\"requestId\":\"");
    const char *q = strstr(req, "\"quantity\":");
    char id[48] = "", body[160];
    if (rid)
        snprintf(id, sizeof(id), "%.*s", (int)strcspn(rid + 13, "\""), rid + 13);
    long long qty = q ? atoll(q + 11) : 1, remaining;
    int i, fresh;
    pthread_mutex_lock(&f->mu);
    for (i = 0; i < f->nids && strcmp(f->ids[i], id) != 0; i++) {
    }
    fresh = i == f->nids && i < MAX_IDS;
    if (fresh) {
        snprintf(f->ids[f->nids++], sizeof(f->ids[0]), "%s", id);
        f->remaining_at[i] = f->stock -= qty;
    }
    if (i < MAX_IDS)
        f->commits[i] += fresh;
    remaining = i < MAX_IDS ? f->remaining_at[i] : -1;
    pthread_mutex_unlock(&f->mu);
    if (fresh && f->mode == MODE_DROP_FIRST) {
        /* committed, but the answer breaks off mid-body: some of it is sent so
         * that libcurl reports the error instead of silently resending the
         * request on a fresh connection, as it does when nothing came back */
        const char part[] = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{";
        send(fd, part, sizeof(part) - 1, MSG_NOSIGNAL);
        return -1;
    }
    snprintf(body, sizeof(body), "{\"quantity\":%lld,\"remaining\":%lld,\"replayed\":%s}", qty,
             remaining, fresh ? "false" : "true");
    return reply(fd, 200, body);
}

/* The fake's slot for requestId id: 1 when it is new (and now taken). */
static int take_id(fake *f, const char *id, int *slot)
{
    int i;
    for (i = 0; i < f->nids && strcmp(f->ids[i], id) != 0; i++) {
    }
    if (i < f->nids) {
        *slot = i;
        return 0;
    }
    assert_true(i < MAX_IDS);
    snprintf(f->ids[f->nids++], sizeof(f->ids[0]), "%s", id);
    *slot = i;
    return 1;
}

/* Commits a cart once per requestId: every line takes its quantity from the
 * one shared stock; the answer repeats the lines (MODE_WRONG_LINES drops the
 * last one) and a replay answers the first body again. */
static int answer_order(fake *f, int fd, const char *req)
{
    json_t *root = json_loads(strstr(req, "\r\n\r\n") + 4, 0, NULL);
    json_t *lines = json_object_get(root, "lines");
    pthread_mutex_lock(&f->mu);
    int slot, fresh = take_id(f, json_string_value(json_object_get(root, "requestId")), &slot);
    if (fresh) {
        json_t *out = json_array();
        size_t n = json_array_size(lines);
        for (size_t k = 0; k < n; k++) {
            json_t *line = json_array_get(lines, k);
            json_int_t item = json_integer_value(json_object_get(line, "itemId"));
            for (size_t j = 0; j < k; j++)
                f->dup_items += item == json_integer_value(
                                            json_object_get(json_array_get(lines, j), "itemId"));
            f->stock -= json_integer_value(json_object_get(line, "quantity"));
            if (f->mode != MODE_WRONG_LINES || k + 1 < n)
                json_array_append_new(out, json_pack("{s:I, s:O, s:I}", "itemId", item,
                                                     "quantity",
                                                     json_object_get(line, "quantity"),
                                                     "remaining", (json_int_t)f->stock));
        }
        f->orders++;
        f->order_lines += (int)n;
        f->commits[slot]++;
        json_t *body = json_pack("{s:I, s:o}", "orderId", (json_int_t)slot + 1, "lines", out);
        f->order_answer[slot] = json_dumps(body, JSON_COMPACT);
        json_decref(body);
    }
    char answer[3072];
    snprintf(answer, sizeof(answer), "%.*s,\"replayed\":%s}",
             (int)strlen(f->order_answer[slot]) - 1, f->order_answer[slot],
             fresh ? "false" : "true");
    pthread_mutex_unlock(&f->mu);
    json_decref(root);
    if (fresh && f->mode == MODE_DROP_FIRST) { /* committed, answer cut off, as in answer_reduce */
        const char part[] = "HTTP/1.1 201 Created\r\nContent-Length: 100\r\n\r\n{";
        send(fd, part, sizeof(part) - 1, MSG_NOSIGNAL);
        return -1;
    }
    return reply(fd, fresh ? 201 : 200, answer);
}

static int answer(fake *f, int fd, const char *req)
{
    pthread_mutex_lock(&f->mu);
    int nth = f->served++;
    pthread_mutex_unlock(&f->mu);
    if (f->delay_ms)
        sleep_ms(f->delay_ms);
    if (strncmp(req, "GET ", 4) == 0)
        return reply(fd, nth % 2 ? 200 : 503, "{\"status\":\"ok\"}");
    if (strncmp(req, "POST /orders ", 13) == 0 && f->mode != MODE_GARBAGE)
        return answer_order(f, fd, req);
    if (f->mode == MODE_GARBAGE) {
        const char *bodies[] = {"not json", "{\"quantity\":\"1\"}", "<html>oops</html>"};
        return reply(fd, nth % 3 == 2 ? 503 : 200, bodies[nth % 3]);
    }
    return answer_reduce(f, fd, req);
}

static void *serve_conn(void *arg)
{
    fake *f = ((void **)arg)[0];
    int fd = (int)(intptr_t)((void **)arg)[1];
    free(arg);
    char buf[8192];
    while (read_request(fd, buf, sizeof(buf)) == 0 && answer(f, fd, buf) == 0) {
    }
    shutdown(fd, SHUT_RDWR);
    return NULL;
}

static void *accept_loop(void *arg)
{
    fake *f = arg;
    for (;;) {
        int fd = accept(f->lfd, NULL, NULL);
        if (fd < 0)
            return NULL; /* the listening socket was shut down */
        void **a = malloc(2 * sizeof(void *));
        a[0] = f;
        a[1] = (void *)(intptr_t)fd;
        pthread_mutex_lock(&f->mu);
        int k = f->nconns < MAX_CONNS ? f->nconns++ : -1;
        if (k >= 0) {
            f->fds[k] = fd;
            pthread_create(&f->threads[k], NULL, serve_conn, a);
        }
        pthread_mutex_unlock(&f->mu);
        if (k < 0) {
            close(fd);
            free(a);
        }
    }
}

static fake *fake_start(int mode, int delay_ms)
{
    fake *f = calloc(1, sizeof(*f));
    f->mode = mode;
    f->delay_ms = delay_ms;
    f->stock = 1000000;
    pthread_mutex_init(&f->mu, NULL);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    f->lfd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(f->lfd >= 0);
    assert_int_equal(bind(f->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(f->lfd, 64), 0);
    getsockname(f->lfd, (struct sockaddr *)&a, &len);
    f->port = ntohs(a.sin_port);
    pthread_create(&f->acceptor, NULL, accept_loop, f);
    return f;
}

static void fake_stop(fake *f)
{
    shutdown(f->lfd, SHUT_RDWR);
    pthread_join(f->acceptor, NULL);
    close(f->lfd);
    pthread_mutex_lock(&f->mu);
    int n = f->nconns;
    for (int i = 0; i < n; i++)
        shutdown(f->fds[i], SHUT_RDWR);
    pthread_mutex_unlock(&f->mu);
    for (int i = 0; i < n; i++) {
        pthread_join(f->threads[i], NULL);
        close(f->fds[i]);
    }
    pthread_mutex_destroy(&f->mu);
    for (int i = 0; i < f->nids; i++)
        free(f->order_answer[i]);
    free(f);
}

static const long long item_ids[] = {11, 12, 13, 14, 15, 16, 17, 18};

/* A closed-loop configuration of n requests over the fakes. */
static lg_load_cfg cfg_for(lg_target *t, fake **fakes, int nfakes, long long n, int conc)
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
    fake *f[2] = {fake_start(MODE_OK, 0), fake_start(MODE_OK, 0)};
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
    lg_result_free(&res);
    fake_stop(f[0]);
    fake_stop(f[1]);
}

/* Runs c (with 2 retries) against f, which drops every first answer after
 * committing: each request must be resent once and committed once. */
static void assert_retries_commit_once(fake *f, lg_load_cfg *c)
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

static void test_retry_resends_the_same_request_id_and_counts_it_once(void **state)
{
    (void)state;
    fake *f = fake_start(MODE_DROP_FIRST, 0);
    lg_target t[1];
    lg_load_cfg c = cfg_for(t, &f, 1, 40, 4);
    assert_retries_commit_once(f, &c);
    fake_stop(f);
}

static void test_without_retry_a_dropped_answer_is_a_transport_error(void **state)
{
    (void)state;
    fake *f = fake_start(MODE_DROP_FIRST, 0);
    lg_target t[1];
    lg_load_cfg c = cfg_for(t, &f, 1, 20, 2);
    lg_result res;
    run_load(&c, &res);
    assert_int_equal(res.total.counts[LG_OUT_TRANSPORT], 20);
    assert_int_equal(all_recs(&res, LG_OUT_TRANSPORT), 20);
    assert_int_equal(hist_count(res.total.all), 0); /* no answer, no latency */
    assert_true(res.example[LG_OUT_TRANSPORT][0] != '\0');
    lg_result_free(&res);
    fake_stop(f);
}

static void test_garbage_answers_are_counted_not_fatal(void **state)
{
    (void)state;
    fake *f = fake_start(MODE_GARBAGE, 0);
    lg_target t[1];
    lg_load_cfg c = cfg_for(t, &f, 1, 30, 3);
    lg_result res;
    run_load(&c, &res);
    assert_int_equal(res.total.counts[LG_OUT_MALFORMED], 20);
    assert_int_equal(res.total.counts[LG_OUT_OTHER_5XX], 10);
    assert_int_equal(res.total.counts[LG_OUT_OK], 0);
    assert_non_null(strstr(res.example[LG_OUT_MALFORMED], "/reduceStock"));
    lg_result_free(&res);
    fake_stop(f);
}

static void test_slow_answers_time_out(void **state)
{
    (void)state;
    fake *f = fake_start(MODE_OK, 400);
    lg_target t[1];
    lg_load_cfg c = cfg_for(t, &f, 1, 4, 2);
    c.timeout_ms = 100;
    lg_result res;
    run_load(&c, &res);
    assert_int_equal(res.total.counts[LG_OUT_TRANSPORT], 4);
    assert_non_null(strstr(res.example[LG_OUT_TRANSPORT], "timed out"));
    lg_result_free(&res);
    fake_stop(f);
}

/* 2 connections scheduled every 10 ms each, 50 ms of service: requests fall
 * further behind their schedule, and the latency must say so (wrk2's point).
 * The bounds follow from the server's sleeps, not from machine speed. */
static void test_open_loop_latency_counts_from_the_intended_send_time(void **state)
{
    (void)state;
    fake *f = fake_start(MODE_OK, 50);
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
    fake_stop(f);
}

static void test_open_loop_paces_a_fast_server(void **state)
{
    (void)state;
    fake *f = fake_start(MODE_OK, 0);
    lg_target t[1];
    lg_load_cfg c = cfg_for(t, &f, 1, 30, 3);
    c.rate = 100; /* 30 requests at 100/s: at least 0.29 s whatever the machine */
    lg_result res;
    run_load(&c, &res);
    assert_int_equal(res.total.counts[LG_OUT_OK], 30);
    assert_true(res.elapsed_s >= 0.28);
    lg_result_free(&res);
    fake_stop(f);
}

static void test_duration_bounds_a_run_without_a_request_limit(void **state)
{
    (void)state;
    fake *f = fake_start(MODE_OK, 1);
    lg_target t[1];
    lg_load_cfg c = cfg_for(t, &f, 1, 0, 2);
    c.duration_s = 0.2;
    lg_result res;
    run_load(&c, &res);
    assert_true(res.total.counts[LG_OUT_OK] > 0);
    assert_true(res.elapsed_s >= 0.19 && res.elapsed_s < 10);
    lg_result_free(&res);
    fake_stop(f);
}

static void test_hard_stop_abandons_requests_in_flight(void **state)
{
    (void)state;
    fake *f = fake_start(MODE_OK, 3000);
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
    fake_stop(f);
}

static void test_raw_mode_gets_a_path_and_keeps_no_records(void **state)
{
    (void)state;
    fake *f = fake_start(MODE_OK, 0);
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
    fake_stop(f);
}

/* n carts of 1-5 lines over the fake's 8 items. */
static lg_load_cfg cart_cfg(lg_target *t, fake **f, long long n)
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
    fake *f = fake_start(MODE_OK, 0);
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
    fake_stop(f);
}

static void test_retry_replays_a_cart_whose_answer_was_cut_off(void **state)
{
    (void)state;
    fake *f = fake_start(MODE_DROP_FIRST, 0);
    lg_target t[1];
    lg_load_cfg c = cart_cfg(t, &f, 40);
    assert_retries_commit_once(f, &c);
    assert_int_equal(f->orders, 40);
    fake_stop(f);
}

static void test_order_answer_missing_a_line_is_malformed(void **state)
{
    (void)state;
    fake *f = fake_start(MODE_WRONG_LINES, 0);
    lg_target t[1];
    lg_load_cfg c = cart_cfg(t, &f, 30);
    lg_result res;
    run_load(&c, &res);
    assert_int_equal(res.total.counts[LG_OUT_MALFORMED], 30);
    assert_non_null(strstr(res.example[LG_OUT_MALFORMED], "/orders: order answer without"));
    lg_result_free(&res);
    fake_stop(f);
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
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_closed_loop_spreads_connections_over_targets),
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
        cmocka_unit_test(test_inconsistent_configuration_is_refused),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
