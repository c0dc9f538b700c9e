/* sentinel.h - where the primary is, as Redis Sentinel says: asked of the
 * Sentinels in turn (SENTINEL get-master-addr-by-name), asked again when the
 * primary fails us, and followed by a thread subscribed to +switch-master on
 * one Sentinel, so a failover is usually known before the first error.
 * Every change of address bumps a generation: what a pool opened before it
 * is dropped (pool.c). Thread-safe. */
#ifndef DLOCK_SENTINEL_H
#define DLOCK_SENTINEL_H

#include <stdint.h>

#include "lock/internal.h"

/* At most this often the Sentinels are asked again after a failure. */
#define DLOCK_SENTINEL_REASK_MS 100

typedef struct dlock_sentinel dlock_sentinel;

/* Follows cfg->master_name on cfg->sentinel[0..cfg->sentinels-1] (with
 * cfg's Sentinel credentials and timeouts; strings copied) and starts the
 * thread that listens for +switch-master (it asks for the primary each
 * time it has subscribed). NULL when out of memory or threads. */
dlock_sentinel *dlock__sentinel_new(const dlock_config *cfg);

/* Stops the thread and closes its connection; NULL is a no-op. */
void dlock__sentinel_free(dlock_sentinel *s);

/* The primary's address into host and *port: the one known, or, when none is or it was suspected, asked of the
 * Sentinels now (one caller asks; the others wait for its answer). 0, or
 * -1 with the error set (DLOCK_ERR_REDIS: no Sentinel answered, or none
 * knows the master name; DLOCK_ERR_AUTH: a Sentinel refused our
 * credentials). */
int dlock__sentinel_primary(dlock_sentinel *s, char host[DLOCK_HOST_MAX + 1], int *port);

/* The primary at host:port failed us (refused, timed out, READONLY, not a
 * master by ROLE): when it is still the one known, the next
 * dlock__sentinel_primary asks again, at most every DLOCK_SENTINEL_REASK_MS. */
void dlock__sentinel_suspect(dlock_sentinel *s, const char *host, int port);

/* 1 when host:port is the primary known now, else 0. */
int dlock__sentinel_is_primary(dlock_sentinel *s, const char *host, int port);

/* The current generation: it changes whenever the address does. Lock-free. */
uint64_t dlock__sentinel_gen(dlock_sentinel *s);

#endif
