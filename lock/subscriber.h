/* subscriber.h - one Redis pub/sub connection per server, on its own
 * thread: it subscribes to the release channels of keys that local threads
 * wait for and wakes the head of the key's queue when the release script
 * publishes. With several servers each has its subscriber, and a release
 * heard from any of them wakes the head.
 * It shares the client's mutex (mu), which guards the key table; the
 * functions below are called with mu held. */
#ifndef DLOCK_SUBSCRIBER_H
#define DLOCK_SUBSCRIBER_H

#include <pthread.h>

#include "lock/counters.h"
#include "lock/keytab.h"
#include "lock/node.h"

typedef struct dlock_subscriber dlock_subscriber;

/* Starts the thread (it connects lazily, through node, server number idx
 * of the client: it keeps e->sub_state[idx] of each entry). NULL when out
 * of memory or threads. */
dlock_subscriber *dlock__sub_start(pthread_mutex_t *mu, dlock_keytab *keys, dlock_node *node,
                                   int idx, dlock_counters *counters);

/* Stops and joins the thread, closing the connection. */
void dlock__sub_stop(dlock_subscriber *s);

/* Asks for e's release channel. Its sub_state becomes ACTIVE at once when
 * the channel is still subscribed from an earlier wait; otherwise PENDING,
 * then ACTIVE once Redis confirms (FAILED when there is no connection, or
 * Redis refuses). The head of e's queue is signalled on each change and on
 * each release notification. */
void dlock__sub_subscribe(dlock_subscriber *s, struct dlock_entry *e);

/* Nobody waits for key any more. Its channel stays subscribed a few seconds,
 * in case the key is wanted again soon. */
void dlock__sub_unsubscribe(dlock_subscriber *s, const char *key);

#endif
