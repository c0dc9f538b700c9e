/* executor.h - a tiny executor of the test's own for libdlock's
 * asynchronous calls (cfg.post): a FIFO of requests, linked through their
 * next, and one thread that runs each one's done, as a caller's event loop
 * or work queue would; and the thread count the lock's async suites check. */
#ifndef TEST_EXECUTOR_H
#define TEST_EXECUTOR_H

#include "lock/dlock_async.h"

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

/* Waits (at most bound_ms) until every other thread of this process has
 * slept through five looks in a row, 20 ms apart: libdlock's threads have
 * nothing to do (its asynchronous waiters are parked). 1, or 0 when they
 * never did. */
int th_threads_idle(int bound_ms);

#endif
