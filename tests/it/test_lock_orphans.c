/* test_lock_orphans.c - acquires whose reply never came, against a real,
 * private redis-server: the script may still run, now or much later, and
 * the client's clean-up thread (lock/orphans.c) must give its token up so
 * that the key is never left held by nobody. In both wait modes. */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "lock/dlock.h"
#include "tests/support/harness.h"
#include "tests/support/lockkit.h"

static th_redis redis;
static dlock_client *client;
static int wait_mode;

static dlock_opts opts(int lease_ms, int wait_ms)
{
    return th_lock_opts(lease_ms, wait_ms, wait_mode);
}

/* The group's own key, so that one mode's gone marks are not the other's. */
static const char *mode_key(char *buf, size_t size, const char *name)
{
    snprintf(buf, size, "%s:%d", name, wait_mode);
    return buf;
}

/* Redis is stopped while an acquire is on its way; the client gives up after
 * its 200 ms command timeout and hands the token to its clean-up thread,
 * whose give-back Redis can't answer either. Resumed, Redis runs the
 * acquire first (it came first): the key is taken for a 30 s lease by a
 * token nobody holds, until the give-back after it releases it. That the
 * stopped script did run is checked (its fence), so that the test can't
 * pass by the script never running. */
static void test_an_acquire_run_after_its_timeout_is_released_by_its_give_back(void **state)
{
    (void)state;
    char key[32];
    mode_key(key, sizeof(key), "t:orphan");
    dlock_names names;
    dlock_names_of(key, &names);
    dlock_client *impatient = th_lock_client_timeout(redis.port, 200);
    assert_non_null(impatient);
    dlock_opts o = opts(30000, 0);
    dlock_handle *h;
    assert_int_equal(dlock_acquire(impatient, key, &o, &h), DLOCK_OK); /* warm pool */
    assert_int_equal(dlock_release(h), DLOCK_OK);
    long long fence = th_redis_int(&redis, "GET %s", names.fence);
    th_signal(redis.pid, SIGSTOP, 0);
    assert_int_equal(dlock_acquire(impatient, key, &o, &h), DLOCK_ERR_REDIS);
    th_sleep_ms(300); /* the first give-back waits in Redis too, behind the acquire */
    th_signal(redis.pid, SIGCONT, 0);
    int64_t until = th_now_ms() + 5000;
    while (th_redis_int(&redis, "GET %s", names.fence) == fence && th_now_ms() < until)
        th_sleep_ms(5);
    assert_true(th_redis_int(&redis, "GET %s", names.fence) > fence); /* it ran */
    o.wait_ms = 3000; /* not the 30 s lease: a hang bound only */
    assert_int_equal(dlock_acquire(client, key, &o, &h), DLOCK_OK);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    dlock_stats s;
    dlock_stats_read(impatient, &s);
    assert_int_equal(s.orphaned, 1);
    dlock_client_free(impatient);
}

/* Redis is out of reach for five leases (of 500 ms) while an acquire is on
 * its way: a proxy holds the script 4.5 s, and every new connection through
 * it fails, so every give-back does - from before the acquire, whose own
 * connection (dlock_ping's) stays on Redis: a first give-back that got
 * through before the outage began would mark the token gone and let the
 * test pass whatever the clean-up thread does after the lease. Then
 * Redis is back, and the acquire arrives after that. The clean-up thread
 * must still be trying to give the token up: it stopped once the lease
 * had passed, and the late acquire then held the key for nobody, for a
 * whole lease. Now the give-back lands within 2 s of Redis coming back
 * (its backoff), marks the token gone, and the acquire finds it so. */
