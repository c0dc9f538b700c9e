/* proxies.c - --trusted-proxies' networks and the X-Forwarded-For walk
 * that names the client behind them (proxies.h). */
#include "server/proxies.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

const char *const proxies_source_names[] = {"peer", "forwarded", "ignored", NULL};

static int blank(char c) { return c == ' ' || c == '\t'; }

/* s[0..*len) without its blanks at both ends. */
static const char *trim(const char *s, size_t *len)
{
    while (*len && blank(s[0]))
        s++, (*len)--;
    while (*len && blank(s[*len - 1]))
        (*len)--;
    return s;
}

/* One entry of the list, "a.b.c.d" or "a.b.c.d/n", into p's slot i. */
static int parse_network(proxies *p, int i, const char *e, size_t len)
{
    char buf[32];
    if (len == 0 || len >= sizeof(buf))
        return -1;
    memcpy(buf, e, len);
    buf[len] = '\0';
    int bits = 32;
    char *slash = strchr(buf, '/');
    if (slash) {
        char *end;
        long v = strtol(slash + 1, &end, 10);
        if (slash[1] < '0' || slash[1] > '9' || *end != '\0' || v < 0 || v > 32)
            return -1;
        bits = (int)v;
        *slash = '\0';
    }
    struct in_addr in;
    if (inet_pton(AF_INET, buf, &in) != 1)
        return -1;
    uint32_t mask = bits ? ~(uint32_t)0 << (32 - bits) : 0;
    uint32_t net = ntohl(in.s_addr);
    if (net & ~mask)
        return -1; /* host bits set past the prefix */
    p->net[i] = net, p->mask[i] = mask;
    return 0;
}

int proxies_parse(proxies *p, const char *list, char *err, size_t errlen)
{
    memset(p, 0, sizeof(*p));
    if (list == NULL || *list == '\0')
        return 0;
    for (const char *s = list;;) {
        const char *comma = strchr(s, ',');
        size_t len = comma ? (size_t)(comma - s) : strlen(s);
        const char *e = trim(s, &len);
        if (p->n == PROXIES_MAX) {
            snprintf(err, errlen, "--trusted-proxies: more than %d networks", PROXIES_MAX);
            return -1;
        }
        if (parse_network(p, p->n, e, len) != 0) {
            snprintf(err, errlen, "--trusted-proxies: bad entry '%.*s' (want an IPv4 address "
                     "a.b.c.d or a network a.b.c.d/n, n 0..32, with no bits set past n)",
                     (int)(len > 64 ? 64 : len), e);
            memset(p, 0, sizeof(*p));
            return -1;
        }
        p->n++;
        if (comma == NULL)
            return 0;
        s = comma + 1;
    }
}

int proxies_trusts(const proxies *p, const proxies_addr *a)
{
    if (a->family != 4)
        return 0;
    uint32_t v = (uint32_t)a->bytes[0] << 24 | (uint32_t)a->bytes[1] << 16 |
                 (uint32_t)a->bytes[2] << 8 | a->bytes[3];
    for (int i = 0; i < p->n; i++)
        if ((v & p->mask[i]) == p->net[i])
            return 1;
    return 0;
}

/* a from 16 IPv6 bytes: a mapped IPv4 address is the IPv4 one. */
static void from_v6(proxies_addr *a, const unsigned char *b)
{
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    memset(a, 0, sizeof(*a));
    if (memcmp(b, mapped, sizeof(mapped)) == 0) {
        a->family = 4;
        memcpy(a->bytes, b + 12, 4);
    } else {
        a->family = 6;
        memcpy(a->bytes, b, 16);
    }
}

int proxies_addr_of(proxies_addr *a, const struct sockaddr *sa)
{
    if (sa && sa->sa_family == AF_INET) {
        memset(a, 0, sizeof(*a));
        a->family = 4;
        memcpy(a->bytes, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        return 0;
    }
    if (sa && sa->sa_family == AF_INET6) {
        from_v6(a, (const unsigned char *)&((const struct sockaddr_in6 *)sa)->sin6_addr);
        return 0;
    }
    return -1;
}

int proxies_addr_parse(proxies_addr *a, const char *text, size_t len)
{
    char buf[PROXIES_TEXT_MAX];
    unsigned char b[16];
    if (len == 0 || len >= sizeof(buf))
        return -1;
    memcpy(buf, text, len);
    buf[len] = '\0';
    if (memchr(buf, '\0', len))
        return -1;
    if (inet_pton(AF_INET, buf, b) == 1) {
        memset(a, 0, sizeof(*a));
        a->family = 4;
        memcpy(a->bytes, b, 4);
        return 0;
    }
    if (inet_pton(AF_INET6, buf, b) == 1) {
        from_v6(a, b);
        return 0;
    }
    return -1;
}

const char *proxies_addr_text(const proxies_addr *a, char *out)
{
    if (inet_ntop(a->family == 6 ? AF_INET6 : AF_INET, a->bytes, out, PROXIES_TEXT_MAX) == NULL)
        snprintf(out, PROXIES_TEXT_MAX, "-");
    return out;
}

/* Where the walk is: the client so far, and whether it goes on. */
struct walk {
    const proxies *p;
    proxies_addr client;
    enum proxies_source source;
    int done;
};

/* Takes the hop s[0..len) (the next one leftwards), blanks around it. */
static void step(struct walk *w, const char *s, size_t len)
{
    proxies_addr hop;
    s = trim(s, &len);
    if (len == 0)
        return; /* an empty element */
    if (proxies_addr_parse(&hop, s, len) != 0) {
        w->done = 1; /* what is left of it can't be told from a forgery */
        return;
    }
    w->client = hop;
    w->source = PROXIES_FORWARDED;
    w->done = !proxies_trusts(w->p, &hop);
}

/* Walks one line's hops from the right. */
static void walk_line(struct walk *w, const char *line)
{
    size_t end = strlen(line);
    while (!w->done) {
        size_t start = end;
        while (start > 0 && line[start - 1] != ',')
            start--;
        step(w, line + start, end - start);
        if (start == 0)
            return;
        end = start - 1; /* before the comma */
    }
}

enum proxies_source proxies_client(const proxies *p, const proxies_addr *peer,
                                   const char *const *lines, int nlines, int dropped,
                                   proxies_addr *client)
{
    *client = *peer;
    if (!proxies_trusts(p, peer))
        return nlines > 0 || dropped > 0 ? PROXIES_IGNORED : PROXIES_PEER;
    struct walk w = {p, *peer, PROXIES_PEER, 0};
    for (int i = nlines - 1; i >= 0 && !w.done; i--)
        walk_line(&w, lines[i] ? lines[i] : "");
    /* every hop trusted: the leftmost, the walk's last; dropped lines end it too */
    *client = w.client;
    return w.source;
}
