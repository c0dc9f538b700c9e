/* http.c - stockd's HTTP server, the libmicrohttpd plumbing: the daemon (a
 * few event threads over epoll) and its connection callbacks, request heads
 * and bodies within their limits, the framing check, deadlines (reaper.c), the
 * refusals no route gets to see, calling each request's handler on its
 * event thread (and suspending the connection when the answer comes
 * later), sending the answer, and a graceful stop. What each route answers is the handler's (handlers.c,
 * given to http_start): this file knows no route's meaning. */
#include "server/http.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <malloc.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "server/log.h"
#include "server/proxies.h"
#include "server/reaper.h"
#include "server/request.h"
#include "server/route.h"
#include "server/service.h"
#include "server/tally.h"

#define DISCARD_MAX (1024 * 1024) /* past the limit, drop this much before closing */
/* libmicrohttpd's memory per connection, for a request's head (RULE_HEAD_MAX
 * of it, its fields' records, a copy of its cookies) and its buffers. Up to
 * 32 KiB, libmicrohttpd 0.9.75 takes it with malloc and touches only what a
 * request fills (the head at its start, the fields' records at its end):
 * a waiting buyer's small request makes about 5 KiB of it resident, as the
 * 6 KiB this was did. Above 32 KiB it is an mmap of its own, which costs
 * whole pages at both ends (8.6 KiB). */
#define CONNECTION_MEMORY (32 * 1024)
/* But libmicrohttpd zeroes all of it after each answer on a connection kept
 * alive for the next request, which makes all of it resident until the
 * connection closes. Past this many open connections (a flash sale's
 * buyers, a flood), an answer closes its connection instead, so that
 * 10,000 answered buyers never hold 32 KiB each; below it, at most this
 * many idle connections hold it (32 MiB). */
#define KEEPALIVE_OPEN_MAX 1024
/* Even so, an answer makes half of it resident (libmicrohttpd zeroes the
 * read buffer's unused part when it turns to sending), and malloc keeps what
 * a closed connection frees for the next one: after a sale's burst of
 * answers, 10,000 x 16 KiB. Every this many closes, malloc_trim gives the
 * free pages back. */
#define TRIM_EVERY_CLOSES 256

struct http_server {
    http_config cfg;
    service *svc;
    http_handler *handle;
    struct MHD_Daemon *daemon;
    reaper *reaper;    /* deadlines for slow senders: its own, or cfg.shares' */
    _Atomic int draining;
    _Atomic int closing; /* http_stop has waited for the answers made: none is made now */
    _Atomic int open;  /* connections open now */
    _Atomic int pending; /* requests handed to the handler and not yet answered */
    _Atomic int unsent;  /* requests let in whose answer is not sent yet (nor their connection gone) */
    _Atomic unsigned closes; /* connections closed, for malloc_trim */
    tls_tickets *tickets; /* HTTPS: resumed sessions; NULL for plain HTTP */
    /* --max-connections-per-ip (NULL without one): connections open by
     * each untrusted peer; requests in flight by each forwarded client */
    tally *conns, *in_flight;
    _Atomic long logged[HTTP_LOG_KINDS]; /* second of each kind's last line (http_log_due) */
};

/* Where a handed request's answer stands. The handler runs on the
 * connection's event thread; its answer may come during that call (then it
 * is sent at once) or later from any thread (then the connection waits
 * suspended). The two meet through this state, with no lock: whoever comes
 * second resumes the connection. */
enum answer_state {
    HANDLING,   /* the handler runs on the event thread */
    SUSPENDING, /* it returned unanswered: the event thread suspends the connection */
    SUSPENDED,  /* ...and did: the answer resumes it */
    ANSWERED,   /* http_answer set the reply */
};

enum req_phase { READING, HANDED };

/* Per-request state, from the headers to NOTIFY_COMPLETED. */
struct req_state {
    http_request req;     /* what the handler sees; first, for http_answer */
    route_result rt;
    char *body;
    size_t len, cap;
    size_t discarded;
    int too_large;
    int head;             /* req_check_head's or req_check_framing's code: not
                           * REQ_OK refuses it unread */
    char *head_err;       /* why, when not REQ_OK */
    int entered;          /* in flight for the drain until its answer is sent */
    int close;            /* close the connection after the answer */
    enum req_phase phase; /* HANDED: to its handler, its answer not sent yet */
    _Atomic int answer;   /* enum answer_state, while HANDED */
    struct timespec t0;   /* handed to its handler */
    http_reply reply;     /* ANSWERED: its answer, the body made already */
    char *reply_body;
    size_t reply_len;
    int client_known;     /* client and source set (once, before refuse) */
    enum proxies_source source;
    proxies_addr client;  /* who asked: the peer or, behind a trusted proxy, its client */
    char client_text[PROXIES_TEXT_MAX];
    int in_flight;        /* counted in s->in_flight until NOTIFY_COMPLETED */
};

