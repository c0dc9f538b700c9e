/* test_behind_proxy.c - stockd behind a proxy (--trusted-proxies), on real
 * replicas: X-Forwarded-For names the client in the log and the metrics only
 * when the peer is trusted (127.0.0.1; 127.0.0.2 is a stranger); the
 * per-address limit counts a forwarded client's requests in flight (the
 * third of one address is answered 429, nothing done) and not the proxy's
 * connections, while a stranger's connections stay limited (and come back
 * when closed); an order's log line names its client; a flood of refusals
 * is logged once a second at most. */
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
#include <jansson.h>

#include "tests/support/calls.h"
#include "tests/support/harness.h"
#include "tests/support/logline.h"

#define STRANGER "127.0.0.2" /* a loopback address outside --trusted-proxies */

static th_redis redis;
static char dir[64];

static int group_setup(void **state)
{
    (void)state;
    return th_tempdir("proxy-it", dir, sizeof(dir)) != 0 || th_redis_start(&redis) != 0 ? -1 : 0;
}

static int group_teardown(void **state)
{
    (void)state;
    th_redis_stop(&redis, 0);
    return 0;
}

/* A replica on a database of its own, trusting 127.0.0.1, with flags. */
static void start(th_stockd *s, const char *name, const char *const flags[])
{
    char db[128];
    const char *argv[32] = {"--trusted-proxies", "127.0.0.1", "--log-level", "debug"};
    int n = 4;
    for (int i = 0; flags && flags[i] && n < 31; i++)
        argv[n++] = flags[i];
    argv[n] = NULL;
    snprintf(db, sizeof(db), "%s/%s.db", dir, name);
    assert_int_equal(th_stockd_start(s, &redis, db, dir, argv), 0);
}

/* A GET of path on fd with X-Forwarded-For lines xff ("" for none: each
 * "X-Forwarded-For: ..." line given whole, CRLF-ended); the answer's status
 * (0 when the connection closed unanswered). */
static int get_on(int fd, const char *path, const char *xff, char *out, size_t size)
{
    char req[512];
    snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\n%s\r\n", path, xff);
    if (th_exchange(fd, req, out, size, 10000 * TH_SLOWER) <= 0)
        return 0;
    return strncmp(out, "HTTP/1.1 ", 9) == 0 ? atoi(out + 9) : 0;
}

/* The client= of the first "request" log line of path in s's log ("" when none). */
static const char *client_logged(const th_stockd *s, const char *path, char *out, size_t size)
{
    char *log = th_read_file(s->log);
    th_logfmt line;
    out[0] = '\0';
    if (log && th_log_find(log, "path", path, &line)) {
        int found = 0;
        const char *v = th_logfmt_get(&line, "client", &found);
        snprintf(out, size, "%s", found && v ? v : "");
    }
    free(log);
    return out;
}

/* Whether s's log has a line msg with client=client. */
static int logged_with_client(const th_stockd *s, const char *msg, const char *client)
{
    char *log = th_read_file(s->log), line[4096];
    const char *next = log;
    int found = 0;
    while (log && !found && th_next_line(&next, line, sizeof(line))) {
        th_logfmt l;
        int has_msg = 0, has_client = 0;
        if (th_logfmt_parse(line, &l) != 0)
            continue;
        const char *m = th_logfmt_get(&l, "msg", &has_msg);
        const char *c = th_logfmt_get(&l, "client", &has_client);
        found = has_msg && has_client && m && c && strcmp(m, msg) == 0 && strcmp(c, client) == 0;
    }
    free(log);
    return found;
}

static double metric(const th_stockd *s, const char *name)
{
    return th_metric(s->url, name);
}

/* Waits (10 s x TH_SLOWER at most: a hang) until s's metric name is at least n. */
static void wait_metric(const th_stockd *s, const char *name, double n)
{
    int64_t end = th_now_ms() + 10000 * TH_SLOWER;
    double now;
    while ((now = metric(s, name)) < n) {
        if (th_now_ms() > end)
            fail_msg("%s is %g after 10 s x %d, want %g", name, now, TH_SLOWER, n);
        th_sleep_ms(5);
    }
}

/* Whether a connection from STRANGER to s is served; waits (5 s x
 * TH_SLOWER at most) for one, as connections closed a moment ago are
 * counted until libmicrohttpd has seen them close. */
