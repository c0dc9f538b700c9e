/* runner.c - the task runner's threads: a FIFO of tasks ready to step, a
 * heap of tasks waiting for a time (timers.c), a table of the requests they
 * serve (for dlock_cancel), and the requests to give back on these threads,
 * all under the client's mutex and all linked through the tasks and
 * requests themselves, so nothing is allocated after the start. A task
 * woken while a thread runs its step is stepped again after it, so no wake
 * is lost; the steps decide from state, so a spare wake costs only a look.
 * However many tasks wait, the threads are the n started with the client. */
#include "lock/runner.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "lock/err.h"
#include "lock/sync.h"

#define REQ_BUCKETS 1024

struct dlock_runner {
    pthread_mutex_t *mu;
    void (*post)(void *ctx, dlock_req *req);
    void *post_ctx;
    pthread_cond_t cv;   /* mu: work for the threads, or stop */
    pthread_cond_t idle; /* mu: the last task ended and nothing waits to be given back */
    struct dlock_task *ready_head, *ready_tail;
    struct dlock_timer *heap;           /* the timer heap's root: the earliest due */
    dlock_req *given_head, *given_tail; /* ended in a caller's call, done to run here */
    struct dlock_task *reqs[REQ_BUCKETS];
    int64_t wake_at; /* when the thread that went to sleep last wakes by itself (INT64_MAX:
                      * only when signalled); a thread that is awake looks at the heap
                      * before it sleeps */
    int tasks;   /* added and not yet ended */
    int closing; /* the client is being freed: tasks end */
    int stop;    /* the threads leave */
    int n;
    pthread_t thread[];
};

/* The task whose link in the timer heap tm is (NULL for none). */
static struct dlock_task *task_of(struct dlock_timer *tm)
{
    return tm ? (struct dlock_task *)((char *)tm - offsetof(struct dlock_task, timer)) : NULL;
}

static void heap_push(dlock_runner *r, struct dlock_task *t, int64_t until)
{
    dlock__timers_arm(&r->heap, &t->timer, until);
}

static void heap_remove(dlock_runner *r, struct dlock_task *t)
{
    dlock__timers_disarm(&r->heap, &t->timer);
}

/* t was armed from outside the runner's threads (mu held): one of them is
 * signalled only when t is due sooner than they would look again by
 * themselves, so that a waiter that can only wait wakes nobody. */
static void armed_outside(dlock_runner *r, struct dlock_task *t)
{
    if (t->timer.armed && t->timer.until < r->wake_at)
        pthread_cond_signal(&r->cv);
}

static void ready_remove(dlock_runner *r, struct dlock_task *t)
{
    if (t->ready_prev)
        t->ready_prev->ready_next = t->ready_next;
    else
        r->ready_head = t->ready_next;
    if (t->ready_next)
        t->ready_next->ready_prev = t->ready_prev;
    else
        r->ready_tail = t->ready_prev;
    t->ready_next = t->ready_prev = NULL;
    t->ready = 0;
}

static void push_ready(dlock_runner *r, struct dlock_task *t)
{
    if (t->timer.armed)
        heap_remove(r, t);
    t->ready = 1;
    t->ready_next = NULL;
    t->ready_prev = r->ready_tail;
    if (r->ready_tail)
        r->ready_tail->ready_next = t;
    else
        r->ready_head = t;
    r->ready_tail = t;
    pthread_cond_signal(&r->cv);
}

static struct dlock_task **req_bucket(dlock_runner *r, const dlock_req *req)
{
    uintptr_t p = (uintptr_t)req;
    return &r->reqs[(p >> 4 ^ p >> 14) % REQ_BUCKETS];
}

/* t ended (mu held): its request can't be withdrawn any more, and is no
 * longer the runner's. */
static void ended(struct dlock_task *t)
{
    if (t->req == NULL)
        return;
    *t->req_link = t->req_next;
    if (t->req_next)
        t->req_next->req_link = t->req_link;
    __atomic_store_n(&t->req->priv, NULL, __ATOMIC_RELEASE);
}