/* Length of the well-formed UTF-8 sequence at s (n bytes left): 1..4, or 0
 * when it is not one (a stray or truncated byte, an overlong form, a
 * surrogate, beyond U+10FFFF). */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    if (s[0] < 0x80)
        return 1;
    size_t len = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 ? 2 : 0;
    if (len == 0 || len > n || s[0] > 0xf4)
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    if ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] > 0x9f) ||
        (s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] > 0x8f))
        return 0; /* overlong, surrogate, or past U+10FFFF */
    return len;
}

/* Raw bytes from a URL, a message cut mid-character: replaced, not refused. */
json_t *http_json_text(const char *s)
{
    size_t n = strlen(s), used = 0;
    char *out = malloc(3 * n + 1);
    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < n;) {
        size_t len = utf8_len((const unsigned char *)s + i, n - i);
        if (len == 0) {
            memcpy(out + used, "\xef\xbf\xbd", 3), used += 3, i++;
        } else {
            memcpy(out + used, s + i, len), used += len, i += len;
        }
    }
    json_t *j = json_stringn_nocheck(out, used);
    free(out);
    return j;
}

void http_reply_error(http_reply *r, int status, const char *code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    json_decref(r->json);
    r->status = status;
    r->json = json_pack("{s:s, s:o}", "error", code, "message", http_json_text(msg));
}

/* The answer's body: r's text, or its JSON made compact (r->json freed). */
static char *reply_body(http_reply *r, size_t *len)
{
    if (r->text) {
        *len = r->text_len;
        return r->text;
    }
    char *body = r->json ? json_dumps(r->json, JSON_COMPACT) : NULL;
    json_decref(r->json);
    r->json = NULL;
    *len = body ? strlen(body) : 0;
    return body;
}

static enum MHD_Result send_reply(struct MHD_Connection *conn, const http_reply *r, char *body,
                                  size_t len, int closing)
{
    struct MHD_Response *resp =
        body ? MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE) : NULL;
    if (resp == NULL) { /* out of memory: drop the connection rather than lie */
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            r->text ? "text/plain; version=0.0.4" : "application/json");
    if (r->location[0])
        MHD_add_response_header(resp, MHD_HTTP_HEADER_LOCATION, r->location);
    if (r->allow)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, r->allow);
    if (r->www_authenticate)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, r->www_authenticate);
    if (r->retry_after) {
        char v[16];
        snprintf(v, sizeof(v), "%d", r->retry_after);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, v);
    }
    if (closing)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ok = MHD_queue_response(conn, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    return ok;
}

/* What a connection keeps from its accept to its close (its socket context). */
struct conn_state {
    reaper_conn *deadlines; /* see reaper.h */
    int over;               /* accepted past max_connections: answered 503, then closed */
    int has_peer, trusted;  /* its peer's address is known; inside --trusted-proxies */
    proxies_addr peer;
    int counted;            /* in s->conns until closed */
    int over_peer;          /* past max_per_ip for its peer (accepted in a race): 503 */
};

static struct conn_state *conn_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info ? info->socket_context : NULL;
}

static reaper_conn *deadlines_of(struct MHD_Connection *conn)
{
    struct conn_state *c = conn_of(conn);
    return c ? c->deadlines : NULL;
}

/* Whether rq may go on under the per-address limit: 0 when its client,
 * forwarded by a trusted proxy, has max_per_ip requests in flight already
 * (the proxy's connections are not counted: this is the limit that sees
 * through it). Counted until NOTIFY_COMPLETED. */
static int in_flight_ok(http_server *s, struct req_state *rq)
{
    if (s->in_flight == NULL || rq->source != PROXIES_FORWARDED || rq->in_flight)
        return 1;
    int rc = tally_take(s->in_flight, &rq->client, s->cfg.max_per_ip);
    rq->in_flight = rc == 1;
    if (rc != 0)
        return 1; /* out of memory: let it through, uncounted */
    metrics_per_address_refusal(service_metrics(s->svc), METRICS_PER_ADDRESS_IN_FLIGHT);
    if (http_log_due(s, HTTP_LOG_IN_FLIGHT))
        log_kv(LOG_INFO, "request refused: too many in flight from one address (logged once "
               "a second at most)", LOG_STR("client", rq->client_text),
               LOG_INT("limit", s->cfg.max_per_ip), LOG_STR("method", rq->req.method),
               LOG_STR("path", rq->req.url));
    return 0;
}

