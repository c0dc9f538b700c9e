/* tls.c - loadgen's TLS client over GnuTLS: one set of credentials per
 * process, a non-blocking session per connection (the handshake returns at
 * each would-block, and the connection waits on its loop for the direction
 * GnuTLS names), session data kept at close for the next handshake. */
#include "loadgen/tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <gnutls/gnutls.h>
#include <gnutls/x509.h>

#include "loadgen/evloop.h"

/* Set once by lg_tls_setup before any connection (and any fork), read-only
 * afterwards; the counters are shared by the load threads. */
static gnutls_certificate_credentials_t trust;
static int insecure;
static atomic_ullong handshakes, resumptions;

/* Room for a few answers' records read ahead: GnuTLS asks for a record's
 * 5-byte header, then its body, each a recv of its own; one recv here
 * serves them (a syscall is the dearest part of a small record). */
#define READ_AHEAD 2048

struct lg_tls {
    gnutls_session_t s;
    int fd;
    int done;                /* the handshake is over */
    size_t rpos, rlen;       /* what of rbuf is read ahead and not yet taken */
    char rbuf[READ_AHEAD];
};

int lg_tls_setup(const char *cacert, int skip_verify, lg_err *err)
{
    if (trust)
        gnutls_certificate_free_credentials(trust);
    trust = NULL;
    insecure = skip_verify;
    if (gnutls_certificate_allocate_credentials(&trust) != GNUTLS_E_SUCCESS)
        return lg_errf(err, LG_ERR_NOMEM, "TLS: out of memory");
    int rc = cacert ? gnutls_certificate_set_x509_trust_file(trust, cacert, GNUTLS_X509_FMT_PEM)
                    : gnutls_certificate_set_x509_system_trust(trust);
    if (cacert && rc <= 0)
        return lg_errf(err, LG_ERR_USAGE, "--cacert %s: %s", cacert,
                       rc == 0 ? "no certificate in it" : gnutls_strerror(rc));
    return LG_OK;
}

void lg_tls_ticket_free(lg_tls_ticket *t)
{
    free(t->data);
    t->data = NULL;
    t->len = 0;
}

static ssize_t push(gnutls_transport_ptr_t p, const void *buf, size_t len)
{
    const lg_tls *t = p;
    return send(t->fd, buf, len, MSG_NOSIGNAL); /* no SIGPIPE from a reset */
}

/* What GnuTLS asks for, from what was read ahead, else one recv of as
 * much as the socket has (straight into buf when len is larger). */
static ssize_t pull(gnutls_transport_ptr_t p, void *buf, size_t len)
{
    lg_tls *t = p;
    if (t->rpos == t->rlen) {
        if (len >= sizeof(t->rbuf))
            return recv(t->fd, buf, len, 0);
        ssize_t n = recv(t->fd, t->rbuf, sizeof(t->rbuf), 0);
        if (n <= 0)
            return n; /* errno as recv left it: GnuTLS reads EAGAIN from it */
        t->rpos = 0;
        t->rlen = (size_t)n;
    }
    size_t k = t->rlen - t->rpos < len ? t->rlen - t->rpos : len;
    memcpy(buf, t->rbuf + t->rpos, k);
    t->rpos += k;
    return (ssize_t)k;
}

/* Whether name is an IPv4 or IPv6 address: no SNI then (RFC 6066), but
 * still checked against the certificate's IP addresses. */
static int is_address(const char *name)
{
    unsigned char a[16];
    return inet_pton(AF_INET, name, a) == 1 || inet_pton(AF_INET6, name, a) == 1;
}

lg_tls *lg_tls_new(int fd, const char *name, const lg_tls_ticket *ticket, char *why, size_t n)
{
    lg_tls *t = calloc(1, sizeof(*t));
    int rc = t ? gnutls_init(&t->s, GNUTLS_CLIENT | GNUTLS_NONBLOCK) : GNUTLS_E_MEMORY_ERROR;
    if (rc == GNUTLS_E_SUCCESS)
        rc = gnutls_set_default_priority(t->s);
    if (rc == GNUTLS_E_SUCCESS)
        rc = gnutls_credentials_set(t->s, GNUTLS_CRD_CERTIFICATE, trust);
    if (rc == GNUTLS_E_SUCCESS && !is_address(name))
        rc = gnutls_server_name_set(t->s, GNUTLS_NAME_DNS, name, strlen(name));
    if (rc != GNUTLS_E_SUCCESS) {
        snprintf(why, n, "TLS: %s", gnutls_strerror(rc));
        if (t && t->s)
            gnutls_deinit(t->s);
        free(t);
        return NULL;
    }
    if (!insecure)
        gnutls_session_set_verify_cert(t->s, name, 0);
    t->fd = fd;
    gnutls_transport_set_ptr(t->s, t);
    gnutls_transport_set_push_function(t->s, push);
    gnutls_transport_set_pull_function(t->s, pull);
    if (ticket && ticket->len) /* one the server no longer takes: a full handshake */
        gnutls_session_set_data(t->s, ticket->data, ticket->len);
    return t;
}