static int stranger_served_again(const th_stockd *s)
{
    char out[4096];
    int status = 0;
    for (int64_t end = th_now_ms() + 5000 * TH_SLOWER; status != 200 && th_now_ms() < end;) {
        int fd = th_connect_from(STRANGER, s->port);
        status = fd >= 0 ? get_on(fd, "/health", "", out, sizeof(out)) : 0;
        if (fd >= 0)
            close(fd);
        if (status != 200)
            th_sleep_ms(20);
    }
    return status == 200;
}

/* 1. From the trusted peer, the client is X-Forwarded-For's rightmost
 *    untrusted hop (a spoofed leftmost one is not believed; several lines
 *    are joined); from a stranger, the header is ignored and the stranger
 *    is the client. The metrics count each source. */
static void test_the_log_names_the_forwarded_client_only_from_a_trusted_peer(void **state)
{
    (void)state;
    th_stockd s;
    start(&s, "log", NULL);
    char out[4096], client[64];
    int fd = th_connect(s.port);
    assert_true(fd >= 0);
    assert_int_equal(get_on(fd, "/via-proxy", "X-Forwarded-For: 6.6.6.6, 203.0.113.5\r\n", out,
                            sizeof(out)), 404);
    assert_int_equal(get_on(fd, "/via-proxy-lines", "X-Forwarded-For: 203.0.113.7\r\n"
                            "X-Forwarded-For: 127.0.0.1\r\n", out, sizeof(out)), 404);
    assert_int_equal(get_on(fd, "/proxy-itself", "", out, sizeof(out)), 404);
    close(fd);
    fd = th_connect_from(STRANGER, s.port);
    assert_true(fd >= 0);
    assert_int_equal(get_on(fd, "/from-stranger", "X-Forwarded-For: 198.51.100.9\r\n", out,
                            sizeof(out)), 404);
    close(fd);

    assert_string_equal(client_logged(&s, "/via-proxy", client, sizeof(client)), "203.0.113.5");
    assert_string_equal(client_logged(&s, "/via-proxy-lines", client, sizeof(client)),
                        "203.0.113.7");
    assert_string_equal(client_logged(&s, "/proxy-itself", client, sizeof(client)), "127.0.0.1");
    assert_string_equal(client_logged(&s, "/from-stranger", client, sizeof(client)), STRANGER);
    assert_int_equal(th_count_in_file(s.log, "client=6.6.6.6"), 0);
    assert_int_equal(th_count_in_file(s.log, "client=198.51.100.9"), 0);
    assert_int_equal(metric(&s, "stockd_http_client_address_total{source=\"forwarded\"}"), 2);
    assert_int_equal(metric(&s, "stockd_http_client_address_total{source=\"ignored\"}"), 1);
    assert_true(metric(&s, "stockd_http_client_address_total{source=\"peer\"}") >= 1);
    assert_int_equal(th_stockd_stop_clean(&s), 0);
}

/* Sends an order of one unit of item, with workMs, from client through the
 * proxy's connection fd, without reading its answer. */
static void send_order(int fd, const char *client, long long item, int work_ms)
{
    char body[128], req[512];
    int len = snprintf(body, sizeof(body), "{\"itemId\":%lld,\"quantity\":1,\"workMs\":%d}", item,
                       work_ms);
    snprintf(req, sizeof(req), "POST /reduceStock HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: %s\r\n"
             "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", client, len, body);
    th_send_all(fd, req, strlen(req));
}

/* The status of the answer waiting on fd (0: none). */
static int answer_on(int fd, char *out, size_t size)
{
    if (th_exchange(fd, "", out, size, 30000 * TH_SLOWER) <= 0)
        return 0;
    return atoi(out + 9);
}

/* 2. --max-connections-per-ip 2: the proxy holds 4 connections at once (all
 *    served); one forwarded client with 2 orders in flight has its third
 *    answered 429 too_many_requests with Retry-After, nothing deducted,
 *    while another client's order passes; once answered, the first client
 *    may order again. A stranger still gets 2 connections, not 3, and once
 *    it has closed them it gets one again. */
