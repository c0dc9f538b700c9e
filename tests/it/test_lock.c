/* test_lock.c - the lock library against a real, private redis-server:
 * acquisition and waiting, owner-checked release, watchdog renewal,
 * interruption, fencing, contention, and Redis going away - all of it in both
 * wait modes - then what only notify mode does: wake-ups by the release,
 * local queueing and hand-off. */
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lock/dlock.h"
#include "lock/dlock_rw.h"
#include "lock/dlock_sem.h"
#include "tests/support/harness.h"
#include "tests/support/lockkit.h"

static th_redis redis;
static dlock_client *client;
static int wait_mode; /* the mode the current group runs in */

/* A second client: another process, as far as the lock can tell. */
static dlock_client *other_client(void)
{
    dlock_client *c = th_lock_client(&redis);
    assert_non_null(c);
    return c;
}

/* Options for a test: short lease and quick retries unless the test says otherwise. */
static dlock_opts opts(int lease_ms, int wait_ms)
{
    return th_lock_opts(lease_ms, wait_ms, wait_mode);
}

static void test_acquire_release_and_reacquire(void **state)
{
    (void)state;
    dlock_opts o = opts(5000, 0);
    dlock_handle *h;
    char buf[64];
    assert_int_equal(dlock_acquire(client, "t:basic", &o, &h), DLOCK_OK);
    assert_int_equal(strlen(dlock_token(h)), DLOCK_TOKEN_LEN);
    assert_string_equal(th_redis_get(&redis, "t:basic", buf, sizeof(buf)), dlock_token(h));
    long long pttl = th_redis_int(&redis, "PTTL t:basic");
    assert_true(pttl > 4000 && pttl <= 5000);
    assert_int_equal(dlock_check(h), DLOCK_OK);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    assert_int_equal(th_redis_int(&redis, "EXISTS t:basic"), 0);
    assert_int_equal(dlock_acquire(client, "t:basic", &o, &h), DLOCK_OK);
    assert_int_equal(dlock_release(h), DLOCK_OK);
}

static void test_tokens_are_unique_per_acquisition(void **state)
{
    (void)state;
    dlock_opts o = opts(5000, 0);
    dlock_handle *a, *b;
    assert_int_equal(dlock_acquire(client, "t:tok1", &o, &a), DLOCK_OK);
    assert_int_equal(dlock_acquire(client, "t:tok2", &o, &b), DLOCK_OK);
    assert_string_not_equal(dlock_token(a), dlock_token(b));
    dlock_release(a);
    dlock_release(b);
}

static void test_second_owner_fails_fast_with_zero_wait(void **state)
{
    (void)state;
    dlock_opts o = opts(5000, 0);
    dlock_handle *h, *h2 = (dlock_handle *)1;
    dlock_client *other = other_client();
    assert_int_equal(dlock_acquire(client, "t:busy", &o, &h), DLOCK_OK);
    int64_t t0 = th_now_ms();
    assert_int_equal(dlock_acquire(other, "t:busy", &o, &h2), DLOCK_ERR_TIMEOUT);
    assert_true(th_now_ms() - t0 < 1000); /* one try, no waiting (hang bound only) */
    assert_null(h2);
    assert_non_null(strstr(dlock_errstr(), "t:busy"));
    assert_int_equal(dlock_release(h), DLOCK_OK);
    dlock_client_free(other);
}

static void test_wait_times_out_after_wait_ms(void **state)
{
    (void)state;
    dlock_opts o = opts(5000, 0);
    dlock_handle *h, *h2;
    dlock_client *other = other_client();
    assert_int_equal(dlock_acquire(client, "t:wait", &o, &h), DLOCK_OK);
    o.wait_ms = 300;
    int64_t t0 = th_now_ms();
    assert_int_equal(dlock_acquire(other, "t:wait", &o, &h2), DLOCK_ERR_TIMEOUT);
    int64_t waited = th_now_ms() - t0;
    assert_true(waited >= 300);
    assert_true(waited < 300 + 1000 * TH_SLOWER); /* wait_ms plus about one command timeout */
    dlock_release(h);
    dlock_client_free(other);
}

struct holder {
    const char *key;
    int hold_ms;
    int released;
};

static void *hold_then_release(void *arg)
{
    struct holder *ho = arg;
    dlock_opts o = opts(5000, 0);
    dlock_handle *h;
    if (dlock_acquire(client, ho->key, &o, &h) != DLOCK_OK)
        return NULL;
    th_sleep_ms(ho->hold_ms);
    ho->released = dlock_release(h) == DLOCK_OK;
    return NULL;
}

