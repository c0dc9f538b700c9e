/* tls.h - the TLS side of loadgen's client (GnuTLS): the trust set up once
 * per process (--cacert, or the system's CAs; --insecure verifies nothing),
 * and a client session per connection on its non-blocking socket, driven by
 * the connection's events: the handshake in steps, records sent and read,
 * and the session kept at close so that the next connection resumes it.
 *
 * Thread safety: lg_tls_setup before any thread (and fork); after it the
 * trust is read-only and shared. A session belongs to its connection's
 * thread. */
#ifndef LG_TLS_H
#define LG_TLS_H

#include <stddef.h>
#include <sys/types.h>

#include "loadgen/err.h"

#define LG_TLS_AGAIN (-2) /* lg_tls_* : would block; wait for what *want says */

/* Sets the trust up: cacert, a PEM file of the CAs to trust (NULL: the
 * system's), or with insecure no verification at all. Safe to call again
 * (the last call wins). Returns LG_OK, or LG_ERR_USAGE with err naming the
 * file and why it does not load. */
int lg_tls_setup(const char *cacert, int insecure, lg_err *err);

/* A session kept for resumption (GnuTLS's session data; owned, malloc'd). */
typedef struct lg_tls_ticket {
    unsigned char *data;
    size_t len;
} lg_tls_ticket;

/* Frees the ticket's data; it is empty after. */
void lg_tls_ticket_free(lg_tls_ticket *t);

typedef struct lg_tls lg_tls;

/* A client session on the connected socket fd for server name (the URL's
 * host, without port or brackets: checked against the certificate, and sent
 * as SNI when it is no address); resumes ticket when it holds one. Returns
 * the session, or NULL with why filled. */
lg_tls *lg_tls_new(int fd, const char *name, const lg_tls_ticket *ticket, char *why, size_t n);

/* Moves the handshake on: 1 done, LG_TLS_AGAIN with *want (LG_EV_READ or
 * LG_EV_WRITE) what to wait for, or -1 with why saying why (a certificate
 * that does not verify is named with its reasons). */
int lg_tls_handshake(lg_tls *t, unsigned *want, char *why, size_t n);

/* Sends up to len bytes as records: the bytes taken, LG_TLS_AGAIN (call
 * again with the same bytes), or -1 with why. */
ssize_t lg_tls_send(lg_tls *t, const void *buf, size_t len, char *why, size_t n);

/* Reads plaintext: the bytes read, 0 at the end of the stream (a
 * close_notify, or the peer closed the socket), LG_TLS_AGAIN, or -1 with why. */
ssize_t lg_tls_recv(lg_tls *t, void *buf, size_t len, char *why, size_t n);

/* Bytes read from the socket and not yet taken (decrypted by GnuTLS, or
 * read ahead): epoll does not see them. */
size_t lg_tls_pending(lg_tls *t);

/* Ends the session (a close_notify when the socket takes it at once),
 * first keeping it in ticket when its handshake was done; then frees t. The
 * socket stays the caller's. NULL is a no-op. */
void lg_tls_free(lg_tls *t, lg_tls_ticket *ticket);

/* Handshakes done and of those resumed, by this process (for the report). */
void lg_tls_counts(unsigned long long *done, unsigned long long *resumed);

#endif
