/* test_lock_async.c - the asynchronous acquires of a lock (dlock_async.h)
 * against a real, private redis-server: ten thousand waiters on one key
 * served once each, one at a time, in the order they asked, by the
 * client's few threads (one thread too), as many threads as
 * cfg.async_threads says; timeouts, Redis killed and the client freed while
 * calls of every kind are pending, and while a waiter is granted its key;
 * multi-locks; async and blocking waiters
 * in one FIFO; spin mode. Time bounds only catch hangs. Semaphores' and
 * read-write locks': test_lock_async_claims.c; where done runs,
 * dlock_cancel, the asynchronous sleep and release: test_lock_async_calls.c. */
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

static dlock_client *new_client(void)
{
    dlock_client *c = th_lock_client(&redis);
    assert_non_null(c);
    return c;
}

/* A client with async_threads threads and post (may be NULL) to ctx. */
static dlock_client *client_with(int async_threads, void (*post)(void *, dlock_req *), void *ctx)
{
    dlock_config cfg;
    dlock_config_defaults(&cfg);
    cfg.port = redis.port;
    cfg.async_threads = async_threads;
    cfg.post = post;
    cfg.post_ctx = ctx;
    dlock_client *c;
    assert_int_equal(dlock_client_new(&cfg, &c), DLOCK_OK);
    return c;
}

/* A holder in another client (another process, as far as the lock can
 * tell) so that every waiter queues first. */
static dlock_handle *hold_elsewhere(dlock_client *holder, const char *key, int lease_ms)
{
    dlock_opts o = th_lock_opts(lease_ms, 0, DLOCK_WAIT_NOTIFY);
    dlock_handle *h;
    assert_int_equal(dlock_acquire(holder, key, &o, &h), DLOCK_OK);
    return h;
}

enum { MANY = 10000 };

/* n async waiters on key, behind a holder elsewhere, all served in order
 * by c's threads, whose number does not grow. */
static void serve_many_in_order(dlock_client *c, const char *key, int n)
{
    struct th_run r;
    struct th_waiter *w = th_run_start(&r, n);
    int before = th_thread_count();
    dlock_handle *held = hold_elsewhere(other, key, 30000);
    dlock_opts o = th_lock_opts(30000, 300000, DLOCK_WAIT_NOTIFY);
    int64_t start = th_now_ms();
    for (int i = 0; i < n; i++)
        assert_int_equal(dlock_acquire_async(c, key, &o, &w[i].req), DLOCK_OK);
    int peak = th_thread_count();
    assert_int_equal(dlock_release(held), DLOCK_OK);
    th_run_wait(&r, 240000);
    int64_t took = th_now_ms() - start;
    int in_order = 0;
    for (int i = 0; i < n; i++)
        in_order += r.order[i] == i;
    print_message("%d async waiters: %d granted in %lld ms, %.4f in asking order, threads "
                  "%d before, %d at the peak\n", n, r.granted, (long long)took,
                  (double)in_order / n, before, peak);
    assert_int_equal(r.granted, n);
    assert_int_equal(peak, before);
    assert_true(in_order >= n * 95 / 100);
    th_run_end(&r, w);
}

static void test_ten_thousand_waiters_are_each_served_once_in_order_by_few_threads(void **state)
{
    (void)state;
    dlock_client *c = new_client();
    serve_many_in_order(c, "async:many", MANY);
    dlock_client_free(c);
}

static void test_a_client_runs_as_many_async_threads_as_its_config_says(void **state)
{
    (void)state;
    int before = th_thread_count();
    dlock_client *one = client_with(1, NULL, NULL);
    int with_one = th_thread_count() - before;
    dlock_client *four = client_with(4, NULL, NULL);
    int with_four = th_thread_count() - before - with_one;
    print_message("a client's threads: %d with async_threads 1, %d with 4\n", with_one,
                  with_four);
    assert_int_equal(with_four, with_one + 3);
    dlock_client_free(four);
    serve_many_in_order(one, "async:one", 1000); /* one thread serves a thousand */
    dlock_client_free(one);

    dlock_config cfg;
    dlock_config_defaults(&cfg);
    dlock_client *c;
    for (int bad = 0; bad <= DLOCK_ASYNC_THREADS_MAX + 1; bad += DLOCK_ASYNC_THREADS_MAX + 1) {
        cfg.async_threads = bad;
        assert_int_equal(dlock_client_new(&cfg, &c), DLOCK_ERR_INVALID);
        assert_non_null(strstr(dlock_errstr(), "async_threads"));
    }
}