static void test_waiter_gets_lock_when_holder_releases(void **state)
{
    (void)state;
    struct holder ho = {"t:handover", 200, 0};
    pthread_t t;
    pthread_create(&t, NULL, hold_then_release, &ho);
    while (th_redis_int(&redis, "EXISTS t:handover") != 1)
        th_sleep_ms(1);
    dlock_opts o = opts(5000, 3000);
    dlock_handle *h;
    int64_t t0 = th_now_ms();
    assert_int_equal(dlock_acquire(client, "t:handover", &o, &h), DLOCK_OK);
    int64_t waited = th_now_ms() - t0;
    pthread_join(t, NULL);
    assert_true(ho.released);
    assert_true(waited >= 100 && waited < 3000);
    dlock_release(h);
}

static void test_release_of_expired_lock_reports_lost_and_keeps_new_owner(void **state)
{
    (void)state;
    dlock_opts o = opts(100, 0);
    o.watchdog = 0;
    dlock_handle *old, *new;
    char buf[64];
    assert_int_equal(dlock_acquire(client, "t:expire", &o, &old), DLOCK_OK);
    th_sleep_ms(250);
    assert_int_equal(dlock_check(old), DLOCK_ERR_LOST); /* local deadline passed */
    o.lease_ms = 5000;
    assert_int_equal(dlock_acquire(client, "t:expire", &o, &new), DLOCK_OK);
    assert_int_equal(dlock_release(old), DLOCK_ERR_LOST);
    assert_string_equal(th_redis_get(&redis, "t:expire", buf, sizeof(buf)), dlock_token(new));
    assert_int_equal(dlock_release(new), DLOCK_OK);
}

static void test_watchdog_keeps_short_lease_alive(void **state)
{
    (void)state;
    dlock_opts o = opts(300, 0);
    dlock_handle *h;
    assert_int_equal(dlock_acquire(client, "t:renew", &o, &h), DLOCK_OK);
    assert_int_equal(dlock_sleep(h, 1500), DLOCK_OK);
    assert_int_equal(th_redis_int(&redis, "EXISTS t:renew"), 1);
    assert_true(dlock_renewals(h) >= 3);
    assert_int_equal(dlock_check(h), DLOCK_OK);
    assert_int_equal(dlock_release(h), DLOCK_OK);
}

static void test_without_watchdog_the_lease_expires(void **state)
{
    (void)state;
    dlock_opts o = opts(300, 0);
    o.watchdog = 0;
    dlock_handle *h;
    assert_int_equal(dlock_acquire(client, "t:norenew", &o, &h), DLOCK_OK);
    int64_t t0 = th_now_ms();
    assert_int_equal(dlock_sleep(h, 1500), DLOCK_ERR_LOST); /* woken at the local deadline, */
    /* at its local deadline (295 ms, a drift allowance before Redis expires
     * it), not at the sleep's end: a busy machine may wake it a little late */
    assert_true(th_now_ms() - t0 < 300 + 200 * TH_SLOWER);
    th_sleep_ms(50);
    assert_int_equal(th_redis_int(&redis, "EXISTS t:norenew"), 0);
    assert_int_equal(dlock_renewals(h), 0);
    assert_int_equal(dlock_release(h), DLOCK_ERR_LOST);
}

static void test_holder_is_interrupted_after_max_renewals(void **state)
{
    (void)state;
    dlock_opts o = opts(300, 0);
    o.max_renewals = 2;
    dlock_handle *h;
    assert_int_equal(dlock_acquire(client, "t:interrupt", &o, &h), DLOCK_OK);
    int64_t t0 = th_now_ms();
    assert_int_equal(dlock_sleep(h, 5000), DLOCK_ERR_INTERRUPTED);
    assert_true(th_now_ms() - t0 < 2000 * TH_SLOWER); /* due at about 300 ms */
    assert_int_equal(dlock_renewals(h), 2);
    assert_int_equal(dlock_check(h), DLOCK_ERR_INTERRUPTED);
    th_sleep_ms(450); /* longer than the lease: never renewed again, so it expired */
    assert_int_equal(th_redis_int(&redis, "EXISTS t:interrupt"), 0);
    assert_int_equal(dlock_renewals(h), 2);
    assert_int_equal(dlock_release(h), DLOCK_ERR_LOST);
}

