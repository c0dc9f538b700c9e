/* test_multilock.c - dlock_acquire_multi against a real redis-server, in both
 * wait modes: every key held as one, canonical order (no deadlock between
 * {a,b} and {b,a}), all or nothing, one renewal schedule and max_renewals for
 * the set, the worst state of any key, each key's own fence; then, in notify
 * mode, hand-off with single-key holders and a bounded wait behind a stream
 * of them. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
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
static int wait_mode;

static dlock_client *new_client(void)
{
    dlock_client *c = th_lock_client(&redis);
    assert_non_null(c);
    return c;
}

static int setup(void **state)
{
    (void)state;
    if (redis.pid == 0 && th_redis_start(&redis) != 0)
        return -1;
    client = new_client();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    dlock_client_free(client);
    return 0;
}

static dlock_opts opts(int lease_ms, int wait_ms)
{
    return th_lock_opts(lease_ms, wait_ms, wait_mode);
}

static void test_every_key_is_held_and_released_as_one(void **state)
{
    (void)state;
    const char *keys[] = {"m:c", "m:a", "m:b"};
    dlock_opts o = opts(5000, 0);
    dlock_handle *set, *h;
    assert_int_equal(dlock_acquire_multi(client, keys, 3, &o, &set), DLOCK_OK);
    assert_int_equal(dlock_key_count(set), 3);
    assert_string_equal(dlock_key_at(set, 0), "m:a"); /* canonical order */
    assert_string_equal(dlock_key_at(set, 2), "m:c");
    dlock_client *other = new_client();
    for (int i = 0; i < 3; i++) {
        assert_int_equal(dlock_acquire(other, keys[i], &o, &h), DLOCK_ERR_TIMEOUT);
        assert_true(dlock_fence_at(set, i) > 0);
    }
    assert_int_equal(dlock_check(set), DLOCK_OK);
    assert_int_equal(dlock_release(set), DLOCK_OK);
    for (int i = 0; i < 3; i++)
        assert_int_equal(th_redis_int(&redis, "EXISTS %s", keys[i]), 0);
    dlock_client_free(other);
}

static void test_a_key_held_elsewhere_makes_it_all_or_nothing(void **state)
{
    (void)state;
    const char *keys[] = {"m:x", "m:y", "m:z"};
    dlock_opts o = opts(5000, 200);
    dlock_handle *blocker, *set;
    dlock_client *other = new_client();
    assert_int_equal(dlock_acquire(other, "m:z", &o, &blocker), DLOCK_OK);
    int64_t t0 = th_now_ms();
    assert_int_equal(dlock_acquire_multi(client, keys, 3, &o, &set), DLOCK_ERR_TIMEOUT);
    assert_true(th_now_ms() - t0 < 2000);
    assert_null(set);
    assert_non_null(strstr(dlock_errstr(), "m:z"));
    /* m:x and m:y, taken first, were given back */
    assert_int_equal(th_redis_int(&redis, "EXISTS m:x"), 0);
    assert_int_equal(th_redis_int(&redis, "EXISTS m:y"), 0);
    dlock_release(blocker);
    dlock_client_free(other);
}

static void test_bad_sets_are_refused(void **state)
{
    (void)state;
    dlock_handle *set;
    const char *twice[] = {"m:a", "m:b", "m:a"};
    assert_int_equal(dlock_acquire_multi(client, twice, 3, NULL, &set), DLOCK_ERR_INVALID);
    assert_non_null(strstr(dlock_errstr(), "twice"));
    assert_int_equal(dlock_acquire_multi(client, twice, 0, NULL, &set), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_acquire_multi(client, twice, DLOCK_MULTI_MAX + 1, NULL, &set),
                     DLOCK_ERR_INVALID);
    const char *empty[] = {"m:a", ""};
    assert_int_equal(dlock_acquire_multi(client, empty, 2, NULL, &set), DLOCK_ERR_INVALID);
}

struct crosser {
    dlock_client *c;
    const char *keys[2];
    int rounds, failures;
};

static void *cross(void *arg)
{
    struct crosser *x = arg;
    dlock_opts o = opts(5000, 5000);
    for (int i = 0; i < x->rounds; i++) {
        dlock_handle *set;
        if (dlock_acquire_multi(x->c, x->keys, 2, &o, &set) != DLOCK_OK) {
            x->failures++;
            continue;
        }
        dlock_release(set);
    }
    return NULL;
}

/* {a, b} against {b, a}, from two processes and two threads each: taken in
 * one order, so nobody ever times out. */
static void test_opposite_orders_never_deadlock(void **state)
{
    (void)state;
    dlock_client *other = new_client();
    struct crosser x[4] = {{client, {"m:p", "m:q"}, 150, 0}, {client, {"m:q", "m:p"}, 150, 0},
                           {other, {"m:q", "m:p"}, 150, 0}, {other, {"m:p", "m:q"}, 150, 0}};
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, cross, &x[i]);
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(x[i].failures, 0);
    }
    dlock_client_free(other);
}

