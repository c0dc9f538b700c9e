/* fields.c - a raw header block read as libmicrohttpd 0.9.75 reads it and as
 * a lenient proxy does (fields.h). The libmicrohttpd side follows its
 * src/microhttpd/connection.c (get_next_header_line, process_header_line,
 * process_broken_line, parse_connection_headers), checked against the
 * library itself by tests/it/test_framing.c. */
#include "tests/support/fields.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "server/request.h"

/* The next line of block[*at..len) into line (NUL-terminated, NULs kept
 * inside), ending at CRLF or LF, and also at a bare CR when cr_ends. Its
 * length, or -1 when no line is left. */
static long next_line(const char *block, size_t len, size_t *at, int cr_ends, char *line,
                      size_t size)
{
    if (*at >= len)
        return -1;
    size_t start = *at, end = start;
    while (end < len && block[end] != '\n' && !(block[end] == '\r' &&
                                                (cr_ends || (end + 1 < len &&
                                                             block[end + 1] == '\n'))))
        end++;
    size_t n = end - start;
    *at = end + (end < len && block[end] == '\r' && end + 1 < len && block[end + 1] == '\n'
                     ? 2
                     : 1);
    if (n >= size)
        n = size - 1; /* longer than any shape a test makes: the caller refuses it */
    memcpy(line, block + start, n);
    line[n] = '\0';
    return (long)(end - start);
}

static int blank(char c) { return c == ' ' || c == '\t'; }

int th_fields_split(const char *block, size_t len, th_field *out)
{
    char line[TH_FIELD_NAME_MAX + TH_FIELD_VALUE_MAX];
    size_t at = 0;
    int n = 0;
    long ll;
    while ((ll = next_line(block, len, &at, 0, line, sizeof(line))) >= 0) {
        if ((size_t)ll >= sizeof(line))
            return -2;
        if (n > 0 && blank(line[0])) { /* glued to the name, as process_broken_line does */
            const char *tail = line;
            while (blank(*tail))
                tail++;
            th_field *f = &out[n - 1];
            if (strlen(f->name) + strlen(tail) >= sizeof(f->name))
                return -2;
            strcat(f->name, tail);
            f->folded = 1;
            continue;
        }
        char *colon = strchr(line, ':'); /* a NUL before it hides it, as there */
        if (colon == NULL)
            return -1;
        if (n == TH_FIELDS_MAX)
            return -2;
        *colon++ = '\0';
        while (blank(*colon))
            colon++;
        if (strlen(line) >= sizeof(out->name) || strlen(colon) >= sizeof(out->value))
            return -2;
        th_field *f = &out[n++];
        strcpy(f->name, line);
        strcpy(f->value, colon);
        f->folded = 0;
    }
    return n;
}

int th_fields_check(const th_field *f, int n, int http10, char *err, size_t errlen)
{
    req_framing fr = {.http10 = http10};
    for (int i = 0; i < n; i++)
        req_framing_add(&fr, f[i].name, f[i].value, f[i].folded);
    return req_check_framing(&fr, err, errlen);
}

/* s is 1..19 digits alone (what fits 64 bits): its value in *v. */
static int digits(const char *s, size_t n, unsigned long long *v)
{
    if (n == 0 || n > 19)
        return 0;
    *v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        *v = *v * 10 + (unsigned long long)(s[i] - '0');
    }
    return 1;
}

th_framing th_fields_mhd(const th_field *f, int n)
{
    th_framing r = {TH_BODY_NONE, 0};
    for (int i = 0; i < n; i++)
        if (strcasecmp(f[i].name, "Transfer-Encoding") == 0) {
            r.body = strcasecmp(f[i].value, "chunked") == 0 ? TH_BODY_CHUNKED : TH_BODY_TO_CLOSE;
            return r;
        }
    for (int i = 0; i < n; i++)
        if (strcasecmp(f[i].name, "Content-Length") == 0) {
            r.body = digits(f[i].value, strlen(f[i].value), &r.length) ? TH_BODY_LENGTH
                                                                      : TH_BODY_REFUSED;
            return r;
        }
    return r;
}

/* s[0..n) without its blanks at both ends. */
static void trim(const char **s, size_t *n)
{
    while (*n && blank(**s))
        (*s)++, (*n)--;
    while (*n && blank((*s)[*n - 1]))
        (*n)--;
}

/* The proxy's reading of one field into its state. */
struct proxy {
    int te, cl; /* fields */
    int codings, last_chunked, lengths, bad_length;
    unsigned long long length;
};

static void proxy_field(struct proxy *p, const char *name, size_t nlen, const char *value)
{
    int te = nlen == 17 && strncasecmp(name, "Transfer-Encoding", 17) == 0;
    int cl = nlen == 14 && strncasecmp(name, "Content-Length", 14) == 0;
    p->te += te, p->cl += cl;
    for (const char *v = value; (te || cl) && *v;) {
        size_t n = strcspn(v, ","), k = n;
        const char *e = v;
        trim(&e, &k);
        unsigned long long x = 0;
        if (k && te) {
            p->codings++;
            p->last_chunked = k == 7 && strncasecmp(e, "chunked", 7) == 0;
        } else if (k && cl) {
            if (!digits(e, k, &x) || (p->lengths++ && x != p->length))
                p->bad_length = 1;
            p->length = x;
        }
        v += n + (v[n] == ',');
    }
}

th_framing th_fields_proxy(const char *block, size_t len)
{
    char line[TH_FIELD_NAME_MAX + TH_FIELD_VALUE_MAX], name[TH_FIELD_NAME_MAX] = "";
    char value[2 * TH_FIELD_VALUE_MAX] = "";
    struct proxy p = {0};
    size_t at = 0;
    long ll;
    th_framing r = {TH_BODY_REFUSED, 0};
    if (memchr(block, '\0', len))
        return r; /* RFC 9110 5.5: refused, or replaced by a blank */
    while ((ll = next_line(block, len, &at, 1, line, sizeof(line))) >= 0) {
        if (blank(line[0]) && name[0]) { /* obs-fold: one SP and the rest of the value */
            if (strlen(value) + strlen(line) + 1 >= sizeof(value))
                return r;
            strcat(value, " ");
            strcat(value, line);
            continue;
        }
        if (name[0])
            proxy_field(&p, name, strlen(name), value);
        char *colon = strchr(line, ':');
        if (colon == NULL)
            return r;
        const char *nm = line, *v = colon + 1;
        size_t nlen = (size_t)(colon - line), vlen = strlen(v);
        trim(&nm, &nlen);
        trim(&v, &vlen);
        if (nlen == 0 || nlen >= sizeof(name) || vlen >= sizeof(value))
            return r;
        memcpy(name, nm, nlen), name[nlen] = '\0';
        memcpy(value, v, vlen), value[vlen] = '\0';
    }
    if (name[0])
        proxy_field(&p, name, strlen(name), value);
    if (p.te) {
        r.body = p.codings && p.last_chunked ? TH_BODY_CHUNKED : TH_BODY_REFUSED;
    } else if (p.cl) {
        r.body = p.lengths && !p.bad_length ? TH_BODY_LENGTH : TH_BODY_REFUSED;
        r.length = p.length;
    } else {
        r.body = TH_BODY_NONE;
    }
    return r;
}
