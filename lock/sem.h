/* sem.h - the semaphore behind dlock_sem_acquire (dlock.h): permits as
 * leases in one Redis ZSET, renewed by the client's watchdog, waited for in
 * a local FIFO per key whose head retries when a release is heard. */
#ifndef DLOCK_SEM_H
#define DLOCK_SEM_H

#include <stdint.h>

#include "client.h"
#include "lease.h"

/* Whether c can hold a semaphore of permits: DLOCK_OK, or DLOCK_ERR_INVALID
 * (permits < 1, or several Redis servers) with errstr saying why. */
int dlock_sem_check(dlock_client *c, int permits);

/* Waits until deadline for one of key's permits (o checked, key valid).
 * Returns as dlock_sem_acquire does; *out set on DLOCK_OK. */
int dlock_sem_wait(dlock_client *c, const char *key, int permits, const dlock_opts *o,
                   int64_t deadline, dlock_handle **out);

/* Gives h's permit back and frees h; *local gets the holder's own view at
 * release. Returns what dlock_release documents for a permit. */
int dlock_sem_release(dlock_handle *h, int *local);

#endif