/* What no handler gets to see: a drain, more connections than the server
 * takes, a body framed two ways or too large, a client over its limit, a
 * path or method no route takes. 1 with the refusal in r (and rq->close set
 * when the connection is to close after it), else 0. */
static int refuse(http_server *s, struct req_state *rq, const char *method, const char *url,
                  http_reply *r)
{
    const route_result *rt = &rq->rt;
    const struct conn_state *c = conn_of(rq->req.conn);
    const char *why = rq->head_err ? rq->head_err : "malformed request head";
    rq->close = 1;
    if (atomic_load(&s->draining)) {
        http_reply_error(r, 503, "shutting_down", "server is shutting down; retry elsewhere");
    } else if (c && c->over && !route_is_probe(rt->id)) { /* a full replica is healthy */
        http_reply_error(r, 503, "too_many_connections", "over the %d connections this server "
                         "takes; retry soon", s->cfg.max_connections);
        r->retry_after = 1;
    } else if (c && c->over_peer && !route_is_probe(rt->id)) {
        http_reply_error(r, 503, "too_many_connections", "over the %d connections one address "
                         "may open; retry soon", s->cfg.max_per_ip);
        r->retry_after = 1;
    } else if (rq->head == REQ_ERR_HEAD) {
        http_reply_error(r, 431, "headers_too_large", "%s", why);
    } else if (rq->head == REQ_ERR_CODING) {
        http_reply_error(r, 501, "unsupported_transfer_coding", "%s", why);
    } else if (rq->head != REQ_OK) {
        http_reply_error(r, 400, "bad_framing", "%s", why);
    } else {
        rq->close = 0;
        if (!in_flight_ok(s, rq)) {
            http_reply_error(r, 429, "too_many_requests", "%d requests from %s are in flight "
                             "already, the most one address may have; retry when one is "
                             "answered", s->cfg.max_per_ip, rq->client_text);
            r->retry_after = 1;
        } else if (rt->id == ROUTE_NOT_FOUND)
            http_reply_error(r, 404, "not_found", "no route %s %s", method, url);
        else if (s->cfg.probes_only && !route_is_probe(rt->id))
            http_reply_error(r, 404, "not_found", "this port answers GET /health and /metrics "
                             "only; %s %s goes to the main port", method, url);
        else if (!rt->method_ok)
            http_reply_error(r, 405, "method_not_allowed", "%s is not allowed here; use %s",
                             method, rt->allow);
        else if (rt->bad_id)
            http_reply_error(r, 400, "invalid_request", "item id must be an integer 1..%lld",
                             (long long)INT64_MAX);
        else if (rq->too_large)
            http_reply_error(r, 413, "body_too_large", "request body over %d bytes",
                             RULE_BODY_MAX);
        else
            return 0;
    }
    return 1;
}

/* Counts and logs rq's answer r, from its start at t0 to now; a 405 gets the
 * path's methods for its Allow header. */
static void account(http_server *s, const struct req_state *rq, http_reply *r)
{
    if (r->status == 405)
        r->allow = rq->rt.allow;
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    int64_t us = (int64_t)(t1.tv_sec - rq->t0.tv_sec) * 1000000 +
                 (t1.tv_nsec - rq->t0.tv_nsec) / 1000;
    metrics_request(service_metrics(s->svc), rq->rt.id, r->status, us);
    log_kv(LOG_DEBUG, "request", LOG_STR("method", rq->req.method), LOG_STR("path", rq->req.url),
           LOG_INT("status", r->status), LOG_MS("ms", (double)us / 1e3),
           LOG_STR("client", rq->client_text));
}

/* Sends rq's answer (on the connection's event thread), closing the
 * connection after it when the server drains, the request was refused
 * unread, or more than KEEPALIVE_OPEN_MAX connections are open. */
static enum MHD_Result send_answer(http_server *s, struct req_state *rq, http_reply *r,
                                   char *body, size_t len)
{
    int closing = rq->close || atomic_load(&s->draining) ||
                  atomic_load(&s->open) > KEEPALIVE_OPEN_MAX;
    return send_reply(rq->req.conn, r, body, len, closing);
}

/* Answers at once, on the event thread: what needs no handler. */
static enum MHD_Result answer_now(http_server *s, struct req_state *rq, http_reply *r)
{
    account(s, rq, r);
    size_t len;
    char *body = reply_body(r, &len);
    return send_answer(s, rq, r, body, len);
}

