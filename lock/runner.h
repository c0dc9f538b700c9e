/* runner.h - the task runner: the few threads of a client that run its
 * asynchronous calls (dlock_async.h). A task takes a step when woken, or
 * when the time it asked to wait until comes, and holds no thread between
 * steps; a call that ends goes back to its caller through the client's
 * post hook, or on these threads. The threads share the client's mutex
 * (mu), which guards every task; the functions taking a task are called
 * with mu held. Nothing here allocates once started: a task is memory of
 * its caller's, linked into a ready list and a timer heap of its own links.
 * Knows nothing of what a step does. */
#ifndef DLOCK_RUNNER_H
#define DLOCK_RUNNER_H

#include <pthread.h>
#include <stdint.h>

#include "lock/internal.h"
#include "lock/timers.h"

typedef struct dlock_runner dlock_runner;

enum { DLOCK_TASK_DONE = 0, DLOCK_TASK_WAIT = 1 }; /* what a step returns */

/* Where a task's end runs, which decides how it gives its request back
 * (dlock__runner_deliver). */
enum dlock_end {
    DLOCK_END_RUNNER,  /* on a runner thread */
    DLOCK_END_CALLER,  /* inside a caller's libdlock call, on the caller's thread */
    DLOCK_END_CLOSING, /* the client is being freed: done is called at once */
};

struct dlock_task {
    /* Called with mu held (it may release mu around I/O, as a blocking
     * waiter's thread would). Returns DLOCK_TASK_WAIT with *until
     * (CLOCK_MONOTONIC ms) for the next step at the latest, or
     * DLOCK_TASK_DONE. A task told to stop (dlock__task_stop) must end. */
    int (*step)(struct dlock_task *t, int64_t *until);
    /* Called once, without mu, after the step that returned DONE: the
     * call's end, which gives its request back (it may free t). */
    void (*end)(struct dlock_task *t, enum dlock_end where);
    /* the runner's, under mu */
    dlock_runner *owner;
    dlock_req *req;                 /* the request dlock_cancel finds it by, or NULL */
    struct dlock_task *req_next;    /* the runner's table of requests */
    struct dlock_task **req_link;
    struct dlock_task *ready_next, *ready_prev;
    struct dlock_timer timer; /* in the timer heap while it waits for a time (timer.armed) */
    int ready, running, rewake, cancelled;
};

/* Starts n threads (1..DLOCK_ASYNC_THREADS_MAX) delivering ended calls
 * through post (may be NULL: done runs on them). NULL when out of memory or
 * threads. */
dlock_runner *dlock__runner_start(pthread_mutex_t *mu, int n, void (*post)(void *, dlock_req *),
                                  void *post_ctx);

/* Ends every task still pending (each steps again, told to stop with
 * DLOCK_ERR_CLOSED, and its end runs on the runner's threads), delivers
 * what waits to be, then stops and joins the threads. Called without mu.
 * NULL is a no-op. */
void dlock__runner_stop(dlock_runner *r);

/* Adds t (step and end set); never fails. It takes its first step soon
 * (until 0), or at until (CLOCK_MONOTONIC ms) unless woken sooner: for a
 * task that knows it can only wait, which then wakes no thread. req (may be
 * NULL): the request it serves, which dlock__runner_cancel can then
 * withdraw until the task ends (req->priv is the runner's meanwhile). */
void dlock__runner_add(dlock_runner *r, struct dlock_task *t, dlock_req *req, int64_t until);

/* t takes a step soon (at once if a thread is free): something it waits
 * for may have happened. */
void dlock__runner_wake(struct dlock_task *t);

/* What t must end with now: 0 (go on), DLOCK_ERR_CLOSED (the client is
 * being freed) or DLOCK_ERR_CANCELLED (dlock_cancel). */
int dlock__task_stop(const struct dlock_task *t);

/* Steps t here, on the calling thread, when the client posts its ends
 * (cfg.post) and no runner thread is stepping it (nor is it told to stop):
 * t leaves the ready list or the timer heap and steps once. Its step must
 * not release mu. Returns 1 when t ended: the caller runs
 * dlock__runner_end_here(t) once it released mu; 0 when it did not step, or
 * must step again (it is then scheduled as usual): wake it. */
int dlock__runner_step_here(struct dlock_task *t);

/* The ends of t and of the tasks linked after it through ready_next (may
 * be NULL), each of which dlock__runner_step_here ended: on the caller's
 * thread, once it released mu. */
void dlock__runner_end_here(struct dlock_task *t);

/* Gives req back, ended (rc, h and err filled), without mu: to post when
 * the client has one (unless closing), else to done, called at once on a
 * runner thread or when closing, or soon on a runner thread from a
 * caller's (linked through req->next: libdlock's threads are the executor
 * then). */
void dlock__runner_deliver(dlock_runner *r, dlock_req *req, enum dlock_end where);

/* dlock_cancel: tells the task that serves req (req->priv's runner) to end
 * with DLOCK_ERR_CANCELLED. Called without mu. DLOCK_OK, or
 * DLOCK_ERR_INVALID when no task of the runner serves req any more (or
 * was told already). */
int dlock__runner_cancel(dlock_req *req);

#endif
