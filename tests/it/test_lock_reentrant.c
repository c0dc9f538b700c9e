/* test_lock_reentrant.c - reentrancy against a real, private redis-server,
 * in both wait modes: a thread that holds a key and asks again gets a nested
 * hold at once, the key leaves Redis (or passes to a waiter) only with the
 * last of the hold's handles whatever the order, the outermost hold's
 * interruption and fence are every handle's, and nobody else - another
 * thread, another client - ever re-enters; without the option, a re-acquire
 * is refused at once. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "lock/dlock.h"
#include "tests/support/harness.h"
#include "tests/support/lockkit.h"

static th_redis redis;
static dlock_client *client; /* the running group's */
static int wait_mode;        /* the running group's, set by main */

/* Reentrant options, in the group's mode, with quick retries. */
static dlock_opts opts(int lease_ms, int wait_ms)
{
    dlock_opts o = th_lock_opts(lease_ms, wait_ms, wait_mode);
    o.reentrant = 1;
    return o;
}

/* Whose token holds key in Redis right now ("" when nobody's). */
static const char *owner(const char *key, char *buf, size_t size)
{
    return th_redis_get(&redis, key, buf, size);
}

static void test_a_nested_acquire_is_immediate_and_the_key_stays_until_the_last_release(
    void **state)
{
    (void)state;
    dlock_opts o = opts(30000, 5000);
    dlock_handle *outer, *mid, *inner;
    char buf[64];
    assert_int_equal(dlock_acquire(client, "r:nest", &o, &outer), DLOCK_OK);
    assert_int_equal(dlock_hold_count(outer), 1);
    long long scripts = th_lock_script_calls(&redis);
    dlock_stats before, after;
    dlock_stats_read(client, &before);
    assert_int_equal(dlock_acquire(client, "r:nest", &o, &mid), DLOCK_OK);
    assert_int_equal(dlock_acquire(client, "r:nest", &o, &inner), DLOCK_OK);
    assert_int_equal(th_lock_script_calls(&redis), scripts); /* nothing sent to Redis */
    dlock_stats_read(client, &after);
    assert_int_equal(after.acquired, before.acquired); /* nothing acquired either */
    assert_ptr_not_equal(mid, outer);
    assert_ptr_not_equal(inner, mid);
    assert_int_equal(dlock_hold_count(inner), 3);
    assert_int_equal(dlock_hold_count(outer), 3);
    /* every handle is the outermost hold's: its token, fence and key */
    assert_string_equal(dlock_token(inner), dlock_token(outer));
    assert_int_equal(dlock_fence(inner), dlock_fence(outer));
    assert_int_equal(dlock_handoff_seq(inner), dlock_handoff_seq(outer));
    assert_string_equal(dlock_key(inner), "r:nest");
    assert_int_equal(dlock_key_count(inner), 1);
    assert_int_equal(dlock_check(inner), DLOCK_OK);
    assert_int_equal(dlock_sleep(inner, 1), DLOCK_OK);

    assert_int_equal(dlock_release(inner), DLOCK_OK);
    assert_int_equal(dlock_hold_count(mid), 2);
    assert_string_equal(owner("r:nest", buf, sizeof(buf)), dlock_token(outer));
    assert_int_equal(dlock_release(mid), DLOCK_OK);
    assert_int_equal(dlock_hold_count(outer), 1);
    assert_string_equal(owner("r:nest", buf, sizeof(buf)), dlock_token(outer));
    assert_int_equal(th_lock_script_calls(&redis), scripts); /* the inner releases sent nothing */
    assert_int_equal(dlock_release(outer), DLOCK_OK);
    assert_int_equal(th_redis_int(&redis, "EXISTS r:nest"), 0);
    dlock_stats_read(client, &after);
    assert_int_equal(after.hold_count, before.hold_count + 1); /* one hold */
}

/* The outermost handle released first: the key stays, held by the nested
 * handle, and leaves with it; nobody else gets it in between. */