static void test_an_acquire_that_arrives_after_a_long_outage_never_holds_the_key(void **state)
{
    (void)state;
    char key[32];
    mode_key(key, sizeof(key), "t:outage");
    dlock_names names;
    dlock_names_of(key, &names);
    th_proxy *proxy;
    dlock_client *slow = th_lock_client_behind_proxy(&redis, &proxy);
    dlock_opts o = opts(500, 0);
    dlock_handle *h;
    int64_t t0 = th_now_ms();
    th_proxy_delay_next(proxy, "EVALSHA", 4500);
    th_proxy_redirect(proxy, th_free_port()); /* out of reach: new connections fail */
    assert_int_equal(dlock_acquire(slow, key, &o, &h), DLOCK_ERR_REDIS);
    th_sleep_ms(2800 - (th_now_ms() - t0));  /* well past the lease and a try after it */
    th_proxy_redirect(proxy, redis.port);
    th_sleep_ms(4800 - (th_now_ms() - t0)); /* the held acquire has run by now */
    assert_int_equal(th_proxy_delayed(proxy), 1);
    long long pttl = th_redis_int(&redis, "PTTL %s", key);
    int64_t until = th_now_ms() + 10000;
    while (th_redis_int(&redis, "ZCARD %s", names.gone) == 0 && th_now_ms() < until)
        th_sleep_ms(10);
    if (th_redis_int(&redis, "ZCARD %s", names.gone) == 0)
        fail_msg("the token was never given up: its late acquire held %s for nobody "
                 "(PTTL %lld ms after it ran)", key, pttl);
    o.wait_ms = 0;
    assert_int_equal(dlock_acquire(client, key, &o, &h), DLOCK_OK); /* free */
    assert_int_equal(dlock_release(h), DLOCK_OK);
    dlock_client_free(slow);
    th_proxy_stop(proxy);
}

#define OUTAGE_TOKENS 32

struct unanswered {
    dlock_client *c;
    char key[32];
    int rc;
    pthread_t thread;
};

static void *acquire_unanswered(void *arg)
{
    struct unanswered *u = arg;
    dlock_opts o = opts(500, 0);
    dlock_handle *h;
    u->rc = dlock_acquire(u->c, u->key, &o, &h);
    return NULL;
}

/* Many tokens in doubt while Redis stays out of reach: the clean-up thread
 * tries one give-back per backoff (up to 2 s) for all of them, not one per
 * token - lock tokens stay for a whole outage, and 1024 of them, each
 * backing off on its own, made 512 connection attempts a second. 32
 * acquires wait in a stopped Redis and time out, then Redis is killed, so
 * that every give-back's connection is refused at once; over the next 3 s
 * each token alone would try at least once. */
static void test_tokens_in_doubt_share_one_backoff_while_redis_is_away(void **state)
{
    (void)state;
    th_redis away = {0};
    assert_int_equal(th_redis_start(&away), 0);
    dlock_client *c = th_lock_client_timeout(away.port, 200);
    assert_non_null(c);
    th_signal(away.pid, SIGSTOP, 0);
    struct unanswered u[OUTAGE_TOKENS];
    for (int i = 0; i < OUTAGE_TOKENS; i++) {
        u[i] = (struct unanswered){.c = c, .rc = -99};
        snprintf(u[i].key, sizeof(u[i].key), "t:away:%d", i);
        pthread_create(&u[i].thread, NULL, acquire_unanswered, &u[i]);
    }
    for (int i = 0; i < OUTAGE_TOKENS; i++) {
        pthread_join(u[i].thread, NULL);
        assert_int_equal(u[i].rc, DLOCK_ERR_REDIS);
    }
    th_redis_stop(&away, 1); /* from now on connections are refused */
    dlock_stats s;
    dlock_stats_read(c, &s);
    assert_int_equal(s.orphaned, OUTAGE_TOKENS);
    th_sleep_ms(1000);
    dlock_stats_read(c, &s);
    uint64_t before = s.redis_errors; /* a failed give-back counts one; the subscriber's
                                       * reconnects (every 250 ms) count none */
    th_sleep_ms(3000);
    dlock_stats_read(c, &s);
    print_message("give-backs tried in 3 s for %d tokens: %llu\n", OUTAGE_TOKENS,
                  (unsigned long long)(s.redis_errors - before));
    assert_true(s.redis_errors - before < OUTAGE_TOKENS / 4);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_an_acquire_run_after_its_timeout_is_released_by_its_give_back),
        cmocka_unit_test(test_an_acquire_that_arrives_after_a_long_outage_never_holds_the_key),
        cmocka_unit_test(test_tokens_in_doubt_share_one_backoff_while_redis_is_away),
    };
    th_lock_suite(&redis, &client);
    int failed = th_lock_both_modes("lock orphans", tests, sizeof(tests) / sizeof(tests[0]),
                                    &wait_mode);
    th_redis_stop(&redis, 0);
    return failed;
}