/* A handed request's answer has gone to its connection (sent, or resumed
 * to be sent): it no longer holds up http_stop. On a service thread, the
 * last touch of s: once pending is 0, http_stop may free it (an event
 * thread may go on: MHD_stop_daemon joins them first). */
static void settled(http_server *s) { atomic_fetch_sub(&s->pending, 1); }

void http_answer(http_request *req, http_reply *r)
{
    struct req_state *rq = (struct req_state *)req; /* req is rq's first member */
    http_server *s = req->server;
    struct MHD_Connection *conn = req->conn;
    account(s, rq, r);
    rq->reply = *r;
    rq->reply_body = reply_body(&rq->reply, &rq->reply_len);
    rq->reply.json = NULL;
    rq->reply.text = r->text ? rq->reply_body : NULL; /* only its content type is read now */
    /* once resumed, rq may be gone: nothing of it after this; else the event
     * thread, still in the handler's call or suspending, sends it */
    if (atomic_exchange(&rq->answer, ANSWERED) == SUSPENDED) {
        MHD_resume_connection(conn); /* its event thread sends the answer */
        settled(s);
    }
}

/* The handler has returned: its answer is here (sent now), or the
 * connection waits suspended for it. */
static enum MHD_Result await_answer(http_server *s, struct MHD_Connection *conn,
                                    struct req_state *rq)
{
    int st = HANDLING;
    if (atomic_compare_exchange_strong(&rq->answer, &st, SUSPENDING)) {
        MHD_suspend_connection(conn);
        st = SUSPENDING;
        if (atomic_compare_exchange_strong(&rq->answer, &st, SUSPENDED))
            return MHD_YES; /* http_answer resumes it */
        MHD_resume_connection(conn); /* answered meanwhile: resumed here, sent next */
        settled(s);
        return MHD_YES;
    }
    rq->phase = READING; /* answered during the handler's call: sent now */
    settled(s);
    return send_answer(s, rq, &rq->reply, rq->reply_body, rq->reply_len);
}

/* X-Forwarded-For's lines, in order: the last PROXIES_LINES_MAX of them. */
struct forwarded {
    const char *lines[PROXIES_LINES_MAX];
    int n, dropped;
};

static enum MHD_Result look_at_forwarded(void *cls, enum MHD_ValueKind kind, const char *name,
                                         const char *value)
{
    struct forwarded *f = cls;
    (void)kind;
    if (name == NULL || strcasecmp(name, "X-Forwarded-For") != 0)
        return MHD_YES;
    if (f->n == PROXIES_LINES_MAX) { /* the walk starts at the right: keep the last ones */
        memmove(f->lines, f->lines + 1, sizeof(f->lines) - sizeof(f->lines[0]));
        f->n--, f->dropped++;
    }
    f->lines[f->n++] = value ? value : "";
    return MHD_YES;
}

/* rq's client (proxies.h), from its connection's peer and, from a trusted
 * one, X-Forwarded-For; counted by where it came from. */
static void find_client(http_server *s, struct MHD_Connection *conn, struct req_state *rq)
{
    const struct conn_state *c = conn_of(conn);
    proxies_addr peer = {0};
    const union MHD_ConnectionInfo *info;
    if (c && c->has_peer)
        peer = c->peer;
    else if ((info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS)))
        proxies_addr_of(&peer, info->client_addr);
    struct forwarded f = {{0}, 0, 0};
    MHD_get_connection_values(conn, MHD_HEADER_KIND, look_at_forwarded, &f);
    static const proxies nobody = {0};
    rq->source = proxies_client(s->cfg.trusted ? s->cfg.trusted : &nobody, &peer, f.lines, f.n,
                                f.dropped, &rq->client);
    proxies_addr_text(&rq->client, rq->client_text);
    rq->client_known = 1;
    metrics_client_source(service_metrics(s->svc), (int)rq->source);
}

/* A request read whole: refused here, or handed to its handler, which runs
 * on this event thread and answers now or later (its slow part on a
 * service thread, its waits as memory). */
