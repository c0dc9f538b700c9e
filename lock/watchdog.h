/* watchdog.h - one thread per client that renews every held lock at lease/3,
 * marks lost leases, and interrupts holders after max_renewals. */
#ifndef DLOCK_WATCHDOG_H
#define DLOCK_WATCHDOG_H

#include "dlock.h"

typedef struct dlock_watchdog dlock_watchdog;

/* Starts the thread. Returns NULL when out of memory or threads. */
dlock_watchdog *dlock_wd_start(dlock_client *c);

/* Stops and joins the thread. Every handle must have been forgotten. */
void dlock_wd_stop(dlock_watchdog *wd);

/* Initialises h's watchdog-owned state from an acquisition made at acquired_ms,
 * and, when renew is set, adds h to the renewal schedule. */
void dlock_wd_watch(dlock_watchdog *wd, dlock_handle *h, int64_t acquired_ms, int renew);

/* Removes h from the schedule and waits for an in-flight renewal of h to end,
 * so nothing renews h afterwards. Returns h's state as dlock_wd_check would. */
int dlock_wd_forget(dlock_watchdog *wd, dlock_handle *h);

/* dlock_check, dlock_sleep and dlock_renewals, under the watchdog's mutex. */
int dlock_wd_check(dlock_watchdog *wd, dlock_handle *h);
int dlock_wd_sleep(dlock_watchdog *wd, dlock_handle *h, int ms);
int dlock_wd_renewals(dlock_watchdog *wd, const dlock_handle *h);

#endif
