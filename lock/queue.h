/* queue.h - notify mode: the threads of one process that want a key wait in
 * a local FIFO, only its head contends in Redis, and a releasing holder can
 * hand its lease straight to the next local waiter. queue.c says how. */
#ifndef DLOCK_QUEUE_H
#define DLOCK_QUEUE_H

#include <stdint.h>

#include "lock/client.h"
#include "lock/lease.h"

/* A waiter's wait is one core for both APIs: join the key's FIFO, then
 * steps, each run as far as it can go without waiting, then the end. A
 * thread runs the steps itself, sleeping on w->cv between them
 * (dlock__queue_acquire); an asynchronous acquire runs them on the client's
 * few threads (runner.h), woken through w->task. A semaphore's or
 * read-write lock's waiter (claim.c) queues in the same FIFO, and its head
 * waits between attempts in the same phases (dlock__queue_retry). */
enum { DLOCK_QUEUE_WAIT = 1 }; /* a step's "not yet": wake me by the time given */

/* Waits in key's local FIFO until h holds the lock (from Redis, or handed
 * over) or deadline passes. Returns as dlock_acquire does. */
int dlock__queue_acquire(dlock_client *c, dlock_handle *h, const char *key, const dlock_opts *o,
                         int64_t deadline);

/* mu held: w (zeroed but for cv, task, here and perhaps spare, a lease made
 * beforehand; o lives as long as w) joins key's FIFO for h, until deadline.
 * spare (may be NULL): an entry for key made beforehand (keytab.h), so that
 * joining allocates nothing. DLOCK_OK, or DLOCK_ERR_NOMEM (never with a
 * spare entry). */
int dlock__queue_join(dlock_client *c, dlock_handle *h, const char *key, const dlock_opts *o,
                      int64_t deadline, struct dlock_waiter *w, struct dlock_entry **spare);

/* mu held (released around a Redis attempt, when w heads the FIFO): takes
 * w's turn as far as it goes. Returns DLOCK_QUEUE_WAIT with *until, the
 * latest time of the next step (w is woken sooner when what it waits for
 * happens), or how the wait ended: DLOCK_OK (w->h holds) or an error as
 * dlock_acquire's. Either way dlock__queue_end follows. */
int dlock__queue_step(dlock_client *c, struct dlock_waiter *w, int64_t *until);

/* mu held, w just joined: 1 with *until when its first step would only
 * wait, its turn not now - it is not the head, a release is putting the
 * head in line, or a valid local holder has the key - and wake it no later
 * than *until (its deadline, or the holder's lease end); else 0 (it would
 * contend, or its wait is over). So that an asynchronous waiter sleeps on
 * the runner's timers from the start, no thread woken to find that out. */
int dlock__queue_waits(const struct dlock_waiter *w, int64_t *until);

/* mu held: ends w's wait, which ended with rc (a caller may end it early
 * with an error of its own; a w granted meanwhile must end with DLOCK_OK):
 * on an error w leaves the FIFO and the next may contend; a token it asked
 * with but holds nothing with is given up. Returns rc. */
int dlock__queue_end(dlock_client *c, struct dlock_waiter *w, int rc);

/* mu held, h's state OK: hands h's lease to the key's next local waiter when
 * the hand-off bounds allow. Returns 1 when handed over (h no longer holds);
 * when that ended an asynchronous acquire's call, its task is pushed on
 * *here (linked through ready_next), whose end the caller runs once it
 * released mu (dlock__runner_end_here). */
int dlock__queue_handoff(dlock_client *c, dlock_handle *h, struct dlock_task **here);

/* mu held: h gives its lease back (it goes to Redis next). Returns 1 with
 * *next filled when the release should put the key's local queue head in
 * Redis's line (the head then waits for dlock__queue_requeued), else 0: the
 * head may contend now, since a release is under way. */
int dlock__queue_released(dlock_client *c, dlock_handle *h, struct dlock_next *next);

/* mu held: the release that carried next is done; queued tells whether next
 * is in line (the head then waits for its grant, else it contends). */
void dlock__queue_requeued(dlock_client *c, struct dlock_entry *e, int queued);

/* mu held, w heading e's FIFO after an attempt at now that found the key
 * (or every permit) taken: sets what w waits for before its next attempt
 * (its phase): nothing, when a release came during the attempt (seen:
 * e->releases before it); the confirmation of e's release channel, when it
 * is being subscribed now (the attempt after it can't miss a release); else
 * a release, or a jittered retry_ms, sooner when pttl (ms until worth
 * trying again, negative when unknown) ends first; never past w's deadline. */
void dlock__queue_retry(dlock_client *c, struct dlock_entry *e, struct dlock_waiter *w,
                        int64_t now, int64_t pttl, unsigned long seen);

/* mu held: whether w's phase still holds it back at now (then *until is its
 * end); else w may attempt again. */
int dlock__queue_held_back(const dlock_client *c, const struct dlock_entry *e,
                           struct dlock_waiter *w, int64_t now, int64_t *until);

/* How many hand-offs a lease just taken from Redis may make in a row: at
 * most handoff_max, fewer when q other processes take turns with the key,
 * n this process's waiters behind the new holder: max(1, 1.5 (q + 1)(n + 1)
 * / q - 1) for q > 0 (lock/README.md, "How long a turn is"). Pure. */
int dlock__handoff_bound(int handoff_max, int q, int n);

/* mu held: drops the reference a holder or waiter had on e. */
void dlock__queue_leave(dlock_client *c, struct dlock_entry *e);

#endif
