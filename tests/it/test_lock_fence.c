/* test_lock_fence.c - a holder's fence raised past a larger token that a
 * store refused it for (dlock_fence_raise), against a real, private
 * redis-server: after fences went back (a counter set ahead, as a clock
 * stepped forward would, then lost), the holder gets a fence above the
 * row's and every later fence is above that; a holder whose key is no
 * longer its own gets none and is lost; fences exact up to the cap below
 * 2^53, a floor past it refused; a floor and a counter of different
 * numbers of digits compared as numbers; an acquire that can draw no fence
 * takes nothing; multi-locks, nested holds, hand-offs, semaphores and read-write
 * locks raise the fence of the key they hold. The quorum's raise is tested
 * in test_quorum.c. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lock/dlock.h"
#include "lock/dlock_rw.h"
#include "lock/dlock_sem.h"
#include "lock/scripts.h" /* the raise's script, run by hand below any clock's fence */
#include "tests/support/harness.h"
#include "tests/support/lockkit.h"

static th_redis redis;
static dlock_client *client;

#define AHEAD_US 1000000000000LL /* 11.6 days: a clock stepped that far forward */

static dlock_opts opts(int lease_ms)
{
    return th_lock_opts(lease_ms, 2000, DLOCK_WAIT_NOTIFY);
}

static long long counter_of(const char *key)
{
    dlock_names names;
    dlock_names_of(key, &names);
    return th_redis_int(&redis, "GET %s", names.fence);
}

/* The token a record got from a holder while Redis's clock was ahead: key's
 * counter set there, one acquisition, the counter then lost (as an expiry,
 * an eviction or a restart loses it). Returns that holder's fence. */
static int64_t fence_from_the_future(const char *key)
{
    dlock_names names;
    dlock_names_of(key, &names);
    assert_int_equal(th_redis_int(&redis, "SET %s %lld", names.fence,
                                  th_redis_now_us(&redis) + AHEAD_US), 0);
    dlock_opts o = opts(5000);
    dlock_handle *h;
    assert_int_equal(dlock_acquire(client, key, &o, &h), DLOCK_OK);
    int64_t fence = dlock_fence(h);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    th_redis_int(&redis, "DEL %s", names.fence);
    return fence;
}

/* The fault itself: a fence from the clock is below the record's, for
 * good; raised, it is above, and every later fence is above that. */
static void test_a_holder_raises_its_fence_past_a_token_from_the_future(void **state)
{
    (void)state;
    int64_t row = fence_from_the_future("f:step");
    dlock_opts o = opts(5000);
    dlock_handle *h;
    assert_int_equal(dlock_acquire(client, "f:step", &o, &h), DLOCK_OK);
    assert_true(dlock_fence(h) < row); /* the record would refuse it until the clock caught up */
    assert_int_equal(dlock_fence_raise(h, row), DLOCK_OK);
    assert_int_equal(dlock_fence(h), row + 1);
    assert_int_equal(counter_of("f:step"), row + 1);
    assert_int_equal(dlock_check(h), DLOCK_OK);
    long long calls = th_lock_script_calls(&redis);
    assert_int_equal(dlock_fence_raise(h, row - 5), DLOCK_OK); /* above already: nothing sent */
    assert_int_equal(th_lock_script_calls(&redis), calls);
    assert_int_equal(dlock_fence(h), row + 1);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    assert_int_equal(dlock_acquire(client, "f:step", &o, &h), DLOCK_OK);
    assert_true(dlock_fence(h) > row + 1);
    assert_int_equal(dlock_release(h), DLOCK_OK);
}

/* The owner check: a holder that still thinks it holds (its local lease is
 * valid) but whose key is another's now gets no fence, is lost from then
 * on, and the counter is left alone, so the live holder's fence stands. */