static void test_renewal_finding_key_stolen_marks_handle_lost(void **state)
{
    (void)state;
    dlock_opts o = opts(300, 0);
    dlock_handle *h;
    char buf[64];
    assert_int_equal(dlock_acquire(client, "t:stolen", &o, &h), DLOCK_OK);
    assert_int_equal(th_redis_int(&redis, "SET t:stolen intruder PX 10000"), 0);
    int64_t t0 = th_now_ms();
    assert_int_equal(dlock_sleep(h, 3000), DLOCK_ERR_LOST); /* next renewal (~100 ms) sees it */
    assert_true(th_now_ms() - t0 < 1000);
    assert_int_equal(dlock_release(h), DLOCK_ERR_LOST);
    assert_string_equal(th_redis_get(&redis, "t:stolen", buf, sizeof(buf)), "intruder");
    th_redis_int(&redis, "DEL t:stolen"); /* the other wait mode's run may come at once */
}

static int count_fn(dlock_handle *h, void *arg)
{
    (void)h;
    return ++*(int *)arg;
}

static int sleep_fn(dlock_handle *h, void *arg)
{
    return dlock_sleep(h, *(int *)arg);
}

static void test_run_helper_runs_and_always_releases(void **state)
{
    (void)state;
    dlock_opts o = opts(5000, 0);
    int calls = 0, rc = -100;
    assert_int_equal(dlock_run(client, "t:run", &o, count_fn, &calls, &rc), DLOCK_OK);
    assert_int_equal(rc, 1);
    assert_int_equal(th_redis_int(&redis, "EXISTS t:run"), 0);

    dlock_handle *h;
    dlock_client *other = other_client();
    assert_int_equal(dlock_acquire(other, "t:run", &o, &h), DLOCK_OK);
    rc = -100;
    assert_int_equal(dlock_run(client, "t:run", &o, count_fn, &calls, &rc), DLOCK_ERR_TIMEOUT);
    assert_int_equal(calls, 1); /* fn did not run */
    assert_int_equal(rc, -100);
    dlock_release(h);
    dlock_client_free(other);

    o.lease_ms = 300;
    o.max_renewals = 1;
    int work = 5000;
    assert_int_equal(dlock_run(client, "t:run", &o, sleep_fn, &work, &rc),
                     DLOCK_ERR_INTERRUPTED);
    assert_int_equal(rc, DLOCK_ERR_INTERRUPTED);
    assert_int_equal(th_redis_int(&redis, "EXISTS t:run"), 0); /* released at once */
}

static void test_fence_grows_with_each_acquisition(void **state)
{
    (void)state;
    dlock_opts o = opts(5000, 0);
    int64_t last = 0;
    for (int i = 0; i < 5; i++) {
        dlock_handle *h;
        assert_int_equal(dlock_acquire(client, "t:fence", &o, &h), DLOCK_OK);
        assert_true(dlock_fence(h) > last);
        assert_true(dlock_fence(h) > 1000000000000000LL); /* seeded from Redis TIME in us */
        last = dlock_fence(h);
        dlock_release(h);
    }
}

static void test_invalid_keys_and_options_are_refused(void **state)
{
    (void)state;
    dlock_handle *h;
    char longkey[DLOCK_KEY_MAX + 2];
    memset(longkey, 'k', sizeof(longkey) - 1);
    longkey[sizeof(longkey) - 1] = '\0';
    assert_int_equal(dlock_acquire(client, longkey, NULL, &h), DLOCK_ERR_INVALID);
    assert_non_null(strstr(dlock_errstr(), "limit"));
    assert_int_equal(dlock_acquire(client, "", NULL, &h), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_acquire(client, "bad\nkey", NULL, &h), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_key_check("with\0nul", 8), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_key_check("stock:lock:{1}", 14), DLOCK_OK);
    dlock_opts o = opts(5, 0);
    assert_int_equal(dlock_acquire(client, "t:opts", &o, &h), DLOCK_ERR_INVALID);
    o = opts(1000, -1);
    assert_int_equal(dlock_acquire(client, "t:opts", &o, &h), DLOCK_ERR_INVALID);
    /* retry_ms sizes a waiter's grace (2 retry_ms + 100), its grant: at most a lease,
     * and never past INT_MAX */
    o = opts(1000, 0);
    o.retry_ms = 1001;
    assert_int_equal(dlock_opts_check(&o), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_acquire(client, "t:opts", &o, &h), DLOCK_ERR_INVALID);
    assert_non_null(strstr(dlock_errstr(), "retry_ms (1001) must not exceed lease_ms (1000)"));
    o.retry_ms = INT_MAX;
    assert_int_equal(dlock_sem_acquire(client, "t:opts", 2, &o, &h), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_acquire_write(client, "t:opts:rw", &o, &h), DLOCK_ERR_INVALID);
    o.retry_ms = 1000;
    assert_int_equal(dlock_opts_check(&o), DLOCK_OK);
    assert_int_equal(dlock_acquire(client, "t:opts", &o, &h), DLOCK_OK);
    assert_int_equal(dlock_release(h), DLOCK_OK);
}

