/* test_lock_async_calls.c - the asynchronous API beyond the acquires'
 * waiting (dlock_async.h), against a real, private redis-server: done on
 * the caller's executor (cfg.post, a tiny one of the test's) and a hand-off
 * from a release on that executor posted from inside the release; asks
 * behind a local holder that wake none of libdlock's threads; without
 * post, done on libdlock's threads; dlock_cancel of a waiter, of a
 * multi-lock that had a key, of a sleep, and refused once a result is
 * decided; dlock_release_async by hand-off, in Redis, of a lost lease, of
 * every kind of handle; dlock_sleep_async the full time, cut short by an
 * interrupt or a loss. Time bounds only catch hangs. */
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
#include "lock/dlock_async.h"
#include "lock/dlock_rw.h"
#include "lock/dlock_sem.h"
#include "tests/support/asynckit.h"
#include "tests/support/harness.h"
#include "tests/support/lockkit.h"

static th_redis redis;
static dlock_client *other; /* the group's: another process, as far as the lock can tell */
static th_exec *exec;       /* the executor of the test that has one */
static _Atomic int releasing; /* the executor is inside a dlock_release of the test's */
static _Atomic int ended;     /* calls ended so far: each call's turn */

/* One asynchronous call of a test: what its done saw, and where. */
struct call {
    dlock_req req;
    _Atomic int done, turn;
    int rc, on_exec, off_main;
    int64_t at; /* when done ran */
    _Atomic int posted_in_release, posted_on_exec;
    dlock_handle *h;
    char err[200];
};

static pthread_t main_thread;

static void on_done(dlock_req *req)
{
    struct call *k = req->data;
    k->rc = req->rc;
    k->h = req->h;
    memcpy(k->err, req->err, sizeof(k->err));
    k->on_exec = exec != NULL && th_exec_is_mine(exec);
    k->off_main = !pthread_equal(pthread_self(), main_thread);
    k->at = th_now_ms();
    atomic_store(&k->turn, atomic_fetch_add(&ended, 1) + 1);
    atomic_store(&k->done, 1);
}

static void call_init(struct call *k)
{
    memset(k, 0, sizeof(*k));
    k->req = (dlock_req){.done = on_done, .data = k};
}

/* Waits (at most bound_ms: a hang) for k's done. */
static void wait_done(struct call *k, int bound_ms)
{
    int64_t end = th_now_ms() + (int64_t)bound_ms * TH_SLOWER;
    while (!atomic_load(&k->done) && th_now_ms() < end)
        usleep(2000);
    assert_true(atomic_load(&k->done));
}

/* cfg.post of the tests with an executor: where the post came from, then
 * the executor's queue. */
static void post_recording(void *ctx, dlock_req *req)
{
    struct call *k = req->data;
    atomic_store(&k->posted_on_exec, th_exec_is_mine(exec));
    atomic_store(&k->posted_in_release, atomic_load(&releasing) && th_exec_is_mine(exec));
    th_exec_post(ctx, req);
}

static dlock_client *client_posting_to(th_exec *e)
{
    dlock_config cfg;
    dlock_config_defaults(&cfg);
    cfg.port = redis.port;
    cfg.post = post_recording;
    cfg.post_ctx = e;
    dlock_client *c;
    assert_int_equal(dlock_client_new(&cfg, &c), DLOCK_OK);
    return c;
}

static dlock_client *new_client(void)
{
    dlock_client *c = th_lock_client(&redis);
    assert_non_null(c);
    return c;
}

/* Options whose hand-offs no slow machine can outlast. */
static dlock_opts patient(int lease_ms)
{
    dlock_opts o = th_lock_opts(lease_ms, 60000, DLOCK_WAIT_NOTIFY);
    o.handoff_ms = 60000;
    return o;
}

/* A job for the executor: releases h there, inside dlock_release as it
 * posts what the release ends. */
struct release_job {
    dlock_req req;
    dlock_handle *h;
    _Atomic int done;
    int rc;
};

static void run_release_job(dlock_req *req)
{
    struct release_job *j = req->data;
    atomic_store(&releasing, 1);
    j->rc = dlock_release(j->h);
    atomic_store(&releasing, 0);
    atomic_store(&j->done, 1);
}

