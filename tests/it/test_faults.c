/* test_faults.c - never oversell under faults. Each scenario runs real
 * processes (redis-server, three stockd replicas on one SQLite file), injects
 * a fault while loadgen drives them, and ends with loadgen's verdict: a
 * crashed holder, a holder stalled past its lease (with and without fencing),
 * a Redis restart, a locked database, idle and slow connections, SIGTERM;
 * abuse: huge headers and a flood of connection attempts; lock commands that
 * reach Redis after their timeout, slow senders from one address, and a
 * burst against a dead Redis. */
#include <jansson.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <sqlite3.h>

#include "lock/dlock.h"
#include "tests/support/harness.h"
#include "tests/support/stack.h"

static th_redis redis;
static char dir[64];

static int group_setup(void **state)
{
    (void)state;
    struct rlimit rl; /* the connection flood needs 10,000 descriptors */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    curl_global_init(CURL_GLOBAL_ALL);
    return th_tempdir("faults-it", dir, sizeof(dir)) == 0 && th_redis_start(&redis) == 0 ? 0
                                                                                         : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    th_redis_stop(&redis, 0);
    return 0;
}

static th_pg pg;

static int pg_setup(void **state)
{
    if (group_setup(state) != 0 || th_pg_start(&pg) != 0)
        return -1;
    th_stack_use_pg(&pg);
    return 0;
}

static int pg_teardown(void **state)
{
    th_stack_use_pg(NULL);
    th_pg_stop(&pg, SIGINT);
    return group_teardown(state);
}

static void wait_for_lock_key(long long item)
{
    assert_int_equal(th_wait_item_locked(&redis, item, 5000), 0);
}

/* 1. kill -9 of a replica while it holds the item's lock: the others wait for
 *    the lease (1 s) to run out, then go on; nothing is lost. */
static void test_crashed_holder_delays_others_by_about_one_lease(void **state)
{
    (void)state;
    th_stack s;
    th_stack_start(&s, dir, &redis, "crash", NULL, NULL, 100000);
    th_bg_reduce holder = {.url = s.r[0].url, .item = s.item, .work_ms = 5000};
    th_bg_reduce_start(&holder);
    wait_for_lock_key(s.item);
    pid_t lg = th_loadgen_start(&s, "crash", s.targets, "3s", "8", "5");
    th_sleep_ms(300);
    th_stockd_stop(&s.r[0], SIGKILL);
    th_loadgen_expect(&s, lg, "crash", 0);
    th_bg_reduce_join(&holder);
    assert_int_equal(holder.status, 0); /* its connection died with it */
    assert_true(th_loadgen_outcome(&s, "crash", "ok") > 0);
    assert_int_equal(th_loadgen_outcome(&s, "crash", "lock_timeout"), 0); /* waits stayed well under 8 s */
    th_stack_stop(&s);
}

/* 2. A replica stops (SIGSTOP) right after its last lease check, before its
 *    write, for longer than the lease; the others take the lock and sell;
 *    then it continues. Fencing must refuse its stale write - and without
 *    fencing the same run must fail, or this test proves nothing. */
static void stalled_holder_scenario(int fencing)
{
    const char *name = fencing ? "stall-fenced" : "stall-unfenced";
    /* only replica 0, the stale writer, runs without fencing in the second case;
     * its long busy timeout makes sure its write is attempted, not timed out */
    const char *flags[] = {"--test-stop-before-write", "--busy-timeout-ms", "20000",
                           fencing ? NULL : "--no-fencing", NULL};
    th_stack s;
    th_stack_start(&s, dir, &redis, name, NULL, flags, 100000);
    th_bg_reduce stale = {.url = s.r[0].url, .item = s.item, .work_ms = 1}; /* not batched */
    th_bg_reduce_start(&stale);
    for (int64_t end = th_now_ms() + 5000; th_proc_state(s.r[0].pid) != 'T';) {
        assert_true(th_now_ms() < end);
        th_sleep_ms(2);
    }
    pid_t lg = th_loadgen_start(&s, name, s.targets, "3s", "4", "0");
    th_sleep_ms(1500); /* past the 1 s lease: the others hold the lock and deduct */
    th_signal(s.r[0].pid, SIGCONT, 0);
    th_bg_reduce_join(&stale);
    if (fencing) {
        th_loadgen_expect(&s, lg, name, 0);
        if (stale.status != 503 || strstr(stale.body, "\"lock_lost\"") == NULL)
            fail_msg("the stale write was not refused by fencing: %ld %s", stale.status,
                     stale.body);
    } else {
        th_loadgen_expect(&s, lg, name, 1); /* the stale write overwrote others' deductions */
        assert_int_equal(stale.status, 200);
    }
    assert_true(th_loadgen_outcome(&s, name, "ok") > 0);
    th_stack_stop(&s);
}