/* The acquire's reply never came within the command timeout, but the command
 * itself reaches Redis later (a slow network: the proxy holds it 1 s). The
 * client gave that token up; it must never take the key, so the next
 * acquirer gets it at once instead of after the 30 s lease. */
static void test_an_acquire_that_arrives_after_its_timeout_never_takes_the_key(void **state)
{
    (void)state;
    th_proxy *proxy;
    dlock_client *slow = th_lock_client_behind_proxy(&redis, &proxy);
    dlock_opts o = opts(30000, 2000);
    dlock_handle *h;
    th_proxy_delay_next(proxy, "EVALSHA", 1000);
    assert_int_equal(dlock_acquire(slow, "t:late", &o, &h), DLOCK_ERR_REDIS);
    assert_int_equal(th_proxy_delayed(proxy), 1);
    th_sleep_ms(1500); /* the held acquire has reached Redis and run by now */
    o.wait_ms = 0;
    assert_int_equal(dlock_acquire(client, "t:late", &o, &h), DLOCK_OK);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    dlock_stats s;
    dlock_stats_read(slow, &s);
    assert_int_equal(s.orphaned, 1);
    dlock_client_free(slow);
    th_proxy_stop(proxy);
}

/* Checks that every key matching pattern has a TTL; returns how many there are. */
static long long keys_with_ttl(const char *pattern)
{
    long long keys = 0;
    redisContext *rc = th_redis_connect(&redis);
    redisReply *r = redisCommand(rc, "KEYS %s", pattern);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    for (size_t i = 0; i < r->elements; i++, keys++) {
        redisReply *ttl = redisCommand(rc, "PTTL %s", r->element[i]->str);
        if (ttl->integer <= 0)
            fail_msg("%s has no TTL (%lld)", r->element[i]->str, ttl->integer);
        freeReplyObject(ttl);
    }
    freeReplyObject(r);
    redisFree(rc);
    return keys;
}

struct waiter {
    dlock_client *c;
    dlock_opts o;
    int rc;
};

static void *wait_in_line(void *arg)
{
    struct waiter *w = arg;
    dlock_handle *h;
    w->rc = dlock_acquire(w->c, "t:ttl", &w->o, &h);
    return NULL;
}

/* Every key the lock writes (the lock, its fence counter, its queue, the
 * waiters' deadlines, the given-up tokens) has a TTL: none lives forever. */
static void test_every_key_the_lock_writes_expires(void **state)
{
    (void)state;
    dlock_opts o = opts(2000, 0);
    dlock_handle *h;
    assert_int_equal(dlock_acquire(client, "t:ttl", &o, &h), DLOCK_OK);
    struct waiter w = {other_client(), opts(2000, 600), -1};
    pthread_t t;
    pthread_create(&t, NULL, wait_in_line, &w);
    th_sleep_ms(300); /* in line: notify mode queues in Redis */
    int notify = wait_mode == DLOCK_WAIT_NOTIFY;
    assert_true(keys_with_ttl("t:ttl*") >= (notify ? 4 : 2)); /* lock, fence, queue, alive */
    pthread_join(t, NULL);
    assert_int_equal(w.rc, DLOCK_ERR_TIMEOUT);
    th_sleep_ms(200); /* the given-up waiter's token is marked gone in the background */
    assert_true(keys_with_ttl("t:ttl*") >= (notify ? 3 : 2)); /* lock, fence, gone */
    assert_int_equal(dlock_release(h), DLOCK_OK);
    dlock_client_free(w.c);
}

/* Redis is down (nothing listens): acquires fail fast, and since nothing
 * reached Redis, nothing is left to clean up and nothing retries. */
