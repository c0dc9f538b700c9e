/* watchdog.h - one thread per client that renews every held lease at
 * lease/3, marks lost leases, and interrupts holders after max_renewals.
 * Functions taking a lease are called with the client's mutex held. */
#ifndef DLOCK_WATCHDOG_H
#define DLOCK_WATCHDOG_H

#include "dlock.h"

struct dlock_lease;
typedef struct dlock_watchdog dlock_watchdog;

/* Starts the thread. Returns NULL when out of memory or threads. */
dlock_watchdog *dlock_wd_start(dlock_client *c);

/* Stops and joins the thread. Every lease must have been forgotten. */
void dlock_wd_stop(dlock_watchdog *wd);

/* Sets l's deadlines from l->acquired_ms and, when renew is set, adds it to
 * the renewal schedule. */
void dlock_wd_watch(dlock_watchdog *wd, struct dlock_lease *l, int renew);

/* Removes l from the schedule and waits for an in-flight renewal of l to end
 * (the mutex is released while waiting), so nothing renews l afterwards. */
void dlock_wd_forget(dlock_watchdog *wd, struct dlock_lease *l);

#endif