static void test_release_in_the_wrong_order_keeps_the_key_until_the_last(void **state)
{
    (void)state;
    dlock_opts o = opts(30000, 0);
    dlock_handle *outer, *inner, *h;
    char token[DLOCK_TOKEN_LEN + 1], buf[64];
    dlock_stats before, after;
    dlock_stats_read(client, &before);
    assert_int_equal(dlock_acquire(client, "r:order", &o, &outer), DLOCK_OK);
    assert_int_equal(dlock_acquire(client, "r:order", &o, &inner), DLOCK_OK);
    int64_t fence = dlock_fence(outer);
    snprintf(token, sizeof(token), "%s", dlock_token(outer));
    assert_int_equal(dlock_release(outer), DLOCK_OK);
    assert_string_equal(owner("r:order", buf, sizeof(buf)), token);
    dlock_stats_read(client, &after);
    assert_int_equal(after.hold_count, before.hold_count); /* the hold goes on */
    assert_int_equal(dlock_hold_count(inner), 1);
    assert_int_equal(dlock_check(inner), DLOCK_OK);
    assert_int_equal(dlock_fence(inner), fence);
    assert_string_equal(dlock_token(inner), token);
    dlock_client *other = th_lock_client(&redis);
    assert_non_null(other);
    assert_int_equal(dlock_acquire(other, "r:order", &o, &h), DLOCK_ERR_TIMEOUT);
    /* still this thread's: it nests again in the hold its outer handle left */
    dlock_handle *again;
    assert_int_equal(dlock_acquire(client, "r:order", &o, &again), DLOCK_OK);
    assert_int_equal(dlock_fence(again), fence);
    assert_int_equal(dlock_release(inner), DLOCK_OK);
    assert_string_equal(owner("r:order", buf, sizeof(buf)), token);
    th_sleep_ms(200);
    assert_int_equal(dlock_release(again), DLOCK_OK);
    assert_int_equal(th_redis_int(&redis, "EXISTS r:order"), 0);
    dlock_stats_read(client, &after); /* one hold, up to its last release */
    assert_int_equal(after.hold_count, before.hold_count + 1);
    assert_true(after.hold_sum_us - before.hold_sum_us >= 200000);
    assert_int_equal(dlock_acquire(other, "r:order", &o, &h), DLOCK_OK);
    assert_true(dlock_fence(h) > fence);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    dlock_client_free(other);
}

/* max_renewals is the outermost hold's: the nested handle's own options
 * (no limit) change nothing, its sleep is cut short, every handle reports
 * the interrupt, a handle nested afterwards too, and the last release
 * returns it. */
static void test_an_interrupt_while_nested_is_seen_by_every_handle(void **state)
{
    (void)state;
    dlock_opts o = opts(900, 0), unlimited = opts(30000, 0); /* renewed every 300 ms */
    o.max_renewals = 2;
    unlimited.max_renewals = 0;
    dlock_handle *outer, *inner, *late;
    assert_int_equal(dlock_acquire(client, "r:interrupt", &o, &outer), DLOCK_OK);
    assert_int_equal(dlock_acquire(client, "r:interrupt", &unlimited, &inner), DLOCK_OK);
    int64_t t0 = th_now_ms();
    assert_int_equal(dlock_sleep(inner, 5000), DLOCK_ERR_INTERRUPTED);
    assert_true(th_now_ms() - t0 < 4000); /* due at about 900 ms: hang bound only */
    assert_int_equal(dlock_renewals(inner), 2);
    assert_int_equal(dlock_check(outer), DLOCK_ERR_INTERRUPTED);
    assert_int_equal(dlock_check(inner), DLOCK_ERR_INTERRUPTED);
    /* an interrupted hold still holds the key: a nested acquire joins it */
    assert_int_equal(dlock_acquire(client, "r:interrupt", &unlimited, &late), DLOCK_OK);
    assert_int_equal(dlock_check(late), DLOCK_ERR_INTERRUPTED);
    assert_int_equal(dlock_release(late), DLOCK_ERR_INTERRUPTED);
    assert_int_equal(dlock_release(outer), DLOCK_ERR_INTERRUPTED); /* not the last */
    int rc = dlock_release(inner); /* the last: the key goes, if the lease didn't already */
    assert_true(rc == DLOCK_ERR_INTERRUPTED || rc == DLOCK_ERR_LOST);
    assert_int_equal(th_redis_int(&redis, "EXISTS r:interrupt"), 0);
}

