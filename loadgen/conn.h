/* conn.h - one HTTP/1.1 client connection on an lg_evloop, the way wrk keeps
 * its connections: a non-blocking socket kept alive between requests, one
 * request at a time, the answer parsed as it arrives (http.h), a new
 * connection when the server closed the old one. Timeouts are the caller's:
 * it knows its deadlines and calls lg_conn_close when one passes.
 *
 * Use: lg_conn_init, then lg_conn_send a request and hand every event whose
 * tag is the connection's to lg_conn_event until it says DONE or ERROR; then
 * the next request. lg_conn_free at the end.
 *
 * An https:// address (addr->tls) makes every connection a TLS one (tls.h):
 * its handshake runs in steps on the loop after the connect, as part of
 * connecting, and a reconnection resumes the last session.
 *
 * Thread safety: none; a connection belongs to its loop's thread. */
#ifndef LG_CONN_H
#define LG_CONN_H

#include <stddef.h>
#include <sys/uio.h>

#include "loadgen/evloop.h"
#include "loadgen/http.h"
#include "loadgen/tls.h"

/* What lg_conn_send and lg_conn_event say of the request in flight. */
enum lg_conn_status {
    LG_CONN_AGAIN = 0,  /* under way (or no request in flight) */
    LG_CONN_DONE = 1,   /* the whole answer is in c->resp */
    LG_CONN_ERROR = -1, /* no answer: c->why says why; the connection is closed */
};

typedef struct lg_conn {
    lg_evloop *loop;
    const lg_http_addr *addr; /* the caller's, alive as long as c */
    void *tag;                /* reported with this connection's events */
    const struct sockaddr *src; /* bound before connect when set (lg_conn_bind), else NULL */
    socklen_t srclen;
    int fd;                   /* -1 when closed */
    unsigned watching;        /* LG_EV_* asked of the loop for fd */
    int connecting;           /* a connect() is under way */
    int opening;              /* lg_conn_open: connecting with no request to send */
    int ai;                   /* which of addr's addresses fd is for */
    int busy;                 /* a request is in flight */
    int resent;               /* the request in flight went out on a second connection */
    int no_resend;            /* the caller's: never send a request twice (set after
                                 lg_conn_init for a service that may not be idempotent) */
    unsigned answered;        /* answers the open connection has carried */
    struct iovec iov[2];      /* the request in flight: the caller's buffers */
    int iovcnt;
    size_t sent, total;       /* bytes of it written, of total */
    lg_http_resp resp;        /* its answer */
    /* TLS, when addr->tls */
    lg_tls *tls;              /* the open connection's session, NULL when none */
    int handshaking;          /* its handshake is under way */
    lg_tls_ticket ticket;     /* the last session, for the next connection to resume */
    char *wbuf;               /* the request's buffers as one, so it goes as one record */
    size_t wcap;
    char why[160];            /* after LG_CONN_ERROR: what went wrong */
} lg_conn;

/* Sets c up, closed, for requests to addr; events on its socket carry tag.
 * Answers keep up to body_max body bytes; keep_headers as for
 * lg_http_resp_init. Allocates nothing. */
void lg_conn_init(lg_conn *c, lg_evloop *loop, const lg_http_addr *addr, void *tag,
                  size_t body_max, int keep_headers);

/* Makes the connections of c leave from src (an IPv4 or IPv6 address with
 * port 0, the caller's, alive as long as c), bound before connect; NULL
 * forgets it. Only addresses of src's family are then tried. */
void lg_conn_bind(lg_conn *c, const struct sockaddr *src, socklen_t len);

/* Opens the connection ahead of any request (a flash sale connects every buyer
 * first): LG_CONN_DONE when connected at once, LG_CONN_AGAIN while under way
 * (lg_conn_event then says DONE once connected), or LG_CONN_ERROR with c->why.
 * Once open, the socket is not watched until lg_conn_send. */
int lg_conn_open(lg_conn *c);

/* Sends a request: iov[0..iovcnt-1] (1 or 2 buffers, head and body), which the
 * caller keeps unchanged until the answer is DONE or ERROR. Opens a
 * connection first when none is open. Returns LG_CONN_AGAIN, or LG_CONN_ERROR
 * at once when no connection could be made. */
int lg_conn_send(lg_conn *c, const struct iovec *iov, int iovcnt);

/* Acts on events (LG_EV_*) reported for c. Returns LG_CONN_DONE when the
 * answer is complete, LG_CONN_ERROR when it cannot come (refused, reset,
 * closed before the end of the answer, not HTTP), else LG_CONN_AGAIN. A
 * reused connection that the server closed before a byte of the answer came
 * back (it may have closed it while idle) is replaced and the request sent
 * again, once, as libcurl does, unless c->no_resend: a request the server
 * answered even in part is never sent twice. Events while no request is in flight close the
 * connection (the server closed it, or sent what nobody asked for). */
int lg_conn_event(lg_conn *c, unsigned events);

/* Whether the connection of the request in flight is still being made (its
 * TLS handshake included). */
int lg_conn_connecting(const lg_conn *c);

/* Abandons the request in flight, if any, and closes the connection, so that a
 * late answer is never taken for the next request's. */
void lg_conn_close(lg_conn *c);

/* Closes c and frees its answer buffer (and its TLS session's). */
void lg_conn_free(lg_conn *c);

#endif