/* Work three leases long: the set is renewed as one, each key's TTL kept. */
static void test_the_set_is_renewed_as_one(void **state)
{
    (void)state;
    const char *keys[] = {"m:r1", "m:r2", "m:r3"};
    dlock_opts o = opts(300, 0);
    dlock_handle *set;
    assert_int_equal(dlock_acquire_multi(client, keys, 3, &o, &set), DLOCK_OK);
    assert_int_equal(dlock_sleep(set, 900), DLOCK_OK);
    assert_true(dlock_renewals(set) >= 4);
    for (int i = 0; i < 3; i++)
        assert_true(th_redis_int(&redis, "PTTL %s", keys[i]) > 0);
    assert_int_equal(dlock_release(set), DLOCK_OK);
}

/* max_renewals counts for the set: reaching it interrupts every key. */
static void test_max_renewals_interrupts_the_whole_set(void **state)
{
    (void)state;
    const char *keys[] = {"m:i1", "m:i2"};
    dlock_opts o = opts(300, 0);
    o.max_renewals = 2;
    dlock_handle *set;
    assert_int_equal(dlock_acquire_multi(client, keys, 2, &o, &set), DLOCK_OK);
    int64_t t0 = th_now_ms();
    assert_int_equal(dlock_sleep(set, 5000), DLOCK_ERR_INTERRUPTED);
    assert_true(th_now_ms() - t0 < 2000);
    assert_int_equal(dlock_check(set), DLOCK_ERR_INTERRUPTED);
    assert_int_equal(dlock_release(set), DLOCK_ERR_INTERRUPTED);
    assert_int_equal(th_redis_int(&redis, "EXISTS m:i1"), 0);
    assert_int_equal(th_redis_int(&redis, "EXISTS m:i2"), 0);
}

/* One key taken away (its holder paused past its lease, say): the set is
 * lost, and its release says so without touching the new owner's key. */
static void test_losing_one_key_loses_the_set(void **state)
{
    (void)state;
    const char *keys[] = {"m:l1", "m:l2"};
    dlock_opts o = opts(300, 0);
    dlock_handle *set;
    assert_int_equal(dlock_acquire_multi(client, keys, 2, &o, &set), DLOCK_OK);
    assert_int_equal(th_redis_int(&redis, "SET m:l2 intruder PX 10000"), 0);
    assert_int_equal(dlock_sleep(set, 2000), DLOCK_ERR_LOST);
    assert_int_equal(dlock_release(set), DLOCK_ERR_LOST);
    char owner[64];
    assert_string_equal(th_redis_get(&redis, "m:l2", owner, sizeof(owner)), "intruder");
    assert_int_equal(th_redis_int(&redis, "EXISTS m:l1"), 0);
    th_redis_int(&redis, "DEL m:l2"); /* the next wait mode runs this test too */
}

/* Each key keeps its own fencing token, growing with every holder of that
 * key, whether it was held alone or in a set. */
static void test_each_key_has_its_own_growing_fence(void **state)
{
    (void)state;
    const char *keys[] = {"m:f1", "m:f2"};
    dlock_opts o = opts(5000, 0);
    dlock_handle *set, *h;
    int64_t last1 = 0, last2 = 0;
    for (int round = 0; round < 5; round++) {
        assert_int_equal(dlock_acquire_multi(client, keys, 2, &o, &set), DLOCK_OK);
        assert_true(dlock_fence_at(set, 0) > last1);
        assert_true(dlock_fence_at(set, 1) > last2);
        last1 = dlock_fence_at(set, 0), last2 = dlock_fence_at(set, 1);
        dlock_release(set);
        assert_int_equal(dlock_acquire(client, "m:f2", &o, &h), DLOCK_OK);
        assert_true(dlock_fence(h) > last2);
        last2 = dlock_fence(h);
        dlock_release(h);
    }
}

static int run_count(dlock_handle *h, void *arg)
{
    ++*(int *)arg;
    return dlock_key_count(h);
}

static void test_run_multi_runs_and_always_releases(void **state)
{
    (void)state;
    const char *keys[] = {"m:u1", "m:u2"};
    dlock_opts o = opts(5000, 0);
    int calls = 0, rc = -1;
    assert_int_equal(dlock_run_multi(client, keys, 2, &o, run_count, &calls, &rc), DLOCK_OK);
    assert_int_equal(calls, 1);
    assert_int_equal(rc, 2);
    assert_int_equal(th_redis_int(&redis, "EXISTS m:u1"), 0);
}

/* ---- notify mode: hand-off and fairness with single-key holders ---- */

struct streamer {
    dlock_client *c;
    _Atomic int *stop;
    long acquisitions;
};