static void test_stalled_holder_is_refused_by_fencing(void **state)
{
    (void)state;
    stalled_holder_scenario(1);
}

static void test_stalled_holder_without_fencing_oversells(void **state)
{
    (void)state;
    stalled_holder_scenario(0);
}

/* 3. Redis restarts without persistence mid-run: 503 while it is down, back
 *    to normal after (fences keep growing: the counter is seeded from time). */
static void test_redis_restart_mid_run(void **state)
{
    (void)state;
    th_stack s;
    th_stack_start(&s, dir, &redis, "redis-restart", NULL, NULL, 100000);
    snprintf(s.targets + strlen(s.targets), sizeof(s.targets) - strlen(s.targets), ",%s",
             s.r[0].url);
    pid_t lg = th_loadgen_start(&s, "redis-restart", s.targets, "4s", "12", "0");
    th_sleep_ms(1000);
    th_redis_stop(&redis, 1);
    th_sleep_ms(1000);
    assert_int_equal(th_redis_start(&redis), 0);
    th_loadgen_expect(&s, lg, "redis-restart", 0);
    assert_true(th_loadgen_outcome(&s, "redis-restart", "redis_unavailable") > 0);
    assert_true(th_loadgen_outcome(&s, "redis-restart", "ok") > 0);
    th_stack_stop(&s);
}

/* 4. Another process holds SQLite's write lock for 1.2 s (busy timeout 300
 *    ms): requests wait or get 503 storage_busy; nothing is half-written. */