static void test_done_runs_on_the_callers_executor_and_a_hand_off_posts_from_the_release(
    void **state)
{
    (void)state;
    exec = th_exec_start();
    dlock_client *c = client_posting_to(exec);
    dlock_opts o = patient(30000);
    struct call a, b;
    call_init(&a);
    call_init(&b);
    assert_int_equal(dlock_acquire_async(c, "calls:exec", &o, &a.req), DLOCK_OK);
    wait_done(&a, 10000);
    assert_int_equal(a.rc, DLOCK_OK);
    assert_true(a.on_exec);                       /* done ran on the executor, */
    assert_false(atomic_load(&a.posted_on_exec)); /* posted from a libdlock thread */
    assert_int_equal(dlock_acquire_async(c, "calls:exec", &o, &b.req), DLOCK_OK);
    assert_true(th_threads_idle(10000 * TH_SLOWER)); /* b waits behind a, parked */
    struct release_job j = {.req = {.done = run_release_job}, .h = a.h};
    j.req.data = &j;
    th_exec_post(exec, &j.req);
    wait_done(&b, 10000);
    assert_true(atomic_load(&j.done));
    assert_int_equal(j.rc, DLOCK_OK);
    assert_int_equal(b.rc, DLOCK_OK);
    assert_int_equal(dlock_handoff_seq(b.h), 1); /* the lease went straight to b */
    assert_true(atomic_load(&b.posted_in_release)); /* posted inside the release ... */
    assert_true(b.on_exec);                         /* ... and run by the executor */
    assert_int_equal(dlock_release(b.h), DLOCK_OK);
    dlock_client_free(c);
    th_exec_stop(exec);
    exec = NULL;
}

/* A batch of stockd's asks for its item's lock while the last batch holds
 * it: an ask that can only wait (behind a valid local holder, or behind the
 * head) sleeps on the runner's timers from the start, waking none of
 * libdlock's threads; the hand-off still ends it inline. */
static void test_asks_behind_a_local_holder_wake_no_libdlock_thread(void **state)
{
    (void)state;
    enum { N = 60 };
    exec = th_exec_start();
    dlock_client *c = client_posting_to(exec);
    dlock_opts o = patient(30000);
    dlock_handle *h;
    static struct call k[N];
    assert_int_equal(dlock_acquire(c, "calls:parked", &o, &h), DLOCK_OK);
    call_init(&k[0]); /* the first arms the runner's first timer: its threads learn of it */
    assert_int_equal(dlock_acquire_async(c, "calls:parked", &o, &k[0].req), DLOCK_OK);
    assert_true(th_threads_idle(10000 * TH_SLOWER));
    long before = th_threads_sleeps();
    for (int i = 1; i < N; i++) {
        call_init(&k[i]);
        assert_int_equal(dlock_acquire_async(c, "calls:parked", &o, &k[i].req), DLOCK_OK);
        usleep(3000); /* time for a thread woken by the ask to step it and sleep again */
    }
    assert_true(th_threads_idle(10000 * TH_SLOWER));
    long slept = th_threads_sleeps() - before;
    /* an ask that woke a thread made it sleep again: N - 1 sleeps or so, fewer
     * on a busy machine; a stray one (the subscriber's look, each second) is
     * all that may come now */
    assert_true(slept < N / 6);
    for (int i = 0; i < N; i++)
        assert_false(atomic_load(&k[i].done));
    struct release_job j = {.req = {.done = run_release_job}, .h = h};
    j.req.data = &j;
    th_exec_post(exec, &j.req);
    wait_done(&k[0], 10000);
    assert_int_equal(j.rc, DLOCK_OK);
    assert_int_equal(k[0].rc, DLOCK_OK);
    assert_int_equal(dlock_handoff_seq(k[0].h), 1); /* handed over, ... */
    assert_true(atomic_load(&k[0].posted_in_release)); /* ... ended inside the release */
    for (int i = 1; i < N; i++)
        assert_int_equal(dlock_cancel(&k[i].req), DLOCK_OK);
    for (int i = 1; i < N; i++) {
        wait_done(&k[i], 10000);
        assert_int_equal(k[i].rc, DLOCK_ERR_CANCELLED);
    }
    assert_int_equal(dlock_release(k[0].h), DLOCK_OK);
    dlock_client_free(c);
    th_exec_stop(exec);
    exec = NULL;
}