static void test_a_holder_whose_key_moved_on_gets_no_fence(void **state)
{
    (void)state;
    int64_t row = fence_from_the_future("f:moved");
    dlock_opts o = opts(5000);
    dlock_handle *h;
    assert_int_equal(dlock_acquire(client, "f:moved", &o, &h), DLOCK_OK);
    int64_t mine = dlock_fence(h);
    /* its lease ran out in Redis (a pause), and another holder took the key */
    assert_int_equal(th_redis_int(&redis, "SET f:moved intruder-token PX 10000"), 0);
    long long counter = counter_of("f:moved");
    assert_int_equal(dlock_fence_raise(h, row), DLOCK_ERR_LOST);
    assert_int_equal(dlock_fence(h), mine);
    assert_int_equal(counter_of("f:moved"), counter);
    assert_int_equal(dlock_check(h), DLOCK_ERR_LOST); /* at once, not at the next renewal */
    long long calls = th_lock_script_calls(&redis);
    assert_int_equal(dlock_fence_raise(h, row), DLOCK_ERR_LOST); /* lost: nothing sent */
    assert_int_equal(th_lock_script_calls(&redis), calls);
    assert_int_equal(dlock_release(h), DLOCK_ERR_LOST);
    th_redis_int(&redis, "DEL f:moved");
}

/* A key that expired with nobody taking it is no longer ours either. */
static void test_a_holder_whose_key_expired_gets_no_fence(void **state)
{
    (void)state;
    dlock_opts o = opts(5000);
    dlock_handle *h;
    assert_int_equal(dlock_acquire(client, "f:expired", &o, &h), DLOCK_OK);
    th_redis_int(&redis, "DEL f:expired");
    assert_int_equal(dlock_fence_raise(h, dlock_fence(h) + 1000), DLOCK_ERR_LOST);
    assert_int_equal(dlock_release(h), DLOCK_ERR_LOST);
}

static void set_counter(const char *key, long long value)
{
    dlock_names names;
    dlock_names_of(key, &names);
    assert_int_equal(th_redis_int(&redis, "SET %s %lld", names.fence, value), 0);
}

/* Lua numbers are doubles, exact below 2^53 only: at DLOCK_FENCE_MAX (2^53 -
 * 2, even) the raised fence is exact, 2^53 - 1 (with a cap of 2^53 the fence
 * 2^53 + 1 would come back from Lua as 2^53, not above the floor). Above the
 * cap a floor is refused before anything is sent - also INT64_MAX - 1, whose
 * INCR would come back as INT64_MIN - and the holder keeps its key. */
static void test_a_floor_at_the_cap_gives_an_exact_fence_and_above_is_refused(void **state)
{
    (void)state;
    dlock_opts o = opts(5000);
    dlock_handle *h;
    assert_int_equal(dlock_acquire(client, "f:exact", &o, &h), DLOCK_OK);
    set_counter("f:exact", DLOCK_FENCE_MAX - 1);
    assert_int_equal(dlock_fence_raise(h, DLOCK_FENCE_MAX), DLOCK_OK);
    assert_int_equal(dlock_fence(h), DLOCK_FENCE_MAX + 1);
    assert_int_equal(counter_of("f:exact"), DLOCK_FENCE_MAX + 1);
    long long calls = th_lock_script_calls(&redis);
    assert_int_equal(dlock_fence_raise(h, DLOCK_FENCE_MAX + 1), DLOCK_ERR_INVALID);
    assert_non_null(strstr(dlock_errstr(), "DLOCK_FENCE_MAX"));
    assert_int_equal(dlock_fence_raise(h, INT64_MAX - 1), DLOCK_ERR_INVALID);
    assert_int_equal(th_lock_script_calls(&redis), calls); /* nothing sent */
    assert_int_equal(dlock_fence(h), DLOCK_FENCE_MAX + 1);
    assert_int_equal(dlock_check(h), DLOCK_OK);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    /* a counter above an even floor of the same length is not taken for below it */
    th_redis_int(&redis, "DEL f:exact:fence");
    assert_int_equal(dlock_acquire(client, "f:exact", &o, &h), DLOCK_OK);
    set_counter("f:exact", DLOCK_FENCE_MAX);
    assert_int_equal(dlock_fence_raise(h, DLOCK_FENCE_MAX - 2), DLOCK_OK);
    assert_int_equal(dlock_fence(h), DLOCK_FENCE_MAX + 1);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    th_redis_int(&redis, "DEL f:exact:fence");
}