static void test_with_redis_down_failed_acquires_leave_nothing_to_retry(void **state)
{
    (void)state;
    dlock_config cfg;
    dlock_config_defaults(&cfg);
    cfg.port = th_free_port();
    dlock_client *c;
    assert_int_equal(dlock_client_new(&cfg, &c), DLOCK_OK);
    dlock_opts o = opts(30000, 2000);
    dlock_handle *h;
    for (int i = 0; i < 200; i++)
        assert_int_equal(dlock_acquire(c, "t:nowhere", &o, &h), DLOCK_ERR_REDIS);
    dlock_stats before, after;
    dlock_stats_read(c, &before);
    assert_int_equal(before.orphaned, 0);
    th_sleep_ms(1000);
    dlock_stats_read(c, &after);
    /* the subscriber's reconnects only: a few a second */
    if (after.connects - before.connects > 10)
        fail_msg("%llu connection attempts in 1 s after the burst",
                 (unsigned long long)(after.connects - before.connects));
    dlock_client_free(c);
}

/* Redis restarted from an old RDB or AOF brings back an older fence counter;
 * tokens must still grow (they follow Redis's clock when the counter lags). */
static void test_fence_grows_even_when_an_older_counter_comes_back(void **state)
{
    (void)state;
    dlock_opts o = opts(5000, 0);
    dlock_handle *h;
    assert_int_equal(dlock_acquire(client, "t:restore", &o, &h), DLOCK_OK);
    int64_t before = dlock_fence(h);
    dlock_release(h);
    dlock_names names;
    dlock_names_of("t:restore", &names);
    assert_int_equal(th_redis_int(&redis, "SET %s 42", names.fence), 0);
    assert_int_equal(dlock_acquire(client, "t:restore", &o, &h), DLOCK_OK);
    assert_true(dlock_fence(h) > before);
    dlock_release(h);
}

#define THREADS 8
#define ROUNDS 200

static int plain_counter; /* protected only by the distributed lock */

static void *increment_loop(void *arg)
{
    redisContext *rc = th_redis_connect(&redis);
    long failures = 0;
    dlock_opts o = opts(5000, 10000);
    o.retry_ms = 2;
    for (int i = 0; i < ROUNDS; i++) {
        dlock_handle *h;
        if (dlock_acquire(client, "t:counter", &o, &h) != DLOCK_OK) {
            failures++;
            continue;
        }
        redisReply *r = redisCommand(rc, "GET t:count");
        long long v = (r && r->type == REDIS_REPLY_STRING) ? atoll(r->str) : 0;
        freeReplyObject(r);
        int local = plain_counter;
        freeReplyObject(redisCommand(rc, "SET t:count %lld", v + 1));
        plain_counter = local + 1;
        if (dlock_release(h) != DLOCK_OK)
            failures++;
    }
    redisFree(rc);
    *(long *)arg = failures;
    return NULL;
}

static void test_threads_increment_shared_counter_without_lost_update(void **state)
{
    (void)state;
    pthread_t t[THREADS];
    long failures[THREADS];
    plain_counter = 0;
    for (int i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, increment_loop, &failures[i]);
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(failures[i], 0);
    }
    assert_int_equal(th_redis_int(&redis, "GET t:count"), THREADS * ROUNDS);
    assert_int_equal(plain_counter, THREADS * ROUNDS);
    dlock_stats s;
    dlock_stats_read(client, &s);
    assert_true(s.acquired >= THREADS * ROUNDS);
}

static void test_redis_down_fails_fast_then_recovers(void **state)
{
    (void)state;
    dlock_opts o = opts(5000, 2000);
    dlock_handle *h;
    assert_int_equal(dlock_ping(client), DLOCK_OK);
    assert_int_equal(dlock_acquire(client, "t:down", &o, &h), DLOCK_OK);
    int64_t fence_before = dlock_fence(h);
    th_redis_stop(&redis, 1); /* kill -9: no persistence, every key is gone */
    assert_int_equal(dlock_release(h), DLOCK_ERR_REDIS);

    int64_t t0 = th_now_ms();
    assert_int_equal(dlock_acquire(client, "t:down", &o, &h), DLOCK_ERR_REDIS);
    assert_true(th_now_ms() - t0 < 1500); /* prompt: no waiting out wait_ms */
    assert_int_equal(dlock_ping(client), DLOCK_ERR_REDIS);

    assert_int_equal(th_redis_start(&redis), 0); /* same port */
    assert_int_equal(dlock_acquire(client, "t:down", &o, &h), DLOCK_OK);
    /* the fence counter was lost with the data, yet tokens still grow */
    assert_true(dlock_fence(h) > fence_before);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    dlock_stats s;
    dlock_stats_read(client, &s);
    assert_true(s.redis_errors >= 2);
}

