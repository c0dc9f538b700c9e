/* dlock_sem.h - libdlock's semaphore: at most N holders of a key at once,
 * over every process that uses it, each holding a permit that is a lease
 * like a lock's (renewed, interrupted, fenced). Its asynchronous acquire is
 * dlock_sem_acquire_async (dlock_async.h); its handle is released with
 * dlock_release. Design: lock/README.md, "Semaphore: at most N holders". */
#ifndef DLOCK_SEM_H
#define DLOCK_SEM_H

#include "dlock.h"

DLOCK_BEGIN_DECLS

/* A semaphore with leases: at most permits_total holders of key at once,
 * over every process that uses it (give each caller of a key the same N).
 * Each permit is a lease renewed and interrupted as a lock's; the handle
 * works with dlock_release, dlock_check, dlock_sleep, dlock_renewals,
 * dlock_token, dlock_key and dlock_fence, not with dlock_run or
 * multi-locks; permits are never handed over or nested (a thread asking
 * again takes a second permit, or waits for one). Never use a semaphore's
 * or a read-write lock's key as a plain lock's. Over a quorum of N servers
 * a permit must be granted by q = floor(N P / (P + 1)) + 1 of them (P =
 * permits_total; a majority for P = 1, all 3 of 3 for P >= 2: only N - q
 * may be down; lock/README.md).
 * returns: as dlock_acquire (DLOCK_ERR_TIMEOUT: all permits still held after
 *          wait_ms; DLOCK_ERR_REDIS at once when more than N - q servers
 *          failed); DLOCK_ERR_INVALID also for permits_total < 1. */
int dlock_sem_acquire(dlock_client *c, const char *key, int permits_total,
                      const dlock_opts *opts, dlock_handle **out);

DLOCK_END_DECLS

#endif