static void test_the_limit_counts_forwarded_clients_not_the_proxys_connections(void **state)
{
    (void)state;
    const int work = 1500 * TH_SLOWER;
    const char *flags[] = {"--max-connections-per-ip", "2", "--allow-work-ms", NULL};
    th_stockd s;
    start(&s, "limit", flags);
    long long items[4];
    for (int i = 0; i < 4; i++)
        items[i] = th_new_item(&s, "proxied", 10);
    int fds[4];
    char out[4096];
    for (int i = 0; i < 4; i++)
        assert_true((fds[i] = th_connect(s.port)) >= 0);
    send_order(fds[0], "203.0.113.5", items[0], work);
    send_order(fds[1], "6.6.6.6, 203.0.113.5", items[1], work); /* the same client */
    /* both hold their item's lock: counted in flight (before their handler
     * ran) already, so the third can't pass ahead of the second */
    wait_metric(&s, "stockd_lock_acquired_total", 2);
    send_order(fds[2], "203.0.113.5", items[2], 0);
    assert_int_equal(answer_on(fds[2], out, sizeof(out)), 429);
    assert_non_null(strstr(out, "\"error\":\"too_many_requests\""));
    assert_non_null(strstr(out, "Retry-After: 1"));
    assert_int_equal(th_item_stock(&s, items[2]), 10); /* nothing done */
    send_order(fds[3], "203.0.113.6", items[3], 0);   /* another client, same proxy */
    assert_int_equal(answer_on(fds[3], out, sizeof(out)), 200);
    assert_int_equal(answer_on(fds[0], out, sizeof(out)), 200);
    assert_int_equal(answer_on(fds[1], out, sizeof(out)), 200);
    int status = 0; /* its count is given back once the answers are out */
    for (int64_t end = th_now_ms() + 5000 * TH_SLOWER; status != 200 && th_now_ms() < end;) {
        send_order(fds[2], "203.0.113.5", items[2], 0);
        if ((status = answer_on(fds[2], out, sizeof(out))) != 200)
            th_sleep_ms(20);
    }
    assert_int_equal(status, 200);
    assert_int_equal(th_item_stock(&s, items[2]), 9);
    for (int i = 0; i < 4; i++)
        close(fds[i]);

    int strangers[3];
    for (int i = 0; i < 2; i++) {
        assert_true((strangers[i] = th_connect_from(STRANGER, s.port)) >= 0);
        assert_int_equal(get_on(strangers[i], "/health", "", out, sizeof(out)), 200);
    }
    strangers[2] = th_connect_from(STRANGER, s.port); /* closed unanswered */
    assert_true(strangers[2] < 0 || get_on(strangers[2], "/health", "", out, sizeof(out)) == 0);
    for (int i = 0; i < 3; i++)
        if (strangers[i] >= 0)
            close(strangers[i]);
    assert_true(stranger_served_again(&s)); /* closed: their counts came back */

    assert_int_equal(metric(&s, "stockd_http_per_address_refusals_total{limit=\"in_flight\"}"), 1);
    assert_true(metric(&s, "stockd_http_per_address_refusals_total{limit=\"connections\"}") >= 1);
    assert_true(metric(&s, "stockd_http_requests_total{route=\"reduceStock\",status=\"429\"}") >= 1);
    char *log = th_read_file(s.log);
    th_logfmt line;
    assert_true(th_log_find(log, "msg", "request refused: too many in flight from one address "
                            "(logged once a second at most)", &line));
    int found = 0;
    assert_string_equal(th_logfmt_get(&line, "client", &found), "203.0.113.5");
    free(log);
    assert_true(logged_with_client(&s, "order placed", "203.0.113.6")); /* the order's own line */
    assert_int_equal(th_stockd_stop_clean(&s), 0);
}

#define FLOOD 50

/* The requests of a flood on fd from client xff: FLOOD of req_fmt (a
 * request with %s for the X-Forwarded-For value) that must each be
 * answered status. Returns the seconds they took, rounded up. */
static int flood(int fd, const char *req_fmt, const char *xff, int status)
{
    char req[512], out[4096];
    snprintf(req, sizeof(req), req_fmt, xff);
    int64_t t0 = th_now_ms();
    for (int i = 0; i < FLOOD; i++) {
        int got = th_exchange(fd, req, out, sizeof(out), 10000 * TH_SLOWER) > 0 ? atoi(out + 9) : 0;
        if (got != status)
            fail_msg("request %d of the flood from %s: %d, want %d: %s", i, xff, got, status, out);
    }
    return (int)((th_now_ms() - t0 + 999) / 1000);
}

/* 3. A forwarded client over its in-flight limit, and one without a token,
 *    hammering: every refusal is counted in /metrics, but each kind is
 *    logged once a second at most (one who hammers can't fill the log). */
