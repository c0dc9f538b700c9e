/* runner.h - the task runner: the few threads of a client that run its
 * asynchronous acquires. A task takes a step when woken, or when the time
 * it asked to wait until comes, and holds no thread between steps. The
 * threads share the client's mutex (mu), which guards every task; the
 * functions taking a task are called with mu held. Nothing here allocates
 * once started: a task is memory of its caller's, linked into a ready list
 * and a timer heap of its own links. Knows nothing of what a step does. */
#ifndef DLOCK_RUNNER_H
#define DLOCK_RUNNER_H

#include <pthread.h>
#include <stdint.h>


typedef struct dlock_runner dlock_runner;

enum { DLOCK_TASK_DONE = 0, DLOCK_TASK_WAIT = 1 }; /* what a step returns */

struct dlock_task {
    /* Called with mu held (it may release mu around I/O, as a blocking
     * waiter's thread would). Returns DLOCK_TASK_WAIT with *until
     * (CLOCK_MONOTONIC ms) for the next step at the latest, or
     * DLOCK_TASK_DONE. A task told to stop (dlock_task_stop) must end. */
    int (*step)(struct dlock_task *t, int64_t *until);
    /* Called once, without mu, after the step that returned DONE: the
     * call's end (it may free t). closing: the client is being freed. */
    void (*end)(struct dlock_task *t, int closing);
    /* the runner's, under mu */
    dlock_runner *owner;
    struct dlock_task *ready_next, *ready_prev;
    struct dlock_task *child, *sibling, *prev; /* the timer heap: prev is the left sibling,
                                                * or the parent of a first child */
    int ready, timed, running, rewake;
    int64_t until;
};

/* Starts n threads (1..DLOCK_ASYNC_THREADS_MAX). NULL when out of memory or
 * threads. */
dlock_runner *dlock_runner_start(pthread_mutex_t *mu, int n);

/* Ends every task still pending (each steps again, told to stop with
 * DLOCK_ERR_CLOSED, and its end runs on the runner's threads), then stops
 * and joins the threads. Called without mu. NULL is a no-op. */
void dlock_runner_stop(dlock_runner *r);

/* Adds t (step and end set) to take its first step soon; never fails. */
void dlock_runner_add(dlock_runner *r, struct dlock_task *t);

/* t takes a step soon (at once if a thread is free): something it waits
 * for may have happened. */
void dlock_runner_wake(struct dlock_task *t);

/* What t must end with now: 0 (go on), or DLOCK_ERR_CLOSED (the client is
 * being freed). */
int dlock_task_stop(const struct dlock_task *t);

#endif