/* A failed handshake's reason: a certificate's, with what did not verify. */
static void handshake_why(lg_tls *t, int rc, char *why, size_t n)
{
    if (rc == GNUTLS_E_CERTIFICATE_VERIFICATION_ERROR) {
        gnutls_datum_t text = {NULL, 0};
        unsigned status = gnutls_session_get_verify_cert_status(t->s);
        gnutls_certificate_verification_status_print(status, GNUTLS_CRT_X509, &text, 0);
        snprintf(why, n, "TLS: the server's certificate does not verify: %s (--cacert FILE "
                 "names the CA to trust)", text.data ? (char *)text.data : "unknown reason");
        gnutls_free(text.data);
    } else if (rc == GNUTLS_E_FATAL_ALERT_RECEIVED) {
        snprintf(why, n, "TLS handshake: the server refused it (%s)",
                 gnutls_alert_get_name(gnutls_alert_get(t->s)));
    } else {
        snprintf(why, n, "TLS handshake: %s", gnutls_strerror(rc));
    }
}

int lg_tls_handshake(lg_tls *t, unsigned *want, char *why, size_t n)
{
    int rc = gnutls_handshake(t->s);
    if (rc == GNUTLS_E_SUCCESS) {
        t->done = 1;
        atomic_fetch_add_explicit(&handshakes, 1, memory_order_relaxed);
        if (gnutls_session_is_resumed(t->s))
            atomic_fetch_add_explicit(&resumptions, 1, memory_order_relaxed);
        return 1;
    }
    if (rc == GNUTLS_E_AGAIN || rc == GNUTLS_E_INTERRUPTED || !gnutls_error_is_fatal(rc)) {
        *want = gnutls_record_get_direction(t->s) ? LG_EV_WRITE : LG_EV_READ;
        return LG_TLS_AGAIN;
    }
    handshake_why(t, rc, why, n);
    return -1;
}

ssize_t lg_tls_send(lg_tls *t, const void *buf, size_t len, char *why, size_t n)
{
    ssize_t rc = gnutls_record_send(t->s, buf, len);
    if (rc == GNUTLS_E_AGAIN || rc == GNUTLS_E_INTERRUPTED)
        return LG_TLS_AGAIN;
    if (rc < 0)
        snprintf(why, n, "TLS send: %s", gnutls_strerror((int)rc));
    return rc < 0 ? -1 : rc;
}

ssize_t lg_tls_recv(lg_tls *t, void *buf, size_t len, char *why, size_t n)
{
    ssize_t rc = gnutls_record_recv(t->s, buf, len);
    if (rc == GNUTLS_E_AGAIN || rc == GNUTLS_E_INTERRUPTED)
        return LG_TLS_AGAIN;
    /* a server may close without close_notify: for HTTP, whose answers say
     * their own length, that is the end of the stream */
    if (rc == GNUTLS_E_PREMATURE_TERMINATION)
        return 0;
    if (rc < 0)
        snprintf(why, n, "TLS recv: %s", gnutls_strerror((int)rc));
    return rc < 0 ? -1 : rc;
}

size_t lg_tls_pending(lg_tls *t) { return gnutls_record_check_pending(t->s) + t->rlen - t->rpos; }

/* The session's data into ticket, replacing what it held. */
static void keep(lg_tls *t, lg_tls_ticket *ticket)
{
    gnutls_datum_t d = {NULL, 0};
    if (gnutls_session_get_data2(t->s, &d) != GNUTLS_E_SUCCESS || d.size == 0)
        return;
    unsigned char *copy = malloc(d.size);
    if (copy) {
        memcpy(copy, d.data, d.size);
        lg_tls_ticket_free(ticket);
        ticket->data = copy;
        ticket->len = d.size;
    }
    gnutls_free(d.data);
}

void lg_tls_free(lg_tls *t, lg_tls_ticket *ticket)
{
    if (t == NULL)
        return;
    if (t->done) {
        if (ticket)
            keep(t, ticket);
        gnutls_bye(t->s, GNUTLS_SHUT_WR); /* non-blocking: sent if it fits, else skipped */
    }
    gnutls_deinit(t->s);
    free(t);
}

void lg_tls_counts(unsigned long long *done, unsigned long long *resumed)
{
    *done = atomic_load(&handshakes);
    *resumed = atomic_load(&resumptions);
}
