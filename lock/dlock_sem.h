/* dlock_sem.h - libdlock's semaphore: at most N holders of a key at once,
 * over every process that uses it, each holding a permit that is a lease
 * like a lock's (renewed, interrupted, fenced). Its asynchronous acquire is
 * dlock_sem_acquire_async (dlock_async.h); its handle is released with
 * dlock_release. Design: lock/README.md, "Semaphore: at most N holders". */
#ifndef DLOCK_SEM_H
#define DLOCK_SEM_H

#include "dlock.h"

DLOCK_BEGIN_DECLS

/* Takes one of permits_total permits of key (give every caller of a key the
 * same permits_total), waiting as dlock_acquire does. A permit is a lease,
 * renewed, interrupted and fenced as a lock's, never handed over or nested
 * (a thread asking again takes a second permit); its handle works with
 * dlock_release, _check, _sleep, _renewals, _token, _key and _fence, not
 * with dlock_run or multi-locks. Never use the key as another kind's. Over
 * N servers a permit needs q = floor(N P / (P + 1)) + 1 of them (P =
 * permits_total: a majority for P = 1, 3 of 3 for P >= 2; lock/README.md).
 * returns: DLOCK_OK, *out the holder.
 * owns:    as dlock_acquire.
 * errors:  as dlock_acquire: DLOCK_ERR_TIMEOUT, all permits still held after
 *          wait_ms; _REDIS at once when more than N - q servers failed;
 *          _INVALID also for permits_total < 1. */
int dlock_sem_acquire(dlock_client *c, const char *key, int permits_total,
                      const dlock_opts *opts, dlock_handle **out);

DLOCK_END_DECLS

#endif