/* Past its local deadline while a renewal is held up (every client paused
 * in Redis), a hold may or may not hold: asking again is refused at once,
 * neither nested in it nor left to wait in Redis for its own token. */
static void test_a_hold_whose_renewal_is_late_is_not_entered(void **state)
{
    (void)state;
    dlock_opts o = opts(300, 0); /* renewed at 100 ms; valid to about 290 */
    dlock_handle *h, *again;
    assert_int_equal(dlock_acquire(client, "r:late", &o, &h), DLOCK_OK);
    redisContext *rc = th_redis_connect(&redis);
    freeReplyObject(redisCommand(rc, "CLIENT PAUSE 1500 ALL"));
    th_sleep_ms(500);
    int64_t t0 = th_now_ms();
    assert_int_equal(dlock_check(h), DLOCK_ERR_LOST);
    assert_int_equal(dlock_acquire(client, "r:late", &o, &again), DLOCK_ERR_INVALID);
    assert_true(th_now_ms() - t0 < 300); /* at once, not after the pause */
    assert_non_null(strstr(dlock_errstr(), "ran past its lease"));
    freeReplyObject(redisCommand(rc, "CLIENT UNPAUSE"));
    redisFree(rc);
    int rc_release = dlock_release(h);
    assert_true(rc_release == DLOCK_OK || rc_release == DLOCK_ERR_LOST);
    assert_int_equal(th_redis_int(&redis, "EXISTS r:late"), 0);
}

/* A lost hold holds nothing: asking again takes the key anew, as a new
 * outermost hold; the lost one's handles keep saying LOST. */
static void test_a_lost_hold_holds_nothing_and_the_key_is_taken_anew(void **state)
{
    (void)state;
    dlock_opts o = opts(100, 0);
    o.watchdog = 0;
    dlock_handle *old, *old_inner, *fresh;
    assert_int_equal(dlock_acquire(client, "r:lost", &o, &old), DLOCK_OK);
    assert_int_equal(dlock_acquire(client, "r:lost", &o, &old_inner), DLOCK_OK);
    th_sleep_ms(250);
    assert_int_equal(dlock_check(old_inner), DLOCK_ERR_LOST);
    o.lease_ms = 5000;
    o.wait_ms = 3000;
    assert_int_equal(dlock_acquire(client, "r:lost", &o, &fresh), DLOCK_OK);
    assert_string_not_equal(dlock_token(fresh), dlock_token(old));
    assert_true(dlock_fence(fresh) > dlock_fence(old));
    assert_int_equal(dlock_hold_count(fresh), 1);
    assert_int_equal(dlock_release(old_inner), DLOCK_ERR_LOST);
    assert_int_equal(dlock_release(old), DLOCK_ERR_LOST);
    assert_int_equal(dlock_check(fresh), DLOCK_OK);
    assert_int_equal(dlock_release(fresh), DLOCK_OK);
}

struct asker {
    dlock_client *c;
    const char *key;
    dlock_opts o;
    int rc;
};

static void *ask(void *arg)
{
    struct asker *a = arg;
    dlock_handle *h;
    if ((a->rc = dlock_acquire(a->c, a->key, &a->o, &h)) == DLOCK_OK)
        dlock_release(h);
    return NULL;
}

/* Reentrancy is the thread's on its client: another thread of the same
 * client waits, and so does this thread on another client (another process,
 * as far as the lock can tell). */
