/* http.h - stockd's HTTP server (libmicrohttpd, one thread per connection)
 * and its routes: /reduceStock, /items, /items/{id}, /health, /metrics.
 *
 * One thread per connection because a request may block for up to wait-ms on a
 * hot item's lock: it must only ever hold up its own connection, never other
 * items or /health. The cost is a thread (512 KiB stack reserved, little of it
 * touched) per open connection, bounded by --max-connections. */
#ifndef HTTP_H
#define HTTP_H

#include <stddef.h>

#include "config.h"
#include "lock/dlock.h"
#include "stock.h"
#include "store.h"

#define HTTP_BODY_MAX (16 * 1024) /* larger bodies get 413 */

typedef struct http_server http_server;

/* What the routes use; all must outlive the server. locks is NULL unless the
 * lock mode is redis; batches unless it is redis with --batch on. */
typedef struct http_deps {
    const stockd_config *cfg;
    const stock_config *stock;
    store *store;
    dlock_client *locks;
    batch_queues *batches; /* NULL: no group commit */
} http_deps;

/* Starts listening on cfg->bind:cfg->port. Returns 0 with *out set, or -1
 * with err filled. */
int http_start(const http_deps *deps, http_server **out, char *err, size_t errlen);

/* Stops accepting connections (new clients get connection refused) and makes
 * requests that arrive on open connections answer 503 shutting_down with
 * Connection: close. Requests already being handled run to completion. */
void http_quiesce(http_server *s);

/* Waits up to timeout_ms for in-flight requests to finish. Returns how many
 * are still running (0 when drained). */
int http_drain(http_server *s, int timeout_ms);

/* Closes every connection and frees the server. NULL is a no-op. */
void http_stop(http_server *s);

#endif