/* ---- notify mode only ---- */

struct timed_holder {
    dlock_client *c;
    const char *key;
    int hold_ms;
    int raw_delete; /* end the hold with a bare DEL: no release notification */
};

static void *hold_for(void *arg)
{
    struct timed_holder *t = arg;
    dlock_opts o = opts(5000, 0);
    dlock_handle *h;
    if (dlock_acquire(t->c, t->key, &o, &h) != DLOCK_OK)
        return NULL;
    th_sleep_ms(t->hold_ms);
    if (t->raw_delete) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "DEL %s", t->key);
        th_redis_int(&redis, cmd);
    }
    dlock_release(h);
    return NULL;
}

/* Waits with retry_ms (its first retry is at least retry_ms/2 away) for a
 * lock another client releases after 100 ms. Returns the wait in ms. */
static int64_t wait_for_release_by_other(int raw_delete, int retry_ms)
{
    dlock_client *other = other_client();
    struct timed_holder t = {other, raw_delete ? "t:missed" : "t:notified", 100, raw_delete};
    pthread_t th;
    pthread_create(&th, NULL, hold_for, &t);
    char cmd[64];
    snprintf(cmd, sizeof(cmd), "EXISTS %s", t.key);
    while (th_redis_int(&redis, cmd) != 1)
        th_sleep_ms(1);
    dlock_opts o = opts(10000, 10000); /* a lease of at least retry_ms */
    o.retry_ms = retry_ms;
    dlock_handle *h;
    int64_t t0 = th_now_ms();
    assert_int_equal(dlock_acquire(client, t.key, &o, &h), DLOCK_OK);
    int64_t waited = th_now_ms() - t0;
    dlock_release(h);
    pthread_join(th, NULL);
    dlock_client_free(other);
    return waited;
}

static void test_waiter_is_woken_by_the_release_not_its_retry(void **state)
{
    (void)state;
    int64_t waited = wait_for_release_by_other(0, 10000);
    assert_true(waited >= 50);   /* it did wait for the holder */
    assert_true(waited < 4000);  /* a retry could not have come before 5000 ms */
}

static void test_missed_notification_costs_at_most_one_retry_interval(void **state)
{
    (void)state;
    int64_t waited = wait_for_release_by_other(1, 300); /* DEL publishes nothing */
    assert_true(waited >= 100);
    assert_true(waited <= 100 + 450 + 300); /* hold + one jittered interval (<= 1.5x) + slack */
}

struct waiter_arg {
    int mode;
    int ok;
};

static void *wait_long(void *arg)
{
    struct waiter_arg *w = arg;
    dlock_opts o = opts(5000, 5000);
    o.wait_mode = w->mode;
    dlock_handle *h;
    w->ok = dlock_acquire(client, "t:queue", &o, &h) == DLOCK_OK;
    if (w->ok)
        dlock_release(h);
    return NULL;
}

/* 6 threads wait 400 ms for a key held elsewhere, retrying every 10 ms: in
 * spin mode each of them polls Redis (~240 attempts); queued, only the head
 * does (its retry interval is a safety net that still ticks). */
static long long script_calls_while_six_threads_wait(int mode)
{
    dlock_client *other = other_client();
    struct timed_holder t = {other, "t:queue", 400, 0};
    pthread_t holder, th[6];
    struct waiter_arg w[6];
    pthread_create(&holder, NULL, hold_for, &t);
    while (th_redis_int(&redis, "EXISTS t:queue") != 1)
        th_sleep_ms(1);
    long long before = th_lock_script_calls(&redis);
    for (int i = 0; i < 6; i++) {
        w[i] = (struct waiter_arg){mode, 0};
        pthread_create(&th[i], NULL, wait_long, &w[i]);
    }
    pthread_join(holder, NULL);
    for (int i = 0; i < 6; i++) {
        pthread_join(th[i], NULL);
        assert_true(w[i].ok);
    }
    dlock_client_free(other);
    return th_lock_script_calls(&redis) - before;
}