static void test_a_waiter_past_its_wait_times_out_and_the_others_go_on(void **state)
{
    (void)state;
    dlock_client *c = new_client();
    struct th_run r;
    struct th_waiter *w = th_run_start(&r, 20);
    dlock_handle *held = hold_elsewhere(other, "async:timeout", 30000);
    dlock_opts quick = th_lock_opts(5000, 300, DLOCK_WAIT_NOTIFY);
    dlock_opts patient = th_lock_opts(5000, 60000, DLOCK_WAIT_NOTIFY);
    for (int i = 0; i < 20; i++) /* every other one gives up while the key is held */
        assert_int_equal(dlock_acquire_async(c, "async:timeout", i % 2 ? &quick : &patient,
                                             &w[i].req), DLOCK_OK);
    int64_t end = th_now_ms() + 30000;
    while (th_now_ms() < end) {
        pthread_mutex_lock(&r.mu);
        int timeouts = r.timeouts;
        pthread_mutex_unlock(&r.mu);
        if (timeouts == 10)
            break;
        usleep(10000);
    }
    assert_int_equal(dlock_release(held), DLOCK_OK);
    th_run_wait(&r, 60000);
    assert_int_equal(r.timeouts, 10);
    assert_int_equal(r.granted, 10);
    for (int i = 0; i < 20; i++)
        assert_int_equal(w[i].rc, i % 2 ? DLOCK_ERR_TIMEOUT : DLOCK_OK);
    assert_non_null(strstr(w[1].req.err, "still held by another owner"));
    for (int i = 0; i < 10; i++) /* the patient ones, in the order they asked */
        assert_int_equal(r.order[i], 2 * i);
    th_run_end(&r, w);
    dlock_client_free(c);
}

static void test_redis_killed_with_waiters_pending_ends_them_with_errors(void **state)
{
    (void)state;
    th_redis own = {0};
    assert_int_equal(th_redis_start(&own), 0);
    dlock_client *c = th_lock_client(&own), *peer = th_lock_client(&own);
    assert_true(c && peer);
    struct th_run r;
    struct th_waiter *w = th_run_start(&r, 50);
    dlock_handle *held = hold_elsewhere(peer, "async:killed", 1000);
    dlock_opts o = th_lock_opts(1000, 60000, DLOCK_WAIT_NOTIFY);
    for (int i = 0; i < 50; i++)
        assert_int_equal(dlock_acquire_async(c, "async:killed", &o, &w[i].req), DLOCK_OK);
    th_redis_stop(&own, 1);
    th_run_wait(&r, 60000); /* every one ends: no hang */
    assert_int_equal(r.granted, 0);
    for (int i = 0; i < 50; i++)
        assert_int_equal(w[i].rc, DLOCK_ERR_REDIS);
    assert_int_not_equal(dlock_release(held), DLOCK_OK);
    th_run_end(&r, w);
    dlock_client_free(c);
    dlock_client_free(peer);
}

static void on_released(dlock_req *req)
{
    struct th_waiter *w = req->data;
    w->rc = req->rc;
    w->calls++;
}

/* What the closing test's post saw: none of the calls that the client's
 * freeing ends goes through it (a release that ended before may). */
static _Atomic int closing_posts;

static void count_post(void *ctx, dlock_req *req)
{
    (void)ctx;
    if (req->done != on_released)
        atomic_fetch_add(&closing_posts, 1);
    req->done(req); /* not through an executor: the test only counts */
}

/* A sleep's done when the client is freed under it: its hold is released
 * from inside done, as a program would. */
