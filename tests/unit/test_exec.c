/* test_exec.c - the executor: tasks in posting order, timers in the order
 * they are due (never before), a stopped timer never runs, and a stop runs
 * what is queued and armed. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include <cmocka.h>

#include "server/exec.h"

/* A task or timer that records when and in which turn it ran. */
struct mark {
    exec_timer timer; /* its task serves plain posts too */
    int id;
    int64_t ran_ms;
    int *log, *nlog;  /* the order runs happened in (one thread: no lock) */
    _Atomic int *count;
    exec *e;
    int on_exec;
};

static struct mark *mark_of(exec_task *t)
{
    return (struct mark *)((char *)t - offsetof(struct mark, timer.task));
}

static void record(exec_task *t)
{
    struct mark *m = mark_of(t);
    m->ran_ms = exec_now_ms();
    m->on_exec = exec_on(m->e);
    if (m->log)
        m->log[(*m->nlog)++] = m->id;
    if (m->count)
        atomic_fetch_add(m->count, 1);
}

static void test_tasks_run_in_the_order_posted(void **state)
{
    (void)state;
    enum { N = 1000 };
    static struct mark m[N];
    static int log[N];
    int nlog = 0;
    exec *e = exec_start(1, "t");
    assert_non_null(e);
    for (int i = 0; i < N; i++) {
        m[i] = (struct mark){.id = i, .log = log, .nlog = &nlog, .e = e};
        exec_post(e, &m[i].timer.task, record);
    }
    exec_stop(e);
    assert_int_equal(nlog, N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(log[i], i);
        assert_true(m[i].on_exec);
    }
}

static void test_timers_fire_when_due_in_due_order(void **state)
{
    (void)state;
    enum { N = 5000 };
    static struct mark m[N];
    static int log[N];
    int nlog = 0;
    _Atomic int count = 0;
    exec *e = exec_start(1, "t");
    int64_t t0 = exec_now_ms();
    srand(7);
    for (int i = 0; i < N; i++) {
        m[i] = (struct mark){.id = i, .log = log, .nlog = &nlog, .count = &count, .e = e};
        exec_timer_start(e, &m[i].timer, t0 + 20 + rand() % 200, record);
    }
    int stopped = 0; /* every third one disarmed: the heap takes any node out */
    for (int i = 0; i < N; i += 3)
        stopped += exec_timer_stop(e, &m[i].timer);
    assert_int_equal(stopped, (N + 2) / 3);
    int64_t until = t0 + 2000;
    while (atomic_load(&count) < N - stopped && exec_now_ms() < until)
        nanosleep(&(struct timespec){0, 5 * 1000000}, NULL);
    assert_int_equal(exec_timer_stop(e, &m[1].timer), 0); /* it ran: nothing to stop */
    exec_stop(e); /* joins: what the threads wrote is ours to read */
    assert_int_equal(nlog, N - stopped);
    for (int k = 0; k < nlog; k++) {
        const struct mark *r = &m[log[k]];
        assert_true(r->id % 3 != 0);                 /* no stopped one ran */
        assert_true(r->ran_ms >= r->timer.due_ms);   /* never before it was due */
        if (k > 0)
            assert_true(m[log[k - 1]].timer.due_ms <= r->timer.due_ms);
    }
}

static void test_a_sooner_timer_wakes_a_waiting_thread(void **state)
{
    (void)state;
    exec *e = exec_start(2, "t");
    _Atomic int count = 0;
    struct mark late = {.e = e, .count = &count}, soon = {.e = e, .count = &count};
    int64_t t0 = exec_now_ms();
    exec_timer_start(e, &late.timer, t0 + 5000, record);
    nanosleep(&(struct timespec){0, 20 * 1000000}, NULL); /* both threads wait for late */
    exec_timer_start(e, &soon.timer, t0 + 50, record);
    while (atomic_load(&count) == 0 && exec_now_ms() < t0 + 3000)
        nanosleep(&(struct timespec){0, 5 * 1000000}, NULL);
    assert_int_equal(exec_timer_stop(e, &late.timer), 1);
    exec_stop(e);
    assert_true(soon.ran_ms >= t0 + 50);
    assert_true(soon.ran_ms < t0 + 3000); /* not after late's due: woken for it */
    assert_int_equal(late.ran_ms, 0);
}

/* A task that posts another from the executor's own thread. */
struct chain {
    exec_task task;
    exec *e;
    int left;
    _Atomic int *ran;
};

static void step(exec_task *t)
{
    struct chain *c = (struct chain *)t;
    atomic_fetch_add(c->ran, 1);
    if (--c->left > 0)
        exec_post(c->e, &c->task, step); /* its own link, reposted: never allocates */
}

static void test_a_task_reposts_itself_from_the_executor(void **state)
{
    (void)state;
    _Atomic int ran = 0;
    exec *e = exec_start(3, "t");
    struct chain c = {.e = e, .left = 10000, .ran = &ran};
    exec_post(e, &c.task, step);
    for (int i = 0; i < 400 && atomic_load(&ran) < 10000; i++)
        nanosleep(&(struct timespec){0, 5 * 1000000}, NULL);
    assert_int_equal(atomic_load(&ran), 10000);
    assert_int_equal(exec_posts(e), 10000);
    exec_stop(e);
}

static void test_stop_runs_what_is_queued_and_armed(void **state)
{
    (void)state;
    enum { N = 200 };
    static struct mark m[N];
    _Atomic int count = 0;
    exec *e = exec_start(4, "t");
    int64_t t0 = exec_now_ms();
    for (int i = 0; i < N; i++) {
        m[i] = (struct mark){.id = i, .count = &count, .e = e};
        if (i % 2)
            exec_post(e, &m[i].timer.task, record);
        else
            exec_timer_start(e, &m[i].timer, t0 + 60000, record); /* a minute away */
    }
    exec_stop(e);
    assert_int_equal(atomic_load(&count), N);
    assert_true(exec_now_ms() - t0 < 30000); /* the armed ones ran at the stop */
}

/* Threads post from outside while the executor's threads run them. */
static void *poster(void *arg)
{
    struct mark *m = arg;
    for (int i = 0; i < 1000; i++)
        exec_post(m[i].e, &m[i].timer.task, record);
    return NULL;
}

static void test_posts_from_many_threads_all_run_once(void **state)
{
    (void)state;
    enum { THREADS = 4 };
    static struct mark m[THREADS][1000];
    _Atomic int count = 0;
    exec *e = exec_start(3, "t");
    pthread_t t[THREADS];
    for (int k = 0; k < THREADS; k++) {
        for (int i = 0; i < 1000; i++)
            m[k][i] = (struct mark){.count = &count, .e = e};
        pthread_create(&t[k], NULL, poster, m[k]);
    }
    for (int k = 0; k < THREADS; k++)
        pthread_join(t[k], NULL);
    exec_stop(e);
    assert_int_equal(atomic_load(&count), THREADS * 1000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tasks_run_in_the_order_posted),
        cmocka_unit_test(test_timers_fire_when_due_in_due_order),
        cmocka_unit_test(test_a_sooner_timer_wakes_a_waiting_thread),
        cmocka_unit_test(test_a_task_reposts_itself_from_the_executor),
        cmocka_unit_test(test_stop_runs_what_is_queued_and_armed),
        cmocka_unit_test(test_posts_from_many_threads_all_run_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