static enum MHD_Result respond(http_server *s, struct MHD_Connection *conn, const char *url,
                               const char *method, struct req_state *rq)
{
    if (rq->phase == HANDED) {
        if (atomic_load(&rq->answer) != ANSWERED)
            return MHD_YES; /* not answered yet */
        rq->phase = READING; /* sent once */
        return send_answer(s, rq, &rq->reply, rq->reply_body, rq->reply_len);
    }
    http_reply r = {0};
    route_match(method, url, &rq->rt);
    if (!rq->entered) { /* once: on_completed leaves once, after the answer is out */
        service_enter(s->svc); /* before reading the flag: draining can't miss us */
        atomic_fetch_add(&s->unsent, 1);
        rq->entered = 1;
    }
    /* A request read once http_stop has waited out the answers made (it
     * sat unread in its socket through the drain): an answer made now
     * would be cut off by MHD_stop_daemon, and logged as sent. Its
     * connection closes unanswered, nothing done, like one never read
     * (libmicrohttpd logs it as the application's error). Read after
     * unsent is raised, both sequentially consistent: either the stop's
     * second wait sees this request in unsent and waits for it, or this
     * sees closing. */
    if (atomic_load(&s->closing))
        return MHD_NO;
    clock_gettime(CLOCK_MONOTONIC, &rq->t0);
    rq->req.conn = conn, rq->req.method = method, rq->req.url = url; /* for the log */
    if (!rq->client_known)
        find_client(s, conn, rq);
    /* counted before draining is read: http_stop sees this request, or it
     * sees the drain and is refused */
    atomic_fetch_add(&s->pending, 1);
    if (refuse(s, rq, method, url, &r)) {
        settled(s);
        return answer_now(s, rq, &r);
    }
    rq->req = (http_request){s, s->svc, method, url, &rq->rt, rq->body, rq->len, conn, {0}};
    rq->phase = HANDED;
    atomic_store(&rq->answer, HANDLING);
    s->handle(&rq->req);
    return await_answer(s, conn, rq);
}

/* Stores a body chunk, up to RULE_BODY_MAX (grown as it comes: a waiting
 * buyer's memory is what it sent); past it, discards (and past DISCARD_MAX
 * more, gives up on the connection). */
static enum MHD_Result take_chunk(struct req_state *rq, const char *data, size_t size)
{
    if (!rq->too_large && rq->len + size <= RULE_BODY_MAX) {
        if (rq->len + size + 1 > rq->cap) {
            size_t cap = rq->cap ? rq->cap : 256;
            while (cap < rq->len + size + 1)
                cap *= 2;
            char *body = realloc(rq->body, cap);
            if (body == NULL)
                return MHD_NO;
            rq->body = body, rq->cap = cap;
        }
        memcpy(rq->body + rq->len, data, size);
        rq->len += size;
        rq->body[rq->len] = '\0';
        return MHD_YES;
    }
    rq->too_large = 1;
    rq->discarded += size;
    return rq->discarded > DISCARD_MAX ? MHD_NO : MHD_YES;
}

/* Whether a field came on one line. libmicrohttpd 0.9.75 keeps a field
 * where it read it: its name, a NUL where the colon was, the blanks it
 * skipped, its value. A folded field's next line is glued to its name,
 * which moves to a block of its own, away from its value: the one trace of
 * the fold it leaves. */
static int one_line(const char *name, size_t name_len, const char *value)
{
    uintptr_t end = (uintptr_t)name + name_len, at = (uintptr_t)value;
    if (at <= end || at - end > 256 || name[name_len] != '\0')
        return 0;
    for (const char *p = name + name_len + 1; p < value; p++)
        if (*p != ' ' && *p != '\t')
            return 0;
    return 1;
}

/* What one look at a request's header fields finds. */
struct head_look {
    req_framing framing;
    req_head head;
};

static enum MHD_Result look_at_field(void *cls, enum MHD_ValueKind kind, const char *name,
                                     size_t name_len, const char *value, size_t value_len)
{
    struct head_look *look = cls;
    (void)kind;
    req_head_add(&look->head, name, name_len, value_len);
    req_framing_add(&look->framing, name, value ? value : "",
                    value && !one_line(name, name_len, value));
    return MHD_YES;
}

/* Whether the request's head is within its limits, and libmicrohttpd reads
 * its body as it says, one way (request.h), checked as soon as its headers
 * are in: libmicrohttpd 0.9.75 frames a body by Transfer-Encoding when
 * Content-Length comes too, by the first of two Content-Lengths, reads a
 * coding it does not know ("chunked " among them) until the connection
 * closes, and glues a folded line to the field's name. Answering now makes
 * it close the connection unread. The code; why in rq->head_err. */
