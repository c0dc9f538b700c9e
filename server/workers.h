/* workers.h - a fixed pool of threads that run tasks in arrival order: the
 * slow half of a request (a store call, the lead of a batch, a commit) runs
 * here, never on the HTTP event threads, and a request that only waits (for
 * a lock, a batch, a commit) is a queued task or a suspended connection,
 * not a thread. Thread-safe. */
#ifndef WORKERS_H
#define WORKERS_H

typedef struct workers workers;

typedef void workers_fn(void *arg);

/* Starts n threads named name (at most 15 bytes, for top and /proc).
 * NULL when out of memory or threads. */
workers *workers_start(int n, const char *name);

/* Queues fn(arg) to run on one of w's threads, in turn; never waits for a
 * thread. 0 when queued, -1 when out of memory (nothing queued). arg is
 * the caller's. */
int workers_submit(workers *w, workers_fn *fn, void *arg);

/* Tasks queued or running now (for the metrics). */
int workers_backlog(workers *w);

/* Runs every task queued (tasks may queue more), then stops the threads and
 * frees w. NULL is a no-op. */
void workers_stop(workers *w);

#endif