static void test_other_threads_and_other_clients_are_never_reentrant(void **state)
{
    (void)state;
    dlock_opts o = opts(30000, 0), wait = opts(30000, 300);
    dlock_handle *h, *h2;
    assert_int_equal(dlock_acquire(client, "r:others", &o, &h), DLOCK_OK);
    struct asker a = {client, "r:others", wait, -100};
    pthread_t t;
    pthread_create(&t, NULL, ask, &a);
    pthread_join(t, NULL);
    assert_int_equal(a.rc, DLOCK_ERR_TIMEOUT);
    dlock_client *other = th_lock_client(&redis);
    assert_non_null(other);
    assert_int_equal(dlock_acquire(other, "r:others", &wait, &h2), DLOCK_ERR_TIMEOUT);
    assert_int_equal(dlock_hold_count(h), 1);
    char token[DLOCK_TOKEN_LEN + 1], buf[64];
    snprintf(token, sizeof(token), "%s", dlock_token(h));
    assert_int_equal(dlock_release(h), DLOCK_OK); /* one handle: released for real */
    /* (in notify mode the release may grant the key to a waiter that just gave up) */
    assert_string_not_equal(owner("r:others", buf, sizeof(buf)), token);
    dlock_client_free(other);
}

static int mark(dlock_handle *h, void *arg)
{
    (void)h;
    return ++*(int *)arg;
}

/* Without the option (the default) a thread that asks for a key it holds
 * is told so at once - nothing sent - instead of waiting wait_ms for itself;
 * its hold is untouched, and once released the key can be taken again. */
static void test_without_reentrant_a_reacquire_is_refused_at_once(void **state)
{
    (void)state;
    dlock_opts o = opts(30000, 5000);
    o.reentrant = 0;
    dlock_handle *h, *h2 = (dlock_handle *)1;
    assert_int_equal(dlock_acquire(client, "r:plain", &o, &h), DLOCK_OK);
    long long scripts = th_lock_script_calls(&redis);
    int64_t t0 = th_now_ms();
    assert_int_equal(dlock_acquire(client, "r:plain", &o, &h2), DLOCK_ERR_INVALID);
    assert_true(th_now_ms() - t0 < 1000); /* not the 5 s wait: hang bound only */
    assert_null(h2);
    assert_non_null(strstr(dlock_errstr(), "already held by this thread"));
    assert_int_equal(th_lock_script_calls(&redis), scripts);
    int calls = 0, fn_rc = -100;
    assert_int_equal(dlock_run(client, "r:plain", &o, mark, &calls, &fn_rc), DLOCK_ERR_INVALID);
    assert_int_equal(calls, 0); /* fn never ran */
    assert_int_equal(fn_rc, -100);
    assert_int_equal(dlock_check(h), DLOCK_OK);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    assert_int_equal(dlock_acquire(client, "r:plain", &o, &h), DLOCK_OK);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    o.reentrant = 2;
    assert_int_equal(dlock_acquire(client, "r:plain", &o, &h), DLOCK_ERR_INVALID);
}

static int count_holds(dlock_handle *h, void *arg)
{
    (void)arg;
    return dlock_hold_count(h);
}

/* dlock_run inside dlock_run on one key: the inner one runs at once, nested,
 * and leaves the key to the outer one. */
static int run_nested(dlock_handle *h, void *arg)
{
    int inner_rc = -100;
    int rc = dlock_run(client, dlock_key(h), arg, count_holds, NULL, &inner_rc);
    if (rc != DLOCK_OK || inner_rc != 2 || th_redis_int(&redis, "EXISTS r:run") != 1)
        return -1;
    return dlock_hold_count(h);
}

static void test_dlock_run_nests_in_the_threads_hold(void **state)
{
    (void)state;
    dlock_opts o = opts(30000, 0);
    int fn_rc = -100;
    assert_int_equal(dlock_run(client, "r:run", &o, run_nested, &o, &fn_rc), DLOCK_OK);
    assert_int_equal(fn_rc, 1);
    assert_int_equal(th_redis_int(&redis, "EXISTS r:run"), 0);
}

/* A single-key acquire nests in the thread's multi-lock part for that key
 * (the set's interruption is its), and outlives the set released first. A
 * multi-lock with a key the thread holds is refused, nothing taken. */