static void test_local_queue_keeps_redis_traffic_per_process_not_per_thread(void **state)
{
    (void)state;
    long long spin = script_calls_while_six_threads_wait(DLOCK_WAIT_SPIN);
    long long notify = script_calls_while_six_threads_wait(DLOCK_WAIT_NOTIFY);
    print_message("acquire+release scripts while 6 threads waited: spin %lld, notify %lld\n",
                  spin, notify);
    assert_true(spin > 100);
    assert_true(notify * 3 < spin); /* traffic per process, not per thread (6 here) */
}

#define HOT_THREADS 4
#define HOT_ROUNDS 100

struct token_log {
    pthread_mutex_t mu;
    int64_t fence[2 * HOT_THREADS * HOT_ROUNDS];
    int seq[2 * HOT_THREADS * HOT_ROUNDS];
    int n, max_seq, remote_ok;
};

struct hot_arg {
    dlock_client *c;
    struct token_log *log;
    int rounds;
};

static void *hot_loop(void *arg)
{
    struct hot_arg *a = arg;
    dlock_opts o = opts(5000, 10000);
    o.handoff_max = 2;
    for (int i = 0; i < a->rounds; i++) {
        dlock_handle *h;
        if (dlock_acquire(a->c, "t:handoff", &o, &h) != DLOCK_OK)
            continue;
        pthread_mutex_lock(&a->log->mu); /* in holding order: we hold the lock */
        int n = a->log->n++;
        a->log->fence[n] = dlock_fence(h);
        a->log->seq[n] = dlock_handoff_seq(h);
        if (a->log->seq[n] > a->log->max_seq)
            a->log->max_seq = a->log->seq[n];
        pthread_mutex_unlock(&a->log->mu);
        th_sleep_ms(1);
        dlock_release(h);
    }
    return NULL;
}

static void test_handoff_is_bounded_and_tokens_keep_growing(void **state)
{
    (void)state;
    static struct token_log log = {.mu = PTHREAD_MUTEX_INITIALIZER};
    dlock_client *remote = other_client();
    pthread_t th[HOT_THREADS + 1];
    struct hot_arg local = {client, &log, HOT_ROUNDS}, far = {remote, &log, HOT_ROUNDS};
    for (int i = 0; i < HOT_THREADS; i++)
        pthread_create(&th[i], NULL, hot_loop, &local);
    pthread_create(&th[HOT_THREADS], NULL, hot_loop, &far); /* a remote waiter */
    for (int i = 0; i <= HOT_THREADS; i++)
        pthread_join(th[i], NULL);
    dlock_stats s;
    dlock_stats_read(client, &s);
    dlock_client_free(remote);
    assert_int_equal(log.n, (HOT_THREADS + 1) * HOT_ROUNDS); /* the remote one got every turn */
    assert_true(s.handoffs > 0);
    assert_true(log.max_seq <= 2); /* handoff_max */
    for (int i = 1; i < log.n; i++)
        if (log.fence[i] < log.fence[i - 1] ||
            (log.fence[i] == log.fence[i - 1] && log.seq[i] <= log.seq[i - 1]))
            fail_msg("token %d (%lld, %d) not above (%lld, %d)", i, (long long)log.fence[i],
                     log.seq[i], (long long)log.fence[i - 1], log.seq[i - 1]);
}

/* Each waiter is another process (its own client); they queue while the key
 * is held and get it in the order they asked, granted by each release. */
static void test_waiters_of_other_processes_get_the_key_in_arrival_order(void **state)
{
    (void)state;
    dlock_opts o = opts(5000, 0), wait = opts(5000, 10000);
    wait.retry_ms = 1000; /* only the grant should wake them; it lasts their own 2.1 s grace,
                           * though the holder's retry_ms (10) gives a grace of 120 ms */
    dlock_handle *h;
    dlock_names names;
    dlock_names_of("t:fifo", &names);
    assert_int_equal(dlock_acquire(client, "t:fifo", &o, &h), DLOCK_OK);
    dlock_client *others[3];
    int order[3];
    for (int i = 0; i < 3; i++)
        others[i] = other_client();
    assert_int_equal(th_lock_fifo(&redis, 1, h, "t:fifo", &wait, others, 3, order, NULL), 3);
    for (int i = 0; i < 3; i++) {
        dlock_client_free(others[i]);
        assert_int_equal(order[i], i);
    }
    assert_int_equal(th_redis_int(&redis, "ZCARD %s", names.queue), 0);
}

/* A waiter that died while queued: once its deadline passes it is skipped;
 * before that a release may grant it the key, which then lapses after the
 * short grant lease. Either way the next waiter gets the key, soon. */
