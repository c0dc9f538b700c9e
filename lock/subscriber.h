/* subscriber.h - one Redis pub/sub connection per client, on its own thread:
 * it subscribes to the release channels of keys that local threads wait for
 * and wakes the head of the key's queue when the release script publishes. */
#ifndef DLOCK_SUBSCRIBER_H
#define DLOCK_SUBSCRIBER_H

#include <stddef.h>

#include "dlock.h"
#include "keytab.h"

#define DLOCK_CHANNEL_SUFFIX ":released"
#define DLOCK_CHANNEL_MAX (DLOCK_KEY_MAX + sizeof(DLOCK_CHANNEL_SUFFIX))

typedef struct dlock_subscriber dlock_subscriber;

/* Starts the thread (it connects lazily). NULL when out of memory or threads. */
dlock_subscriber *dlock_sub_start(dlock_client *c);

/* Stops and joins the thread, closing the connection. */
void dlock_sub_stop(dlock_subscriber *s);

/* With the client's mutex held: asks for e's release channel. e->sub_state
 * becomes ACTIVE at once when the channel is still subscribed from an earlier
 * wait; otherwise PENDING, then ACTIVE once Redis confirms (FAILED when there
 * is no connection). The head of e's queue is signalled on each change and on
 * each release notification. */
void dlock_sub_subscribe(dlock_subscriber *s, struct dlock_entry *e);

/* With the client's mutex held: nobody waits for key any more. Its channel
 * stays subscribed a few seconds, in case the key is wanted again soon. */
void dlock_sub_unsubscribe(dlock_subscriber *s, const char *key);

/* Writes key's release channel name into buf (DLOCK_CHANNEL_MAX bytes); returns its length. */
size_t dlock_channel(const char *key, char *buf);

#endif
