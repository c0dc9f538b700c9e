/* batch.h - group commit for hot items: requests for the same item queue up
 * inside the process, and one thread at a time (the leader) serves a whole
 * batch of them. Only the queueing lives here; the service decides what
 * serving means (take the item's lock, apply the batch in one transaction).
 *
 *   if (batch_enter(q, &job)) {            // we lead
 *       ...acquire the item's lock...
 *       n = batch_take(q, item, jobs, max); // ours first; promotes the next leader
 *       ...answer every jobs[i]->arg...
 *       batch_finish(q, jobs, n);
 *   }                                       // else another leader answered job.arg
 *
 * Thread-safe. The next leader is promoted either while the current batch
 * is still being served (BATCH_PROMOTE_AT_TAKE: it is already waiting for
 * the item's lock when that is released) or once it is served
 * (BATCH_PROMOTE_AT_FINISH: for a leader that must see its whole batch
 * before it knows which locks to take, so that its batch is everything
 * queued meanwhile, not a batch of one). */
#ifndef BATCH_H
#define BATCH_H

#include <pthread.h>
#include <stdint.h>

typedef struct batch_queues batch_queues;

typedef struct batch_job batch_job;
typedef void batch_job_fn(batch_job *job);

struct batch_job {
    int64_t queue; /* which queue it waits in: an item's id, or any other key the caller uses */
    void *arg;     /* the caller's: the request and where its answer goes */
    /* Both NULL: batch_enter waits on the caller's thread. Both set: it
     * returns at once; on_lead runs when the job is to lead a batch (on a
     * thread of the callee's choosing), and on_done once the job is served,
     * by its own leader too (the job is not touched again). Each runs on
     * the thread of the leader that promoted or served the job, outside the
     * queue's lock, and must not block. A queue's jobs all have callbacks,
     * or none. */
    batch_job_fn *on_lead, *on_done;
    /* owned by batch.c */
    struct batch_job *next;
    int done, leader;
    pthread_cond_t cv;
};

/* NULL when out of memory. */
batch_queues *batch_new(void);
void batch_free(batch_queues *q); /* no job may be queued */

/* Queues job (queue, arg and the callbacks set) and, without callbacks,
 * waits. Returns 1 when the caller must lead a batch now, 0 when another
 * leader served the job (with callbacks: when one of them will run), -1
 * when out of memory (nothing queued: serve the job alone). */
int batch_enter(batch_queues *q, batch_job *job);

enum batch_promote { BATCH_PROMOTE_AT_TAKE, BATCH_PROMOTE_AT_FINISH };

/* Leader: dequeues up to max jobs of queue, in arrival order (the leader's
 * own first), stopping before a job that fits (when not NULL) says does not
 * fit with those taken (fits sees every job, the leader's own first, which
 * is taken whatever it says), and promotes the next queued job to lead, now
 * or at batch_finish as promote says. */
int batch_take(batch_queues *q, int64_t queue, batch_job **jobs, int max,
               int (*fits)(const batch_job *job, void *arg), void *arg,
               enum batch_promote promote);

/* Leader: marks the jobs served (their out filled), runs each one's on_done
 * or, without callbacks, wakes their threads (all but jobs[0], the
 * leader's own), and promotes the next leader if batch_take left that for
 * now. */
void batch_finish(batch_queues *q, batch_job **jobs, int n);

#endif
