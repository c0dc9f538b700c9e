/* watch.h - what a flash sale watches on the replicas while it runs, from an
 * address none of its buyers uses: GET /health on each replica every
 * WATCH_EVERY_MS (each probe timed, on a fresh connection, as a health check
 * comes), and GET /metrics every few rounds for each replica's process_*
 * series at their peak (threads, resident memory, open descriptors).
 *
 * Thread safety: start and stop from one thread; the watching runs on a
 * thread of its own. */
#ifndef LG_WATCH_H
#define LG_WATCH_H

#include "loadgen/err.h"
#include "loadgen/opts.h"
#include "loadgen/sale.h"

typedef struct lg_watch lg_watch;

/* Starts watching targets[0..ntargets) (the caller keeps them alive until
 * lg_watch_stop). 0 with *out set, or LG_ERR_NOMEM / LG_ERR_SYS with err. */
int lg_watch_start(const lg_target *targets, int ntargets, lg_watch **out, lg_err *err);

/* Stops and joins the watcher, then merges what it saw into s (the probes'
 * latencies into s->health, their failures, each replica's peaks) and frees
 * w. NULL is a no-op. */
void lg_watch_stop(lg_watch *w, lg_sale *s);

#endif