static void test_refusals_of_a_flood_are_logged_once_a_second_at_most(void **state)
{
    (void)state;
    char tokens[128];
    snprintf(tokens, sizeof(tokens), "%s/tokens", dir);
    FILE *f = fopen(tokens, "w");
    assert_non_null(f);
    fputs("buyer shop flood-buyer-token\noperator ops flood-operator-token\n", f);
    fclose(f);
    const char *flags[] = {"--max-connections-per-ip", "1", "--allow-work-ms",
                           "--api-tokens-file", tokens, NULL};
    th_stockd s;
    start(&s, "flood", flags);
    int holder = th_connect(s.port), fd = th_connect(s.port);
    assert_true(holder >= 0 && fd >= 0);
    char body[128], req[512], out[4096];
    const char *item = "{\"name\":\"flood\",\"stock\":10}";
    snprintf(req, sizeof(req), "POST /items HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
             "flood-operator-token\r\nContent-Type: application/json\r\nContent-Length: %zu"
             "\r\n\r\n%s", strlen(item), item);
    assert_true(th_exchange(holder, req, out, sizeof(out), 10000 * TH_SLOWER) > 0);
    const char *id = strstr(out, "\"id\":");
    assert_non_null(id);
    int len = snprintf(body, sizeof(body), "{\"itemId\":%lld,\"quantity\":1,\"workMs\":%d}",
                       atoll(id + 5), 3000 * TH_SLOWER);
    snprintf(req, sizeof(req), "POST /reduceStock HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: "
             "203.0.113.5\r\nAuthorization: Bearer flood-buyer-token\r\nContent-Type: "
             "application/json\r\nContent-Length: %d\r\n\r\n%s", len, body);
    th_send_all(holder, req, strlen(req));
    wait_metric(&s, "stockd_lock_acquired_total", 1); /* in flight: its one */

    int secs = flood(fd, "GET /health HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: %s\r\n\r\n",
                     "203.0.113.5", 429);
    secs += flood(fd, "POST /reduceStock HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: %s\r\n"
                  "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
                  "203.0.113.6", 401);
    assert_int_equal(answer_on(holder, out, sizeof(out)), 200);
    close(holder);
    close(fd);

    assert_int_equal(metric(&s, "stockd_http_per_address_refusals_total{limit=\"in_flight\"}"),
                     FLOOD);
    assert_int_equal(metric(&s, "stockd_http_requests_total{route=\"health\",status=\"429\"}"),
                     FLOOD);
    assert_int_equal(metric(&s, "stockd_http_requests_total{route=\"reduceStock\",status=\"401\"}"),
                     FLOOD);
    int in_flight = th_count_in_file(s.log, "msg=\"request refused: too many in flight");
    int unauthorized = th_count_in_file(s.log, "msg=\"request not authorized");
    print_message("a flood of %d each in %d s: %d lines of 429, %d of 401\n", FLOOD, secs,
                  in_flight, unauthorized);
    assert_true(in_flight >= 1 && in_flight <= secs + 1); /* one per second begun */
    assert_true(unauthorized >= 1 && unauthorized <= secs + 1);
    assert_true(logged_with_client(&s, "request not authorized (logged once a second at most)",
                                   "203.0.113.6"));
    assert_int_equal(th_stockd_stop_clean(&s), 0);
}

/* 4. Without --trusted-proxies, a header from 127.0.0.1 is ignored too. */
static void test_without_trusted_proxies_every_header_is_ignored(void **state)
{
    (void)state;
    const char *flags[] = {"--trusted-proxies", "", NULL}; /* last wins: trust nobody */
    th_stockd s;
    start(&s, "nobody", flags);
    char out[4096], client[64];
    int fd = th_connect(s.port);
    assert_true(fd >= 0);
    assert_int_equal(get_on(fd, "/nobody", "X-Forwarded-For: 203.0.113.5\r\n", out, sizeof(out)),
                     404);
    close(fd);
    assert_string_equal(client_logged(&s, "/nobody", client, sizeof(client)), "127.0.0.1");
    assert_int_equal(metric(&s, "stockd_http_client_address_total{source=\"forwarded\"}"), 0);
    assert_int_equal(metric(&s, "stockd_http_client_address_total{source=\"ignored\"}"), 1);
    assert_int_equal(th_stockd_stop_clean(&s), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_log_names_the_forwarded_client_only_from_a_trusted_peer),
        cmocka_unit_test(test_the_limit_counts_forwarded_clients_not_the_proxys_connections),
        cmocka_unit_test(test_refusals_of_a_flood_are_logged_once_a_second_at_most),
        cmocka_unit_test(test_without_trusted_proxies_every_header_is_ignored),
    };
    return cmocka_run_group_tests_name("behind a proxy", tests, group_setup, group_teardown);
}