static void *stream(void *arg)
{
    struct streamer *s = arg;
    dlock_opts o = opts(5000, 5000);
    while (!atomic_load(s->stop)) {
        dlock_handle *h;
        if (dlock_acquire(s->c, "m:hot", &o, &h) == DLOCK_OK) {
            s->acquisitions++;
            th_sleep_ms(1); /* a hold long enough for a queue to form */
            dlock_release(h);
        }
    }
    return NULL;
}

/* Eight threads of this process and of another keep taking m:hot one after
 * another, handing it over among themselves; a set {m:hot, m:cold} joins the
 * queue and gets its turn quickly: hand-off is bounded, so it can't starve. */
static void test_a_set_is_not_starved_by_single_key_holders(void **state)
{
    (void)state;
    dlock_client *other = new_client();
    _Atomic int stop = 0;
    struct streamer s[8];
    pthread_t t[8];
    for (int i = 0; i < 8; i++) {
        s[i] = (struct streamer){i % 2 ? other : client, &stop, 0};
        pthread_create(&t[i], NULL, stream, &s[i]);
    }
    th_sleep_ms(200);
    const char *keys[] = {"m:hot", "m:cold"};
    dlock_opts o = opts(5000, 5000);
    int64_t worst = 0;
    for (int round = 0; round < 10; round++) {
        dlock_handle *set;
        int64_t t0 = th_now_ms();
        assert_int_equal(dlock_acquire_multi(client, keys, 2, &o, &set), DLOCK_OK);
        worst = th_now_ms() - t0 > worst ? th_now_ms() - t0 : worst;
        dlock_release(set);
    }
    atomic_store(&stop, 1);
    long total = 0;
    for (int i = 0; i < 8; i++) {
        pthread_join(t[i], NULL);
        total += s[i].acquisitions;
    }
    print_message("slowest of 10 sets: %lld ms, while single holders took m:hot %ld times\n",
                  (long long)worst, total);
    assert_true(total > 50);    /* the stream did flow */
    assert_true(worst < 1000);  /* and the set still got its turns promptly */
    dlock_client_free(other);
}

struct single_waiter {
    const char *key;
    int rc, seq;
};

static void *wait_for_key(void *arg)
{
    struct single_waiter *w = arg;
    dlock_opts o = opts(5000, 3000);
    dlock_handle *h;
    if ((w->rc = dlock_acquire(client, w->key, &o, &h)) == DLOCK_OK) {
        w->seq = dlock_handoff_seq(h);
        dlock_release(h);
    }
    return NULL;
}

/* A set's release hands each key to a local single-key waiter of it, like
 * any holder's release: no Redis round trip, the next hand-off number. */
static void test_a_set_hands_its_keys_to_local_waiters(void **state)
{
    (void)state;
    const char *keys[] = {"m:h1", "m:h2"};
    dlock_opts o = opts(5000, 0);
    o.handoff_ms = 10000; /* the waiters queue for 100 ms: keep the lease hand-off young */
    dlock_handle *set;
    assert_int_equal(dlock_acquire_multi(client, keys, 2, &o, &set), DLOCK_OK);
    struct single_waiter w[2] = {{"m:h1", -1, -1}, {"m:h2", -1, -1}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, wait_for_key, &w[i]);
    th_sleep_ms(100); /* both in line behind the set */
    dlock_stats before, after;
    dlock_stats_read(client, &before);
    assert_int_equal(dlock_release(set), DLOCK_OK);
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(w[i].rc, DLOCK_OK);
        assert_int_equal(w[i].seq, 1);
    }
    dlock_stats_read(client, &after);
    assert_int_equal(after.handoffs - before.handoffs, 2);
}

int main(void)
{
    const struct CMUnitTest common[] = {
        cmocka_unit_test_setup_teardown(test_every_key_is_held_and_released_as_one, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_key_held_elsewhere_makes_it_all_or_nothing, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_bad_sets_are_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_opposite_orders_never_deadlock, setup, teardown),
        cmocka_unit_test_setup_teardown(test_the_set_is_renewed_as_one, setup, teardown),
        cmocka_unit_test_setup_teardown(test_max_renewals_interrupts_the_whole_set, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_losing_one_key_loses_the_set, setup, teardown),
        cmocka_unit_test_setup_teardown(test_each_key_has_its_own_growing_fence, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_multi_runs_and_always_releases, setup,
                                        teardown),
    };
    const struct CMUnitTest notify_only[] = {
        cmocka_unit_test_setup_teardown(test_a_set_is_not_starved_by_single_key_holders, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_set_hands_its_keys_to_local_waiters, setup,
                                        teardown),
    };
    wait_mode = DLOCK_WAIT_SPIN;
    int failed = cmocka_run_group_tests_name("multi-lock, spin mode", common, NULL, NULL);
    wait_mode = DLOCK_WAIT_NOTIFY;
    failed += cmocka_run_group_tests_name("multi-lock, notify mode", common, NULL, NULL);
    failed += cmocka_run_group_tests_name("multi-lock, notify only", notify_only, NULL, NULL);
    th_redis_stop(&redis, 0);
    return failed;
}