static void test_a_key_nests_in_a_multi_lock_but_a_multi_lock_never_nests(void **state)
{
    (void)state;
    const char *keys[] = {"r:m:b", "r:m:a"}, *with_held[] = {"r:m:c", "r:m:a"};
    dlock_opts o = opts(30000, 0);
    dlock_handle *set, *single, *h;
    char buf[64];
    assert_int_equal(dlock_acquire_multi(client, keys, 2, &o, &set), DLOCK_OK);
    assert_int_equal(dlock_acquire(client, "r:m:b", &o, &single), DLOCK_OK);
    assert_int_equal(dlock_fence(single), dlock_fence_at(set, 1));
    assert_string_equal(dlock_token(single), owner("r:m:b", buf, sizeof(buf)));
    assert_int_equal(dlock_hold_count(single), 2);
    assert_int_equal(dlock_hold_count(set), 1);
    assert_int_equal(dlock_acquire_multi(client, with_held, 2, &o, &h), DLOCK_ERR_INVALID);
    assert_non_null(strstr(dlock_errstr(), "r:m:a"));
    assert_int_equal(dlock_release(set), DLOCK_OK);
    assert_int_equal(th_redis_int(&redis, "EXISTS r:m:a"), 0);
    assert_int_equal(th_redis_int(&redis, "EXISTS r:m:b"), 1); /* still the single's */
    assert_int_equal(dlock_check(single), DLOCK_OK);
    assert_int_equal(dlock_acquire_multi(client, with_held, 2, &o, &h), DLOCK_OK);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    const char *with_single[] = {"r:m:b", "r:m:c"};
    assert_int_equal(dlock_acquire_multi(client, with_single, 2, &o, &h), DLOCK_ERR_INVALID);
    assert_int_equal(th_redis_int(&redis, "EXISTS r:m:c"), 0); /* nothing taken */
    assert_int_equal(dlock_release(single), DLOCK_OK);
    assert_int_equal(th_redis_int(&redis, "EXISTS r:m:b"), 0);

    o.lease_ms = 900; /* the set's max_renewals interrupts the key nested in it, at
                       * ~900 ms, 600 ms before the lease ends: late renewals are in time */
    o.max_renewals = 2;
    assert_int_equal(dlock_acquire_multi(client, keys, 2, &o, &set), DLOCK_OK);
    assert_int_equal(dlock_acquire(client, "r:m:a", &o, &single), DLOCK_OK);
    assert_int_equal(dlock_sleep(single, 5000), DLOCK_ERR_INTERRUPTED);
    assert_int_equal(dlock_release(single), DLOCK_ERR_INTERRUPTED);
    assert_int_equal(dlock_release(set), DLOCK_ERR_INTERRUPTED);
}

struct waiter {
    const char *key;
    dlock_opts o;
    _Atomic pid_t tid; /* its thread's, once it is about to ask */
    _Atomic int got;   /* 1 once it holds the key */
    int rc, seq;
    char token[DLOCK_TOKEN_LEN + 1];
};

static void *wait_for_key(void *arg)
{
    struct waiter *w = arg;
    dlock_handle *h;
    atomic_store(&w->tid, gettid());
    if ((w->rc = dlock_acquire(client, w->key, &w->o, &h)) != DLOCK_OK)
        return NULL;
    w->seq = dlock_handoff_seq(h);
    snprintf(w->token, sizeof(w->token), "%s", dlock_token(h));
    atomic_store(&w->got, 1);
    dlock_release(h);
    return NULL;
}

/* Calls the running group's client has had answered (the waiter's attempts
 * in spin mode; the holder sends nothing while nested). */
static uint64_t client_calls(void)
{
    dlock_node_info info;
    dlock_node_info_read(client, 0, &info);
    return info.calls;
}

/* Returns once w is observably waiting for the key, failing the test after
 * a generous bound. Spin mode: Redis answered two more of the client's calls
 * (so at least one of w's attempts was refused). Notify mode: a local waiter
 * sends nothing, so its thread (/proc/<tid> is the thread's own) is seen
 * asleep in dlock_acquire at five looks 10 ms apart: the local queue's wait,
 * not a moment's wait for the client's mutex. */
