/* test_notify.c - what stockd tells systemd (sd_notify), without systemd: the
 * test binds the AF_UNIX datagram socket a Type=notify unit's NOTIFY_SOCKET
 * names, starts a real stockd with it and reads its messages. No READY=1
 * while Redis is down (stockd serves meanwhile, /health 503), READY=1 once
 * Redis answers; RELOADING=1 then READY=1 around a SIGHUP's token reload,
 * also a failed one (the old tokens stay, and STATUS= says so); a SIGHUP
 * before READY says neither; STOPPING=1 on SIGTERM. */
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/support/harness.h"

#define OPERATOR "op-5b4a39281706f5e4"

static char dir[64], db[128], sock_path[108];
static int sock = -1;

/* Every message heard in the running test, in order. */
#define HEARD_MAX 256
static char heard[HEARD_MAX][1024];
static int nheard;

static int group_setup(void **state)
{
    (void)state;
    if (th_tempdir("stockd-notify", dir, sizeof(dir)) != 0)
        return -1;
    snprintf(db, sizeof(db), "%s/stock.db", dir);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(sock_path, sizeof(sock_path), "%s/notify", dir);
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock_path);
    sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    return sock >= 0 && bind(sock, (struct sockaddr *)&a, sizeof(a)) == 0 ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    close(sock);
    unlink(sock_path);
    return 0;
}

/* Starts s against redis port r (which may not be up) with NOTIFY_SOCKET set
 * for it alone: no server the test starts besides stockd hears of it. */
static void start_stockd(th_stockd *s, const th_redis *r, const char *const extra[])
{
    nheard = 0;
    char buf[1024];
    while (recv(sock, buf, sizeof(buf), MSG_DONTWAIT) > 0) { /* an earlier test's */
    }
    setenv("NOTIFY_SOCKET", sock_path, 1);
    int rc = th_stockd_start(s, r, db, dir, extra);
    unsetenv("NOTIFY_SOCKET");
    assert_int_equal(rc, 0);
}

/* Whether message m holds the line line exactly ("READY=1"), or one that
 * begins with it when it ends in '=' ("STATUS="). */
static int has_line(const char *m, const char *line)
{
    size_t n = strlen(line);
    int prefix = n > 0 && line[n - 1] == '=';
    for (const char *p = m; (p = strstr(p, line)) != NULL; p++)
        if ((p == m || p[-1] == '\n') && (prefix || p[n] == '\n' || p[n] == '\0'))
            return 1;
    return 0;
}

/* Reads messages into heard[] until one holds line and, when given, a status
 * with text in it, at most timeout_ms (a bound that only finds a hang): its
 * index, or -1. */
static int listen_for(const char *line, const char *text, int timeout_ms)
{
    int64_t end = th_now_ms() + (int64_t)timeout_ms * TH_SLOWER;
    for (;;) {
        int left = (int)(end - th_now_ms());
        struct pollfd p = {.fd = sock, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, left) <= 0 || nheard == HEARD_MAX)
            return -1;
        ssize_t n = recv(sock, heard[nheard], sizeof(heard[0]) - 1, 0);
        if (n < 0)
            continue;
        char *m = heard[nheard++];
        m[n] = '\0';
        if (has_line(m, line) && (text == NULL || strstr(m, text) != NULL))
            return nheard - 1;
    }
}

/* The first message heard that holds line, or -1. */
static int heard_line(const char *line)
{
    for (int i = 0; i < nheard; i++)
        if (has_line(heard[i], line))
            return i;
    return -1;
}

static void print_heard(void)
{
    for (int i = 0; i < nheard; i++)
        printf("heard %d: %s\n", i, heard[i]);
}

static long health(const th_stockd *s, char *body, size_t size)
{
    char url[96];
    th_resp r;
    snprintf(url, sizeof(url), "%s/health", s->url);
    th_http("GET", url, NULL, &r);
    snprintf(body, size, "%s", r.body ? r.body : r.error);
    th_resp_free(&r);
    return r.status;
}

/* Writes text as the token file, whole (renamed over the old one). */
static const char *write_tokens(const char *text)
{
    static char path[160];
    snprintf(path, sizeof(path), "%s/tokens", dir);
    assert_int_equal(th_replace_file(path, text), 0);
    return path;
}

