/* metrics.h - stockd's counters and their Prometheus text rendering. A
 * metrics object is owned by the service; the HTTP layer counts requests in
 * it. Counters are atomics: thread-safe, never reset. */
#ifndef METRICS_H
#define METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "lock/dlock.h"
#include "route.h"

typedef struct metrics metrics;

/* Counters for outcomes named by outcome_names[0..noutcomes-1] (static
 * strings: the API's result codes). NULL when out of memory. */
metrics *metrics_new(const char *const *outcome_names, int noutcomes);
void metrics_free(metrics *m);

/* Counts one answered request. */
void metrics_request(metrics *m, enum route_id route, int status);

/* Counts one deduction result; quantity counts toward units deducted when ok. */
void metrics_outcome(metrics *m, int outcome, int ok, int64_t quantity);

/* What the rest of the process knows, for one rendering. */
typedef struct metrics_extra {
    dlock_client *locks; /* NULL unless the lock mode is redis */
    int64_t inflight;    /* requests being handled */
    uint64_t reaped;     /* connections closed at their deadline */
} metrics_extra;

/* Renders every metric. Returns a malloc'd NUL-terminated buffer (caller
 * frees) with its length in *len, or NULL when out of memory. */
char *metrics_render(metrics *m, const metrics_extra *x, size_t *len);

#endif
