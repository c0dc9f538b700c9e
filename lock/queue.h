/* queue.h - notify mode: the threads of one process that want a key wait in
 * a local FIFO, only its head contends in Redis, and a releasing holder can
 * hand its lease straight to the next local waiter. queue.c says how. */
#ifndef DLOCK_QUEUE_H
#define DLOCK_QUEUE_H

#include <stdint.h>

#include "lock/client.h"
#include "lock/lease.h"

/* Waits in key's local FIFO until h holds the lock (from Redis, or handed
 * over) or deadline passes. Returns as dlock_acquire does. */
int dlock_queue_acquire(dlock_client *c, dlock_handle *h, const char *key, const dlock_opts *o,
                        int64_t deadline);

/* mu held, h's state OK: hands h's lease to the key's next local waiter when
 * the hand-off bounds allow. Returns 1 when handed over (h no longer holds). */
int dlock_queue_handoff(dlock_client *c, dlock_handle *h);

/* mu held: h gives its lease back (it goes to Redis next). Returns 1 with
 * *next filled when the release should put the key's local queue head in
 * Redis's line (the head then waits for dlock_queue_requeued), else 0: the
 * head may contend now, since a release is under way. */
int dlock_queue_released(dlock_client *c, dlock_handle *h, struct dlock_next *next);

/* mu held: the release that carried next is done; queued tells whether next
 * is in line (the head then waits for its grant, else it contends). */
void dlock_queue_requeued(dlock_client *c, struct dlock_entry *e, int queued);

/* mu held, w heading e's queue after a failed attempt: when e's release
 * channel is not subscribed, subscribes and waits (bounded by retry_ms and
 * deadline) for Redis to confirm. Returns 1 when it did: the next attempt
 * should follow at once, as a release from now on wakes w; else 0. */
int dlock_queue_listen(dlock_client *c, struct dlock_entry *e, struct dlock_waiter *w,
                       const dlock_opts *o, int64_t deadline);

/* mu held: drops the reference a holder or waiter had on e. */
void dlock_queue_leave(dlock_client *c, struct dlock_entry *e);

#endif