/* A counter past the exact range (written by hand, or raised there by an
 * older client) has no fence to give: the raise fails as Redis's answer
 * would not be exact, the holder keeps its key and its fence - it is not
 * taken for lost, as an answer of INT64_MIN (Lua's double of INT64_MAX)
 * once made it. */
static void test_a_counter_past_2_to_the_53_refuses_the_raise_and_keeps_the_holder(void **state)
{
    (void)state;
    const long long counters[] = {DLOCK_FENCE_MAX + 1, INT64_MAX - 1, INT64_MAX};
    for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]); i++) {
        dlock_opts o = opts(5000);
        dlock_handle *h;
        assert_int_equal(dlock_acquire(client, "f:past", &o, &h), DLOCK_OK);
        int64_t mine = dlock_fence(h);
        set_counter("f:past", counters[i]);
        assert_int_equal(dlock_fence_raise(h, mine + 1000), DLOCK_ERR_REDIS);
        print_message("counter %lld: %s\n", counters[i], dlock_errstr());
        assert_int_equal(dlock_fence(h), mine);
        assert_int_equal(dlock_check(h), DLOCK_OK);
        assert_int_equal(dlock_release(h), DLOCK_OK);
        th_redis_int(&redis, "DEL f:past:fence");
    }
}

/* The raise's script run by hand, as the owner of f:digits, over a counter
 * at counter with floor: its answer. A holder's fence is the clock in
 * microseconds, so through the API a floor is never below 16 digits. */
static long long raise_by_hand(long long counter, long long floor)
{
    assert_int_equal(th_redis_int(&redis, "SET f:digits owner PX 10000"), 0);
    assert_int_equal(th_redis_int(&redis, "SET f:digits:counter %lld", counter), 0);
    return th_redis_int(&redis, "EVAL %s 2 f:digits f:digits:counter owner %lld 10000 0",
                        dlock__script_body[DLOCK_SCRIPT_RAISE], floor);
}

/* The floor and the counter are decimal strings in the script: one with
 * fewer digits is smaller, whatever its first digit. The counter is never
 * lowered and its next fence is above both - never one it issued already,
 * never the floor the store refused. */
static void test_a_raise_across_a_digit_boundary_never_lowers_the_counter(void **state)
{
    (void)state;
    const long long pairs[][2] = {{999, 1000}, {1000000000000000LL, 10000000000000000LL},
                                  {9, 10}, {DLOCK_FENCE_MAX, 10000000000000000LL}};
    for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++)
        for (int way = 0; way < 2; way++) {
            long long counter = pairs[i][way], floor = pairs[i][!way];
            if (floor > DLOCK_FENCE_MAX) /* fence.c never sends one */
                continue;
            long long top = counter > floor ? counter : floor;
            long long fence = raise_by_hand(counter, floor);
            /* past 2^53 the answer, a Lua number, is not exact (fence.c refuses
             * it); the counter is */
            int exact = top + 1 <= DLOCK_FENCE_MAX + 1;
            if ((exact && fence != top + 1) ||
                th_redis_int(&redis, "GET f:digits:counter") != top + 1)
                fail_msg("counter %lld, floor %lld: fence %lld, counter %lld (want %lld)",
                         counter, floor, fence, th_redis_int(&redis, "GET f:digits:counter"),
                         top + 1);
        }
    /* through the API: a 17-digit counter (past the exact range) is not taken
     * for below a 16-digit floor; the raise is refused, the counter kept */
    dlock_opts o = opts(5000);
    dlock_handle *h;
    assert_int_equal(dlock_acquire(client, "f:digits17", &o, &h), DLOCK_OK);
    set_counter("f:digits17", 10000000000000000LL);
    assert_true(dlock_fence(h) < DLOCK_FENCE_MAX - 1);
    assert_int_equal(dlock_fence_raise(h, DLOCK_FENCE_MAX - 1), DLOCK_ERR_REDIS);
    assert_true(counter_of("f:digits17") > 10000000000000000LL);
    assert_int_equal(dlock_check(h), DLOCK_OK);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    th_redis_int(&redis, "DEL f:digits f:digits:counter f:digits17:fence");
}