static void idle_check(dlock_runner *r)
{
    if (r->tasks == 0 && r->given_head == NULL)
        pthread_cond_broadcast(&r->idle);
}

/* After a step that returned WAIT: ready again at once when woken meanwhile
 * (or told to stop), else on the timer heap until then. */
static void schedule(dlock_runner *r, struct dlock_task *t, int64_t until)
{
    if (t->rewake || r->closing || t->cancelled)
        push_ready(r, t);
    else
        heap_push(r, t, until);
}

static int step(struct dlock_task *t, int64_t *until)
{
    t->running = 1;
    t->rewake = 0;
    int rc = t->step(t, until);
    t->running = 0;
    return rc;
}

/* Steps t (mu held, perhaps released meanwhile); at its end, its end runs
 * without mu. */
static void run(dlock_runner *r, struct dlock_task *t)
{
    int64_t until = 0;
    if (step(t, &until) == DLOCK_TASK_WAIT) {
        schedule(r, t, until);
        return;
    }
    int closing = r->closing;
    ended(t);
    pthread_mutex_unlock(r->mu);
    t->end(t, closing ? DLOCK_END_CLOSING : DLOCK_END_RUNNER);
    pthread_mutex_lock(r->mu);
    r->tasks--; /* after its end: one that asks again while closing is run too */
    idle_check(r);
}

/* The next task to step (mu held), or NULL when none is due; *wait_until
 * then tells until when to sleep (0: no timer). */
static struct dlock_task *next_task(dlock_runner *r, int64_t *wait_until)
{
    struct dlock_task *t = r->ready_head;
    *wait_until = 0;
    if (t) {
        ready_remove(r, t);
        return t;
    }
    if ((t = task_of(r->heap)) == NULL)
        return NULL;
    if (t->timer.until > dlock__now_ms()) {
        *wait_until = t->timer.until;
        return NULL;
    }
    heap_remove(r, t);
    return t;
}

/* Gives back one request that ended in a caller's call (mu held, released
 * around its done). */
static void give_one(dlock_runner *r)
{
    dlock_req *req = r->given_head;
    if ((r->given_head = req->next) == NULL)
        r->given_tail = NULL;
    pthread_mutex_unlock(r->mu);
    req->done(req);
    pthread_mutex_lock(r->mu);
    idle_check(r);
}

/* Sleeps (mu held) until signalled or until (0: no timer), noting when it
 * wakes by itself for armed_outside. */
static void sleep_until(dlock_runner *r, int64_t until)
{
    r->wake_at = until ? until : INT64_MAX;
    if (until)
        dlock__cond_wait_until(&r->cv, r->mu, until);
    else
        pthread_cond_wait(&r->cv, r->mu);
}

static void *loop(void *arg)
{
    dlock_runner *r = arg;
    pthread_mutex_lock(r->mu);
    while (!r->stop) {
        int64_t until;
        struct dlock_task *t;
        if (r->given_head)
            give_one(r);
        else if ((t = next_task(r, &until)) != NULL)
            run(r, t);
        else
            sleep_until(r, until);
    }
    pthread_mutex_unlock(r->mu);
    return NULL;
}

dlock_runner *dlock__runner_start(pthread_mutex_t *mu, int n, void (*post)(void *, dlock_req *),
                                  void *post_ctx)
{
    if (n < 1 || n > DLOCK_ASYNC_THREADS_MAX)
        return NULL;
    dlock_runner *r = calloc(1, sizeof(*r) + (size_t)n * sizeof(pthread_t));
    if (r == NULL)
        return NULL;
    r->mu = mu;
    r->post = post;
    r->post_ctx = post_ctx;
    r->wake_at = INT64_MAX;
    if (dlock__cond_init(&r->cv) != 0 || pthread_cond_init(&r->idle, NULL) != 0) {
        free(r);
        return NULL;
    }
    for (; r->n < n; r->n++)
        if (pthread_create(&r->thread[r->n], NULL, loop, r) != 0) {
            dlock__runner_stop(r);
            return NULL;
        }
    return r;
}