static int check_head(struct MHD_Connection *conn, const char *version, struct req_state *rq)
{
    struct head_look look = {.framing = {.http10 = strcmp(version, MHD_HTTP_VERSION_1_0) == 0}};
    char err[256];
    MHD_get_connection_values_n(conn, MHD_HEADER_KIND, look_at_field, &look);
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    int rc = req_check_head(&look.head, info ? info->header_size : 0, err, sizeof(err));
    if (rc == REQ_OK)
        rc = req_check_framing(&look.framing, err, sizeof(err));
    if (rc != REQ_OK)
        rq->head_err = strdup(err); /* NULL when out of memory: refused all the same */
    return rc;
}

/* Whether s trusts a (--trusted-proxies). */
static int trusted(const http_server *s, const proxies_addr *a)
{
    return s->cfg.trusted && proxies_trusts(s->cfg.trusted, a);
}

int http_log_due(http_server *s, enum http_log_kind kind)
{
    long now = (long)time(NULL), last = atomic_load(&s->logged[kind]);
    return now != last && atomic_compare_exchange_strong(&s->logged[kind], &last, now);
}

/* A connection refused for its peer's limit: counted, and logged once a
 * second at most (a flood from one address would fill the log). */
static void refused_peer(http_server *s, const proxies_addr *peer)
{
    char text[PROXIES_TEXT_MAX];
    metrics_per_address_refusal(service_metrics(s->svc), METRICS_PER_ADDRESS_CONNECTIONS);
    if (http_log_due(s, HTTP_LOG_REFUSED_PEER))
        log_kv(LOG_WARN, "connection refused: over --max-connections-per-ip from one address "
               "(logged once a second at most)", LOG_STR("client", proxies_addr_text(peer, text)),
               LOG_INT("limit", s->cfg.max_per_ip));
}

/* A new connection is taken until the drain begins, then closed at once,
 * unanswered (http_quiesce); likewise one from a peer (not a trusted proxy)
 * that has max_per_ip open already. on_connection counts it (an accept
 * libmicrohttpd then drops never gets there, so nothing is counted here). */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    http_server *s = cls;
    proxies_addr peer;
    (void)addrlen;
    if (atomic_load(&s->draining))
        return MHD_NO;
    if (s->conns && proxies_addr_of(&peer, addr) == 0 && !trusted(s, &peer) &&
        tally_count(s->conns, &peer) >= s->cfg.max_per_ip) {
        refused_peer(s, &peer);
        return MHD_NO;
    }
    return MHD_YES;
}

/* Counts c's peer against max_per_ip, unless it is a trusted proxy (whose
 * clients are limited one by one, in_flight_ok). Past the limit (accepts on
 * several event threads at once passed on_accept together) its requests are
 * refused. */
static void count_peer(http_server *s, struct MHD_Connection *conn, struct conn_state *c)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (info == NULL || proxies_addr_of(&c->peer, info->client_addr) != 0)
        return;
    c->has_peer = 1;
    c->trusted = trusted(s, &c->peer);
    if (s->conns == NULL || c->trusted)
        return;
    int rc = tally_take(s->conns, &c->peer, s->cfg.max_per_ip);
    c->counted = rc == 1;
    if (rc == 0) {
        c->over_peer = 1;
        refused_peer(s, &c->peer);
    }
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **req_cls)
{
    http_server *s = cls;
    struct req_state *rq = *req_cls;
    if (rq == NULL) { /* headers are in: set up, or refuse a body before it is read */
        if ((rq = calloc(1, sizeof(*rq))) == NULL)
            return MHD_NO;
        *req_cls = rq;
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        rq->too_large = cl && strtoull(cl, NULL, 10) > RULE_BODY_MAX;
        rq->head = check_head(conn, version, rq);
        if (rq->too_large || rq->head != REQ_OK) {
            reaper_request_read(deadlines_of(conn));
            return respond(s, conn, url, method, rq); /* MHD drops the body and closes */
        }
        return MHD_YES;
    }
    if (*upload_data_size) {
        enum MHD_Result ok = take_chunk(rq, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return ok;
    }
    reaper_request_read(deadlines_of(conn));
    return respond(s, conn, url, method, rq);
}

/* The request line is in (headers are not yet): its deadline starts. */
static void *on_request_line(void *cls, const char *uri, struct MHD_Connection *conn)
{
    (void)cls, (void)uri;
    reaper_request_line(deadlines_of(conn));
    return NULL; /* on_request sets up the request state */
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    http_server *s = cls;
    struct conn_state *c = *socket_context;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        int open = atomic_fetch_add(&s->open, 1) + 1;
        const union MHD_ConnectionInfo *info =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if ((c = *socket_context = calloc(1, sizeof(*c))) == NULL)
            return; /* out of memory: no deadlines, no refusal */
        c->over = open > s->cfg.max_connections;
        count_peer(s, conn, c);
        c->deadlines = info ? reaper_conn_started(s->reaper, info->connect_fd) : NULL;
        /* HTTPS: its handshake is still to come */
        if (s->tickets && (info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_GNUTLS_SESSION)))
            tls_tickets_enable(s->tickets, info->tls_session);
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) { /* before MHD closes the socket */
        atomic_fetch_sub(&s->open, 1);
        if ((atomic_fetch_add(&s->closes, 1) + 1) % TRIM_EVERY_CLOSES == 0)
            malloc_trim(0); /* what the closes before this one freed: 1.4 ms (at
                             * most 12) on this event thread in a 10,000-buyer
                             * sale, 10 us a connection */
        if (c && c->counted)
            tally_give(s->conns, &c->peer);
        if (c)
            reaper_conn_closed(s->reaper, c->deadlines);
        free(c);
        *socket_context = NULL;
    }
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                         enum MHD_RequestTerminationCode toe)
{
    http_server *s = cls;
    struct req_state *rq = *req_cls;
    reaper_request_done(deadlines_of(conn));
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && toe != MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN)
        log_kv(LOG_DEBUG, "request not completed", LOG_INT("reason", toe));
    if (rq) {
        /* Only now, the answer sent (or the connection gone): the drain ends
         * in MHD_stop_daemon, which shuts every socket down, and an answer
         * still queued then (a committed deduction's) would never arrive. */
        if (rq->entered) {
            service_leave(s->svc);
            atomic_fetch_sub(&s->unsent, 1);
        }
        if (rq->in_flight)
            tally_give(s->in_flight, &rq->client);
        if (rq->phase == HANDED) /* the answer never went: the connection did first */
            free(rq->reply_body);
        free(rq->body);
        free(rq->head_err);
        free(rq);
    }
    *req_cls = NULL;
}