static dlock_handle *sleeper;

static void on_slept_then_release(dlock_req *req)
{
    on_released(req);
    dlock_release(sleeper);
}

static void test_freeing_the_client_ends_its_pending_calls_of_every_kind(void **state)
{
    (void)state;
    dlock_client *c = client_with(2, count_post, NULL);
    struct th_run r;
    enum { N = 10 };
    struct th_waiter *w = th_run_start(&r, N + 7);
    dlock_handle *held = hold_elsewhere(other, "async:freed", 30000);
    dlock_handle *sem = NULL, *writer = NULL;
    dlock_opts o = th_lock_opts(30000, 60000, DLOCK_WAIT_NOTIFY);
    dlock_opts spin = th_lock_opts(30000, 60000, DLOCK_WAIT_SPIN);
    assert_int_equal(dlock_sem_acquire(other, "async:freed:sem", 1, &o, &sem), DLOCK_OK);
    assert_int_equal(dlock_acquire_write(other, "async:freed:rw", &o, &writer), DLOCK_OK);
    const char *pair[] = {"async:freed", "async:freea"}; /* freea is taken first */
    for (int i = 0; i < N; i++)
        assert_int_equal(dlock_acquire_async(c, "async:freed", &o, &w[i].req), DLOCK_OK);
    assert_int_equal(dlock_acquire_async(c, "async:freed", &spin, &w[N].req), DLOCK_OK);
    assert_int_equal(dlock_acquire_multi_async(c, pair, 2, &o, &w[N + 1].req), DLOCK_OK);
    assert_int_equal(dlock_sem_acquire_async(c, "async:freed:sem", 1, &o, &w[N + 2].req),
                     DLOCK_OK);
    assert_int_equal(dlock_acquire_read_async(c, "async:freed:rw", &o, &w[N + 3].req), DLOCK_OK);
    assert_int_equal(dlock_acquire_write_async(c, "async:freed:rw", &spin, &w[N + 4].req),
                     DLOCK_OK);
    /* a sleep under a hold, and a release on its way to Redis */
    dlock_handle *h;
    assert_int_equal(dlock_acquire(c, "async:freed:sleep", &o, &sleeper), DLOCK_OK);
    w[N + 5].req.done = on_slept_then_release;
    assert_int_equal(dlock_sleep_async(sleeper, 60000, &w[N + 5].req), DLOCK_OK);
    assert_int_equal(dlock_acquire(c, "async:freed:release", &o, &h), DLOCK_OK);
    w[N + 6].req.done = on_released;
    usleep(100000); /* let some of them try; freeing ends them wherever they are */
    dlock_release_async(h, &w[N + 6].req);
    dlock_client_free(c);
    assert_int_equal(atomic_load(&closing_posts), 0); /* called directly, not posted */
    pthread_mutex_lock(&r.mu);
    int ended = r.ended, closed = r.closed;
    pthread_mutex_unlock(&r.mu);
    assert_int_equal(ended, N + 5);
    assert_int_equal(closed, N + 5);
    assert_int_equal(w[N + 5].calls, 1);
    assert_int_equal(w[N + 5].rc, DLOCK_ERR_CLOSED);
    assert_int_equal(w[N + 6].calls, 1); /* a release is carried out, not withdrawn */
    assert_int_equal(w[N + 6].rc, DLOCK_OK);
    /* the multi-lock's first key, taken, went back, and so did the others */
    dlock_opts now = th_lock_opts(1000, 0, DLOCK_WAIT_NOTIFY);
    const char *gone[] = {"async:freea", "async:freed:sleep", "async:freed:release"};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(dlock_acquire(other, gone[i], &now, &h), DLOCK_OK);
        assert_int_equal(dlock_release(h), DLOCK_OK);
    }
    assert_int_equal(dlock_release(sem), DLOCK_OK);
    assert_int_equal(dlock_release(writer), DLOCK_OK);
    assert_int_equal(dlock_release(held), DLOCK_OK);
    r.n = N + 5;
    th_run_end(&r, w);
}

