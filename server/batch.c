/* batch.c - the queues of group commit: a FIFO per key with its leader, in a
 * chained hash table, and the FIFO of batches waiting for a transaction. */
#include "server/batch.h"

#include <pthread.h>
#include <stdlib.h>

#define BUCKETS 256

struct key_queue {
    struct key_queue *hnext;
    int64_t key;
    batch_link *head, *tail; /* the leader, if it has not taken its batch yet, first */
};

struct batch_queues {
    pthread_mutex_t mu;
    struct key_queue *bucket[BUCKETS];
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

/* Where key's queue is, or would be (mu held). A key has a queue exactly
 * while it has a leader. */
static struct key_queue **slot(batch_queues *q, int64_t key)
{
    struct key_queue **p = &q->bucket[(uint64_t)key % BUCKETS];
    while (*p && (*p)->key != key)
        p = &(*p)->hnext;
    return p;
}

static void append(batch_link **head, batch_link **tail, batch_link *l)
{
    l->next = NULL;
    if (*tail)
        (*tail)->next = l;
    else
        *head = l;
    *tail = l;
}

int batch_join(batch_queues *q, batch_link *l)
{
    pthread_mutex_lock(&q->mu);
    struct key_queue **p = slot(q, l->key), *kq = *p;
    int lead = kq == NULL;
    if (lead && (kq = *p = calloc(1, sizeof(*kq))) != NULL)
        kq->key = l->key;
    if (kq)
        append(&kq->head, &kq->tail, l);
    pthread_mutex_unlock(&q->mu);
    return kq == NULL ? -1 : lead;
}

int batch_take(batch_queues *q, int64_t key, batch_link **links, int max,
               int (*fits)(const batch_link *l, void *arg), void *arg)
{
    pthread_mutex_lock(&q->mu);
    struct key_queue *kq = *slot(q, key);
    int n = 0;
    /* fits sees the first too (it may count what is taken), which is taken anyway */
    while (kq && kq->head && n < max && (fits == NULL || fits(kq->head, arg) || n == 0)) {
        links[n++] = kq->head;
        if ((kq->head = kq->head->next) == NULL)
            kq->tail = NULL;
    }
    pthread_mutex_unlock(&q->mu);
    return n;
}

batch_link *batch_promote(batch_queues *q, int64_t key)
{
    pthread_mutex_lock(&q->mu);
    struct key_queue **p = slot(q, key), *kq = *p;
    batch_link *next = kq ? kq->head : NULL;
    if (kq && next == NULL) { /* nobody waits: the key has no leader */
        *p = kq->hnext;
        free(kq);
    }
    pthread_mutex_unlock(&q->mu);
    return next;
}

struct batch_commits {
    pthread_mutex_t mu;
    batch_commit_link *head, *tail;
    int committing; /* a transaction is in flight: its committer takes what joins */
};

batch_commits *batch_commits_new(void)
{
    batch_commits *c = calloc(1, sizeof(*c));
    if (c)
        pthread_mutex_init(&c->mu, NULL);
    return c;
}

void batch_commits_free(batch_commits *c)
{
    if (c == NULL)
        return;
    pthread_mutex_destroy(&c->mu);
    free(c);
}

int batch_commit_join(batch_commits *c, batch_commit_link *l)
{
    pthread_mutex_lock(&c->mu);
    l->next = NULL;
    if (c->tail)
        c->tail->next = l;
    else
        c->head = l;
    c->tail = l;
    int commit = !c->committing;
    c->committing = 1;
    pthread_mutex_unlock(&c->mu);
    return commit;
}

int batch_commit_take(batch_commits *c, batch_commit_link **links, int max,
                      int (*fits)(const batch_commit_link *l, void *arg), void *arg)
{
    pthread_mutex_lock(&c->mu);
    int n = 0;
    while (c->head && n < max && (fits == NULL || fits(c->head, arg) || n == 0)) {
        links[n++] = c->head;
        if ((c->head = c->head->next) == NULL)
            c->tail = NULL;
    }
    pthread_mutex_unlock(&c->mu);
    return n;
}

int batch_commit_done(batch_commits *c)
{
    pthread_mutex_lock(&c->mu);
    int more = c->head != NULL;
    c->committing = more;
    pthread_mutex_unlock(&c->mu);
    return more;
}
