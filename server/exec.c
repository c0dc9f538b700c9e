/* exec.c - an executor: one FIFO of caller-owned tasks and a pairing heap of
 * caller-owned timers, under one mutex, served by a fixed set of threads. */
#include "server/exec.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

struct exec {
    pthread_mutex_t mu;
    pthread_cond_t ready; /* CLOCK_MONOTONIC: a task was queued, a timer came first, or stop */
    exec_task *head, *tail;
    exec_timer *timers;   /* the heap's root: the next timer due */
    int idle;             /* threads waiting on ready */
    int queued;           /* tasks in the FIFO */
    int running;          /* tasks being run */
    int armed;            /* timers armed */
    int stopping;
    _Atomic uint64_t posts;
    int n;
    pthread_t thread[];
};

static _Thread_local const exec *current; /* the executor whose thread this is */

int64_t exec_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the timers' pairing heap (mu held) ---- */

/* Two heaps' roots (siblings and prev NULL) as one; returns its root. */
static exec_timer *meld(exec_timer *a, exec_timer *b)
{
    if (a == NULL || b == NULL)
        return a ? a : b;
    if (b->due_ms < a->due_ms) {
        exec_timer *t = a;
        a = b, b = t;
    }
    b->sibling = a->child; /* b becomes a's first child */
    if (a->child)
        a->child->prev = b;
    b->prev = a;
    a->child = b;
    return a;
}

/* The heaps of first and its siblings as one: melded in pairs left to right,
 * then the pairs from the last back (the two passes that keep it balanced). */
static exec_timer *merge_pairs(exec_timer *first)
{
    exec_timer *pairs = NULL; /* melded pairs, the last first, linked by sibling */
    while (first) {
        exec_timer *a = first, *b = a->sibling;
        first = b ? b->sibling : NULL;
        a->sibling = a->prev = NULL;
        if (b)
            b->sibling = b->prev = NULL;
        exec_timer *m = meld(a, b);
        m->sibling = pairs;
        pairs = m;
    }
    exec_timer *root = NULL;
    while (pairs) {
        exec_timer *next = pairs->sibling;
        pairs->sibling = NULL;
        root = meld(root, pairs);
        pairs = next;
    }
    return root;
}

/* Takes t (armed) out of e's heap. */
static void heap_remove(exec *e, exec_timer *t)
{
    if (t == e->timers) {
        e->timers = merge_pairs(t->child);
    } else {
        if (t->prev->child == t) /* the first child: prev is its parent */
            t->prev->child = t->sibling;
        else
            t->prev->sibling = t->sibling;
        if (t->sibling)
            t->sibling->prev = t->prev;
        e->timers = meld(e->timers, merge_pairs(t->child));
    }
    if (e->timers)
        e->timers->prev = NULL;
    t->child = t->sibling = t->prev = NULL;
    t->armed = 0;
    e->armed--;
}

/* ---- the queue (mu held) ---- */

static void push(exec *e, exec_task *t)
{
    e->queued++;
    t->next = NULL;
    if (e->tail)
        e->tail->next = t;
    else
        e->head = t;
    e->tail = t;
    atomic_fetch_add_explicit(&e->posts, 1, memory_order_relaxed);
}

/* Queues the timers due by now (all of them once stopping); wakes a thread
 * for each beyond the first, which the caller runs. */
static void queue_due(exec *e)
{
    int64_t now = exec_now_ms();
    int queued = 0;
    while (e->timers && (e->timers->due_ms <= now || e->stopping)) {
        exec_timer *t = e->timers;
        heap_remove(e, t);
        push(e, &t->task);
        if (++queued > 1 && e->idle > 0) /* the caller runs the first */
            pthread_cond_signal(&e->ready);
    }
}

static void wait_for_work(exec *e)
{
    e->idle++;
    if (e->timers) {
        int64_t due = e->timers->due_ms;
        struct timespec until = {due / 1000, (long)(due % 1000) * 1000000};
        pthread_cond_timedwait(&e->ready, &e->mu, &until);
    } else {
        pthread_cond_wait(&e->ready, &e->mu);
    }
    e->idle--;
}

static void *serve(void *arg)
{
    exec *e = arg;
    current = e;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        queue_due(e);
        exec_task *t = e->head;
        if (t) {
            if ((e->head = t->next) == NULL)
                e->tail = NULL;
            e->queued--;
            e->running++;
            pthread_mutex_unlock(&e->mu);
            t->fn(t);
            pthread_mutex_lock(&e->mu);
            e->running--;
        } else if (e->stopping) {
            break;
        } else {
            wait_for_work(e);
        }
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

exec *exec_start(int n, const char *name)
{
    exec *e = calloc(1, sizeof(*e) + (size_t)n * sizeof(pthread_t));
    if (e == NULL)
        return NULL;
    pthread_mutex_init(&e->mu, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&e->ready, &attr);
    pthread_condattr_destroy(&attr);
    for (; e->n < n; e->n++) {
        if (pthread_create(&e->thread[e->n], NULL, serve, e) != 0) {
            exec_stop(e);
            return NULL;
        }
        char title[16];
        snprintf(title, sizeof(title), "%.11s-%d", name, e->n);
        pthread_setname_np(e->thread[e->n], title);
    }
    return e;
}

/* A post from one of e's threads is run by that thread once its task
 * returns, unless a backlog builds (then an idle thread helps): a task that
 * hands work on (a lock's grant, a release's end) wakes no other thread
 * for it. */
#define BACKLOG 3

void exec_post(exec *e, exec_task *t, exec_fn *fn)
{
    t->fn = fn;
    pthread_mutex_lock(&e->mu);
    push(e, t);
    if (e->idle > 0 && (current != e || e->queued >= BACKLOG))
        pthread_cond_signal(&e->ready);
    pthread_mutex_unlock(&e->mu);
}

void exec_timer_start(exec *e, exec_timer *t, int64_t due_ms, exec_fn *fn)
{
    pthread_mutex_lock(&e->mu);
    t->task.fn = fn;
    t->due_ms = due_ms;
    t->child = t->sibling = t->prev = NULL;
    t->armed = 1;
    e->armed++;
    e->timers = meld(e->timers, t);
    if (e->timers == t && e->idle > 0) /* sooner than any thread waits until */
        pthread_cond_signal(&e->ready);
    pthread_mutex_unlock(&e->mu);
}

int exec_timer_stop(exec *e, exec_timer *t)
{
    pthread_mutex_lock(&e->mu);
    int armed = t->armed;
    if (armed)
        heap_remove(e, t);
    pthread_mutex_unlock(&e->mu);
    return armed;
}

int exec_on(const exec *e) { return current == e; }

int exec_busy(exec *e)
{
    pthread_mutex_lock(&e->mu);
    int n = e->queued + e->running + e->armed;
    pthread_mutex_unlock(&e->mu);
    return n;
}

uint64_t exec_posts(exec *e) { return atomic_load(&e->posts); }

void exec_stop(exec *e)
{
    if (e == NULL)
        return;
    pthread_mutex_lock(&e->mu);
    e->stopping = 1;
    pthread_cond_broadcast(&e->ready);
    pthread_mutex_unlock(&e->mu);
    for (int i = 0; i < e->n; i++)
        pthread_join(e->thread[i], NULL);
    pthread_cond_destroy(&e->ready);
    pthread_mutex_destroy(&e->mu);
    free(e);
}