/* The test below: its client, the holder whose release hands the key to
 * the waiter while the client is freed, and what that release saw. */
static dlock_client *granting;
static dlock_handle *handing, *handing_sleeper, *granted_h;
static int hand_over_rc;
static uint64_t handed_over;

static void on_waited(dlock_req *req)
{
    on_released(req);
    granted_h = req->h; /* NULL, unless it was answered a hold */
}

/* The sleep's done, ended by the freeing: the key's local holder releases,
 * and its release hands the lease to the waiter, which the freeing is
 * ending too (a runner of one thread: it is stepped after this). */
static void on_closed_then_hand_over(dlock_req *req)
{
    on_released(req);
    dlock_stats before, after;
    dlock_stats_read(granting, &before);
    hand_over_rc = dlock_release(handing);
    dlock_stats_read(granting, &after);
    handed_over = after.handoffs - before.handoffs;
    dlock_release(handing_sleeper);
}

/* A post that counts the waiter's requests: none may go through it, as
 * dlock_client_free calls the done of the calls it ends itself. */
static _Atomic int waiter_posts;

static void count_waiter_post(void *ctx, dlock_req *req)
{
    (void)ctx;
    if (req->done == on_waited)
        atomic_fetch_add(&waiter_posts, 1);
    req->done(req);
}

/* A waiter granted its key while its client is freed: the key goes back
 * and its done gets DLOCK_ERR_CLOSED - never OK with a holder of a client
 * that is gone. With a post, the hand-off does not end the waiter where
 * it is made (it would post it). */
static void granted_while_freed(int with_post)
{
    granting = client_with(1, with_post ? count_waiter_post : NULL, NULL);
    granted_h = NULL, hand_over_rc = -1, handed_over = 0;
    atomic_store(&waiter_posts, 0);
    struct th_waiter w[2] = {{.req = {.done = on_waited}},
                             {.req = {.done = on_closed_then_hand_over}}};
    for (int i = 0; i < 2; i++)
        w[i].req.data = &w[i];
    dlock_opts hold = th_lock_opts(30000, 0, DLOCK_WAIT_NOTIFY);
    hold.handoff_ms = 600000; /* a busy machine must not make the lease too old to hand over */
    assert_int_equal(dlock_acquire(granting, "async:granted", &hold, &handing), DLOCK_OK);
    dlock_opts o = th_lock_opts(30000, 60000, DLOCK_WAIT_NOTIFY);
    assert_int_equal(dlock_acquire_async(granting, "async:granted", &o, &w[0].req), DLOCK_OK);
    /* a sleep due long before the waiter would look again: it ends first */
    assert_int_equal(dlock_acquire(granting, "async:granted:sleep", &o, &handing_sleeper),
                     DLOCK_OK);
    assert_int_equal(dlock_sleep_async(handing_sleeper, 5000, &w[1].req), DLOCK_OK);
    usleep(100000 * (useconds_t)TH_SLOWER); /* both took their first step and wait on the
                                              * runner's timers (a busy machine: longer) */
    dlock_client_free(granting);
    assert_int_equal(w[1].calls, 1);
    assert_int_equal(w[1].rc, DLOCK_ERR_CLOSED);
    assert_int_equal(hand_over_rc, DLOCK_OK);
    assert_int_equal(handed_over, 1); /* the waiter was granted while the client closed */
    assert_int_equal(w[0].calls, 1);
    assert_int_equal(w[0].rc, DLOCK_ERR_CLOSED);
    assert_null(granted_h);
    assert_int_equal(atomic_load(&waiter_posts), 0);
    dlock_opts now = th_lock_opts(1000, 0, DLOCK_WAIT_NOTIFY); /* the key went back */
    dlock_handle *h;
    assert_int_equal(dlock_acquire(other, "async:granted", &now, &h), DLOCK_OK);
    assert_int_equal(dlock_release(h), DLOCK_OK);
}

static void test_a_waiter_granted_while_its_client_is_freed_gives_the_key_back(void **state)
{
    (void)state;
    granted_while_freed(0);
    granted_while_freed(1);
}

