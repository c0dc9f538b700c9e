/* watchdog.h - one thread per client that renews every held lease at
 * lease/3, marks lost leases, and interrupts holders after max_renewals.
 * It shares the client's mutex (mu), which guards leases and holders; the
 * functions taking a lease are called with mu held. */
#ifndef DLOCK_WATCHDOG_H
#define DLOCK_WATCHDOG_H

#include <pthread.h>

#include "lock/counters.h"
#include "lock/lease.h"
#include "lock/quorum.h"

typedef struct dlock_watchdog dlock_watchdog;

/* Starts the thread, renewing through q's servers (on connections of its
 * own). Returns NULL when out of memory or threads. */
dlock_watchdog *dlock__wd_start(pthread_mutex_t *mu, dlock_quorum *q, dlock_counters *counters);

/* Stops and joins the thread. Every lease must have been forgotten. */
void dlock__wd_stop(dlock_watchdog *wd);

/* Makes h the holder of l, just taken from Redis (h's hand-off number 0):
 * sets l's deadlines from l->acquired_ms (and, for a lease held on a
 * grant's word, from l->granted_ms, the grant's shorter lease) and, when
 * renew is set, adds it to the renewal schedule. */
void dlock__wd_hold(dlock_watchdog *wd, dlock_handle *h, struct dlock_lease *l, int renew);

/* l was found not ours in Redis by a call other than a renewal (a fence
 * raise): as a renewal that found it gone, it leaves the schedule, counts
 * as lost, and its holder is woken. */
void dlock__wd_lost(dlock_watchdog *wd, struct dlock_lease *l);

/* Removes l from the schedule and waits for an in-flight renewal of l to end
 * (mu is released while waiting), so nothing renews l afterwards. */
void dlock__wd_forget(dlock_watchdog *wd, struct dlock_lease *l);

#endif