static void test_locked_database_mid_run(void **state)
{
    (void)state;
    th_stack s;
    th_stack_start(&s, dir, &redis, "sqlite-busy", NULL, NULL, 100000);
    pid_t lg = th_loadgen_start(&s, "sqlite-busy", s.targets, "3s", "12", "0");
    th_sleep_ms(800);
    sqlite3 *other;
    assert_int_equal(sqlite3_open(s.db, &other), SQLITE_OK);
    sqlite3_busy_timeout(other, 5000);
    assert_int_equal(sqlite3_exec(other, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
    th_sleep_ms(1200);
    sqlite3_exec(other, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close(other);
    th_loadgen_expect(&s, lg, "sqlite-busy", 0);
    assert_true(th_loadgen_outcome(&s, "sqlite-busy", "other_5xx") > 0); /* 503 storage_busy */
    assert_true(th_loadgen_outcome(&s, "sqlite-busy", "ok") > 0);
    th_stack_stop(&s);
}

/* 5. 500 idle keep-alive connections and 20 slow clients trickling a body on
 *    one replica (no limit per address here), plus load on it: it keeps
 *    serving, in bounded memory. */
static void test_idle_and_slow_connections_do_not_starve_the_replica(void **state)
{
    (void)state;
    enum { IDLE = 500, SLOW = 20 };
    const char *flags[] = {"--max-connections-per-ip", "0", NULL};
    th_stack s;
    th_stack_start(&s, dir, &redis, "idle", NULL, flags, 100000);
    long rss_before = th_rss_kb(s.r[0].pid);
    int fds[IDLE + SLOW];
    const char *slow_head = "POST /reduceStock HTTP/1.1\r\nHost: x\r\nContent-Length: 64\r\n\r\n{";
    for (int i = 0; i < IDLE + SLOW; i++) {
        fds[i] = th_connect(s.r[0].port);
        assert_true(fds[i] >= 0);
        if (i >= IDLE)
            assert_true(write(fds[i], slow_head, strlen(slow_head)) > 0);
    }
    pid_t lg = th_loadgen_start(&s, "idle", s.r[0].url, "2s", "16", "0");
    for (int tick = 0; tick < 10; tick++) { /* a byte every 200 ms: never completes */
        for (int i = IDLE; i < IDLE + SLOW; i++)
            assert_true(write(fds[i], " ", 1) == 1);
        th_sleep_ms(200);
    }
    th_loadgen_expect(&s, lg, "idle", 0);
    long rss_after = th_rss_kb(s.r[0].pid);
    print_message("replica RSS with %d open connections: %ld KiB (was %ld KiB)\n", IDLE + SLOW,
                  rss_after, rss_before);
    assert_true(th_loadgen_outcome(&s, "idle", "ok") > 0);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    /* a connection is some kilobytes of libmicrohttpd's and ours, no thread:
     * well under 128 KiB each (sanitizer builds add shadow memory, so only here) */
    assert_true(rss_after - rss_before < (IDLE + SLOW) * 128L);
#endif
    for (int i = 0; i < IDLE + SLOW; i++)
        close(fds[i]);
    th_stack_stop(&s);
}

/* 6. SIGTERM to a replica during load: in-flight requests finish, its locks
 *    are released, later requests are refused at connect; verdict PASS. */
static void test_sigterm_during_load(void **state)
{
    (void)state;
    th_stack s;
    th_stack_start(&s, dir, &redis, "sigterm", NULL, NULL, 100000);
    char all[sizeof(s.targets) + sizeof(s.r[0].url) + 1];
    snprintf(all, sizeof(all), "%s,%s", s.r[0].url, s.targets);
    pid_t lg = th_loadgen_start(&s, "sigterm", all, "3s", "12", "20");
    th_sleep_ms(1000);
    assert_int_equal(th_stockd_stop(&s.r[0], SIGTERM), 0);
    th_loadgen_expect(&s, lg, "sigterm", 0);
    assert_true(th_loadgen_outcome(&s, "sigterm", "ok") > 0);
    char cmd[64];
    char key[DLOCK_KEY_MAX + 1];
    snprintf(cmd, sizeof(cmd), "EXISTS %s", th_item_lock_key(s.item, key));
    th_stack_stop(&s);
    assert_int_equal(th_redis_int(&redis, cmd), 0); /* no lock left behind */
    char *log = th_read_file(s.r[0].log);
    assert_non_null(strstr(log, "msg=\"stopped\""));
    free(log);
}

/* Huge headers and a flood of 10,000 connection attempts: refused or timed
 * out, never a crash, never a change to stock, and the log stays readable. */
static void test_huge_headers_and_connection_flood_are_refused(void **state)
{
    (void)state;
    th_stack s;
    th_stack_start(&s, dir, &redis, "abuse", NULL, NULL, 1000);
    size_t big = 100 * 1000;
    char *req = malloc(big + 256), out[512];
    int n = snprintf(req, 256, "POST /reduceStock HTTP/1.1\r\nHost: x\r\nX-Big: ");
    memset(req + n, 'a', big);
    snprintf(req + n + big, 256, "\r\nContent-Length: 2\r\n\r\n{}");
    assert_true(th_raw(s.r[0].port, req, strlen(req), 0, out, sizeof(out), 5000) > 0);
    assert_non_null(strstr(out, " 431 "));
    free(req);

    enum { FLOOD = 10000 };
    static int fds[FLOOD];
    int opened = 0;
    for (int i = 0; i < FLOOD; i++) /* non-blocking connects: all at once */
        if ((fds[i] = th_connect_nonblocking(s.r[0].port)) >= 0)
            opened++;
    th_sleep_ms(1000);
    for (int i = 0; i < FLOOD; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    print_message("%d of %d connection attempts opened a socket\n", opened, FLOOD);
    th_resp r;
    char url[128];
    snprintf(url, sizeof(url), "%s/health", s.r[0].url);
    for (int64_t end = th_now_ms() + 10000; th_http("GET", url, NULL, &r) != 0 || r.status != 200;) {
        th_resp_free(&r);
        assert_true(th_now_ms() < end); /* it recovers once the flood is gone */
        th_sleep_ms(100);
    }
    th_resp_free(&r);
    assert_int_equal(th_stack_stock(&s), 1000);
    char *log = th_read_file(s.r[0].log);
    int lines = 0;
    for (const char *p = log; (p = strstr(p, "libmicrohttpd")) != NULL; p++)
        lines++;
    free(log);
    assert_true(lines < 50); /* repeats are counted, not printed one by one */
    th_stack_stop(&s);
}

/* 7. Replica 0 talks to Redis through a proxy that can hold a lock command
 *    for 1 s, past its 300 ms Redis timeout; the command still reaches Redis
 *    afterwards. First a lone request: its acquire is held, it gets 503, and
 *    its acquire lands on a free key. Its 30 s lease would lock the item
 *    that long if a late acquire could take the key: in the run that
 *    follows, with more commands held now and then, nobody may time out. */
static void test_late_lock_commands_never_lock_the_item(void **state)
{
    (void)state;
    th_proxy *proxy = th_proxy_start(redis.port);
    assert_non_null(proxy);
    char port[16];
    snprintf(port, sizeof(port), "%d", th_proxy_port(proxy));
    const char *flags[] = {"--redis-port", port, "--redis-timeout-ms", "300", "--lease-ms",
                           "30000", NULL};
    th_stack s;
    th_stack_start(&s, dir, &redis, "late", NULL, flags, 100000);
    th_proxy_delay_next(proxy, "EVALSHA", 1000);
    char body[512];
    assert_int_equal(th_reduce(s.r[0].url, s.item, 1, 0, body, sizeof(body)), 503);
    assert_non_null(strstr(body, "redis_unavailable"));
    th_sleep_ms(1500); /* the held acquire has run by now, on a free key */
    char all[sizeof(s.targets) + sizeof(s.r[0].url) + 1];
    snprintf(all, sizeof(all), "%s,%s", s.r[0].url, s.targets);
    pid_t lg = th_loadgen_start(&s, "late", all, "4s", "12", "0");
    for (int i = 0; i < 6; i++) {
        th_sleep_ms(500);
        th_proxy_delay_next(proxy, "EVALSHA", 1000);
    }
    th_loadgen_expect(&s, lg, "late", 0);
    print_message("%d lock commands held past their timeout\n", th_proxy_delayed(proxy));
    assert_true(th_proxy_delayed(proxy) >= 4);
    assert_true(th_loadgen_outcome(&s, "late", "ok") > 0);
    assert_int_equal(th_loadgen_outcome(&s, "late", "lock_timeout"), 0);
    th_stack_stop(&s);
    th_proxy_stop(proxy);
}

/* One GET /health from 127.0.0.2; returns how long the answer took (ms), or
 * -1 when there was none. */
static long health_from_another_address(int port)
{
    char out[1024];
    int64_t t0 = th_now_ms();
    int fd = th_connect_from("127.0.0.2", port);
    if (fd < 0)
        return -1;
    int n = th_exchange(fd, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", out, sizeof(out),
                        2000 * TH_SLOWER);
    close(fd);
    return n > 0 && strstr(out, " 200 ") ? (long)(th_now_ms() - t0) : -1;
}

/* 8. 1000 sockets from 127.0.0.1 trickle a request's headers, a byte every
 *    500 ms, at replica 0 (600 connections at most, 200 per address, 3 s to
 *    send a request): a client at 127.0.0.2 is answered within 1 s
 *    throughout (under a sanitizer, which makes each of the first 200
 *    threads dear to start, the first look only needs an answer), the trickling ones are closed at their deadline, and the
 *    other replicas' load passes. */
static void test_slow_senders_from_one_address_cannot_lock_others_out(void **state)
{
    (void)state;
    enum { SLOW = 1000 };
    const char *flags[] = {"--max-connections", "600", "--max-connections-per-ip", "200",
                           "--request-timeout-ms", "3000", NULL};
    th_stack s;
    th_stack_start(&s, dir, &redis, "slowloris", NULL, flags, 100000);
    static int fds[SLOW];
    for (int i = 0; i < SLOW; i++)
        fds[i] = th_connect_nonblocking(s.r[0].port);
    pid_t lg = th_loadgen_start(&s, "slowloris", s.targets, "5s", "8", "0");
    const char *head = "GET /health HTTP/1.1\r\nX-Slow: ";
    long worst = 0;
    for (int tick = 0; tick < 10; tick++) {
        for (int i = 0; i < SLOW; i++)
            if (fds[i] >= 0 && send(fds[i], tick ? "a" : head, tick ? 1 : strlen(head),
                                    MSG_NOSIGNAL) < 0)
                close(fds[i]), fds[i] = -1; /* refused, or closed at its deadline */
        long ms = health_from_another_address(s.r[0].port);
        /* at tick 0 the replica starts the first 200 connections' threads:
         * under a sanitizer, several times dearer each, an answer is enough */
        long bound = (tick == 0 && TH_SLOWER > 1 ? 2000 : 1000) * TH_SLOWER;
        if (ms < 0 || ms > bound)
            fail_msg("GET /health from 127.0.0.2 took %ld ms at tick %d", ms, tick);
        worst = ms > worst ? ms : worst;
        th_sleep_ms(500);
    }
    th_loadgen_expect(&s, lg, "slowloris", 0);
    int open = 0;
    for (int i = 0; i < SLOW; i++)
        if (fds[i] >= 0)
            open++, close(fds[i]);
    double reaped = th_metric(s.r[0].url, "stockd_http_deadline_closed_total");
    print_message("/health from 127.0.0.2: worst %ld ms; %d of %d slow sockets still open; "
                  "%.0f closed at their deadline\n", worst, open, SLOW, reaped);
    assert_true(reaped >= 100); /* those that got in were cut off after 3 s */
    assert_int_equal(open, 0);
    th_stack_stop(&s);
}

/* 9. Redis is down (nothing listens on its port) and 800 requests hit
 *    replica 0: each fails fast, and since no command reached Redis there is
 *    nothing to undo; afterwards the replica is idle (CPU, connection
 *    attempts) instead of retrying. Then Redis comes up and a run passes. */
static void test_a_burst_against_a_dead_redis_leaves_the_replica_idle(void **state)
{
    (void)state;
    th_redis later = {.port = th_free_port()};
    char port[16];
    snprintf(port, sizeof(port), "%d", later.port);
    const char *flags[] = {"--redis-port", port, "--lease-ms", "30000", NULL};
    th_stack s;
    th_stack_start(&s, dir, &redis, "dead-redis", NULL, flags, 100000);
    static char bin[256], item[32], out[160];
    snprintf(bin, sizeof(bin), "%s/loadgen", th_build_dir());
    snprintf(item, sizeof(item), "%lld", s.item);
    snprintf(out, sizeof(out), "%s/dead-redis.out", dir);
    const char *burst[] = {bin, "--target", s.r[0].url, "--item", item, "-n", "800", "-c", "32",
                           NULL};
    assert_int_equal(th_run(burst, out, 60000), 0);
    th_sleep_ms(200);
    const char *connects = "stockd_lock_redis_connects_total";
    double c0 = th_metric(s.r[0].url, connects);
    long cpu0 = th_cpu_ms(s.r[0].pid);
    th_sleep_ms(2000);
    double c1 = th_metric(s.r[0].url, connects);
    long cpu1 = th_cpu_ms(s.r[0].pid);
    print_message("after the burst: %.1f connection attempts/s, %ld ms CPU in 2 s, %.0f "
                  "tokens given to clean-up\n", (c1 - c0) / 2, cpu1 - cpu0,
                  th_metric(s.r[0].url, "stockd_lock_orphaned_total"));
    assert_true((c1 - c0) / 2 < 10);  /* the subscriber's reconnects: 4 a second */
    assert_true(cpu1 - cpu0 < 100);   /* under 5 % of a core */
    assert_true(th_metric(s.r[0].url, "stockd_lock_orphaned_total") == 0);

    assert_int_equal(th_redis_start(&later), 0);
    pid_t lg = th_loadgen_start(&s, "dead-redis", s.r[0].url, "2s", "8", "0");
    th_loadgen_expect(&s, lg, "dead-redis", 0);
    assert_true(th_loadgen_outcome(&s, "dead-redis", "ok") > 0);
    th_stack_stop(&s);
    th_redis_stop(&later, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crashed_holder_delays_others_by_about_one_lease),
        cmocka_unit_test(test_stalled_holder_is_refused_by_fencing),
        cmocka_unit_test(test_stalled_holder_without_fencing_oversells),
        cmocka_unit_test(test_redis_restart_mid_run),
        cmocka_unit_test(test_locked_database_mid_run),
        cmocka_unit_test(test_idle_and_slow_connections_do_not_starve_the_replica),
        cmocka_unit_test(test_sigterm_during_load),
        cmocka_unit_test(test_huge_headers_and_connection_flood_are_refused),
        cmocka_unit_test(test_late_lock_commands_never_lock_the_item),
        cmocka_unit_test(test_slow_senders_from_one_address_cannot_lock_others_out),
        cmocka_unit_test(test_a_burst_against_a_dead_redis_leaves_the_replica_idle),
    };
    /* the scenarios of a lock holder that fails, again on PostgreSQL */
    const struct CMUnitTest on_pg[] = {
        cmocka_unit_test(test_crashed_holder_delays_others_by_about_one_lease),
        cmocka_unit_test(test_stalled_holder_is_refused_by_fencing),
        cmocka_unit_test(test_stalled_holder_without_fencing_oversells),
    };
    return cmocka_run_group_tests_name("faults", tests, group_setup, group_teardown) +
           cmocka_run_group_tests_name("faults on PostgreSQL", on_pg, pg_setup, pg_teardown);
}