static void test_without_post_done_runs_on_libdlock_threads_not_in_the_release(void **state)
{
    (void)state;
    dlock_client *c = new_client();
    dlock_opts o = patient(30000);
    dlock_handle *h;
    struct call b;
    call_init(&b);
    assert_int_equal(dlock_acquire(c, "calls:nopost", &o, &h), DLOCK_OK);
    assert_int_equal(dlock_acquire_async(c, "calls:nopost", &o, &b.req), DLOCK_OK);
    assert_true(th_threads_idle(10000 * TH_SLOWER));
    assert_int_equal(dlock_release(h), DLOCK_OK); /* hands over to b */
    wait_done(&b, 10000);
    assert_int_equal(b.rc, DLOCK_OK);
    assert_int_equal(dlock_handoff_seq(b.h), 1);
    assert_true(b.off_main); /* not inside the caller's release */
    assert_int_equal(dlock_release(b.h), DLOCK_OK);
    dlock_client_free(c);
}

static void test_a_cancelled_waiter_holds_nothing_and_the_next_gets_the_key_in_order(
    void **state)
{
    (void)state;
    dlock_client *c = new_client();
    dlock_opts o = th_lock_opts(30000, 60000, DLOCK_WAIT_NOTIFY);
    dlock_opts hold = th_lock_opts(30000, 0, DLOCK_WAIT_NOTIFY);
    dlock_handle *held;
    assert_int_equal(dlock_acquire(other, "calls:cancel", &hold, &held), DLOCK_OK);
    struct call k[3];
    for (int i = 0; i < 3; i++) {
        call_init(&k[i]);
        assert_int_equal(dlock_acquire_async(c, "calls:cancel", &o, &k[i].req), DLOCK_OK);
    }
    assert_int_equal(dlock_cancel(&k[1].req), DLOCK_OK);
    wait_done(&k[1], 10000);
    assert_int_equal(k[1].rc, DLOCK_ERR_CANCELLED);
    assert_null(k[1].h);
    assert_non_null(strstr(k[1].err, "withdrawn"));
    assert_int_equal(dlock_cancel(&k[1].req), DLOCK_ERR_INVALID); /* decided already */
    assert_int_equal(dlock_release(held), DLOCK_OK);
    wait_done(&k[0], 10000);
    assert_int_equal(k[0].rc, DLOCK_OK);
    usleep(100000);
    assert_false(atomic_load(&k[2].done)); /* the next waits for k[0]'s hold, ... */
    assert_int_equal(dlock_release(k[0].h), DLOCK_OK);
    wait_done(&k[2], 10000); /* ... and gets the key after it */
    assert_int_equal(k[2].rc, DLOCK_OK);
    assert_true(atomic_load(&k[2].turn) > atomic_load(&k[0].turn));
    assert_int_equal(dlock_release(k[2].h), DLOCK_OK);
    assert_int_equal(th_redis_int(&redis, "EXISTS %s", "calls:cancel"), 0);
    dlock_client_free(c);
}

static void test_a_cancel_after_the_grant_is_refused_and_done_still_gets_the_key(void **state)
{
    (void)state;
    exec = th_exec_start();
    dlock_client *c = client_posting_to(exec);
    dlock_opts o = th_lock_opts(30000, 60000, DLOCK_WAIT_NOTIFY);
    struct call k;
    call_init(&k);
    th_exec_hold(exec, 1); /* done waits in the executor's queue */
    assert_int_equal(dlock_acquire_async(c, "calls:late", &o, &k.req), DLOCK_OK);
    int64_t end = th_now_ms() + 10000 * TH_SLOWER;
    while (th_exec_posts(exec) == 0 && th_now_ms() < end)
        usleep(2000);
    assert_int_equal(th_exec_posts(exec), 1); /* granted and posted, done not run */
    assert_int_equal(dlock_cancel(&k.req), DLOCK_ERR_INVALID);
    th_exec_hold(exec, 0);
    wait_done(&k, 10000);
    assert_int_equal(k.rc, DLOCK_OK);
    struct call r;
    call_init(&r);
    dlock_release_async(k.h, &r.req);
    assert_int_equal(dlock_cancel(&r.req), DLOCK_ERR_INVALID); /* a release can't be withdrawn */
    wait_done(&r, 10000);
    assert_int_equal(r.rc, DLOCK_OK);
    dlock_client_free(c);
    th_exec_stop(exec);
    exec = NULL;
}

