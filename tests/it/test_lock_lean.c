/* test_lock_lean.c - the lock's cheap paths against a real, private
 * redis-server: an uncontended acquire and release that skip the queue's
 * work, fences that keep growing whatever Redis lost or brought back, and
 * a release that wakes waiters only when someone was in line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lock/dlock.h"
#include "tests/support/harness.h"
#include "tests/support/lockkit.h"

static th_redis redis;
static dlock_client *client;

static dlock_opts opts(int wait_ms)
{
    dlock_opts o;
    dlock_opts_defaults(&o);
    o.lease_ms = 5000;
    o.wait_ms = wait_ms;
    o.retry_ms = 10;
    return o;
}

/* Calls of every command so far (INFO commandstats, which counts the
 * commands inside scripts too): the total, and name's. */
static long long commands(const char *name, long long *total)
{
    redisContext *rc = th_redis_connect(&redis);
    redisReply *r = redisCommand(rc, "INFO commandstats");
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    char needle[64];
    snprintf(needle, sizeof(needle), "cmdstat_%s:calls=", name);
    const char *p = strstr(r->str, needle);
    long long calls = p ? atoll(p + strlen(needle)) : 0;
    *total = 0;
    for (p = r->str; (p = strstr(p, ":calls=")) != NULL; p += 7)
        *total += atoll(p + 7);
    freeReplyObject(r);
    redisFree(rc);
    return calls;
}

static void pair(const char *key)
{
    dlock_opts o = opts(0);
    dlock_handle *h;
    assert_int_equal(dlock_acquire(client, key, &o, &h), DLOCK_OK);
    assert_int_equal(dlock_release(h), DLOCK_OK);
}

/* With nobody in line and nothing given up, a pair is two scripts that do
 * no queue work and publish nothing: 9 commands, where the full path spent
 * 14 (the gone set, the queue, the counter's INCR and PEXPIRE, a PUBLISH). */
static void test_an_uncontended_pair_takes_the_lean_path(void **state)
{
    (void)state;
    pair("t:lean:warm"); /* SCRIPT LOAD out of the way */
    pair("t:lean");      /* and the key's fence counter exists, as in a steady state */
    long long before, after;
    long long evalsha = commands("evalsha", &before), publish = commands("publish", &before);
    long long zscore = commands("zscore", &before);
    pair("t:lean");
    assert_int_equal(commands("evalsha", &after) - evalsha, 2);
    assert_int_equal(commands("publish", &after) - publish, 0);
    assert_int_equal(commands("zscore", &after) - zscore, 0);
    long long used = after - before - 3; /* the INFOs of the three reads since before */
    print_message("commands for one uncontended pair: %lld\n", used);
    assert_true(used <= 9);
}

/* FLUSHALL loses the counter and SCRIPT FLUSH the scripts (as a restart
 * without persistence does): the next fence still comes out larger, from
 * Redis's clock, and the scripts are sent again. */
static void test_fences_grow_after_flushall_and_script_flush(void **state)
{
    (void)state;
    dlock_opts o = opts(0);
    dlock_handle *h;
    int64_t last = 0;
    for (int round = 0; round < 3; round++) {
        assert_int_equal(dlock_acquire(client, "t:flush", &o, &h), DLOCK_OK);
        if (dlock_fence(h) <= last)
            fail_msg("round %d: fence %lld after %lld", round, (long long)dlock_fence(h),
                     (long long)last);
        last = dlock_fence(h);
        assert_int_equal(dlock_release(h), DLOCK_OK);
        assert_int_equal(th_redis_int(&redis, "FLUSHALL"), 0);
        assert_int_equal(th_redis_int(&redis, "SCRIPT FLUSH"), 0);
    }
}

/* A counter ahead of Redis's clock (a burst of more than a million
 * acquisitions a second, or a clock that went back) is counted on from,
 * one at a time: the lean path's SET ... GET must not pull it back to the
 * clock. */
static void test_fence_counts_on_from_a_counter_ahead_of_the_clock(void **state)
{
    (void)state;
    dlock_names names;
    dlock_names_of("t:ahead", &names);
    long long ahead = th_redis_now_us(&redis) + 1000000000000LL; /* 11.6 days ahead */
    assert_int_equal(th_redis_int(&redis, "SET %s %lld", names.fence, ahead), 0);
    dlock_opts o = opts(0);
    dlock_handle *h;
    for (int i = 1; i <= 3; i++) {
        assert_int_equal(dlock_acquire(client, "t:ahead", &o, &h), DLOCK_OK);
        assert_int_equal(dlock_fence(h), ahead + i);
        assert_int_equal(dlock_release(h), DLOCK_OK);
        assert_int_equal(th_redis_int(&redis, "GET %s", names.fence), ahead + i);
        assert_true(th_redis_int(&redis, "PTTL %s", names.fence) > 0); /* still expires */
    }
}

/* A release wakes the key's waiters (PUBLISH) only when someone was in
 * line: a waiter queues before it listens, so nobody else needs it. A waiter
 * found dead in line still gets its "" - it may be only slow. */
static void test_a_release_publishes_only_when_someone_was_in_line(void **state)
{
    (void)state;
    long long total;
    pair("t:quiet");
    long long publish = commands("publish", &total);
    pair("t:quiet");
    assert_int_equal(commands("publish", &total) - publish, 0);

    dlock_opts o = opts(0);
    dlock_handle *h;
    assert_int_equal(dlock_acquire(client, "t:quiet", &o, &h), DLOCK_OK);
    dlock_names names;
    dlock_names_of("t:quiet", &names);
    const char *slow = "slow-waiter-token-0000000000000000";
    th_redis_int(&redis, "ZADD %s 1 %s", names.queue, slow);
    th_redis_int(&redis, "HSET %s %s 1", names.alive, slow); /* its deadline passed long ago */
    publish = commands("publish", &total);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    assert_int_equal(commands("publish", &total) - publish, 1);
    assert_int_equal(th_redis_int(&redis, "EXISTS %s", names.queue), 0); /* dropped from line */
    assert_int_equal(th_redis_int(&redis, "EXISTS t:quiet"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_an_uncontended_pair_takes_the_lean_path),
        cmocka_unit_test(test_fences_grow_after_flushall_and_script_flush),
        cmocka_unit_test(test_fence_counts_on_from_a_counter_ahead_of_the_clock),
        cmocka_unit_test(test_a_release_publishes_only_when_someone_was_in_line),
    };
    th_lock_suite(&redis, &client);
    int failed = cmocka_run_group_tests_name("lock, lean paths", tests, th_lock_group_setup,
                                             th_lock_group_teardown);
    th_redis_stop(&redis, 0);
    return failed;
}
