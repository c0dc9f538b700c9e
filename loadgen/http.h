/* http.h - the HTTP/1.1 wire format of loadgen's client: a target URL
 * resolved once into socket addresses and a Host header, request heads
 * formatted once per connection, and answers parsed as they arrive by
 * Debian's http_parser (the parser wrk uses), whether their body has a
 * Content-Length, is chunked or ends with the connection.
 *
 * Thread safety: an lg_http_resp belongs to one thread; the other calls are
 * reentrant. */
#ifndef LG_HTTP_H
#define LG_HTTP_H

#include <stddef.h>
#include <sys/socket.h>

#include <http_parser.h>

#include "loadgen/err.h"
#include "loadgen/opts.h"

#define LG_HTTP_ADDRS 4 /* addresses kept per host (IPv4 and IPv6 of a name, say) */

/* Room for any head lg_http_head formats from an lg_target and a path of at
 * most LG_PATH_MAX, with lg_http_head_end's digits. */
#define LG_HTTP_HEAD_MAX (LG_URL_MAX + LG_PATH_MAX + LG_TOKEN_MAX + 160)

/* Where to connect, and what to name in the Host header. */
typedef struct lg_http_addr {
    int n; /* addresses, tried in order */
    struct sockaddr_storage sa[LG_HTTP_ADDRS];
    socklen_t salen[LG_HTTP_ADDRS];
    char host[LG_URL_MAX]; /* "host:port" as the URL wrote it */
    char name[LG_URL_MAX]; /* the host alone (no port, no brackets): what TLS verifies */
    int tls;               /* an https:// URL: connections speak TLS (tls.h) */
} lg_http_addr;

/* The length of url's scheme, "http://" (7) or "https://" (8), or 0 for
 * any other. */
size_t lg_http_scheme(const char *url);

/* Splits url, "http[s]://host[:port][/path]" (host may be "[v6]"; the port
 * defaults to 80, or 443 for https), and resolves
 * host with getaddrinfo (blocking). *path gets the part of url from the first
 * '/' after the host ("" when none); path may be NULL. Returns 0, LG_ERR_USAGE
 * (not such a URL) or LG_ERR_TRANSPORT (the name does not resolve), with err
 * naming the URL. */
int lg_http_resolve(const char *url, lg_http_addr *a, const char **path, lg_err *err);

/* Makes every head lg_http_head formats from now on carry
 * "Authorization: Bearer token" (a checked b64token of at most LG_TOKEN_MAX
 * characters; "" for none). The process's one setting: call it before any
 * thread starts (forked processes inherit it). */
void lg_http_set_token(const char *token);

/* Formats the head of a request into buf: request line and Host (and the
 * token of lg_http_set_token), then, when
 * with_body, "Content-Type: application/json" and "Content-Length: " for
 * lg_http_head_end to complete; without a body the head is complete. Returns
 * its length, or -1 when it does not fit in size. */
int lg_http_head(char *buf, size_t size, const char *method, const char *path, const char *host,
                 int with_body);

/* Writes body_len's digits and the blank line that ends a head at p, which
 * needs 24 bytes of room. Returns the bytes written. */
size_t lg_http_head_end(char *p, size_t body_len);

/* lg_http_head with extra header lines after the token's (extra: "" or
 * "Name: value\r\n" lines, as an --api profile gives them) and, with a body,
 * "Content-Type: application/json" only when json is 1 (else extra names the
 * type). Returns the length, or -1 when it does not fit. */
int lg_http_head_with(char *buf, size_t size, const char *method, const char *path,
                      const char *host, const char *extra, int with_body, int json);

/* One answer being read. The body is kept up to max bytes (always followed by
 * a NUL); beyond, the rest is counted but dropped and truncated is set. */
typedef struct lg_http_resp {
    http_parser parser;
    int status;       /* the final status code, once done */
    int done;         /* 1 once the whole answer is in */
    int keep_alive;   /* once done: the connection may carry another request */
    int head;         /* set by the caller: the answer to a HEAD has no body */
    int truncated;    /* the body outgrew max */
    size_t got;       /* bytes of the answer received so far */
    char *body;       /* NULL until a body byte arrives; owned by the resp */
    size_t len, cap, max;
    int keep_headers; /* fill retry_after and content_type */
    int in_value;     /* header parsing: the last callback was a value */
    int header;       /* which kept header the current value belongs to, 0 none */
    char field[16];   /* the current header name, cut at 15 bytes */
    char retry_after[16], content_type[64]; /* "" when absent */
    char why[120];    /* what was wrong, after lg_http_feed returned -1 */
} lg_http_resp;

/* Sets r up for answers of bodies up to max bytes; keep_headers as above.
 * Allocates nothing. */
void lg_http_resp_init(lg_http_resp *r, size_t max, int keep_headers);

/* Readies r for the next answer; the body buffer is kept for reuse. */
void lg_http_resp_reset(lg_http_resp *r);

/* Frees r's body buffer. */
void lg_http_resp_free(lg_http_resp *r);

/* Feeds n received bytes into the answer; n == 0 says the connection closed.
 * Returns 1 when the answer is complete (*used: bytes of data it took; the
 * rest does not belong to it), 0 when more is needed, and -1 when the bytes
 * are no valid HTTP answer or the connection closed before its end (why
 * says which). Interim 1xx answers are skipped. */
int lg_http_feed(lg_http_resp *r, const char *data, size_t n, size_t *used);

#endif