static void test_a_cancelled_multi_lock_gives_back_the_key_it_had_taken(void **state)
{
    (void)state;
    dlock_client *c = new_client();
    dlock_opts o = th_lock_opts(30000, 60000, DLOCK_WAIT_NOTIFY);
    dlock_opts now = th_lock_opts(30000, 0, DLOCK_WAIT_NOTIFY);
    dlock_handle *held, *h;
    assert_int_equal(dlock_acquire(other, "calls:m:b", &now, &held), DLOCK_OK);
    const char *keys[] = {"calls:m:b", "calls:m:a"}; /* a is taken first */
    struct call k;
    call_init(&k);
    assert_int_equal(dlock_acquire_multi_async(c, keys, 2, &o, &k.req), DLOCK_OK);
    int64_t end = th_now_ms() + 10000 * TH_SLOWER;
    while (th_redis_int(&redis, "EXISTS %s", "calls:m:a") != 1 && th_now_ms() < end)
        usleep(2000);
    assert_int_equal(th_redis_int(&redis, "EXISTS %s", "calls:m:a"), 1);
    assert_int_equal(dlock_cancel(&k.req), DLOCK_OK);
    wait_done(&k, 10000);
    assert_int_equal(k.rc, DLOCK_ERR_CANCELLED);
    assert_null(k.h);
    assert_int_equal(dlock_acquire(other, "calls:m:a", &now, &h), DLOCK_OK); /* given back */
    assert_int_equal(dlock_release(h), DLOCK_OK);
    assert_int_equal(dlock_release(held), DLOCK_OK);
    dlock_client_free(c);
}

static void test_release_async_hands_over_at_once_or_gives_back_in_redis(void **state)
{
    (void)state;
    dlock_client *c = new_client();
    dlock_opts o = patient(30000);
    dlock_handle *h;
    struct call k, r1, r2;
    call_init(&k);
    call_init(&r1);
    call_init(&r2);
    assert_int_equal(dlock_acquire(c, "calls:rel", &o, &h), DLOCK_OK);
    assert_int_equal(dlock_acquire_async(c, "calls:rel", &o, &k.req), DLOCK_OK);
    dlock_release_async(h, &r1.req); /* a local waiter: handed over, no Redis */
    wait_done(&r1, 10000);
    wait_done(&k, 10000);
    assert_int_equal(r1.rc, DLOCK_OK);
    assert_null(r1.h);
    assert_true(r1.off_main);
    assert_int_equal(k.rc, DLOCK_OK);
    assert_int_equal(dlock_handoff_seq(k.h), 1);
    dlock_release_async(k.h, &r2.req); /* nobody waits: back to Redis, on the runner */
    wait_done(&r2, 10000);
    assert_int_equal(r2.rc, DLOCK_OK);
    assert_int_equal(th_redis_int(&redis, "EXISTS %s", "calls:rel"), 0);
    dlock_client_free(c);
}

static void test_release_async_of_a_key_deleted_under_the_holder_says_lost(void **state)
{
    (void)state;
    dlock_client *c = new_client();
    dlock_opts o = th_lock_opts(30000, 0, DLOCK_WAIT_NOTIFY);
    dlock_handle *h;
    struct call r;
    call_init(&r);
    assert_int_equal(dlock_acquire(c, "calls:lost", &o, &h), DLOCK_OK);
    assert_int_equal(th_redis_int(&redis, "DEL %s", "calls:lost"), 1);
    dlock_release_async(h, &r.req);
    wait_done(&r, 10000);
    assert_int_equal(r.rc, DLOCK_ERR_LOST);
    assert_string_not_equal(r.err, "");
    dlock_client_free(c);
}

/* Releases h asynchronously and waits: what done got. */
static int release_async_and_wait(dlock_handle *h)
{
    struct call r;
    call_init(&r);
    dlock_release_async(h, &r.req);
    wait_done(&r, 10000);
    return r.rc;
}