static void test_async_multi_locks_take_their_keys_as_one(void **state)
{
    (void)state;
    dlock_client *c = new_client();
    struct th_run r;
    enum { N = 60 };
    struct th_waiter *w = th_run_start(&r, N);
    const char *names[] = {"async:m:a", "async:m:b", "async:m:c"};
    dlock_opts o = th_lock_opts(5000, 60000, DLOCK_WAIT_NOTIFY);
    for (int i = 0; i < N; i++) { /* {a,b,c}, {c,b} and {a} in turn, keys given in any order */
        const char *keys[3];
        int n = 0;
        for (int k = 2; k >= 0; k--)
            if (i % 3 == 0 || (i % 3 == 1 && k > 0) || (i % 3 == 2 && k == 0)) {
                keys[n] = names[k];
                w[i].keys[n++] = k;
            }
        w[i].nkeys = n;
        assert_int_equal(dlock_acquire_multi_async(c, keys, n, &o, &w[i].req), DLOCK_OK);
    }
    th_run_wait(&r, 120000);
    assert_int_equal(r.granted, N);
    th_run_end(&r, w);

    /* one key held elsewhere: the set times out and gives back what it took */
    dlock_handle *held = hold_elsewhere(other, "async:m:c", 30000);
    w = th_run_start(&r, 1);
    dlock_opts quick = th_lock_opts(5000, 200, DLOCK_WAIT_NOTIFY);
    assert_int_equal(dlock_acquire_multi_async(c, names, 3, &quick, &w[0].req), DLOCK_OK);
    th_run_wait(&r, 30000);
    assert_int_equal(w[0].rc, DLOCK_ERR_TIMEOUT);
    dlock_opts now = th_lock_opts(1000, 0, DLOCK_WAIT_NOTIFY);
    dlock_handle *h;
    assert_int_equal(dlock_acquire_multi(other, names, 2, &now, &h), DLOCK_OK);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    assert_int_equal(dlock_release(held), DLOCK_OK);
    th_run_end(&r, w);
    dlock_client_free(c);
}

/* A blocking waiter of the mixed test: records its turn in the run. */
struct blocker {
    dlock_client *c;
    struct th_waiter *w;
    _Atomic int tid;
    pthread_t t;
};

static void *block_and_record(void *arg)
{
    struct blocker *b = arg;
    atomic_store(&b->tid, (int)gettid());
    dlock_opts o = th_lock_opts(30000, 60000, DLOCK_WAIT_NOTIFY);
    dlock_handle *h = NULL;
    b->w->req.rc = dlock_acquire(b->c, "async:mixed", &o, &h); /* before h is read */
    b->w->req.h = h;
    th_run_done(&b->w->req); /* the workers release it, as an async one's */
    return NULL;
}

/* Whether thread tid of this process sleeps, a few looks in a row: then it
 * waits in the key's FIFO (it sleeps nowhere else for long). */
static int thread_sleeps(int tid)
{
    for (int look = 0; look < 5; look++) {
        if (th_thread_state(tid) != 'S')
            return 0;
        usleep(20000);
    }
    return 1;
}

static void test_async_and_blocking_waiters_share_one_fifo(void **state)
{
    (void)state;
    dlock_client *c = new_client();
    struct th_run r;
    enum { N = 8 };
    struct th_waiter *w = th_run_start(&r, N);
    struct blocker b[N] = {0};
    dlock_handle *held = hold_elsewhere(other, "async:mixed", 30000);
    dlock_opts o = th_lock_opts(30000, 60000, DLOCK_WAIT_NOTIFY);
    for (int i = 0; i < N; i++) {
        if (i % 2 == 0) {
            assert_int_equal(dlock_acquire_async(c, "async:mixed", &o, &w[i].req), DLOCK_OK);
            continue;
        }
        b[i] = (struct blocker){.c = c, .w = &w[i]};
        assert_int_equal(pthread_create(&b[i].t, NULL, block_and_record, &b[i]), 0);
        int64_t end = th_now_ms() + 20000;
        while (th_now_ms() < end && (atomic_load(&b[i].tid) == 0 || !thread_sleeps(b[i].tid)))
            usleep(5000);
    }
    assert_int_equal(dlock_release(held), DLOCK_OK);
    th_run_wait(&r, 60000);
    for (int i = 1; i < N; i += 2)
        pthread_join(b[i].t, NULL);
    for (int i = 0; i < N; i++)
        assert_int_equal(r.order[i], i);
    th_run_end(&r, w);
    dlock_client_free(c);
}