static int acquire_permit(dlock_client *c, const char *key, const dlock_opts *o,
                          dlock_handle **out)
{
    return dlock_sem_acquire(c, key, 2, o, out);
}

/* An acquire that can draw no fence - its counter at INT64_MAX, where INCR
 * fails - takes nothing: it answers DLOCK_ERR_REDIS, and at once nothing
 * holds what it asked for (Redis keeps a failed script's writes: a lock's
 * SET NX, made before the fence, must be undone in the script). Its
 * background give-back, which would undo it too, is held back 1 s by a
 * proxy, so the test sees what the acquire itself left. In every kind. */
static void test_an_acquire_that_can_draw_no_fence_takes_nothing(void **state)
{
    (void)state;
    static const struct {
        const char *key, *held; /* held: what a holder's token would be in */
        th_lock_acquire_fn acquire;
    } kinds[] = {{"f:nofence:lock", "f:nofence:lock", dlock_acquire},
                 {"f:nofence:sem", "f:nofence:sem", acquire_permit},
                 {"f:nofence:rw", "f:nofence:rw", dlock_acquire_read},
                 {"f:nofence:rw", "f:nofence:rw:writer", dlock_acquire_write}};
    th_proxy *proxy = th_proxy_start(redis.port);
    assert_non_null(proxy);
    /* the held give-back is waited for, not tried again */
    dlock_client *c = th_lock_client_timeout(th_proxy_port(proxy), 5000);
    assert_non_null(c);
    dlock_opts o = th_lock_opts(500, 0, DLOCK_WAIT_SPIN); /* spin: no SUBSCRIBE names the channel */
    for (int i = 0; i < (int)(sizeof(kinds) / sizeof(kinds[0])); i++) {
        dlock_names names;
        dlock_names_of(kinds[i].key, &names);
        set_counter(kinds[i].key, INT64_MAX);
        th_proxy_delay_next(proxy, names.channel, 1000); /* the give-back names the channel */
        dlock_handle *h;
        assert_int_equal(kinds[i].acquire(c, kinds[i].key, &o, &h), DLOCK_ERR_REDIS);
        if (strstr(dlock_errstr(), "no fence above") == NULL)
            fail_msg("%s: %s", kinds[i].key, dlock_errstr());
        long long left = th_redis_int(&redis, "EXISTS %s", kinds[i].held);
        if (left != 0)
            fail_msg("%s: its failed acquire left %s held for nobody", kinds[i].key,
                     kinds[i].held);
        int64_t until = th_now_ms() + 10000;
        while (th_proxy_delayed(proxy) <= i && th_now_ms() < until)
            th_sleep_ms(10);
        assert_int_equal(th_proxy_delayed(proxy), i + 1);
        th_redis_int(&redis, "DEL %s", names.fence);
    }
    dlock_client_free(c);
    th_proxy_stop(proxy);
}

struct waiter {
    dlock_client *c; /* the test's client when NULL */
    const char *key;
    int rc, seq;
    int64_t fence;
    char err[256];
    pthread_t thread;
};

static void *wait_for_key(void *arg)
{
    struct waiter *w = arg;
    dlock_opts o = opts(5000);
    dlock_handle *h;
    w->rc = dlock_acquire(w->c ? w->c : client, w->key, &o, &h);
    snprintf(w->err, sizeof(w->err), "%s", dlock_errstr());
    if (w->rc == DLOCK_OK) {
        w->seq = dlock_handoff_seq(h);
        w->fence = dlock_fence(h);
        dlock_release(h);
    }
    return NULL;
}

/* A release whose grant can draw no fence (the counter at INT64_MAX) gives
 * the key to nobody: it is released, not granted without a fence (its
 * taker would claim the counter's last fence again) nor left with the
 * releaser's token; the waiter is woken and told why by its own acquire. */