static void test_release_async_releases_every_kind_of_handle(void **state)
{
    (void)state;
    dlock_client *c = new_client();
    dlock_opts o = th_lock_opts(30000, 0, DLOCK_WAIT_NOTIFY);
    dlock_handle *h, *nested;
    const char *pair[] = {"calls:k:a", "calls:k:b"};
    assert_int_equal(dlock_acquire_multi(c, pair, 2, &o, &h), DLOCK_OK);
    assert_int_equal(release_async_and_wait(h), DLOCK_OK);
    assert_int_equal(th_redis_int(&redis, "EXISTS %s %s", "calls:k:a", "calls:k:b"), 0);
    assert_int_equal(dlock_sem_acquire(c, "calls:k:sem", 1, &o, &h), DLOCK_OK);
    assert_int_equal(release_async_and_wait(h), DLOCK_OK);
    assert_int_equal(dlock_sem_acquire(other, "calls:k:sem", 1, &o, &h), DLOCK_OK);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    assert_int_equal(dlock_acquire_read(c, "calls:k:rw", &o, &h), DLOCK_OK);
    assert_int_equal(release_async_and_wait(h), DLOCK_OK);
    assert_int_equal(dlock_acquire_write(c, "calls:k:rw", &o, &h), DLOCK_OK);
    assert_int_equal(release_async_and_wait(h), DLOCK_OK);
    assert_int_equal(dlock_acquire_write(other, "calls:k:rw", &o, &h), DLOCK_OK);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    o.reentrant = 1; /* a nested hold: the key goes with its last handle */
    assert_int_equal(dlock_acquire(c, "calls:k:n", &o, &h), DLOCK_OK);
    assert_int_equal(dlock_acquire(c, "calls:k:n", &o, &nested), DLOCK_OK);
    assert_int_equal(release_async_and_wait(nested), DLOCK_OK);
    assert_int_equal(th_redis_int(&redis, "EXISTS %s", "calls:k:n"), 1);
    assert_int_equal(release_async_and_wait(h), DLOCK_OK);
    assert_int_equal(th_redis_int(&redis, "EXISTS %s", "calls:k:n"), 0);
    /* no request: the result is not wanted, the key goes all the same */
    assert_int_equal(dlock_acquire(c, "calls:k:none", &o, &h), DLOCK_OK);
    dlock_release_async(h, NULL);
    int64_t end = th_now_ms() + 10000 * TH_SLOWER;
    while (th_redis_int(&redis, "EXISTS %s", "calls:k:none") != 0 && th_now_ms() < end)
        usleep(2000);
    assert_int_equal(th_redis_int(&redis, "EXISTS %s", "calls:k:none"), 0);
    struct call r; /* no handle: nothing to do, done at once */
    call_init(&r);
    dlock_release_async(NULL, &r.req);
    assert_true(atomic_load(&r.done));
    assert_int_equal(r.rc, DLOCK_OK);
    dlock_client_free(c);
}

static void test_sleep_async_sleeps_the_full_time_and_keeps_the_hold(void **state)
{
    (void)state;
    dlock_client *c = new_client();
    dlock_opts o = th_lock_opts(30000, 0, DLOCK_WAIT_NOTIFY);
    dlock_handle *h, *set, *permit;
    struct call s, again;
    call_init(&s);
    call_init(&again);
    assert_int_equal(dlock_acquire(c, "calls:sleep", &o, &h), DLOCK_OK);
    int64_t start = th_now_ms();
    assert_int_equal(dlock_sleep_async(h, 300, &s.req), DLOCK_OK);
    assert_int_equal(dlock_sleep_async(h, 300, &again.req), DLOCK_ERR_INVALID); /* one a hold */
    assert_int_equal(dlock_release(h), DLOCK_ERR_INVALID); /* not while it sleeps */
    wait_done(&s, 10000);
    assert_true(s.at - start >= 300);
    assert_int_equal(s.rc, DLOCK_OK);
    assert_null(s.h);
    assert_int_equal(dlock_check(h), DLOCK_OK);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    /* a multi-lock's and a permit's sleep as well */
    const char *pair[] = {"calls:sleep:a", "calls:sleep:b"};
    assert_int_equal(dlock_acquire_multi(c, pair, 2, &o, &set), DLOCK_OK);
    assert_int_equal(dlock_sem_acquire(c, "calls:sleep:sem", 2, &o, &permit), DLOCK_OK);
    call_init(&s);
    call_init(&again);
    assert_int_equal(dlock_sleep_async(set, 50, &s.req), DLOCK_OK);
    assert_int_equal(dlock_sleep_async(permit, 0, &again.req), DLOCK_OK);
    wait_done(&s, 10000);
    wait_done(&again, 10000);
    assert_int_equal(s.rc, DLOCK_OK);
    assert_int_equal(again.rc, DLOCK_OK);
    assert_int_equal(dlock_release(set), DLOCK_OK);
    assert_int_equal(dlock_release(permit), DLOCK_OK);
    assert_int_equal(dlock_sleep_async(NULL, 10, &s.req), DLOCK_ERR_INVALID);
    dlock_client_free(c);
}

/* A holder of key on c with o, sleeping asynchronously for ms with s
 * (*start: when it began). */
