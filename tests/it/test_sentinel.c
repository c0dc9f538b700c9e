/* test_sentinel.c - the lock on a primary watched by Sentinel (one primary,
 * two replicas, three real redis-sentinel processes): libdlock finds the
 * primary, follows a failover without a restart, and says clearly when the
 * master name is wrong or no Sentinel answers; stockd replicas under load
 * keep every verdict PASS while the primary is killed, or stopped past
 * down-after and then comes back as a replica. How long the service
 * answered 503 during each failover is printed (lock/README.md records it). */
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

#include "lock/dlock.h"
#include "tests/support/harness.h"
#include "tests/support/sentinel.h"
#include "tests/support/stack.h"

#define FAILOVER_BOUND_MS (20000 * TH_SLOWER) /* a hang, not a timing claim */

static char dir[64];

static int group_setup(void **state)
{
    (void)state;
    if (!th_have("redis-sentinel")) /* `make deps` installs it; an older checkout may lack it */
        return 0;
    return th_tempdir("sentinel-test", dir, sizeof(dir));
}

static dlock_client *client_on(const char *sentinels, const char *master)
{
    dlock_config cfg;
    dlock_config_defaults(&cfg);
    assert_int_equal(dlock_config_sentinels(&cfg, sentinels), DLOCK_OK);
    cfg.master_name = master;
    cfg.connect_timeout_ms = 200;
    cfg.command_timeout_ms = 300;
    dlock_client *c;
    assert_int_equal(dlock_client_new(&cfg, &c), DLOCK_OK);
    return c;
}

static dlock_opts quick(int lease_ms, int wait_ms)
{
    dlock_opts o;
    dlock_opts_defaults(&o);
    o.lease_ms = lease_ms;
    o.wait_ms = wait_ms;
    o.retry_ms = 20;
    return o;
}

/* Acquires key, tells whether data server r holds it while held, releases;
 * the fence, or -1 when it could not be had. */
static int64_t lock_on(dlock_client *c, const char *key, const th_redis *r, int *held_there)
{
    dlock_opts o = quick(2000, 0);
    dlock_handle *h;
    if (dlock_acquire(c, key, &o, &h) != DLOCK_OK)
        return -1;
    *held_there = th_redis_int(r, "EXISTS %s", key) == 1;
    int64_t fence = dlock_fence(h);
    dlock_release(h);
    return fence;
}

static void test_the_client_finds_the_primary_and_follows_its_failover(void **state)
{
    (void)state;
    if (!th_have("redis-sentinel"))
        th_skip("redis-sentinel is not installed (make deps)");
    th_sentinels s;
    th_sentinels_start(&s);
    dlock_client *c = client_on(s.list, TH_SENTINEL_MASTER);
    assert_int_equal(dlock_ping(c), DLOCK_OK);
    dlock_node_info info;
    dlock_node_info_read(c, 0, &info);
    assert_string_equal(info.name, "sentinel:" TH_SENTINEL_MASTER);
    int there = 0;
    int64_t before = lock_on(c, "sentinel:{1}", &s.data[0], &there);
    assert_true(before > 0);
    assert_true(there); /* on the first primary */

    th_redis_stop(&s.data[0], 1);
    int64_t killed = th_now_ms(), fence = -1;
    while ((fence = lock_on(c, "sentinel:{1}", &s.data[0], &there)) < 0) {
        assert_true(th_now_ms() - killed < FAILOVER_BOUND_MS);
        th_sleep_ms(20);
    }
    int64_t took = th_now_ms() - killed;
    int now = th_sentinels_primary(&s);
    assert_true(now > 0);
    assert_true(lock_on(c, "sentinel:{1}", &s.data[now], &there) > before);
    assert_true(there); /* on the new primary, the same client, no restart */
    print_message("libdlock: first lock on the new primary %lld ms after the kill "
                  "(down-after %d ms)\n", (long long)took, TH_SENTINEL_DOWN_MS);
    assert_true(fence > 0);
    dlock_client_free(c);
    th_sentinels_stop(&s);
}

static void test_a_wrong_master_name_or_no_sentinel_is_a_clear_error(void **state)
{
    (void)state;
    if (!th_have("redis-sentinel"))
        th_skip("redis-sentinel is not installed (make deps)");
    th_sentinels s;
    th_sentinels_start(&s);
    dlock_client *c = client_on(s.list, "nosuch");
    assert_int_equal(dlock_ping(c), DLOCK_ERR_REDIS);
    if (strstr(dlock_errstr(), "knows no master named \"nosuch\"") == NULL)
        fail_msg("unclear error: %s", dlock_errstr());
    dlock_client_free(c);
    th_sentinels_stop(&s);

    char nobody[32];
    snprintf(nobody, sizeof(nobody), "127.0.0.1:%d", th_free_port());
    c = client_on(nobody, TH_SENTINEL_MASTER);
    assert_int_equal(dlock_ping(c), DLOCK_ERR_REDIS);
    if (strstr(dlock_errstr(), "no Sentinel named the primary") == NULL ||
        strstr(dlock_errstr(), nobody) == NULL)
        fail_msg("unclear error: %s", dlock_errstr());
    dlock_client_free(c);
}

