/* http.h - stockd's HTTP server (libmicrohttpd over epoll, a few event
 * threads): it reads each request's body within its limits and deadlines,
 * refuses what no route can take (framing, size, path, method, a drain,
 * too many connections), hands the rest to a handler (handlers.h) on the
 * connection's event thread, and sends the answer it makes.
 *
 * A request may wait up to wait-ms for a hot item's lock, or for its batch
 * to commit. It waits as a suspended connection, not a thread: the handler
 * only starts the work (an order joins its item's queue; a read goes to a
 * service thread, service_run) and whoever completes the request (the
 * committer of its batch, the service thread) calls http_answer, which
 * resumes the connection to send the answer. A waiting buyer costs its
 * socket and its connection's memory (some kilobytes); slow senders are
 * cut off by the request deadlines (reaper.h). */
#ifndef HTTP_H
#define HTTP_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "server/proxies.h"
#include "server/route.h"
#include "server/service.h"
#include "server/tls.h"

typedef struct http_config {
    const char *bind;       /* IPv4 listen address */
    int port;
    int max_connections;    /* concurrent connections; those past it get 503 and are closed
                             * (0 in the defaults: the caller sizes it to its descriptors) */
    int max_per_ip;         /* of which from one client address; 0 = no limit. Connections
                             * from a trusted proxy don't count: a forwarded client may have
                             * this many requests in flight instead (429 past them) */
    const proxies *trusted; /* --trusted-proxies (the caller's, alive while the server
                             * runs); NULL: trust nobody, X-Forwarded-For is ignored */
    int idle_timeout_s;     /* a connection idle this long, or whose next request line takes
                             * longer, is closed */
    int request_timeout_ms; /* a request's headers and body must arrive within this */
    int threads;            /* event threads; 0: one per core */
    const tls_pem *tls;     /* HTTPS with this certificate and key (checked, the caller's,
                             * alive while the server runs); NULL: plain HTTP */
    int probes_only;        /* answer only the probes' routes (/health, /metrics); the rest
                             * 404: the probe port's server */
    struct http_server *shares; /* its thread of deadlines for slow senders is this server's
                                 * (which must outlive it); NULL: one of its own */
} http_config;

/* Sets every field to its default. */
void http_config_defaults(http_config *cfg);

/* Connections the server takes at max_connections max: a few more (a
 * sixteenth, at least 64), to be answered 503 rather than reset; past those,
 * libmicrohttpd closes them unanswered. Each needs a descriptor. */
long http_connections_taken(long max);

typedef struct http_server http_server;
struct MHD_Connection;

/* A request as its handler sees it: route matched and allowed, body read
 * whole (at most RULE_BODY_MAX bytes) and framed one way. Valid until
 * http_answer is called for it. */
typedef struct http_request {
    http_server *server;
    service *svc;               /* the service http_start was given */
    const char *method, *url;   /* url: the path, without the query */
    const route_result *route;
    const char *body;           /* NUL-terminated, or NULL when there was none */
    size_t len;
    struct MHD_Connection *conn; /* the plumbing's: read the query with http_query */
    exec_task task;             /* the handler's: its link to a service thread (service_run) */
} http_request;

/* What a handler answers: a status, a JSON body or text, optional headers. */
typedef struct http_reply {
    int status;
    json_t *json;      /* owned; NULL when text is set */
    char *text;        /* owned, malloc'd (metrics) */
    size_t text_len;
    char location[64]; /* "" = no header */
    int retry_after;   /* seconds; 0 = no header */
    const char *allow; /* 405 */
    const char *www_authenticate; /* 401: the WWW-Authenticate header (static) */
} http_reply;

/* Answers rq, by calling http_answer once: before it returns, or later from
 * any thread. Runs on: the connection's event thread, which must never
 * block (what may block goes to a service thread: service_run). */
typedef void http_handler(http_request *rq);

/* rq's answer: r's status, headers and body (taken: r's json or text is the
 * server's now). Any thread, once per request; rq is gone after it. */
void http_answer(http_request *rq, http_reply *r);

/* Starts listening on cfg->bind:cfg->port, answering with handle, which
 * asks svc (both must outlive the server; http.c itself uses svc only to
 * count requests and bracket them for draining). Returns 0 with *out set, or
 * -1 with err filled. */
int http_start(const http_config *cfg, service *svc, http_handler *handle, http_server **out,
               char *err, size_t errlen);

/* The value of query parameter name in rq's URL, or NULL. */
const char *http_query(const http_request *rq, const char *name);

/* The value of request header name (any case) of rq, or NULL. */
const char *http_header(const http_request *rq, const char *name);

/* rq's client address as text: X-Forwarded-For's from a trusted proxy,
 * else the connection's peer (proxies.h); for the log's client=. Valid
 * until http_answer is called for rq. */
const char *http_client(const http_request *rq);

/* The log lines a flood would repeat once a request: a refusal of the
 * per-address limits, a request without the right token. */
enum http_log_kind {
    HTTP_LOG_REFUSED_PEER,    /* a connection over --max-connections-per-ip */
    HTTP_LOG_IN_FLIGHT,       /* a request over a forwarded client's in-flight limit */
    HTTP_LOG_NOT_AUTHORIZED,  /* a 401 or 403 */
    HTTP_LOG_KINDS
};

/* Whether a line of kind may be logged now: 1 at most once a second per
 * kind and server (the first caller in that second), else 0; what was not
 * logged is still counted in /metrics. Thread-safe. */
int http_log_due(http_server *s, enum http_log_kind kind);

/* Connections closed at their deadlines so far (reaper.h), for /metrics. */
uint64_t http_reaped(const http_server *s);

/* Sets r to an error answer: status, {"error": code, "message": ...}. */
void http_reply_error(http_reply *r, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* A JSON string of s, every byte that is not valid UTF-8 replaced by U+FFFD
 * (jansson refuses invalid UTF-8, and an answer must never fail to build for
 * it); NULL when out of memory. */
json_t *http_json_text(const char *s);

/* Stops taking connections (a new one is closed at once, unanswered) and makes
 * requests that arrive on open connections answer 503 shutting_down with
 * Connection: close. Requests already being handled run to completion
 * (service_drain waits for them). */
void http_quiesce(http_server *s);

/* Waits until every request handed to its handler has its answer made
 * (unbounded here: the handler's own timeouts bound it), then until those
 * answers are written to their connections or the connections are gone, at
 * most cfg.request_timeout_ms (a warn line counts those left); then closes
 * every connection and frees the server. NULL is a no-op. */
void http_stop(http_server *s);

#endif
