/* conn.c - a keep-alive HTTP/1.1 client connection: non-blocking connect,
 * writes straight from the caller's buffers (the loop is asked to report
 * writability only while a write is pending), reads fed to the answer's
 * parser. Per request that is one send and one recv in the common case; over
 * TLS too (a record each way, the answer's records read ahead in one recv). */
#include "loadgen/conn.h"

#include <errno.h>
#include <stdlib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define RECV_BUF 16384

void lg_conn_init(lg_conn *c, lg_evloop *loop, const lg_http_addr *addr, void *tag,
                  size_t body_max, int keep_headers)
{
    memset(c, 0, sizeof(*c));
    c->loop = loop;
    c->addr = addr;
    c->tag = tag;
    c->fd = -1;
    lg_http_resp_init(&c->resp, body_max, keep_headers);
}

int lg_conn_connecting(const lg_conn *c)
{
    return c->busy && (c->connecting || c->handshaking);
}

/* Closes the socket; the request in flight, if any, stays. Closing the last
 * descriptor of a socket also takes it out of the epoll set. */
static void drop(lg_conn *c)
{
    lg_tls_free(c->tls, &c->ticket); /* before the close: its close_notify goes out on fd */
    c->tls = NULL;
    c->handshaking = 0;
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->watching = 0;
    c->connecting = 0;
    c->opening = 0;
    c->answered = 0;
}

void lg_conn_close(lg_conn *c)
{
    drop(c);
    c->busy = 0;
}

void lg_conn_free(lg_conn *c)
{
    lg_conn_close(c);
    lg_http_resp_free(&c->resp);
    lg_tls_ticket_free(&c->ticket);
    free(c->wbuf);
    c->wbuf = NULL;
    c->wcap = 0;
}

static int watch(lg_conn *c, unsigned events)
{
    if (events == c->watching)
        return 0;
    if (lg_evloop_watch(c->loop, c->fd, c->watching, events, c->tag) != 0)
        return -1;
    c->watching = events;
    return 0;
}

static int start(lg_conn *c);

/* The request failed: cause is an errno from the call named in what, or 0
 * for a protocol error that what tells. On a reused connection that gave
 * nothing back, the server most likely closed it while idle: one fresh
 * connection gets the request again. */
static int failed(lg_conn *c, int cause, const char *what)
{
    int stale = c->answered > 0 && c->resp.got == 0 && !c->resent && !c->no_resend;
    drop(c);
    if (stale) {
        c->resent = 1;
        return start(c);
    }
    c->busy = 0;
    if (cause)
        snprintf(c->why, sizeof(c->why), "%s: %s", what, strerror(cause));
    else
        snprintf(c->why, sizeof(c->why), "%s", what);
    return LG_CONN_ERROR;
}

/* Has the loop report events on the socket; they move the request on. */
static int wait_for(lg_conn *c, unsigned events)
{
    return watch(c, events) == 0 ? LG_CONN_AGAIN : failed(c, errno, "epoll_ctl");
}

/* write_some over TLS: c->iov is one buffer (lg_conn_send made it so). A
 * send that would block is made again with the same bytes, as GnuTLS asks. */
static int write_tls(lg_conn *c)
{
    char why[sizeof(c->why)];
    while (c->sent < c->total) {
        ssize_t w = lg_tls_send(c->tls, (char *)c->iov[0].iov_base + c->sent,
                                c->total - c->sent, why, sizeof(why));
        if (w == LG_TLS_AGAIN)
            return wait_for(c, LG_EV_READ | LG_EV_WRITE);
        if (w < 0)
            return failed(c, 0, why);
        c->sent += (size_t)w;
    }
    return wait_for(c, LG_EV_READ);
}

