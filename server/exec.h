/* exec.h - an executor: a few threads that run tasks in arrival order, and
 * timers that run a task when they are due. Tasks and timers are the
 * caller's memory, embedded in its own request (as libuv's uv_work_t), so
 * posting or arming never allocates and can't fail. A request that waits
 * (for a lock, a timer, a connection) is such memory, never a thread.
 * Thread-safe. */
#ifndef EXEC_H
#define EXEC_H

#include <stdint.h>

typedef struct exec exec;
typedef struct exec_task exec_task;
typedef void exec_fn(exec_task *t);

/* The caller's; the executor's while posted. */
struct exec_task {
    exec_fn *fn;
    exec_task *next;
};

/* The caller's; the executor's while armed. */
typedef struct exec_timer {
    exec_task task;  /* posted when due */
    int64_t due_ms;  /* CLOCK_MONOTONIC */
    struct exec_timer *child, *sibling, *prev; /* a pairing heap */
    int armed;
} exec_timer;

/* Starts n threads named name-i (name at most 11 bytes).
 * Returns: the executor, or NULL when out of memory or threads. */
exec *exec_start(int n, const char *name);

/* Queues fn(t) to run on one of e's threads, after what is queued now.
 * Runs on: any thread. A post from one of e's own threads wakes no other
 * thread until a few tasks are queued: the poster takes it once its task
 * returns (so post last, or before little more work). Never fails. */
void exec_post(exec *e, exec_task *t, exec_fn *fn);

/* Arms t to post fn(&t->task) at due_ms (CLOCK_MONOTONIC; past: at once).
 * t must not be armed. Never fails. */
void exec_timer_start(exec *e, exec_timer *t, int64_t due_ms, exec_fn *fn);

/* Disarms t. Returns: 1 when it was armed (fn will not run), 0 when it was
 * not (fn has run, or is queued to). */
int exec_timer_stop(exec *e, exec_timer *t);

/* Milliseconds on CLOCK_MONOTONIC: the clock timers are set on. */
int64_t exec_now_ms(void);

/* 1 when the caller is one of e's threads. */
int exec_on(const exec *e);

/* Tasks queued, running or armed now (to tell when e is quiet). */
int exec_busy(exec *e);

/* Tasks posted so far (timers' included): the hand-offs to e's threads. */
uint64_t exec_posts(exec *e);

/* Runs what is queued and every armed timer (at once, due or not; tasks may
 * post more), then stops the threads and frees e. NULL is a no-op. */
void exec_stop(exec *e);

#endif