void dlock__runner_stop(dlock_runner *r)
{
    if (r == NULL)
        return;
    pthread_mutex_lock(r->mu);
    r->closing = 1;
    while (r->heap) /* every waiting task steps once more, and ends */
        push_ready(r, task_of(r->heap));
    pthread_cond_broadcast(&r->cv);
    while ((r->tasks > 0 || r->given_head) && r->n > 0)
        pthread_cond_wait(&r->idle, r->mu);
    r->stop = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(r->mu);
    for (int i = 0; i < r->n; i++)
        pthread_join(r->thread[i], NULL);
    pthread_cond_destroy(&r->cv);
    pthread_cond_destroy(&r->idle);
    free(r);
}

void dlock__runner_add(dlock_runner *r, struct dlock_task *t, dlock_req *req, int64_t until)
{
    r->tasks++;
    t->owner = r;
    t->req = req;
    t->running = t->rewake = t->ready = t->cancelled = 0;
    t->timer = (struct dlock_timer){0};
    if (req) {
        struct dlock_task **b = req_bucket(r, req);
        t->req_next = *b;
        if (*b)
            (*b)->req_link = &t->req_next;
        t->req_link = b;
        *b = t;
        __atomic_store_n(&req->priv, r, __ATOMIC_RELEASE);
    }
    if (until == 0) {
        push_ready(r, t);
        return;
    }
    heap_push(r, t, until);
    armed_outside(r, t);
}

void dlock__runner_wake(struct dlock_task *t)
{
    if (t->running)
        t->rewake = 1;
    else if (!t->ready)
        push_ready(t->owner, t);
}

int dlock__task_stop(const struct dlock_task *t)
{
    return t->owner->closing ? DLOCK_ERR_CLOSED : t->cancelled ? DLOCK_ERR_CANCELLED : 0;
}

int dlock__runner_step_here(struct dlock_task *t)
{
    dlock_runner *r = t->owner;
    if (r->post == NULL || t->running || dlock__task_stop(t))
        return 0;
    if (t->ready)
        ready_remove(r, t);
    else if (t->timer.armed)
        heap_remove(r, t);
    int64_t until = 0;
    if (step(t, &until) == DLOCK_TASK_WAIT) {
        schedule(r, t, until);
        armed_outside(r, t);
        return 0;
    }
    ended(t);
    r->tasks--;
    return 1;
}

void dlock__runner_end_here(struct dlock_task *t)
{
    while (t) {
        struct dlock_task *next = t->ready_next; /* before its end frees it */
        t->end(t, DLOCK_END_CALLER);
        t = next;
    }
}

void dlock__runner_deliver(dlock_runner *r, dlock_req *req, enum dlock_end where)
{
    if (r->post && where != DLOCK_END_CLOSING) {
        r->post(r->post_ctx, req);
        return;
    }
    if (where != DLOCK_END_CALLER) {
        req->done(req);
        return;
    }
    pthread_mutex_lock(r->mu);
    req->next = NULL;
    if (r->given_tail)
        r->given_tail->next = req;
    else
        r->given_head = req;
    r->given_tail = req;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(r->mu);
}

int dlock__runner_cancel(dlock_req *req)
{
    dlock_runner *r = __atomic_load_n(&req->priv, __ATOMIC_ACQUIRE);
    if (r == NULL)
        return dlock__fail(DLOCK_ERR_INVALID, "the call does not wait: its result is decided");
    pthread_mutex_lock(r->mu);
    struct dlock_task *t = *req_bucket(r, req);
    while (t && t->req != req)
        t = t->req_next;
    int waits = t != NULL && !t->cancelled;
    if (waits) {
        t->cancelled = 1;
        dlock__runner_wake(t);
    }
    pthread_mutex_unlock(r->mu);
    return waits ? DLOCK_OK
                 : dlock__fail(DLOCK_ERR_INVALID, "the call does not wait: its result is decided");
}