static void test_spin_mode_waiters_retry_on_the_timer(void **state)
{
    (void)state;
    dlock_client *c = new_client();
    struct th_run r;
    enum { N = 50 };
    struct th_waiter *w = th_run_start(&r, N);
    int before = th_thread_count();
    dlock_handle *held = hold_elsewhere(other, "async:spin", 30000);
    dlock_opts o = th_lock_opts(30000, 120000, DLOCK_WAIT_SPIN);
    for (int i = 0; i < N; i++)
        assert_int_equal(dlock_acquire_async(c, "async:spin", &o, &w[i].req), DLOCK_OK);
    usleep(200000);
    int peak = th_thread_count();
    assert_int_equal(dlock_release(held), DLOCK_OK);
    th_run_wait(&r, 240000);
    assert_int_equal(r.granted, N);
    assert_int_equal(peak, before);
    th_run_end(&r, w);
    dlock_client_free(c);
}

static void test_bad_arguments_are_refused_and_done_never_runs(void **state)
{
    (void)state;
    dlock_client *c = new_client();
    struct th_run r;
    struct th_waiter *w = th_run_start(&r, 1);
    dlock_opts bad = th_lock_opts(5000, 1000, DLOCK_WAIT_NOTIFY);
    bad.retry_ms = 0;
    const char *twice[] = {"async:x", "async:x"};
    dlock_req no_done = {0};
    assert_int_equal(dlock_acquire_async(c, "", NULL, &w->req), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_acquire_async(c, NULL, NULL, &w->req), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_acquire_async(c, "async:x", &bad, &w->req), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_acquire_async(c, "async:x", NULL, NULL), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_acquire_async(c, "async:x", NULL, &no_done), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_acquire_multi_async(c, twice, 2, NULL, &w->req), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_acquire_multi_async(c, NULL, 1, NULL, &w->req), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_sem_acquire_async(c, "async:x", 0, NULL, &w->req),
                     DLOCK_ERR_INVALID);
    assert_int_equal(dlock_acquire_read_async(c, "async:x", NULL, &no_done), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_acquire_write_async(c, "", NULL, &w->req), DLOCK_ERR_INVALID);
    dlock_client_free(c);
    assert_int_equal(w[0].calls, 0);
    r.n = 0;
    th_run_end(&r, w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ten_thousand_waiters_are_each_served_once_in_order_by_few_threads),
        cmocka_unit_test(test_a_client_runs_as_many_async_threads_as_its_config_says),
        cmocka_unit_test(test_a_waiter_past_its_wait_times_out_and_the_others_go_on),
        cmocka_unit_test(test_redis_killed_with_waiters_pending_ends_them_with_errors),
        cmocka_unit_test(test_freeing_the_client_ends_its_pending_calls_of_every_kind),
        cmocka_unit_test(test_a_waiter_granted_while_its_client_is_freed_gives_the_key_back),
        cmocka_unit_test(test_async_multi_locks_take_their_keys_as_one),
        cmocka_unit_test(test_async_and_blocking_waiters_share_one_fifo),
        cmocka_unit_test(test_spin_mode_waiters_retry_on_the_timer),
        cmocka_unit_test(test_bad_arguments_are_refused_and_done_never_runs),
    };
    th_lock_suite(&redis, &other);
    int failed = cmocka_run_group_tests_name("lock, asynchronous acquire", tests,
                                             th_lock_group_setup, th_lock_group_teardown);
    th_redis_stop(&redis, 0);
    return failed;
}