static dlock_handle *hold_and_sleep(dlock_client *c, const char *key, const dlock_opts *o,
                                    int ms, struct call *s, int64_t *start)
{
    dlock_handle *h;
    call_init(s);
    assert_int_equal(dlock_acquire(c, key, o, &h), DLOCK_OK);
    *start = th_now_ms();
    assert_int_equal(dlock_sleep_async(h, ms, &s->req), DLOCK_OK);
    return h;
}

static void test_sleep_async_of_an_interrupted_holder_ends_soon_after_the_interrupt(
    void **state)
{
    (void)state;
    dlock_client *c = new_client();
    dlock_opts o = th_lock_opts(300, 0, DLOCK_WAIT_NOTIFY);
    o.max_renewals = 2;
    struct call s;
    int64_t start;
    dlock_handle *h = hold_and_sleep(c, "calls:int", &o, 10000, &s, &start);
    wait_done(&s, 10000);
    print_message("the 10 s sleep of a holder interrupted after 2 renewals of 300 ms leases "
                  "ended after %lld ms\n", (long long)(s.at - start));
    assert_int_equal(s.rc, DLOCK_ERR_INTERRUPTED);
    assert_true(s.at - start < 5000); /* woken by the interrupt, not at the end of its 10 s */
    assert_int_equal(dlock_release(h), DLOCK_ERR_INTERRUPTED);
    dlock_client_free(c);
}

static void test_sleep_async_of_a_holder_whose_key_went_ends_lost(void **state)
{
    (void)state;
    dlock_client *c = new_client();
    dlock_opts o = th_lock_opts(600, 0, DLOCK_WAIT_NOTIFY);
    struct call s;
    int64_t start;
    dlock_handle *h = hold_and_sleep(c, "calls:gone", &o, 10000, &s, &start);
    assert_int_equal(th_redis_int(&redis, "DEL %s", "calls:gone"), 1);
    wait_done(&s, 10000); /* the next renewal finds it gone */
    assert_int_equal(s.rc, DLOCK_ERR_LOST);
    assert_true(s.at - start < 5000);
    assert_int_equal(dlock_release(h), DLOCK_ERR_LOST);
    dlock_client_free(c);
}

static void test_a_cancelled_sleep_ends_at_once_and_leaves_the_hold(void **state)
{
    (void)state;
    dlock_client *c = new_client();
    dlock_opts o = th_lock_opts(30000, 0, DLOCK_WAIT_NOTIFY);
    struct call s;
    int64_t start;
    dlock_handle *h = hold_and_sleep(c, "calls:sleepcancel", &o, 60000, &s, &start);
    assert_int_equal(dlock_cancel(&s.req), DLOCK_OK);
    wait_done(&s, 10000);
    assert_int_equal(s.rc, DLOCK_ERR_CANCELLED);
    assert_true(s.at - start < 10000);
    assert_int_equal(dlock_cancel(&s.req), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_check(h), DLOCK_OK);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            test_done_runs_on_the_callers_executor_and_a_hand_off_posts_from_the_release),
        cmocka_unit_test(test_asks_behind_a_local_holder_wake_no_libdlock_thread),
        cmocka_unit_test(test_without_post_done_runs_on_libdlock_threads_not_in_the_release),
        cmocka_unit_test(
            test_a_cancelled_waiter_holds_nothing_and_the_next_gets_the_key_in_order),
        cmocka_unit_test(test_a_cancel_after_the_grant_is_refused_and_done_still_gets_the_key),
        cmocka_unit_test(test_a_cancelled_multi_lock_gives_back_the_key_it_had_taken),
        cmocka_unit_test(test_release_async_hands_over_at_once_or_gives_back_in_redis),
        cmocka_unit_test(test_release_async_of_a_key_deleted_under_the_holder_says_lost),
        cmocka_unit_test(test_release_async_releases_every_kind_of_handle),
        cmocka_unit_test(test_sleep_async_sleeps_the_full_time_and_keeps_the_hold),
        cmocka_unit_test(test_sleep_async_of_an_interrupted_holder_ends_soon_after_the_interrupt),
        cmocka_unit_test(test_sleep_async_of_a_holder_whose_key_went_ends_lost),
        cmocka_unit_test(test_a_cancelled_sleep_ends_at_once_and_leaves_the_hold),
    };
    main_thread = pthread_self();
    th_lock_suite(&redis, &other);
    int failed = cmocka_run_group_tests_name("lock, asynchronous calls", tests,
                                             th_lock_group_setup, th_lock_group_teardown);
    th_redis_stop(&redis, 0);
    return failed;
}