static void await_waiting(struct waiter *w, uint64_t calls_before)
{
    int64_t until = th_now_ms() + 10000;
    int looks = 0;
    while (th_now_ms() < until) {
        if (wait_mode == DLOCK_WAIT_SPIN && client_calls() >= calls_before + 2)
            return;
        pid_t tid = atomic_load(&w->tid);
        int asleep = wait_mode == DLOCK_WAIT_NOTIFY && tid && th_proc_state(tid) == 'S';
        looks = asleep ? looks + 1 : 0;
        if (looks == 5)
            return;
        th_sleep_ms(10);
    }
    fail_msg("the waiter for %s was not seen waiting within 10 s", w->key);
}

/* Another thread of the process waits for the key: releasing an inner handle, in either
 * order, must not hand it the key; the last release does. */
static void handoff_waits_for_the_last_release(int outer_first)
{
    const char *key = outer_first ? "r:handoff:wrong" : "r:handoff";
    dlock_opts o = opts(30000, 0);
    o.handoff_ms = 10000; /* the waiter queues for a while: keep the lease young enough */
    dlock_handle *outer, *inner;
    assert_int_equal(dlock_acquire(client, key, &o, &outer), DLOCK_OK);
    assert_int_equal(dlock_acquire(client, key, &o, &inner), DLOCK_OK);
    struct waiter w = {.key = key, .o = opts(30000, 20000), .rc = -100, .seq = -1};
    dlock_stats before, after;
    dlock_stats_read(client, &before);
    pthread_t t;
    pthread_create(&t, NULL, wait_for_key, &w);
    await_waiting(&w, client_calls()); /* notify: in the local FIFO; spin: polling */
    assert_int_equal(dlock_release(outer_first ? outer : inner), DLOCK_OK);
    dlock_handle *last = outer_first ? inner : outer;
    char buf[64];
    assert_string_equal(owner(key, buf, sizeof(buf)), dlock_token(last)); /* not let go */
    dlock_stats_read(client, &after);
    assert_int_equal(after.handoffs, before.handoffs); /* nor handed over (done in the release) */
    if (wait_mode == DLOCK_WAIT_SPIN)
        await_waiting(&w, client_calls()); /* it tried again since, and was refused */
    assert_int_equal(atomic_load(&w.got), 0);
    assert_string_equal(owner(key, buf, sizeof(buf)), dlock_token(last));
    assert_int_equal(dlock_release(last), DLOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, DLOCK_OK);
    if (wait_mode == DLOCK_WAIT_NOTIFY)
        assert_int_equal(w.seq, 1); /* handed over by the last release */
}

static void test_a_handoff_never_goes_to_a_waiter_while_the_holder_is_nested(void **state)
{
    (void)state;
    handoff_waits_for_the_last_release(0);
    handoff_waits_for_the_last_release(1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            test_a_nested_acquire_is_immediate_and_the_key_stays_until_the_last_release),
        cmocka_unit_test(test_release_in_the_wrong_order_keeps_the_key_until_the_last),
        cmocka_unit_test(test_an_interrupt_while_nested_is_seen_by_every_handle),
        cmocka_unit_test(test_a_hold_whose_renewal_is_late_is_not_entered),
        cmocka_unit_test(test_a_lost_hold_holds_nothing_and_the_key_is_taken_anew),
        cmocka_unit_test(test_other_threads_and_other_clients_are_never_reentrant),
        cmocka_unit_test(test_without_reentrant_a_reacquire_is_refused_at_once),
        cmocka_unit_test(test_dlock_run_nests_in_the_threads_hold),
        cmocka_unit_test(test_a_key_nests_in_a_multi_lock_but_a_multi_lock_never_nests),
        cmocka_unit_test(test_a_handoff_never_goes_to_a_waiter_while_the_holder_is_nested),
    };
    th_lock_suite(&redis, &client);
    wait_mode = DLOCK_WAIT_SPIN;
    int failed = cmocka_run_group_tests_name("reentrant lock, spin mode", tests,
                                             th_lock_group_setup, th_lock_group_teardown);
    wait_mode = DLOCK_WAIT_NOTIFY;
    failed += cmocka_run_group_tests_name("reentrant lock, notify mode", tests,
                                          th_lock_group_setup, th_lock_group_teardown);
    th_redis_stop(&redis, 0);
    return failed;
}
