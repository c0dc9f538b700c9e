/* test_failover.c - Redis servers failing under load, each scenario a
 * loadgen run across three stockd replicas that must end in PASS: a quorum
 * of three servers losing one (no redis_unavailable at all), losing a
 * majority (503 while it is gone, never an oversell), and getting one back
 * empty; then one primary with a replica, failed over while a holder's lock
 * had not been replicated: the new primary grants the lock again, and only
 * fencing keeps the stale holder from overwriting - without it the same run
 * fails, or the test would prove nothing. */
#include <jansson.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <curl/curl.h>

#include "tests/support/calls.h"
#include "tests/support/harness.h"
#include "tests/support/stack.h"

#define SERVERS 3

static th_redis redis[SERVERS];
static char dir[64], servers[128]; /* "127.0.0.1:p1,..." */

static int group_setup(void **state)
{
    (void)state;
    curl_global_init(CURL_GLOBAL_ALL);
    if (th_tempdir("failover-it", dir, sizeof(dir)) != 0)
        return -1;
    for (int i = 0; i < SERVERS; i++) {
        if (th_redis_start(&redis[i]) != 0)
            return -1;
        snprintf(servers + strlen(servers), sizeof(servers) - strlen(servers), "%s127.0.0.1:%d",
                 i ? "," : "", redis[i].port);
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    for (int i = 0; i < SERVERS; i++)
        if (redis[i].pid)
            th_redis_stop(&redis[i], 0);
    return 0;
}

/* Three replicas using all three servers. */
static void quorum_stack(th_stack *s, const char *name)
{
    for (int i = 0; i < SERVERS; i++)
        if (redis[i].pid == 0)
            assert_int_equal(th_redis_start(&redis[i]), 0);
    /* Losing one server leaves no spare: a quorum then needs both of the
     * others' answers within --redis-timeout-ms, which a busy machine can
     * miss; the timeout and the lease (at least 6 of them) scale with it */
    char lease[16], timeout[16];
    snprintf(lease, sizeof(lease), "%d", 1000 * TH_SLOWER);
    snprintf(timeout, sizeof(timeout), "%d", 150 * TH_SLOWER);
    const char *all[] = {"--redis", servers, "--lease-ms", lease, "--redis-timeout-ms", timeout,
                         NULL};
    th_stack_start(s, dir, &redis[0], name, all, NULL, 100000);
}

/* Every replica, loadgen's targets and replica 0. */
static void all_targets(const th_stack *s, char *out, size_t size)
{
    snprintf(out, size, "%s,%s", s->r[0].url, s->targets);
}

static void test_one_server_killed_mid_run_changes_nothing(void **state)
{
    (void)state;
    th_stack s;
    char targets[600];
    quorum_stack(&s, "kill-one");
    all_targets(&s, targets, sizeof(targets));
    pid_t lg = th_loadgen_start(&s, "kill-one", targets, "4s", "12", "0");
    th_sleep_ms(1000);
    th_redis_stop(&redis[1], 1);
    th_sleep_ms(500);
    json_t *h = th_call(&s.r[0], "GET", "/health", NULL, 200);
    assert_string_equal(th_jstr(h, "status"), "degraded");
    char port[16];
    snprintf(port, sizeof(port), ":%d", redis[1].port);
    assert_non_null(strstr(th_jstr(h, "redis"), port)); /* it names the server */
    json_decref(h);
    th_loadgen_expect(&s, lg, "kill-one", 0);
    assert_int_equal(th_loadgen_outcome(&s, "kill-one", "redis_unavailable"), 0);
    assert_true(th_loadgen_outcome(&s, "kill-one", "ok") > 0);
    th_stack_stop(&s);
}

static void test_a_majority_killed_gives_503_then_recovers(void **state)
{
    (void)state;
    th_stack s;
    char targets[600];
    quorum_stack(&s, "kill-two");
    all_targets(&s, targets, sizeof(targets));
    pid_t lg = th_loadgen_start(&s, "kill-two", targets, "5s", "12", "0");
    th_sleep_ms(1000);
    th_redis_stop(&redis[0], 1);
    th_redis_stop(&redis[2], 1);
    th_sleep_ms(300);
    json_t *h = th_call(&s.r[1], "GET", "/health", NULL, 503);
    assert_string_equal(th_jstr(h, "status"), "unavailable");
    json_decref(h);
    th_sleep_ms(1000);
    assert_int_equal(th_redis_start(&redis[0]), 0); /* back, empty */
    assert_int_equal(th_redis_start(&redis[2]), 0);
    th_loadgen_expect(&s, lg, "kill-two", 0);
    assert_true(th_loadgen_outcome(&s, "kill-two", "redis_unavailable") > 0);
    assert_true(th_loadgen_outcome(&s, "kill-two", "ok") > 0);
    json_decref(th_call(&s.r[1], "GET", "/health", NULL, 200));
    pid_t after = th_loadgen_start(&s, "after-two", targets, "1s", "12", "0");
    th_loadgen_expect(&s, after, "after-two", 0); /* back to normal */
    assert_int_equal(th_loadgen_outcome(&s, "after-two", "redis_unavailable"), 0);
    th_stack_stop(&s);
}

static void test_a_server_restarted_empty_mid_run(void **state)
{
    (void)state;
    th_stack s;
    char targets[600];
    quorum_stack(&s, "empty");
    all_targets(&s, targets, sizeof(targets));
    pid_t lg = th_loadgen_start(&s, "empty", targets, "4s", "12", "0");
    th_sleep_ms(1000);
    th_redis_stop(&redis[2], 1);
    th_sleep_ms(700);
    assert_int_equal(th_redis_start(&redis[2]), 0); /* no keys, no counters, no scripts */
    th_sleep_ms(700);
    th_redis_stop(&redis[0], 1); /* and now another: the restarted one must carry its part */
    th_loadgen_expect(&s, lg, "empty", 0);
    assert_int_equal(th_loadgen_outcome(&s, "empty", "redis_unavailable"), 0);
    assert_true(th_loadgen_outcome(&s, "empty", "ok") > 0);
    th_stack_stop(&s);
}

/* The failover. One Redis primary with a replica; the replicas of stockd
 * reach the primary through a proxy (their "Redis address"). The replica of
 * Redis is cut off, then replica 0 takes the item's lock and stops
 * (SIGSTOP) before its write: the lock never reaches the replica. Then the
 * primary dies, its replica is promoted (REPLICAOF NO ONE) and the proxy
 * points at it: the new primary has no lock, grants it to the others, and
 * they sell. Replica 0 continues with its lock of 10 s still "valid". */
static void failover_scenario(int fencing)
{
    const char *name = fencing ? "failover-fenced" : "failover-unfenced";
    th_redis primary = {0}, replica = {0};
    assert_int_equal(th_redis_start(&primary), 0);
    assert_int_equal(th_redis_start(&replica), 0);
    /* a diskless full sync would wait 5 s for more replicas first (the default) */
    assert_int_equal(th_redis_int(&primary, "CONFIG SET repl-diskless-sync-delay 0"), 0);
    assert_int_equal(th_redis_int(&replica, "REPLICAOF 127.0.0.1 %d", primary.port), 0);
    char info[4096];
    for (int64_t end = th_now_ms() + 10000;;) {
        redisContext *c = th_redis_connect(&replica);
        redisReply *r = redisCommand(c, "INFO replication");
        snprintf(info, sizeof(info), "%s", r && r->str ? r->str : "");
        freeReplyObject(r);
        redisFree(c);
        if (strstr(info, "master_link_status:up"))
            break;
        assert_true(th_now_ms() < end);
        th_sleep_ms(20);
    }
    th_proxy *proxy = th_proxy_start(primary.port);
    assert_non_null(proxy);
    char port[16];
    snprintf(port, sizeof(port), "%d", th_proxy_port(proxy));
    const char *all[] = {"--redis-port", port, "--lease-ms", "10000", NULL};
    const char *first[] = {"--test-stop-before-write", "--busy-timeout-ms", "20000",
                           fencing ? NULL : "--no-fencing", NULL};
    th_stack s;
    th_stack_start(&s, dir, &primary, name, all, first, 100000);

    /* from here on the primary's writes stay its own: the replica can't read
     * (stopped) and the primary closes its link (what it had sent before was
     * in the kernel's buffers, and would still arrive) */
    th_signal(replica.pid, SIGSTOP, 0);
    assert_int_equal(th_redis_int(&primary, "CLIENT KILL TYPE replica"), 1);
    th_bg_reduce stale = {.url = s.r[0].url, .item = s.item, .work_ms = 1}; /* not batched */
    th_bg_reduce_start(&stale);
    for (int64_t end = th_now_ms() + 5000; th_proc_state(s.r[0].pid) != 'T';) {
        assert_true(th_now_ms() < end);
        th_sleep_ms(2);
    }
    pid_t lg = th_loadgen_start(&s, name, s.targets, "4s", "4", "0");
    th_sleep_ms(300);
    th_redis_stop(&primary, 1); /* the failover */
    th_signal(replica.pid, SIGCONT, 0);
    assert_int_equal(th_redis_int(&replica, "REPLICAOF NO ONE"), 0);
    th_proxy_redirect(proxy, replica.port);
    th_sleep_ms(1500); /* the others get the lock from the new primary, and sell */
    th_signal(s.r[0].pid, SIGCONT, 0);
    th_bg_reduce_join(&stale);
    print_message("the stale holder's answer: %ld %s\n", stale.status, stale.body);
    if (fencing) {
        th_loadgen_expect(&s, lg, name, 0);
        if (stale.status != 503 || strstr(stale.body, "\"lock_lost\"") == NULL)
            fail_msg("the stale write was not refused by fencing: %ld %s", stale.status,
                     stale.body);
    } else {
        th_loadgen_expect(&s, lg, name, 1); /* its write overwrote the others' deductions */
        assert_int_equal(stale.status, 200);
    }
    assert_true(th_loadgen_outcome(&s, name, "ok") > 0);
    char path[160];
    snprintf(path, sizeof(path), "%s/%s.out", dir, name);
    char *out = th_read_file(path), *verdict = out ? strstr(out, "VERDICT") : NULL;
    print_message("loadgen: %s\n", verdict ? verdict : "(no verdict)");
    free(out);
    th_stack_stop(&s);
    th_proxy_stop(proxy);
    th_redis_stop(&replica, 0);
}

static void test_failover_to_a_replica_that_missed_the_lock_is_caught_by_fencing(void **state)
{
    (void)state;
    failover_scenario(1);
}

static void test_the_same_failover_without_fencing_oversells(void **state)
{
    (void)state;
    failover_scenario(0);
}

static void test_a_bad_server_list_stops_start_up(void **state)
{
    (void)state;
    char bin[256], out[256];
    snprintf(bin, sizeof(bin), "%s/stockd", th_build_dir());
    snprintf(out, sizeof(out), "%s/bad-list.out", dir);
    const char *argv[] = {bin, "--redis", "127.0.0.1:1,127.0.0.1:x", NULL};
    assert_int_equal(th_run(argv, out, 10000), 2);
    char *text = th_read_file(out);
    assert_non_null(strstr(text, "bad Redis server \"127.0.0.1:x\""));
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_server_killed_mid_run_changes_nothing),
        cmocka_unit_test(test_a_majority_killed_gives_503_then_recovers),
        cmocka_unit_test(test_a_server_restarted_empty_mid_run),
        cmocka_unit_test(test_failover_to_a_replica_that_missed_the_lock_is_caught_by_fencing),
        cmocka_unit_test(test_the_same_failover_without_fencing_oversells),
        cmocka_unit_test(test_a_bad_server_list_stops_start_up),
    };
    return cmocka_run_group_tests_name("failover", tests, group_setup, group_teardown);
}
