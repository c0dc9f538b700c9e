/* client.h - what a lock client is made of: a header with no .c of its own,
 * for the files that hold a client (dlock.c, dlock_async.c, sem.c, rw.c,
 * fence.c, lock.c, claim.c, handle.c, queue.c, reentry.c).
 *
 * One mutex per client (mu) guards the key table, waiter queues, lease and
 * handle state, the watchdog's schedule and the asynchronous calls; the
 * watchdog, subscriber and runner threads share it. Nobody holds it across
 * I/O. */
#ifndef DLOCK_CLIENT_H
#define DLOCK_CLIENT_H

#include <pthread.h>

#include "lock/counters.h"
#include "lock/keytab.h"
#include "lock/quorum.h"
#include "lock/orphans.h"
#include "lock/runner.h"
#include "lock/subscriber.h"
#include "lock/watchdog.h"

struct dlock_client {
    pthread_mutex_t mu;
    dlock_quorum *nodes;      /* the Redis servers: one, or N as a quorum */
    dlock_keytab *keys;       /* mu: per-key queues (notify mode) */
    struct dlock_holds *holds; /* mu: which thread holds which key (reentry.h, which
                                * includes this file) */
    dlock_watchdog *wd;
    dlock_subscriber *sub[DLOCK_NODES_MAX]; /* release notifications, one per server */
    dlock_orphans *orphans;   /* clean-up of tokens whose state in Redis is unknown */
    dlock_runner *runner;     /* the threads that run asynchronous calls */
    dlock_counters counters;
};

#endif
