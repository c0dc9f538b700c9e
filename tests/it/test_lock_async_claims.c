/* test_lock_async_claims.c - the asynchronous acquires of a semaphore and
 * of a read-write lock (dlock_sem_acquire_async, dlock_acquire_read_async,
 * dlock_acquire_write_async) against a real, private redis-server, in both
 * wait modes: never more than P holders among 50 waiters, a waiting writer
 * keeps new readers out (and readers share), a wait times out and a writer
 * that gave up withdraws its wish. Time bounds only catch hangs. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
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
static int wait_mode;       /* the running group's, set by main */

static dlock_client *new_client(void)
{
    dlock_client *c = th_lock_client(&redis);
    assert_non_null(c);
    return c;
}

static void test_async_permits_never_exceed_the_semaphore(void **state)
{
    (void)state;
    enum { N = 50, P = 3 };
    dlock_client *c = new_client();
    struct th_run r;
    struct th_waiter *w = th_run_start(&r, N);
    r.limit = P;
    dlock_opts o = th_lock_opts(10000, 120000, wait_mode);
    for (int i = 0; i < N; i++)
        assert_int_equal(dlock_sem_acquire_async(c, "async:sem", P, &o, &w[i].req), DLOCK_OK);
    th_run_wait(&r, 240000);
    assert_int_equal(r.granted, N);
    print_message("%d async permits of %d: at most %d held at once\n", N, P,
                  atomic_load(&r.most));
    assert_true(atomic_load(&r.most) > 1); /* permits are held side by side ... */
    th_run_end(&r, w);                        /* ... never more than P (no overlap) */
    dlock_client_free(c);
}

/* done of a read-write test: what came, in order. */
struct rw_seen {
    pthread_mutex_t mu;
    char order[8];
    int n, rc[8];
    dlock_handle *h[8];
};

static struct rw_seen seen = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void on_rw(dlock_req *req)
{
    int id = (int)(intptr_t)req->data;
    pthread_mutex_lock(&seen.mu);
    seen.order[seen.n++] = (char)('0' + id);
    seen.rc[id] = req->rc;
    seen.h[id] = req->h;
    pthread_mutex_unlock(&seen.mu);
}

static int rw_count(void)
{
    pthread_mutex_lock(&seen.mu);
    int n = seen.n;
    pthread_mutex_unlock(&seen.mu);
    return n;
}

static void rw_wait(int n)
{
    int64_t end = th_now_ms() + 30000 * TH_SLOWER;
    while (rw_count() < n && th_now_ms() < end)
        usleep(5000);
    assert_int_equal(rw_count(), n);
}

static void test_an_async_writer_that_waits_keeps_new_readers_out(void **state)
{
    (void)state;
    dlock_client *c = new_client();
    memset(seen.order, 0, sizeof(seen.order));
    seen.n = 0;
    dlock_opts o = th_lock_opts(10000, 60000, wait_mode);
    dlock_handle *reader;
    assert_int_equal(dlock_acquire_read(other, "async:rw", &o, &reader), DLOCK_OK);
    dlock_req req[3];
    for (int i = 0; i < 3; i++)
        req[i] = (dlock_req){.done = on_rw, .data = (void *)(intptr_t)i};
    assert_int_equal(dlock_acquire_write_async(c, "async:rw", &o, &req[0]), DLOCK_OK);
    usleep(300000); /* the writer's wish is in Redis before the reader asks */
    assert_int_equal(dlock_acquire_read_async(c, "async:rw", &o, &req[1]), DLOCK_OK);
    usleep(300000);
    assert_int_equal(rw_count(), 0); /* the reader held elsewhere keeps the writer out ... */
    assert_int_equal(dlock_release(reader), DLOCK_OK);
    rw_wait(1); /* ... and the waiting writer the new reader */
    assert_int_equal(seen.order[0], '0');
    assert_int_equal(seen.rc[0], DLOCK_OK);
    usleep(200000);
    assert_int_equal(rw_count(), 1);
    assert_int_equal(dlock_release(seen.h[0]), DLOCK_OK);
    rw_wait(2);
    assert_int_equal(seen.rc[1], DLOCK_OK);
    /* readers share: another comes in beside it at once */
    assert_int_equal(dlock_acquire_read_async(c, "async:rw", &o, &req[2]), DLOCK_OK);
    rw_wait(3);
    assert_int_equal(seen.rc[2], DLOCK_OK);
    assert_string_equal(seen.order, "012");
    assert_int_equal(dlock_release(seen.h[1]), DLOCK_OK);
    assert_int_equal(dlock_release(seen.h[2]), DLOCK_OK);
    dlock_client_free(c);
}

static void test_async_semaphore_and_writer_waits_time_out(void **state)
{
    (void)state;
    dlock_client *c = new_client();
    seen.n = 0;
    memset(seen.order, 0, sizeof(seen.order));
    dlock_opts o = th_lock_opts(10000, 0, wait_mode);
    dlock_opts quick = th_lock_opts(10000, 200, wait_mode);
    dlock_handle *permit, *reader;
    assert_int_equal(dlock_sem_acquire(other, "async:semto", 1, &o, &permit), DLOCK_OK);
    assert_int_equal(dlock_acquire_read(other, "async:rwto", &o, &reader), DLOCK_OK);
    dlock_req req[2] = {{.done = on_rw, .data = (void *)0}, {.done = on_rw, .data = (void *)1}};
    assert_int_equal(dlock_sem_acquire_async(c, "async:semto", 1, &quick, &req[0]), DLOCK_OK);
    assert_int_equal(dlock_acquire_write_async(c, "async:rwto", &quick, &req[1]), DLOCK_OK);
    rw_wait(2);
    assert_int_equal(seen.rc[0], DLOCK_ERR_TIMEOUT);
    assert_int_equal(seen.rc[1], DLOCK_ERR_TIMEOUT);
    assert_non_null(strstr(req[0].err, "all permits still held"));
    assert_null(req[1].h);
    /* the writer that gave up withdrew its wish: a reader gets in at once */
    dlock_handle *h;
    assert_int_equal(dlock_acquire_read(other, "async:rwto", &o, &h), DLOCK_OK);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    assert_int_equal(dlock_release(reader), DLOCK_OK);
    assert_int_equal(dlock_release(permit), DLOCK_OK);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_async_permits_never_exceed_the_semaphore),
        cmocka_unit_test(test_an_async_writer_that_waits_keeps_new_readers_out),
        cmocka_unit_test(test_async_semaphore_and_writer_waits_time_out),
    };
    th_lock_suite(&redis, &other);
    int failed = th_lock_both_modes("lock, asynchronous semaphores and read-write locks", tests,
                                    sizeof(tests) / sizeof(tests[0]), &wait_mode);
    th_redis_stop(&redis, 0);
    return failed;
}
