/* batch.c - queues of requests for group commit: one per item, or per any
 * other key the service uses. */
#include "server/batch.h"

#include <stdlib.h>

#define BUCKETS 256

struct job_queue {
    struct job_queue *hnext;
    int64_t id;
    batch_job *head, *tail;
    int has_leader;  /* a thread will take the next batch */
    int promote_due; /* ...chosen at batch_finish of the batch being served */
};

struct batch_queues {
    pthread_mutex_t mu;
    struct job_queue *bucket[BUCKETS];
};

batch_queues *batch_new(void)
{
    batch_queues *q = calloc(1, sizeof(*q));
    if (q)
        pthread_mutex_init(&q->mu, NULL);
    return q;
}

void batch_free(batch_queues *q)
{
    if (q == NULL)
        return;
    pthread_mutex_destroy(&q->mu);
    free(q);
}

static struct job_queue **slot(batch_queues *q, int64_t id)
{
    struct job_queue **p = &q->bucket[(uint64_t)id % BUCKETS];
    while (*p && (*p)->id != id)
        p = &(*p)->hnext;
    return p;
}

int batch_enter(batch_queues *q, batch_job *job)
{
    job->next = NULL;
    job->done = job->leader = 0;
    int waits = job->on_lead == NULL;
    if (waits)
        pthread_cond_init(&job->cv, NULL);
    pthread_mutex_lock(&q->mu);
    struct job_queue **p = slot(q, job->queue), *iq = *p;
    if (iq == NULL && (iq = *p = calloc(1, sizeof(*iq))) != NULL)
        iq->id = job->queue;
    if (iq == NULL) { /* out of memory: serve it alone */
        pthread_mutex_unlock(&q->mu);
        if (waits)
            pthread_cond_destroy(&job->cv);
        return -1;
    }
    if (iq->tail)
        iq->tail->next = job;
    else
        iq->head = job;
    iq->tail = job;
    if (!iq->has_leader)
        iq->has_leader = job->leader = 1; /* the queue was empty: we are its head */
    while (waits && !job->done && !job->leader)
        pthread_cond_wait(&job->cv, &q->mu);
    int lead = job->leader && !job->done;
    pthread_mutex_unlock(&q->mu);
    if (waits && !lead)
        pthread_cond_destroy(&job->cv);
    return lead;
}

/* Wakes job's thread (under q->mu), or tells the caller to run one of its
 * callbacks once q->mu is let go: 1 when it must. */
static int wake(batch_job *job)
{
    if (job->on_lead)
        return 1;
    pthread_cond_signal(&job->cv);
    return 0;
}

/* Hands the queue to its next leader, or frees it when nobody waits (the
 * next arrival leads). Under q->mu; returns the new leader when its
 * on_lead is to run once q->mu is let go, else NULL. */
static batch_job *promote(struct job_queue **p)
{
    struct job_queue *iq = *p;
    iq->promote_due = 0;
    if (iq->head) {
        iq->head->leader = 1;
        return wake(iq->head) ? iq->head : NULL;
    }
    *p = iq->hnext;
    free(iq);
    return NULL;
}

int batch_take(batch_queues *q, int64_t queue, batch_job **jobs, int max,
               int (*fits)(const batch_job *job, void *arg), void *arg,
               enum batch_promote when)
{
    pthread_mutex_lock(&q->mu);
    struct job_queue **p = slot(q, queue), *iq = *p;
    int n = 0;
    while (iq && iq->head && n < max && (fits == NULL || fits(iq->head, arg) || n == 0)) {
        jobs[n++] = iq->head;
        iq->head = iq->head->next;
    }
    if (iq && iq->head == NULL)
        iq->tail = NULL;
    batch_job *next = NULL;
    if (iq && when == BATCH_PROMOTE_AT_TAKE)
        next = promote(p);
    else if (iq)
        iq->promote_due = 1;
    pthread_mutex_unlock(&q->mu);
    if (next)
        next->on_lead(next);
    return n;
}

void batch_finish(batch_queues *q, batch_job **jobs, int n)
{
    pthread_mutex_lock(&q->mu);
    struct job_queue **p = slot(q, jobs[0]->queue);
    batch_job *next = *p && (*p)->promote_due ? promote(p) : NULL;
    int callbacks = jobs[0]->on_done != NULL; /* a queue's jobs all have them, or none */
    for (int i = callbacks ? 0 : 1; i < n; i++) { /* without: jobs[0]'s thread is here */
        jobs[i]->done = 1;
        if (!callbacks)
            pthread_cond_signal(&jobs[i]->cv);
    }
    pthread_mutex_unlock(&q->mu);
    if (!callbacks)
        pthread_cond_destroy(&jobs[0]->cv);
    for (int i = 0; callbacks && i < n; i++)
        jobs[i]->on_done(jobs[i]); /* may free the job: not touched after */
    if (next)
        next->on_lead(next);
}
