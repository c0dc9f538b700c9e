/* workers.c - a fixed pool of threads over one FIFO of tasks. */
#include "server/workers.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct task {
    struct task *next;
    workers_fn *fn;
    void *arg;
};

struct workers {
    pthread_mutex_t mu;
    pthread_cond_t ready; /* a task was queued, or stopping */
    struct task *head, *tail;
    int queued, running, stopping, n;
    pthread_t thread[];
};

static void *run(void *arg)
{
    workers *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (w->head == NULL && !w->stopping)
            pthread_cond_wait(&w->ready, &w->mu);
        struct task *t = w->head;
        if (t == NULL)
            break; /* stopping, and nothing is left */
        w->head = t->next;
        if (w->head == NULL)
            w->tail = NULL;
        w->queued--, w->running++;
        pthread_mutex_unlock(&w->mu);
        t->fn(t->arg);
        free(t);
        pthread_mutex_lock(&w->mu);
        w->running--;
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

workers *workers_start(int n, const char *name)
{
    workers *w = calloc(1, sizeof(*w) + (size_t)n * sizeof(pthread_t));
    if (w == NULL)
        return NULL;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->ready, NULL);
    for (; w->n < n; w->n++) {
        if (pthread_create(&w->thread[w->n], NULL, run, w) != 0) {
            workers_stop(w);
            return NULL;
        }
        char title[16];
        snprintf(title, sizeof(title), "%.11s-%d", name, w->n);
        pthread_setname_np(w->thread[w->n], title);
    }
    return w;
}

int workers_submit(workers *w, workers_fn *fn, void *arg)
{
    struct task *t = malloc(sizeof(*t));
    if (t == NULL)
        return -1;
    *t = (struct task){NULL, fn, arg};
    pthread_mutex_lock(&w->mu);
    if (w->tail)
        w->tail->next = t;
    else
        w->head = t;
    w->tail = t;
    w->queued++;
    pthread_cond_signal(&w->ready);
    pthread_mutex_unlock(&w->mu);
    return 0;
}

int workers_backlog(workers *w)
{
    pthread_mutex_lock(&w->mu);
    int n = w->queued + w->running;
    pthread_mutex_unlock(&w->mu);
    return n;
}

void workers_stop(workers *w)
{
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->mu);
    w->stopping = 1;
    pthread_cond_broadcast(&w->ready);
    pthread_mutex_unlock(&w->mu);
    for (int i = 0; i < w->n; i++)
        pthread_join(w->thread[i], NULL);
    pthread_cond_destroy(&w->ready);
    pthread_mutex_destroy(&w->mu);
    free(w);
}
