/* tls.h - stockd's certificate and key for HTTPS: read once at start, the
 * key's file refused when others may read it, the pair refused when the key
 * is not the certificate's, so that a mistake stops the start with its
 * reason instead of failing every handshake later. */
#ifndef TLS_H
#define TLS_H

#include <stddef.h>

/* The protocols stockd speaks (GnuTLS priority string): TLS 1.2 and 1.3. */
#define TLS_PRIORITIES "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2"

typedef struct tls_pem {
    char *cert; /* PEM text, NUL-terminated; NULL when no TLS */
    char *key;  /* likewise; zeroed when freed */
    size_t key_len;
} tls_pem;

/* Whether this libmicrohttpd was built with TLS. */
int tls_supported(void);

/* Reads cert_path and key_path into t (which it owns until tls_pem_free)
 * and checks them: the key's file readable by its owner only, both PEM that
 * GnuTLS loads, the key the certificate's. Returns 0, or -1 with err
 * naming the file and what is wrong (t is then empty). Names no secret. */
int tls_pem_load(tls_pem *t, const char *cert_path, const char *key_path, char *err,
                 size_t errlen);

/* Zeroes the key and frees both; t is empty after. An empty t is a no-op. */
void tls_pem_free(tls_pem *t);

/* The secret a server's session tickets are sealed with (made at random,
 * never written anywhere; GnuTLS rotates what it derives from it), so that a
 * client reconnecting to the same replica resumes its session instead of a
 * full handshake. */
typedef struct tls_tickets tls_tickets;

/* A new secret, or NULL when out of memory. */
tls_tickets *tls_tickets_new(void);

/* Lets session (a gnutls_session_t, before its handshake) issue and take
 * tickets sealed with t. Any thread. */
void tls_tickets_enable(const tls_tickets *t, void *session);

/* Zeroes and frees the secret. NULL is a no-op. */
void tls_tickets_free(tls_tickets *t);

#endif