/* Writes what is left of the request; then waits for the answer only. */
static int write_some(lg_conn *c)
{
    if (c->tls)
        return write_tls(c);
    while (c->sent < c->total) {
        struct iovec iov[2];
        int n = 0;
        size_t skip = c->sent;
        for (int i = 0; i < c->iovcnt; i++) {
            if (skip >= c->iov[i].iov_len) {
                skip -= c->iov[i].iov_len;
                continue;
            }
            iov[n].iov_base = (char *)c->iov[i].iov_base + skip;
            iov[n++].iov_len = c->iov[i].iov_len - skip;
            skip = 0;
        }
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(c->fd, &m, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return wait_for(c, LG_EV_READ | LG_EV_WRITE);
        if (w < 0)
            return failed(c, errno, "send");
        c->sent += (size_t)w;
    }
    return wait_for(c, LG_EV_READ);
}

/* An open-only connection is made: nothing to send yet, nothing to watch. */
static int opened(lg_conn *c)
{
    c->opening = 0;
    return watch(c, 0) == 0 ? LG_CONN_DONE : failed(c, errno, "epoll_ctl");
}

/* The TLS handshake's next step; once over, on to the request, if any. */
static int shake(lg_conn *c)
{
    char why[sizeof(c->why)];
    unsigned want = 0;
    int rc = lg_tls_handshake(c->tls, &want, why, sizeof(why));
    if (rc == LG_TLS_AGAIN)
        return wait_for(c, want);
    if (rc < 0)
        return failed(c, 0, why);
    c->handshaking = 0;
    return c->opening ? opened(c) : write_some(c);
}

/* The connection is made: its TLS handshake first, then on to the request,
 * if there is one. */
static int made(lg_conn *c)
{
    c->connecting = 0;
    if (c->addr->tls) {
        char why[sizeof(c->why)];
        if ((c->tls = lg_tls_new(c->fd, c->addr->name, &c->ticket, why, sizeof(why))) == NULL)
            return failed(c, 0, why);
        c->handshaking = 1;
        return shake(c);
    }
    return c->opening ? opened(c) : write_some(c);
}

/* Binds fd to the source address, without a port yet (the kernel picks it
 * at connect, per destination: many connections share one source). */
static int bind_src(const lg_conn *c, int fd)
{
    if (c->src == NULL)
        return 0;
    int one = 1;
    setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
    return bind(fd, c->src, c->srclen);
}

/* Opens a socket to the next of addr's addresses that takes one. */
static int open_next(lg_conn *c)
{
    int last = ECONNREFUSED;
    for (; c->ai < c->addr->n; c->ai++) {
        const struct sockaddr *sa = (const struct sockaddr *)&c->addr->sa[c->ai];
        if (c->src && c->src->sa_family != sa->sa_family)
            continue;
        int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return failed(c, errno, "socket");
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (bind_src(c, fd) != 0) {
            int e = errno;
            close(fd);
            return failed(c, e, "bind");
        }
        int rc = connect(fd, sa, c->addr->salen[c->ai]);
        if (rc == 0 || errno == EINPROGRESS) {
            c->fd = fd;
            c->connecting = rc != 0;
            break;
        }
        last = errno;
        close(fd);
    }
    if (c->fd < 0)
        return failed(c, last, "connect");
    if (!c->connecting)
        return made(c);
    return wait_for(c, LG_EV_READ | LG_EV_WRITE);
}

/* Sends the request in flight from its first byte, connecting when needed. */
static int start(lg_conn *c)
{
    c->sent = 0;
    lg_http_resp_reset(&c->resp);
    if (c->fd >= 0)
        return write_some(c);
    c->ai = 0;
    return open_next(c);
}

void lg_conn_bind(lg_conn *c, const struct sockaddr *src, socklen_t len)
{
    c->src = src;
    c->srclen = src ? len : 0;
}

int lg_conn_open(lg_conn *c)
{
    lg_conn_close(c);
    c->opening = 1;
    c->why[0] = '\0';
    c->ai = 0;
    return open_next(c);
}

/* Over TLS, the request's buffers as one in c->wbuf: one record, one
 * send. 0, or -1 when out of memory. */
static int join_tls(lg_conn *c)
{
    if (c->iovcnt < 2)
        return 0;
    if (c->wcap < c->total) {
        char *grown = realloc(c->wbuf, c->total);
        if (grown == NULL)
            return -1;
        c->wbuf = grown;
        c->wcap = c->total;
    }
    memcpy(c->wbuf, c->iov[0].iov_base, c->iov[0].iov_len);
    memcpy(c->wbuf + c->iov[0].iov_len, c->iov[1].iov_base, c->iov[1].iov_len);
    c->iov[0] = (struct iovec){c->wbuf, c->total};
    c->iovcnt = 1;
    return 0;
}

int lg_conn_send(lg_conn *c, const struct iovec *iov, int iovcnt)
{
    c->iovcnt = iovcnt < 2 ? iovcnt : 2;
    c->total = 0;
    for (int i = 0; i < c->iovcnt; i++) {
        c->iov[i] = iov[i];
        c->total += iov[i].iov_len;
    }
    if (c->addr->tls && join_tls(c) != 0) {
        snprintf(c->why, sizeof(c->why), "out of memory");
        return LG_CONN_ERROR;
    }
    c->busy = 1;
    c->resent = 0;
    c->why[0] = '\0';
    return start(c);
}

/* A non-blocking connect finished: on to the request, or to the next address. */
static int connected(lg_conn *c)
{
    int e = 0;
    socklen_t len = sizeof(e);
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &e, &len) != 0)
        e = errno;
    if (e == 0)
        return made(c);
    int opening = c->opening;
    drop(c);
    c->opening = opening;
    c->ai++;
    if (c->ai < c->addr->n)
        return open_next(c);
    c->busy = 0;
    snprintf(c->why, sizeof(c->why), "connect: %s", strerror(e));
    return LG_CONN_ERROR;
}

