/* proxies.h - who the client is when stockd sits behind a proxy: the
 * networks of --trusted-proxies, and the walk of X-Forwarded-For that names
 * the client of a request a trusted proxy passed on. Pure code (no sockets,
 * no threads, no allocation): http.c feeds it the peer and the header's lines. */
#ifndef PROXIES_H
#define PROXIES_H

#include <stddef.h>
#include <stdint.h>

struct sockaddr;

#define PROXIES_MAX 64        /* networks in --trusted-proxies */
#define PROXIES_LINES_MAX 16  /* X-Forwarded-For lines walked: the last ones */
#define PROXIES_TEXT_MAX 46   /* an address as text, its NUL included (INET6_ADDRSTRLEN) */

/* --trusted-proxies: IPv4 networks, host order. n = 0 trusts nobody. */
typedef struct proxies {
    int n;
    uint32_t net[PROXIES_MAX], mask[PROXIES_MAX];
} proxies;

/* A client's address: IPv4 (family 4, bytes[0..3]) or IPv6 (family 6,
 * bytes[0..15]); an IPv4-mapped IPv6 address (::ffff:a.b.c.d) is kept as
 * the IPv4 one it is. Unused bytes are 0, so two equal addresses compare
 * equal byte for byte (a key for counting). */
typedef struct proxies_addr {
    unsigned char family;
    unsigned char bytes[16];
} proxies_addr;

/* Where a request's client address came from. */
enum proxies_source {
    PROXIES_PEER,      /* the connection's peer: no header, or the proxy itself */
    PROXIES_FORWARDED, /* X-Forwarded-For, sent by a trusted peer */
    PROXIES_IGNORED,   /* the peer: it sent X-Forwarded-For but is not trusted */
    PROXIES_SOURCE_COUNT
};

/* "peer", "forwarded", "ignored": indexed by enum proxies_source. */
extern const char *const proxies_source_names[];

/* Parses list, "a.b.c.d[/n][,...]" (blanks around entries allowed; a bare
 * address is /32) into p. NULL or "" is no network (trust nobody). Returns 0,
 * or -1 with err naming the bad entry: not an IPv4 address, a prefix outside
 * 0..32, bits set past the prefix (10.0.0.1/8: a typo for /32 or for
 * 10.0.0.0/8, not guessed), an empty entry, or more than PROXIES_MAX. */
int proxies_parse(proxies *p, const char *list, char *err, size_t errlen);

/* 1 when a is inside one of p's networks (an IPv6 address never is). */
int proxies_trusts(const proxies *p, const proxies_addr *a);

/* a from a socket address: 0, or -1 (a unset) when sa is neither IPv4 nor IPv6. */
int proxies_addr_of(proxies_addr *a, const struct sockaddr *sa);

/* a from text: one address, IPv4 dotted or IPv6, nothing else (no port,
 * no brackets, no blanks). 0, or -1 when it is not one. */
int proxies_addr_parse(proxies_addr *a, const char *text, size_t len);

/* a as text into out (PROXIES_TEXT_MAX bytes); returns out. */
const char *proxies_addr_text(const proxies_addr *a, char *out);

/* The client of a request from peer that came with nlines X-Forwarded-For
 * lines (lines[0] the first in the request; earlier lines dropped before
 * them, when there were more than the caller keeps), in *client.
 *
 * From a peer p does not trust: the peer, PROXIES_IGNORED when it sent the
 * header, else PROXIES_PEER. From a trusted peer, the hops of the lines
 * joined in order are walked from the right: the first one not trusted is
 * the client; when every hop is trusted, the leftmost. A hop that is not an
 * address (a port, "unknown", a name) stops the walk, as does reaching
 * dropped lines: the client is then the hop right of it (maybe the peer).
 * Empty elements ("a, ,b") are skipped, as HTTP's list syntax allows.
 * PROXIES_FORWARDED when the client is a hop, else PROXIES_PEER. IPv6 hops
 * are addresses like any other (never trusted: the list is IPv4). */
enum proxies_source proxies_client(const proxies *p, const proxies_addr *peer,
                                   const char *const *lines, int nlines, int dropped,
                                   proxies_addr *client);

#endif