static void test_a_release_with_no_fence_to_grant_frees_the_key(void **state)
{
    (void)state;
    dlock_opts o = opts(5000);
    dlock_handle *h;
    assert_int_equal(dlock_acquire(client, "f:nogrant", &o, &h), DLOCK_OK);
    struct waiter w = {.c = th_lock_client(&redis), .key = "f:nogrant", .rc = -99};
    assert_non_null(w.c);
    pthread_create(&w.thread, NULL, wait_for_key, &w);
    int64_t until = th_now_ms() + 10000;
    while (th_redis_int(&redis, "ZCARD f:nogrant:queue") == 0 && th_now_ms() < until)
        th_sleep_ms(5);
    assert_int_equal(th_redis_int(&redis, "ZCARD f:nogrant:queue"), 1);
    set_counter("f:nogrant", INT64_MAX);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    assert_int_equal(th_redis_int(&redis, "EXISTS f:nogrant"), 0);
    pthread_join(w.thread, NULL);
    assert_int_equal(w.rc, DLOCK_ERR_REDIS);
    if (strstr(w.err, "no fence above") == NULL)
        fail_msg("the waiter was told: %s", w.err);
    dlock_client_free(w.c);
    th_redis_int(&redis, "DEL f:nogrant:fence");
}

static void test_a_multi_lock_raises_the_key_it_is_asked_for(void **state)
{
    (void)state;
    int64_t row = fence_from_the_future("f:multi:b");
    const char *keys[] = {"f:multi:b", "f:multi:a"};
    dlock_opts o = opts(5000);
    dlock_handle *h;
    assert_int_equal(dlock_acquire_multi(client, keys, 2, &o, &h), DLOCK_OK);
    assert_string_equal(dlock_key_at(h, 1), "f:multi:b"); /* canonical order */
    int64_t a = dlock_fence_at(h, 0);
    assert_int_equal(dlock_fence_raise_at(h, 1, row), DLOCK_OK);
    assert_int_equal(dlock_fence_at(h, 1), row + 1);
    assert_int_equal(dlock_fence_at(h, 0), a);
    assert_int_equal(dlock_fence_raise_at(h, 2, row), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_fence_raise_at(h, -1, row), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_fence_raise_at(h, 0, DLOCK_FENCE_MAX + 1), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_release(h), DLOCK_OK);
}

/* A nested hold's fence is its outermost hold's: raised through either. */
static void test_a_nested_hold_raises_the_outermost_fence(void **state)
{
    (void)state;
    int64_t row = fence_from_the_future("f:nested");
    dlock_opts o = opts(5000);
    o.reentrant = 1;
    dlock_handle *outer, *inner;
    assert_int_equal(dlock_acquire(client, "f:nested", &o, &outer), DLOCK_OK);
    assert_int_equal(dlock_acquire(client, "f:nested", &o, &inner), DLOCK_OK);
    assert_int_equal(dlock_fence_raise(inner, row), DLOCK_OK);
    assert_int_equal(dlock_fence(outer), row + 1);
    assert_int_equal(dlock_fence(inner), row + 1);
    assert_int_equal(dlock_release(inner), DLOCK_OK);
    assert_int_equal(dlock_release(outer), DLOCK_OK);
}

/* A lease handed to a local waiter keeps its raised fence: (fence, seq)
 * keeps growing in the order of holding. A waiter that was not in line yet
 * when the key went (a busy machine) takes it from Redis, with a larger
 * fence still; then the round is tried again, waiting longer. */
static void test_a_hand_off_passes_the_raised_fence_on(void **state)
{
    (void)state;
    dlock_opts o = opts(5000);
    o.handoff_ms = 10000; /* however slow the machine, the waiter is handed the lease */
    int handed = 0;
    for (int round = 1; round <= 8 && !handed; round++) {
        int64_t row = fence_from_the_future("f:handoff");
        dlock_handle *h;
        assert_int_equal(dlock_acquire(client, "f:handoff", &o, &h), DLOCK_OK);
        struct waiter w = {.key = "f:handoff", .rc = -99};
        pthread_create(&w.thread, NULL, wait_for_key, &w);
        th_sleep_ms(50 * round); /* in the local line, by then */
        assert_int_equal(dlock_fence_raise(h, row), DLOCK_OK);
        assert_int_equal(dlock_release(h), DLOCK_OK);
        pthread_join(w.thread, NULL);
        assert_int_equal(w.rc, DLOCK_OK);
        handed = w.seq == 1;
        if (handed)
            assert_int_equal(w.fence, row + 1);
        else
            assert_true(w.fence > row + 1);
    }
    assert_true(handed);
}