/* libmicrohttpd's messages, one log line each, except that a message
 * repeating within a second (a connection flood hitting the limit) is
 * counted and logged once a second with the count. */
static struct {
    pthread_mutex_t mu;
    char last[512];
    time_t at;
    long suppressed;
} mhd_log = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    msg[strcspn(msg, "\r\n")] = '\0'; /* the log escapes the rest */
    time_t now = time(NULL);
    pthread_mutex_lock(&mhd_log.mu);
    int repeat = strcmp(msg, mhd_log.last) == 0 && now == mhd_log.at;
    long suppressed = mhd_log.suppressed;
    if (repeat) {
        mhd_log.suppressed++;
    } else {
        snprintf(mhd_log.last, sizeof(mhd_log.last), "%s", msg);
        mhd_log.at = now;
        mhd_log.suppressed = 0;
    }
    pthread_mutex_unlock(&mhd_log.mu);
    if (!repeat)
        log_kv(LOG_WARN, "libmicrohttpd", LOG_STR("detail", msg),
               LOG_INT("repeatsBefore", suppressed));
}

long http_connections_taken(long max) { return max + (max / 16 > 64 ? max / 16 : 64); }

void http_config_defaults(http_config *cfg)
{
    *cfg = (http_config){.bind = "127.0.0.1", .port = 8080, .max_connections = 0,
                         .max_per_ip = 256, .idle_timeout_s = 60, .request_timeout_ms = 10000};
}

/* Undoes what http_start made before it failed, or all of it. */
static void discard(http_server *s)
{
    if (s->cfg.shares == NULL)
        reaper_stop(s->reaper);
    tls_tickets_free(s->tickets);
    tally_free(s->conns);
    tally_free(s->in_flight);
    free(s);
}

