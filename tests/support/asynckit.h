/* asynckit.h - what the lock's asynchronous suites share: a run of
 * asynchronous waiters (their done records each grant, and two worker
 * threads of the test's hold each granted handle a moment and release it,
 * counting the holders of each key from grant to release); a tiny executor
 * of the test's own for cfg.post (a FIFO of requests, linked through their
 * next, and one thread that runs each one's done, as a caller's event loop
 * or work queue would); and this process's threads as /proc shows them. */
#ifndef TEST_ASYNCKIT_H
#define TEST_ASYNCKIT_H

#include <pthread.h>
#include <stdatomic.h>

#include "lock/dlock_async.h"

#define TH_RUN_KEYS 4 /* keys a run's waiter may hold at once (a multi-lock's) */

/* One run of asynchronous waiters: what their done saw, and the workers. */
struct th_run {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n, ended, granted, failed, closed, timeouts, twice;
    int *order;             /* waiter ids in the order granted */
    dlock_handle **queue;   /* granted, for the workers to release */
    struct th_waiter **queued;
    int head, tail, stop;
    int limit;              /* most holders a key may have at once (1, or a semaphore's) */
    _Atomic int holding[TH_RUN_KEYS], overlaps, bad_releases, most;
    pthread_t worker[2];
};

/* One waiter of a run: its request (done th_run_done, data the waiter). */
struct th_waiter {
    dlock_req req;
    struct th_run *run;
    int id, calls, rc;
    int keys[TH_RUN_KEYS], nkeys; /* indices into run->holding */
};

/* Starts a run of n waiters (each on key 0, as th_run_done's request;
 * limit 1) and its workers. */
struct th_waiter *th_run_start(struct th_run *r, int n);

/* A run's waiter's done: records the grant (and its holders, checked
 * against limit) or the failure. A blocking waiter of a run calls it with
 * its request's rc and h set. */
void th_run_done(dlock_req *req);

/* Waits (at most bound_ms, TH_SLOWER times: a hang) until n of the run's
 * waiters, or all of them, have ended. */
void th_run_wait_for(struct th_run *r, int n, int bound_ms);
void th_run_wait(struct th_run *r, int bound_ms);

/* Stops the workers once they released what was granted; asserts that no
 * done ran twice, no key had more holders than limit and every holder
 * still held when released; frees w. */
void th_run_end(struct th_run *r, struct th_waiter *w);

typedef struct th_exec th_exec;

/* Starts the executor's thread (the test fails when it can't). */
th_exec *th_exec_start(void);

/* Runs what is queued, then stops and joins the thread. */
void th_exec_stop(th_exec *e);

/* cfg.post's function, ctx the executor: queues req for its thread. A test's
 * own post may record what it wants and call this. */
void th_exec_post(void *ctx, dlock_req *req);

/* Whether the calling thread is e's. */
int th_exec_is_mine(th_exec *e);

/* Requests posted to e so far. */
int th_exec_posts(th_exec *e);

/* Holds e's thread (1) until released (0): what is posted meanwhile waits
 * in its queue, done not run. */
void th_exec_hold(th_exec *e, int hold);

/* Threads of this process now (/proc/self/task). */
int th_thread_count(void);

/* Thread tid's state letter from /proc (R, S...), or 0 when it is gone. */
char th_thread_state(int tid);

/* How many times the threads of this process but the caller went to sleep
 * so far (their voluntary context switches, summed from /proc): each wake
 * of one of libdlock's threads ends in one. */
long th_threads_sleeps(void);

/* Waits (at most bound_ms) until every other thread of this process has
 * slept through five looks in a row, 20 ms apart: libdlock's threads have
 * nothing to do (its asynchronous waiters are parked). 1, or 0 when they
 * never did. */
int th_threads_idle(int bound_ms);

#endif