/* A permit or a read or write hold raises the counter its kind draws from,
 * only while its lease stands: a permit that was taken away, or a reader
 * whose deadline passed in Redis (its member may still be there: one that
 * has expired may be counted free already), gets nothing. */
static void test_semaphore_and_read_write_holders_raise_their_fence(void **state)
{
    (void)state;
    dlock_opts o = opts(5000);
    dlock_handle *p, *q, *r, *w;
    int64_t row = th_redis_now_us(&redis) + AHEAD_US;
    assert_int_equal(dlock_sem_acquire(client, "f:sem", 2, &o, &p), DLOCK_OK);
    assert_int_equal(dlock_sem_acquire(client, "f:sem", 2, &o, &q), DLOCK_OK);
    assert_int_equal(dlock_fence_raise(p, row), DLOCK_OK);
    assert_int_equal(dlock_fence(p), row + 1);
    assert_int_equal(th_redis_int(&redis, "ZREM f:sem %s", dlock_token(q)), 1);
    assert_int_equal(dlock_fence_raise(q, row), DLOCK_ERR_LOST);
    assert_int_equal(dlock_release(q), DLOCK_ERR_LOST);
    assert_int_equal(dlock_release(p), DLOCK_OK);

    assert_int_equal(dlock_acquire_read(client, "f:rw", &o, &r), DLOCK_OK);
    assert_int_equal(dlock_fence_raise(r, row), DLOCK_OK);
    assert_int_equal(dlock_fence(r), row + 1);
    assert_int_equal(dlock_release(r), DLOCK_OK);
    assert_int_equal(dlock_acquire_read(client, "f:rw", &o, &r), DLOCK_OK);
    assert_int_equal(th_redis_int(&redis, "ZADD f:rw XX 1 %s", dlock_token(r)), 0); /* expired */
    assert_int_equal(dlock_fence_raise(r, row + 50), DLOCK_ERR_LOST);
    assert_int_equal(dlock_release(r), DLOCK_ERR_LOST);
    assert_int_equal(dlock_acquire_write(client, "f:rw", &o, &w), DLOCK_OK);
    assert_true(dlock_fence(w) > row + 1); /* one counter for readers and writers */
    assert_int_equal(dlock_fence_raise(w, row + 100), DLOCK_OK);
    assert_int_equal(dlock_fence(w), row + 101);
    assert_int_equal(dlock_release(w), DLOCK_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_holder_raises_its_fence_past_a_token_from_the_future),
        cmocka_unit_test(test_a_holder_whose_key_moved_on_gets_no_fence),
        cmocka_unit_test(test_a_holder_whose_key_expired_gets_no_fence),
        cmocka_unit_test(test_a_floor_at_the_cap_gives_an_exact_fence_and_above_is_refused),
        cmocka_unit_test(test_a_counter_past_2_to_the_53_refuses_the_raise_and_keeps_the_holder),
        cmocka_unit_test(test_a_raise_across_a_digit_boundary_never_lowers_the_counter),
        cmocka_unit_test(test_an_acquire_that_can_draw_no_fence_takes_nothing),
        cmocka_unit_test(test_a_release_with_no_fence_to_grant_frees_the_key),
        cmocka_unit_test(test_a_multi_lock_raises_the_key_it_is_asked_for),
        cmocka_unit_test(test_a_nested_hold_raises_the_outermost_fence),
        cmocka_unit_test(test_a_hand_off_passes_the_raised_fence_on),
        cmocka_unit_test(test_semaphore_and_read_write_holders_raise_their_fence),
    };
    th_lock_suite(&redis, &client);
    int failed = cmocka_run_group_tests_name("lock, fence raise", tests, th_lock_group_setup,
                                             th_lock_group_teardown);
    th_redis_stop(&redis, 0);
    return failed;
}
