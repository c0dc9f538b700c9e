/* http.h - stockd's HTTP server (libmicrohttpd, one thread per connection)
 * and its routes: /reduceStock, /items, /items/{id}, /health, /metrics. It
 * parses and validates requests, asks the service, and answers JSON.
 *
 * One thread per connection because a request may block for up to wait-ms on a
 * hot item's lock: it must only ever hold up its own connection, never other
 * items or /health. The cost is a thread (512 KiB stack reserved, little of it
 * touched) per open connection, bounded by max_connections and max_per_ip;
 * slow senders are cut off by the request deadlines (reaper.h). */
#ifndef HTTP_H
#define HTTP_H

#include <stddef.h>

#include "service.h"

typedef struct http_config {
    const char *bind;       /* IPv4 listen address */
    int port;
    int max_connections;    /* concurrent connections (one thread each) */
    int max_per_ip;         /* of which from one client address; 0 = no limit */
    int idle_timeout_s;     /* a connection idle this long, or whose next request line takes
                             * longer, is closed */
    int request_timeout_ms; /* a request's headers and body must arrive within this */
} http_config;

/* Sets every field to its default. */
void http_config_defaults(http_config *cfg);

typedef struct http_server http_server;

/* Starts listening on cfg->bind:cfg->port, answering with svc (which must
 * outlive the server). Returns 0 with *out set, or -1 with err filled. */
int http_start(const http_config *cfg, service *svc, http_server **out, char *err,
               size_t errlen);

/* Stops accepting connections (new clients get connection refused) and makes
 * requests that arrive on open connections answer 503 shutting_down with
 * Connection: close. Requests already being handled run to completion
 * (service_drain waits for them). */
void http_quiesce(http_server *s);

/* Closes every connection and frees the server. NULL is a no-op. */
void http_stop(http_server *s);

#endif