static void test_ready_waits_until_redis_answers_while_stockd_serves(void **state)
{
    (void)state;
    th_redis r = {0};
    r.port = th_free_port(); /* nothing listens there yet */
    th_stockd s;
    const char *flags[] = {"--redis-timeout-ms", "200", NULL};
    start_stockd(&s, &r, flags);
    /* two checks that found Redis down: stockd looked, and said it waits */
    const char *waiting = "waiting for the database and Redis";
    int first = listen_for("STATUS=", waiting, 10000);
    int second = first >= 0 ? listen_for("STATUS=", waiting, 10000) : -1;
    char body[1024];
    long status = health(&s, body, sizeof(body));
    if (second < 0 || heard_line("READY=1") >= 0 || status != 503)
        print_heard();
    assert_true(second > first);
    assert_int_equal(heard_line("READY=1"), -1);
    assert_int_equal(status, 503);
    assert_non_null(strstr(body, "\"unavailable\""));

    /* a SIGHUP before READY reloads, but is no reload to systemd: the start
     * is not over */
    assert_int_equal(kill(s.pid, SIGHUP), 0);
    int said = listen_for("STATUS=", "not ready yet; no --api-tokens-file", 10000);
    if (said < 0 || heard_line("RELOADING=1") >= 0 || heard_line("READY=1") >= 0)
        print_heard();
    assert_true(said >= 0);
    assert_int_equal(heard_line("RELOADING=1"), -1);
    assert_int_equal(heard_line("READY=1"), -1);

    assert_int_equal(th_redis_start(&r), 0); /* on the port stockd was given */
    int ready = listen_for("READY=1", NULL, 15000);
    if (ready < 0)
        print_heard();
    assert_true(ready >= 0);
    assert_non_null(strstr(heard[ready], "STATUS=serving on port"));
    assert_non_null(strstr(heard[ready], "redis ok"));
    assert_int_equal(health(&s, body, sizeof(body)), 200);
    /* the log line is written just after the datagram is sent: waited for
     * (bounded), then once only */
    const char *told = "msg=\"ready: told systemd";
    int64_t end = th_now_ms() + 5000 * TH_SLOWER;
    while (th_count_in_file(s.log, told) == 0 && th_now_ms() < end)
        th_sleep_ms(10);
    assert_int_equal(th_count_in_file(s.log, told), 1);

    assert_int_equal(th_stockd_stop_clean(&s), 0);
    int stopping = listen_for("STOPPING=1", NULL, 5000);
    if (stopping < 0)
        print_heard();
    assert_true(stopping > ready);
    th_redis_stop(&r, 1);
}

static void test_sighup_is_reloading_then_ready_and_sigterm_is_stopping(void **state)
{
    (void)state;
    th_redis r = {0};
    assert_int_equal(th_redis_start(&r), 0);
    char tokens[128];
    snprintf(tokens, sizeof(tokens), "operator ops %s\n", OPERATOR);
    const char *flags[] = {"--api-tokens-file", write_tokens(tokens), NULL};
    th_stockd s;
    start_stockd(&s, &r, flags);
    int ready = listen_for("READY=1", NULL, 10000);
    if (ready < 0)
        print_heard();
    assert_true(ready >= 0);

    /* a reload that works */
    assert_int_equal(kill(s.pid, SIGHUP), 0);
    int reloading = listen_for("RELOADING=1", NULL, 10000);
    int again = reloading >= 0 ? listen_for("READY=1", NULL, 10000) : -1;
    if (again < 0)
        print_heard();
    assert_true(reloading > ready);
    assert_true(again > reloading);
    assert_true(has_line(heard[reloading], "RELOADING=1"));
    assert_non_null(strstr(heard[reloading], "MONOTONIC_USEC="));
    assert_non_null(strstr(heard[again], "api tokens reloaded"));

    /* one that fails: READY=1 all the same (the old tokens serve), and why */
    write_tokens("operator\n");
    assert_int_equal(kill(s.pid, SIGHUP), 0);
    reloading = listen_for("RELOADING=1", NULL, 10000);
    again = reloading >= 0 ? listen_for("READY=1", NULL, 10000) : -1;
    if (again < 0)
        print_heard();
    assert_true(again > reloading && reloading >= 0);
    assert_non_null(strstr(heard[again], "api tokens NOT reloaded, the old ones stay"));
    char body[1024];
    assert_int_equal(health(&s, body, sizeof(body)), 200);

    /* the stop: STOPPING=1 first, then what the drain does */
    int before = nheard;
    assert_int_equal(th_stockd_stop_clean(&s), 0);
    int stopping = listen_for("STOPPING=1", NULL, 5000);
    if (stopping < 0)
        print_heard();
    assert_int_equal(stopping, before);
    assert_non_null(strstr(heard[stopping], "STATUS=stopping on SIGTERM: draining"));
    assert_true(listen_for("STATUS=", "stopping: drained; closing", 5000) > stopping);
    th_redis_stop(&r, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ready_waits_until_redis_answers_while_stockd_serves),
        cmocka_unit_test(test_sighup_is_reloading_then_ready_and_sigterm_is_stopping),
    };
    return cmocka_run_group_tests_name("notify", tests, group_setup, group_teardown);
}
