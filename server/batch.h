/* batch.h - the two queues of group commit. Orders queue per key (an
 * item's id, or the one key of the carts) behind a leader, who serves a
 * batch of them under one lock hold; batches whose locks are held queue for
 * the one transaction in flight. Entries are links embedded in the caller's
 * own requests, so queueing never allocates (a key's queue is made once, at
 * its first order). No callbacks: each call says what the caller does next.
 * Thread-safe.
 *
 *   order arrives:   batch_join(q, &o->link) == 1 -> o leads: asks the lock
 *   lock granted:    n = batch_take(q, key, links, max, ...)   (the leader's own first)
 *                    next = batch_promote(q, key) -> next leads: asks the lock
 *                    batch_commit_join(c, &b->link) == 1 -> commit now:
 *   the committer:   do { n = batch_commit_take(c, ...); ...commit, answer, release... }
 *                    while (batch_commit_done(c));
 */
#ifndef BATCH_H
#define BATCH_H

#include <stdint.h>

/* An order's place in its key's queue: the caller's, embedded. */
typedef struct batch_link {
    int64_t key;             /* the caller's: which queue */
    struct batch_link *next; /* batch.c's */
} batch_link;

typedef struct batch_queues batch_queues;

/* Returns: the queues, or NULL when out of memory. */
batch_queues *batch_new(void);

/* No order may be queued. NULL is a no-op. */
void batch_free(batch_queues *q);

/* l (l->key set) joins its key's queue.
 * Returns: 1 when l leads (the queue had no leader), 0 when it waits behind
 * one (a batch_take or batch_promote reaches it), -1 when out of memory
 * (nothing queued). */
int batch_join(batch_queues *q, batch_link *l);

/* The leader: dequeues up to max of key's links into links[], in arrival
 * order (the leader's own first), stopping before one that fits (NULL: any)
 * says does not fit; the first is taken whatever it says.
 * Returns: how many. */
int batch_take(batch_queues *q, int64_t key, batch_link **links, int max,
               int (*fits)(const batch_link *l, void *arg), void *arg);

/* The leader, done with key's queue: its next link leads from now on.
 * Returns: that link (the caller starts its lead), or NULL when none waits
 * (the next batch_join leads). */
batch_link *batch_promote(batch_queues *q, int64_t key);

/* A batch's place among those waiting for a transaction: the caller's. */
typedef struct batch_commit_link {
    struct batch_commit_link *next; /* batch.c's */
} batch_commit_link;

typedef struct batch_commits batch_commits;

/* Returns: the queue, or NULL when out of memory. */
batch_commits *batch_commits_new(void);

/* No batch may be queued. NULL is a no-op. */
void batch_commits_free(batch_commits *c);

/* l's batch (its lock held) waits for a transaction.
 * Returns: 1 when no transaction is in flight: the caller commits now
 * (batch_commit_take), 0 when the one in flight, or its next, takes it. */
int batch_commit_join(batch_commits *c, batch_commit_link *l);

/* The committer: dequeues up to max waiting batches in arrival order,
 * stopping before one that fits (NULL: any) refuses (the first is taken).
 * Returns: how many. */
int batch_commit_take(batch_commits *c, batch_commit_link **links, int max,
                      int (*fits)(const batch_commit_link *l, void *arg), void *arg);

/* The committer, its transaction over.
 * Returns: 1 when more batches wait (it commits again), 0 when none does
 * (the next batch_commit_join commits). */
int batch_commit_done(batch_commits *c);

#endif
