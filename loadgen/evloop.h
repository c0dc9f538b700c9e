/* evloop.h - one libcurl multi handle driven by epoll through
 * curl_multi_socket_action: the event-driven core of a load thread. It knows
 * nothing of requests; the caller adds easy handles, waits, and collects the
 * finished ones.
 *
 * Thread safety: none; one loop per thread, used only by that thread. */
#ifndef LG_EVLOOP_H
#define LG_EVLOOP_H

#include <stdint.h>

#include <curl/curl.h>

#include "loadgen/err.h"

typedef struct lg_evloop lg_evloop;

/* A loop that keeps up to max_conns idle connections open between transfers
 * (keep-alive). Returns 0 with *out set, or LG_ERR_SYS / LG_ERR_NOMEM. */
int lg_evloop_new(int max_conns, lg_evloop **out, lg_err *err);

/* Frees the loop; every easy handle must have been removed. NULL is a no-op. */
void lg_evloop_free(lg_evloop *l);

/* Starts a transfer on e (reusing an idle connection to the same host when one
 * is cached). 0 or LG_ERR_NOMEM. */
int lg_evloop_add(lg_evloop *l, CURL *e);

/* Detaches e, finished or not; its connection goes back to the cache. */
void lg_evloop_remove(lg_evloop *l, CURL *e);

/* Runs libcurl's timeouts when they are due at now (CLOCK_MONOTONIC ns).
 * Returns 1 when it ran them, 0 when nothing was due. */
int lg_evloop_timers(lg_evloop *l, int64_t now);

/* The earlier of wake and libcurl's next timeout. */
int64_t lg_evloop_deadline(const lg_evloop *l, int64_t wake);

/* Waits for socket activity until wake (ns, CLOCK_MONOTONIC) and lets libcurl
 * act on it. */
void lg_evloop_wait(lg_evloop *l, int64_t wake);

/* The next finished transfer: 1 with *e and *result set (e still attached:
 * remove it), or 0 when none is pending. */
int lg_evloop_done(lg_evloop *l, CURL **e, CURLcode *result);

/* CLOCK_MONOTONIC in nanoseconds. */
int64_t lg_now_ns(void);

#endif
