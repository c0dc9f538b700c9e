/* lock.h - a lock's and a multi-lock's acquire steps and their release, for
 * the blocking API (dlock.c) and the asynchronous one (dlock_async.c): spin
 * mode's try (notify mode's line is queue.c's), a held key's bookkeeping,
 * a multi-lock's handle and key order; a release split into what needs no
 * Redis (a nested hold's end, a hand-off) and the give-back in Redis, which
 * a semaphore's or read-write lock's handle also goes through (claim.c). */
#ifndef DLOCK_LOCK_H
#define DLOCK_LOCK_H

#include <stdint.h>

#include "lock/client.h"

/* Spin mode's step (mu held, released around the try): one try for h with
 * *lp (made at the first when NULL; its token drawn then when it has none
 * yet). Returns DLOCK_QUEUE_WAIT with *until
 * the next try, or how the wait ended (*lp then held by h, given up, or
 * freed, and NULL). */
int dlock__lock_spin_step(dlock_client *c, dlock_handle *h, const char *key, const dlock_opts *o,
                          struct dlock_lease **lp, int64_t deadline, int64_t *until);

/* h has just got its key: counted, its hold timed from now. */
void dlock__lock_held(dlock_client *c, dlock_handle *h);

/* keys sorted into order[] (the canonical order every multi-lock takes its
 * keys in), each checked, none twice: DLOCK_OK or DLOCK_ERR_INVALID. */
int dlock__lock_order(const char *const *keys, int n, const char **order);

/* A multi-lock's handle with room for n parts, or NULL when out of memory. */
dlock_handle *dlock__lock_set_new(dlock_client *c, const dlock_opts *o, int n);

/* A multi-lock whose parts are all held (mu not held): from now on they are
 * renewed and interrupted as one. */
void dlock__lock_set_formed(dlock_handle *set);

/* How bad a release's result is: a multi-lock reports its worst part's. */
int dlock__lock_worse(int rc, int than);

enum { DLOCK_RELEASED, DLOCK_GIVE_BACK }; /* what dlock__lock_release_begin leaves */

/* mu held: the part of *hp's release that needs no Redis; *local gets the
 * holder's own view at release (OK, INTERRUPTED or LOST). Returns
 * DLOCK_RELEASED with *rc when the release is over: the hold goes on in its
 * other handles (*hp, nested, freed), or every lease went to a local waiter
 * (*hp freed; the calls this ended are pushed on *here, linked through
 * ready_next, for dlock__runner_end_here once mu is released), or *hp may
 * not be released now (DLOCK_ERR_INVALID: an asynchronous sleep of its
 * hold is pending; nothing done). DLOCK_GIVE_BACK: *hp (a hold's outermost
 * handle by now) has leases to give back in Redis (dlock__lock_give_back). */
int dlock__lock_release_begin(dlock_client *c, dlock_handle **hp, int *local, int *rc,
                              struct dlock_task **here);

/* mu held (released around the I/O): gives back in Redis what h, past
 * dlock__lock_release_begin, still holds - granted to the next waiter in
 * line, or deleted - (a multi-lock's parts freed as they go, last first);
 * a DLOCK_ERR_REDIS result leaves the token to the orphans thread. h is
 * the caller's to free. Returns what dlock_release documents. */
int dlock__lock_give_back(dlock_client *c, dlock_handle *h);

/* dlock_release's whole: both parts, h freed, the calls it ended ended.
 * *local: the holder's own view at release. */
int dlock__lock_release(dlock_handle *h, int *local);

#endif
