/* test_batch.c - the group-commit queues: who leads, what a batch holds,
 * and when the next leader is chosen (at take, or once the batch is served). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cmocka.h>

#include "server/batch.h"

static void sleep_ms(int ms)
{
    struct timespec ts = {0, (long)ms * 1000000};
    nanosleep(&ts, NULL);
}

/* One request thread: enters the queue; as a leader, takes a batch and holds
 * it for hold_ms before finishing it. */
struct req {
    batch_queues *q;
    int64_t queue;
    enum batch_promote when;
    int hold_ms;
    int fits_max;      /* 0: no fits; else a batch holds at most this many */
    int led, batch;    /* out: it led, and how many jobs its batch had */
    int served_by;     /* out: the index of the request whose batch served it */
    int index;
    pthread_t t;
};

static _Atomic int leaders_now, leaders_max;

static int fits_count(const batch_job *job, void *arg)
{
    (void)job;
    int *left = arg;
    return (*left)-- > 0;
}

static void *request(void *arg)
{
    struct req *r = arg;
    batch_job job = {.queue = r->queue, .arg = r};
    if (batch_enter(r->q, &job) != 1)
        return NULL;
    int now = atomic_fetch_add(&leaders_now, 1) + 1;
    for (int m = atomic_load(&leaders_max); now > m && !atomic_compare_exchange_weak(
                                                           &leaders_max, &m, now);) {
    }
    batch_job *jobs[64];
    int left = r->fits_max;
    int n = batch_take(r->q, r->queue, jobs, 64, r->fits_max ? fits_count : NULL, &left,
                       r->when);
    r->led = 1, r->batch = n;
    for (int i = 0; i < n; i++)
        ((struct req *)jobs[i]->arg)->served_by = r->index;
    sleep_ms(r->hold_ms);
    atomic_fetch_sub(&leaders_now, 1);
    batch_finish(r->q, jobs, n);
    return NULL;
}

/* Starts n requests, 20 ms apart so their arrival order is known, and joins them. */
static void run(struct req *r, int n, batch_queues *q, enum batch_promote when, int hold_ms,
                int fits_max)
{
    atomic_store(&leaders_now, 0);
    atomic_store(&leaders_max, 0);
    for (int i = 0; i < n; i++) {
        r[i] = (struct req){.q = q, .queue = 7, .when = when, .hold_ms = hold_ms,
                            .fits_max = fits_max, .index = i, .served_by = -1};
        pthread_create(&r[i].t, NULL, request, &r[i]);
        sleep_ms(20);
    }
    for (int i = 0; i < n; i++)
        pthread_join(r[i].t, NULL);
    for (int i = 0; i < n; i++)
        assert_true(r[i].served_by >= 0); /* every job answered once */
}

static void test_promoted_at_finish_the_next_leader_takes_all_that_queued(void **state)
{
    (void)state;
    batch_queues *q = batch_new();
    struct req r[6];
    run(r, 6, q, BATCH_PROMOTE_AT_FINISH, 300, 0); /* the first holds while 5 queue */
    assert_true(r[0].led);
    assert_int_equal(r[0].batch, 1);
    assert_true(r[1].led);
    assert_int_equal(r[1].batch, 5);
    for (int i = 2; i < 6; i++) {
        assert_false(r[i].led);
        assert_int_equal(r[i].served_by, 1);
    }
    assert_int_equal(atomic_load(&leaders_max), 1); /* never two batches at once */
    batch_free(q);
}

static void test_promoted_at_take_the_next_leader_starts_at_once(void **state)
{
    (void)state;
    batch_queues *q = batch_new();
    struct req r[3];
    run(r, 3, q, BATCH_PROMOTE_AT_TAKE, 300, 0);
    /* each arrival found a leader already serving: all three led a batch of one */
    for (int i = 0; i < 3; i++) {
        assert_true(r[i].led);
        assert_int_equal(r[i].batch, 1);
    }
    assert_true(atomic_load(&leaders_max) >= 2);
    batch_free(q);
}

static void test_a_job_that_does_not_fit_leads_the_next_batch(void **state)
{
    (void)state;
    batch_queues *q = batch_new();
    struct req r[6];
    run(r, 6, q, BATCH_PROMOTE_AT_FINISH, 300, 3); /* batches of at most 3 */
    assert_int_equal(r[0].batch, 1);
    assert_int_equal(r[1].batch, 3);
    assert_true(r[4].led); /* the first that did not fit */
    assert_int_equal(r[4].batch, 2);
    assert_int_equal(r[5].served_by, 4);
    batch_free(q);
}

static void test_a_queue_emptied_by_its_leader_is_led_again_by_the_next_arrival(void **state)
{
    (void)state;
    batch_queues *q = batch_new();
    struct req r[1];
    for (int round = 0; round < 3; round++) { /* the queue is freed and made again */
        run(r, 1, q, round % 2 ? BATCH_PROMOTE_AT_TAKE : BATCH_PROMOTE_AT_FINISH, 0, 0);
        assert_true(r[0].led);
        assert_int_equal(r[0].batch, 1);
    }
    batch_free(q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_promoted_at_finish_the_next_leader_takes_all_that_queued),
        cmocka_unit_test(test_promoted_at_take_the_next_leader_starts_at_once),
        cmocka_unit_test(test_a_job_that_does_not_fit_leads_the_next_batch),
        cmocka_unit_test(test_a_queue_emptied_by_its_leader_is_led_again_by_the_next_arrival),
    };
    return cmocka_run_group_tests_name("batch", tests, NULL, NULL);
}