static void test_a_dead_waiter_delays_the_key_at_most_briefly(void **state)
{
    (void)state;
    redisContext *rc = th_redis_connect(&redis);
    redisReply *t = redisCommand(rc, "TIME");
    long long now_ms = atoll(t->element[0]->str) * 1000 + atoll(t->element[1]->str) / 1000;
    freeReplyObject(t);
    dlock_names names;
    dlock_names_of("t:dead", &names);
    freeReplyObject(redisCommand(rc, "ZADD %s 1 %s", names.queue,
                                 "dead-waiter-token-000000000000000"));
    freeReplyObject(redisCommand(rc, "HSET %s %s %lld", names.alive,
                                 "dead-waiter-token-000000000000000", now_ms + 300));
    redisFree(rc);
    dlock_opts o = opts(5000, 0);
    o.retry_ms = 50;
    dlock_handle *h;
    /* the key is free but the dead waiter is first in line until its deadline */
    assert_int_equal(dlock_acquire(client, "t:dead", &o, &h), DLOCK_ERR_TIMEOUT);
    o.wait_ms = 3000;
    int64_t t0 = th_now_ms();
    assert_int_equal(dlock_acquire(client, "t:dead", &o, &h), DLOCK_OK);
    assert_true(th_now_ms() - t0 < 1500); /* its 300 ms, plus at most a retry interval */
    assert_int_equal(dlock_release(h), DLOCK_OK);
    assert_int_equal(th_redis_int(&redis, "ZCARD %s", names.queue), 0);
}

int main(void)
{
    const struct CMUnitTest common[] = {
        cmocka_unit_test(test_acquire_release_and_reacquire),
        cmocka_unit_test(test_tokens_are_unique_per_acquisition),
        cmocka_unit_test(test_second_owner_fails_fast_with_zero_wait),
        cmocka_unit_test(test_wait_times_out_after_wait_ms),
        cmocka_unit_test(test_waiter_gets_lock_when_holder_releases),
        cmocka_unit_test(test_release_of_expired_lock_reports_lost_and_keeps_new_owner),
        cmocka_unit_test(test_watchdog_keeps_short_lease_alive),
        cmocka_unit_test(test_without_watchdog_the_lease_expires),
        cmocka_unit_test(test_holder_is_interrupted_after_max_renewals),
        cmocka_unit_test(test_renewal_finding_key_stolen_marks_handle_lost),
        cmocka_unit_test(test_run_helper_runs_and_always_releases),
        cmocka_unit_test(test_fence_grows_with_each_acquisition),
        cmocka_unit_test(test_fence_grows_even_when_an_older_counter_comes_back),
        cmocka_unit_test(test_an_acquire_that_arrives_after_its_timeout_never_takes_the_key),
        cmocka_unit_test(test_every_key_the_lock_writes_expires),
        cmocka_unit_test(test_with_redis_down_failed_acquires_leave_nothing_to_retry),
        cmocka_unit_test(test_invalid_keys_and_options_are_refused),
        cmocka_unit_test(test_threads_increment_shared_counter_without_lost_update),
        cmocka_unit_test(test_redis_down_fails_fast_then_recovers),
    };
    const struct CMUnitTest notify_only[] = {
        cmocka_unit_test(test_waiter_is_woken_by_the_release_not_its_retry),
        cmocka_unit_test(test_missed_notification_costs_at_most_one_retry_interval),
        cmocka_unit_test(test_local_queue_keeps_redis_traffic_per_process_not_per_thread),
        cmocka_unit_test(test_handoff_is_bounded_and_tokens_keep_growing),
        cmocka_unit_test(test_waiters_of_other_processes_get_the_key_in_arrival_order),
        cmocka_unit_test(test_a_dead_waiter_delays_the_key_at_most_briefly),
    };
    th_lock_suite(&redis, &client);
    wait_mode = DLOCK_WAIT_SPIN;
    int failed = cmocka_run_group_tests_name("lock, spin mode", common, th_lock_group_setup,
                                             th_lock_group_teardown);
    wait_mode = DLOCK_WAIT_NOTIFY;
    failed += cmocka_run_group_tests_name("lock, notify mode", common, th_lock_group_setup,
                                          th_lock_group_teardown);
    failed += cmocka_run_group_tests_name("lock, notify only", notify_only, th_lock_group_setup,
                                          th_lock_group_teardown);
    th_redis_stop(&redis, 0);
    return failed;
}
