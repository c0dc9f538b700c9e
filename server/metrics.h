/* metrics.h - stockd's counters and their Prometheus text rendering.
 * The counters are this module's own process-wide state (atomics):
 * thread-safe, never reset. */
#ifndef METRICS_H
#define METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "lock/dlock.h"
#include "route.h"
#include "stock.h"

/* Counts one answered request. */
void metrics_request(enum route_id route, int status);

/* Counts one /reduceStock result; quantity counts toward units deducted when ok. */
void metrics_outcome(enum stock_outcome outcome, int64_t quantity);

/* Requests being handled right now (for the gauge and for draining). */
void metrics_inflight_add(int delta);
int64_t metrics_inflight(void);

/* Renders every metric, with the lock client's counters when locks is not
 * NULL, and the number of connections closed at their deadline. Returns a
 * malloc'd NUL-terminated buffer (caller frees) or NULL when out of memory. */
char *metrics_render(dlock_client *locks, uint64_t reaped, size_t *len);

#endif
