/* async.c - the threads that run asynchronous acquires: a FIFO of tasks
 * ready to step and a min-heap of tasks waiting for a time, both under the
 * client's mutex. A task woken while a thread runs its step is stepped
 * again after it, so no wake is lost; the steps themselves decide from
 * state, so a spare wake costs only a look. However many tasks wait, the
 * threads are the n started with the client. */
#include "lock/async.h"

#include <stdlib.h>

#include "lock/dlock.h"
#include "lock/sync.h"

struct dlock_async {
    pthread_mutex_t *mu;
    pthread_cond_t cv;   /* mu: work for the threads, or stop */
    pthread_cond_t idle; /* mu: the last task ended */
    struct dlock_task *ready_head, *ready_tail;
    struct dlock_task **heap; /* by until; cap >= tasks, so a push never fails */
    int nheap, cap;
    int tasks;       /* added and not yet done */
    int closing;     /* the client is being freed: tasks end */
    int stop;        /* the threads leave */
    int n;
    pthread_t thread[];
};

static void heap_set(dlock_async *a, int i, struct dlock_task *t)
{
    a->heap[i] = t;
    t->heap_at = i;
}

static void heap_up(dlock_async *a, int i)
{
    struct dlock_task *t = a->heap[i];
    while (i > 0 && a->heap[(i - 1) / 2]->until > t->until) {
        heap_set(a, i, a->heap[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
    heap_set(a, i, t);
}

static void heap_down(dlock_async *a, int i)
{
    struct dlock_task *t = a->heap[i];
    for (;;) {
        int k = 2 * i + 1;
        if (k >= a->nheap)
            break;
        if (k + 1 < a->nheap && a->heap[k + 1]->until < a->heap[k]->until)
            k++;
        if (a->heap[k]->until >= t->until)
            break;
        heap_set(a, i, a->heap[k]);
        i = k;
    }
    heap_set(a, i, t);
}

static void heap_remove(dlock_async *a, struct dlock_task *t)
{
    int i = t->heap_at;
    t->heap_at = -1;
    struct dlock_task *last = a->heap[--a->nheap];
    if (i == a->nheap)
        return;
    heap_set(a, i, last);
    heap_up(a, i);
    heap_down(a, last->heap_at);
}

static void push_ready(dlock_async *a, struct dlock_task *t)
{
    if (t->heap_at >= 0)
        heap_remove(a, t);
    t->ready = 1;
    t->next_ready = NULL;
    if (a->ready_tail)
        a->ready_tail->next_ready = t;
    else
        a->ready_head = t;
    a->ready_tail = t;
    pthread_cond_signal(&a->cv);
}

/* The next task to step (mu held), or NULL when none is due; *wait_until
 * then tells until when to sleep (0: no timer). */
static struct dlock_task *next_task(dlock_async *a, int64_t *wait_until)
{
    struct dlock_task *t = a->ready_head;
    *wait_until = 0;
    if (t) {
        if ((a->ready_head = t->next_ready) == NULL)
            a->ready_tail = NULL;
        t->ready = 0;
        return t;
    }
    if (a->nheap == 0)
        return NULL;
    t = a->heap[0];
    if (t->until > dlock_now_ms()) {
        *wait_until = t->until;
        return NULL;
    }
    heap_remove(a, t);
    return t;
}

/* Steps t (mu held, perhaps released meanwhile); at its end, its done runs
 * without mu. */
static void run(dlock_async *a, struct dlock_task *t)
{
    int64_t until = 0;
    t->running = 1;
    t->rewake = 0;
    int rc = t->step(t, a->closing, &until);
    t->running = 0;
    if (rc == DLOCK_TASK_WAIT) {
        if (t->rewake || a->closing) {
            push_ready(a, t);
        } else {
            t->until = until;
            a->heap[a->nheap] = t;
            t->heap_at = a->nheap++;
            heap_up(a, t->heap_at);
        }
        return;
    }
    int closing = a->closing;
    pthread_mutex_unlock(a->mu);
    t->done(t, closing);
    pthread_mutex_lock(a->mu);
    if (--a->tasks == 0)
        pthread_cond_broadcast(&a->idle);
}

static void *loop(void *arg)
{
    dlock_async *a = arg;
    pthread_mutex_lock(a->mu);
    while (!a->stop) {
        int64_t until;
        struct dlock_task *t = next_task(a, &until);
        if (t)
            run(a, t);
        else if (until)
            dlock_cond_wait_until(&a->cv, a->mu, until);
        else
            pthread_cond_wait(&a->cv, a->mu);
    }
    pthread_mutex_unlock(a->mu);
    return NULL;
}

dlock_async *dlock_async_start(pthread_mutex_t *mu, int n)
{
    if (n < 1 || n > 64)
        return NULL;
    dlock_async *a = calloc(1, sizeof(*a) + (size_t)n * sizeof(pthread_t));
    if (a == NULL)
        return NULL;
    a->mu = mu;
    if (dlock_cond_init(&a->cv) != 0 || pthread_cond_init(&a->idle, NULL) != 0) {
        free(a);
        return NULL;
    }
    for (; a->n < n; a->n++)
        if (pthread_create(&a->thread[a->n], NULL, loop, a) != 0) {
            dlock_async_stop(a);
            return NULL;
        }
    return a;
}

void dlock_async_stop(dlock_async *a)
{
    if (a == NULL)
        return;
    pthread_mutex_lock(a->mu);
    a->closing = 1;
    while (a->nheap > 0) /* every waiting task steps once more, and ends */
        push_ready(a, a->heap[0]);
    pthread_cond_broadcast(&a->cv);
    while (a->tasks > 0 && a->n > 0)
        pthread_cond_wait(&a->idle, a->mu);
    a->stop = 1;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(a->mu);
    for (int i = 0; i < a->n; i++)
        pthread_join(a->thread[i], NULL);
    pthread_cond_destroy(&a->cv);
    pthread_cond_destroy(&a->idle);
    free(a->heap);
    free(a);
}

int dlock_async_add(dlock_async *a, struct dlock_task *t)
{
    if (a->tasks == a->cap) {
        int cap = a->cap ? 2 * a->cap : 64;
        struct dlock_task **heap = realloc(a->heap, (size_t)cap * sizeof(*heap));
        if (heap == NULL)
            return DLOCK_ERR_NOMEM;
        a->heap = heap;
        a->cap = cap;
    }
    a->tasks++;
    t->owner = a;
    t->running = t->rewake = t->ready = 0;
    t->heap_at = -1;
    push_ready(a, t);
    return DLOCK_OK;
}

void dlock_async_wake(struct dlock_task *t)
{
    if (t->running)
        t->rewake = 1;
    else if (!t->ready)
        push_ready(t->owner, t);
}