/* Feeds what arrived (n == 0: the end of the stream) to the answer. */
static int take(lg_conn *c, const char *buf, size_t n)
{
    size_t used;
    int rc = lg_http_feed(&c->resp, buf, n, &used);
    if (rc < 0)
        return failed(c, 0, c->resp.why);
    if (rc == 0)
        return LG_CONN_AGAIN;
    c->busy = 0;
    c->answered++;
    /* bytes nobody asked for, or an answer that came before the request was
     * all out, leave the connection in a state no next request should meet */
    if (!c->resp.keep_alive || used < n || n == 0 || c->sent < c->total)
        drop(c);
    return LG_CONN_DONE;
}

/* read_some over TLS: records are read while the session holds bytes
 * already read, which are no event for epoll (what the socket still has,
 * level-triggered epoll reports again); an answer followed by more leaves
 * the connection, as unasked bytes do. */
static int read_tls(lg_conn *c)
{
    char buf[RECV_BUF], why[sizeof(c->why)];
    size_t held = (size_t)-1; /* read ahead, as last seen: AGAIN with less is progress */
    for (;;) {
        ssize_t n = lg_tls_recv(c->tls, buf, sizeof(buf), why, sizeof(why));
        /* GnuTLS says AGAIN after a record of its own (a session ticket) too:
         * what is still read ahead must be taken, while it is */
        size_t left = n == LG_TLS_AGAIN ? lg_tls_pending(c->tls) : 0;
        if (n == LG_TLS_AGAIN && left > 0 && left < held) {
            held = left;
            continue;
        }
        if (n == LG_TLS_AGAIN)
            return LG_CONN_AGAIN;
        if (n < 0)
            return failed(c, 0, why);
        int rc = take(c, buf, (size_t)n);
        if (rc == LG_CONN_DONE && c->tls && lg_tls_pending(c->tls) > 0)
            drop(c);
        if (rc != LG_CONN_AGAIN || n == 0 || (held = lg_tls_pending(c->tls)) == 0)
            return rc;
    }
}

static int read_some(lg_conn *c)
{
    char buf[RECV_BUF];
    if (c->tls)
        return read_tls(c);
    for (;;) {
        ssize_t n = recv(c->fd, buf, sizeof(buf), 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return LG_CONN_AGAIN;
        if (n < 0)
            return failed(c, errno, "recv");
        int rc = take(c, buf, (size_t)n);
        /* level-triggered: what a short read left is reported again */
        if (rc != LG_CONN_AGAIN || n < (ssize_t)sizeof(buf))
            return rc;
    }
}

int lg_conn_event(lg_conn *c, unsigned events)
{
    if (c->fd < 0)
        return LG_CONN_AGAIN;
    if (!c->busy && !c->opening) {
        drop(c); /* idle: a close, a reset or unasked bytes; the next request reconnects */
        return LG_CONN_AGAIN;
    }
    if (c->connecting)
        return events & (LG_EV_WRITE | LG_EV_ERROR) ? connected(c) : LG_CONN_AGAIN;
    if (c->handshaking)
        return shake(c);
    if ((events & LG_EV_WRITE) && c->sent < c->total) {
        int rc = write_some(c);
        if (rc != LG_CONN_AGAIN || c->fd < 0)
            return rc;
    }
    if (events & (LG_EV_READ | LG_EV_ERROR))
        return read_some(c);
    return LG_CONN_AGAIN;
}
