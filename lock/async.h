/* async.h - the few threads that run a client's asynchronous acquires: a
 * task (one acquire) takes a step when woken, or when the time it asked to
 * wait until comes, and holds no thread between steps. The threads share
 * the client's mutex (mu), which guards every task; the functions taking a
 * task are called with mu held. Knows nothing of what a step does. */
#ifndef DLOCK_ASYNC_H
#define DLOCK_ASYNC_H

#include <pthread.h>
#include <stdint.h>

typedef struct dlock_async dlock_async;

enum { DLOCK_TASK_DONE = 0, DLOCK_TASK_WAIT = 1 }; /* what a step returns */

struct dlock_task {
    /* Called with mu held (it may release mu around I/O, as a blocking
     * waiter's thread would). closing: the client is being freed, the task
     * must end now. Returns DLOCK_TASK_WAIT with *until (CLOCK_MONOTONIC
     * ms) for the next step at the latest, or DLOCK_TASK_DONE. */
    int (*step)(struct dlock_task *t, int closing, int64_t *until);
    /* Called once, without mu, after the step that returned DONE: the task's
     * end (it may free t). closing: the client is being freed by now. */
    void (*done)(struct dlock_task *t, int closing);
    /* the runner's, under mu */
    dlock_async *owner;
    struct dlock_task *next_ready;
    int ready, running, rewake;
    int heap_at; /* its place in the timer heap, -1 when not there */
    int64_t until;
};

/* Starts n threads (1..64). NULL when out of memory or threads. */
dlock_async *dlock_async_start(pthread_mutex_t *mu, int n);

/* Ends every task still pending (each steps once more with closing set and
 * its done runs, on the runner's threads), then stops and joins the threads.
 * Called without mu. NULL is a no-op. */
void dlock_async_stop(dlock_async *a);

/* Adds t (step and done set) to take its first step soon. DLOCK_OK, or
 * DLOCK_ERR_NOMEM with t not added. */
int dlock_async_add(dlock_async *a, struct dlock_task *t);

/* t takes a step soon (at once if a thread is free): something it waits
 * for may have happened. */
void dlock_async_wake(struct dlock_task *t);

#endif