int http_start(const http_config *cfg, service *svc, http_handler *handle, http_server **out,
               char *err, size_t errlen)
{
    *out = NULL;
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)cfg->port)};
    if (inet_pton(AF_INET, cfg->bind, &addr.sin_addr) != 1) {
        snprintf(err, errlen, "bind address '%s' is not an IPv4 address", cfg->bind);
        return -1;
    }
    http_server *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    s->cfg = *cfg;
    s->svc = svc;
    s->handle = handle;
    s->reaper = cfg->shares ? cfg->shares->reaper
                            : reaper_start(cfg->idle_timeout_s * 1000, cfg->request_timeout_ms);
    if (cfg->tls)
        s->tickets = tls_tickets_new();
    if (cfg->max_per_ip > 0) { /* libmicrohttpd's own limit would count a proxy as one client */
        s->conns = tally_new();
        s->in_flight = tally_new();
    }
    if (s->reaper == NULL || (cfg->tls && s->tickets == NULL) ||
        (cfg->max_per_ip > 0 && (s->conns == NULL || s->in_flight == NULL))) {
        snprintf(err, errlen, "out of memory or threads");
        discard(s);
        return -1;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned threads = cfg->threads > 0 ? (unsigned)cfg->threads : cores > 0 ? (unsigned)cores : 1;
    unsigned max = (unsigned)cfg->max_connections;
    /* TLS 1.2 and 1.3 only; libmicrohttpd hands the PEM to GnuTLS */
    struct MHD_OptionItem tls[] = {
        {MHD_OPTION_HTTPS_MEM_CERT, 0, cfg->tls ? cfg->tls->cert : NULL},
        {MHD_OPTION_HTTPS_MEM_KEY, 0, cfg->tls ? cfg->tls->key : NULL},
        {MHD_OPTION_HTTPS_PRIORITIES, 0, (void *)TLS_PRIORITIES},
        {MHD_OPTION_END, 0, NULL}};
    s->daemon = MHD_start_daemon(
        MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG |
            (cfg->tls ? MHD_USE_TLS : 0),
        (uint16_t)cfg->port, on_accept, s, on_request, s,
        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s, /* first, so it sees every message */
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
        MHD_OPTION_THREAD_POOL_SIZE, threads,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)http_connections_taken(max),
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)cfg->idle_timeout_s,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
        MHD_OPTION_URI_LOG_CALLBACK, on_request_line, s,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONNECTION_MEMORY,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, max > 1024 ? max : 1024u,
        MHD_OPTION_ARRAY, cfg->tls ? tls : tls + 3,
        MHD_OPTION_END);
    if (s->daemon == NULL) {
        snprintf(err, errlen, "cannot listen on %s:%d (in use, or not permitted%s)",
                 cfg->bind, cfg->port, cfg->tls ? ", or TLS not set up: see the log" : "");
        discard(s);
        return -1;
    }
    *out = s;
    return 0;
}

const char *http_query(const http_request *rq, const char *name)
{
    return MHD_lookup_connection_value(rq->conn, MHD_GET_ARGUMENT_KIND, name);
}

const char *http_header(const http_request *rq, const char *name)
{
    return MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, name);
}

const char *http_client(const http_request *rq)
{
    return ((const struct req_state *)rq)->client_text; /* rq is its first member */
}

uint64_t http_reaped(const http_server *s) { return reaper_reaped(s->reaper); }

/* Not MHD_quiesce_daemon: with a pool of event threads, libmicrohttpd
 * 0.9.75 takes the listening socket out of each thread's epoll set from
 * the caller's thread while that thread, awake, may do the same, and it
 * aborts the process when its own removal then fails (ENOENT; seen at a
 * stop in the tests, likelier under load). on_accept closes new connections
 * instead. */
void http_quiesce(http_server *s) { atomic_store(&s->draining, 1); }

/* Waits, a look each ms (only while stopping: no answer need signal), while
 * *count is above 0 and, when until_ms is not 0, until until_ms. */
static void wait_for_none(_Atomic int *count, int64_t until_ms)
{
    while (atomic_load(count) > 0) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (until_ms && (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000 >= until_ms)
            return;
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
}

void http_stop(http_server *s)
{
    if (s == NULL)
        return;
    /* libmicrohttpd must not stop with a connection suspended: a request
     * still in its handler answers first (its lock's wait and the store's
     * timeouts bound that; past the drain, commits are refused) */
    wait_for_none(&s->pending, 0);
    /* An answer made is not yet sent: its event thread has still to write it
     * (it may have been resumed an instant ago), and MHD_stop_daemon shuts
     * every socket down, a committed order's answer with it. They get, all
     * together, what a slow sender gets for its request: --request-timeout-ms.
     * Meanwhile a request still read is refused (503), and waited for too.
     * Then no answer is made any more (closing, see respond); the second
     * wait takes those made in between. */
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t until = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000 + s->cfg.request_timeout_ms;
    wait_for_none(&s->unsent, until);
    atomic_store(&s->closing, 1);
    wait_for_none(&s->unsent, until);
    if (atomic_load(&s->unsent) > 0)
        log_kv(LOG_WARN, "answers not taken by their clients within --request-timeout-ms of "
               "the stop; their connections are closed", LOG_INT("count", atomic_load(&s->unsent)));
    MHD_stop_daemon(s->daemon); /* every connection closed: the reaper has none left */
    discard(s);
}