static void test_sentinel_settings_are_checked(void **state)
{
    (void)state;
    dlock_config cfg;
    dlock_config_defaults(&cfg);
    assert_int_equal(dlock_config_sentinels(&cfg, "a,b:26380,[::1]:7000"), DLOCK_OK);
    assert_int_equal(cfg.sentinels, 3);
    assert_int_equal(cfg.sentinel[0].port, 26379); /* Sentinel's port when left out */
    assert_int_equal(dlock_config_sentinels(&cfg, "a:x"), DLOCK_ERR_INVALID);
    dlock_client *c = NULL;
    assert_int_equal(dlock_client_new(&cfg, &c), DLOCK_ERR_INVALID); /* no master name */
    assert_non_null(strstr(dlock_errstr(), "master name"));
    cfg.master_name = "m";
    assert_int_equal(dlock_config_nodes(&cfg, "a:1,b:2,c:3"), DLOCK_OK);
    assert_int_equal(dlock_client_new(&cfg, &c), DLOCK_ERR_INVALID);
    assert_non_null(strstr(dlock_errstr(), "exclude each other"));
    assert_null(c);
}

/* How long the service answered 503 (any 503 outcome) during the run: from
 * the first timeline bucket with one to the end of the last, in ms. */
static double unavailable_ms(const th_stack *st, const char *name)
{
    static const char *const kinds[] = {"redis_unavailable", "lock_lost", "lock_timeout",
                                        "lock_interrupted", NULL};
    char path[160];
    snprintf(path, sizeof(path), "%s/%s.json", st->dir, name);
    json_t *j = json_load_file(path, 0, NULL);
    json_t *tl = json_object_get(j, "timeline");
    double width = json_number_value(json_object_get(tl, "bucketMs"));
    long first = -1, last = -1;
    for (int k = 0; kinds[k]; k++) {
        json_t *arr = json_object_get(json_object_get(tl, "outcomes"), kinds[k]);
        for (size_t i = 0; i < json_array_size(arr); i++)
            if (json_integer_value(json_array_get(arr, i)) > 0) {
                first = first < 0 || (long)i < first ? (long)i : first;
                last = (long)i > last ? (long)i : last;
            }
    }
    json_decref(j);
    return first < 0 ? 0 : (double)(last - first + 1) * width;
}

/* Three stockd replicas on the Sentinel-watched primary under load; the
 * primary fails (fault: SIGKILL, or SIGSTOP past down-after, SIGCONT once
 * failed over). The verdict must be PASS. */
static void failover_under_load(const char *name, int sig)
{
    th_sentinels s;
    th_sentinels_start(&s);
    const char *all[] = {"--redis-sentinel", s.list, "--redis-master", TH_SENTINEL_MASTER, NULL};
    th_stack st;
    th_stack_start(&st, dir, NULL, name, all, NULL, 100000);
    char targets[512];
    snprintf(targets, sizeof(targets), "%s,%s", st.r[0].url, st.targets);
    pid_t lg = th_loadgen_start(&st, name, targets, "7s", "12", "0");
    th_sleep_ms(1500);
    int64_t failed = th_now_ms();
    if (sig == SIGKILL)
        th_redis_stop(&s.data[0], 1);
    else
        th_signal(s.data[0].pid, SIGSTOP, 0);
    int now = th_sentinels_wait_failover(&s, 0, FAILOVER_BOUND_MS);
    assert_true(now > 0);
    int64_t switched = th_now_ms() - failed;
    if (sig == SIGSTOP) {
        th_signal(s.data[0].pid, SIGCONT, 0);
        for (int64_t end = th_now_ms() + FAILOVER_BOUND_MS;; th_sleep_ms(50)) {
            redisContext *c = th_redis_connect(&s.data[0]);
            redisReply *r = c && !c->err ? redisCommand(c, "ROLE") : NULL;
            int replica = r && r->type == REDIS_REPLY_ARRAY &&
                          strcmp(r->element[0]->str, "slave") == 0;
            freeReplyObject(r);
            redisFree(c);
            if (replica)
                break; /* Sentinel made it a replica of the new primary */
            assert_true(th_now_ms() < end);
        }
    }
    th_loadgen_expect(&st, lg, name, 0);
    assert_true(th_loadgen_outcome(&st, name, "ok") > 0);
    print_message("%s: Sentinel switched after %lld ms; 503s for %.0f ms of the run "
                  "(lock_lost %lld, redis_unavailable %lld, lock_timeout %lld, ok %lld)\n",
                  name, (long long)switched, unavailable_ms(&st, name),
                  th_loadgen_outcome(&st, name, "lock_lost"),
                  th_loadgen_outcome(&st, name, "redis_unavailable"),
                  th_loadgen_outcome(&st, name, "lock_timeout"),
                  th_loadgen_outcome(&st, name, "ok"));
    char path[160];
    snprintf(path, sizeof(path), "%s/%s.out", dir, name);
    char *out = th_read_file(path), *verdict = out ? strstr(out, "VERDICT") : NULL;
    print_message("loadgen: %s\n", verdict ? verdict : "(no verdict)");
    free(out);
    th_stack_stop(&st);
    th_sentinels_stop(&s);
}

static void test_stockd_follows_a_killed_primary_under_load(void **state)
{
    (void)state;
    if (!th_have("redis-sentinel"))
        th_skip("redis-sentinel is not installed (make deps)");
    failover_under_load("sentinel-kill", SIGKILL);
}

static void test_stockd_follows_a_primary_stopped_past_down_after(void **state)
{
    (void)state;
    if (!th_have("redis-sentinel"))
        th_skip("redis-sentinel is not installed (make deps)");
    failover_under_load("sentinel-stop", SIGSTOP);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sentinel_settings_are_checked),
        cmocka_unit_test(test_the_client_finds_the_primary_and_follows_its_failover),
        cmocka_unit_test(test_a_wrong_master_name_or_no_sentinel_is_a_clear_error),
        cmocka_unit_test(test_stockd_follows_a_killed_primary_under_load),
        cmocka_unit_test(test_stockd_follows_a_primary_stopped_past_down_after),
    };
    return cmocka_run_group_tests_name("sentinel", tests, group_setup, NULL);
}
