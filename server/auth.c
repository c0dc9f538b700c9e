/* auth.c - the API tokens of --api-tokens-file: parsing the file into
 * SHA-256 digests, checking a bearer token in constant time, and the swap
 * of a reload (a pointer under a read-write lock, held by a check for a few
 * microseconds, by a reload only for the swap). */
#include "server/auth.h"

#include <ctype.h>
#include <errno.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server/rules.h"

#define DIGEST_LEN 32 /* SHA-256 */
#define SHA256_PREFIX "sha256:"

struct auth_entry {
    enum route_role role;
    unsigned char digest[DIGEST_LEN];
    char name[RULE_TOKEN_NAME_MAX + 1];
};

/* One reading of the file: never changed once made. */
struct auth_table {
    int count[ROUTE_ROLE_COUNT];
    int closed[ROUTE_ROLE_COUNT];
    size_t n, cap;
    struct auth_entry *e;
};

struct auth {
    char *path;
    pthread_rwlock_t rw; /* guards t: read by checks, written by a reload's swap */
    struct auth_table *t;
};

static void table_free(struct auth_table *t)
{
    if (t) {
        if (t->e) /* NULL for a file without a token: explicit_bzero wants a buffer */
            explicit_bzero(t->e, t->cap * sizeof(*t->e));
        free(t->e);
        free(t);
    }
}

static int sha256(const char *s, size_t len, unsigned char *out)
{
    return gnutls_hash_fast(GNUTLS_DIG_SHA256, s, len, out) == 0 ? 0 : -1;
}

static int hexval(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                       : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* RFC 6750's b64token: letters, digits, -._~+/ then any '='. */
static int is_b64token(const char *s, size_t len)
{
    size_t i = 0;
    while (i < len && (isalnum((unsigned char)s[i]) || strchr("-._~+/", s[i])))
        i++;
    if (i == 0)
        return 0;
    while (i < len && s[i] == '=')
        i++;
    return i == len;
}

static int is_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > RULE_TOKEN_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && !strchr("._@:-", s[i]))
            return 0;
    return 1;
}

/* TOKEN of a line into its digest; errors never show the token. */
static int token_digest(const char *tok, unsigned char *out, char *err, size_t errlen)
{
    size_t len = strlen(tok), plen = strlen(SHA256_PREFIX);
    if (strncmp(tok, SHA256_PREFIX, plen) == 0) {
        if (len - plen != 2 * DIGEST_LEN) {
            snprintf(err, errlen, "a sha256: token wants 64 hex digits");
            return -1;
        }
        for (int i = 0; i < DIGEST_LEN; i++) {
            int hi = hexval(tok[plen + 2 * i]), lo = hexval(tok[plen + 2 * i + 1]);
            if (hi < 0 || lo < 0) {
                snprintf(err, errlen, "a sha256: token wants 64 hex digits");
                return -1;
            }
            out[i] = (unsigned char)(hi << 4 | lo);
        }
        return 0;
    }
    if (len < AUTH_TOKEN_MIN || len > AUTH_TOKEN_MAX || !is_b64token(tok, len)) {
        snprintf(err, errlen, "a token wants %d..%d characters of A-Z a-z 0-9 -._~+/ (then "
                 "any =), or sha256:HEX", AUTH_TOKEN_MIN, AUTH_TOKEN_MAX);
        return -1;
    }
    if (sha256(tok, len, out) != 0) {
        snprintf(err, errlen, "cannot hash a token (GnuTLS)");
        return -1;
    }
    return 0;
}

/* One line, cut at its comment, into t (blank lines add nothing). */
static int parse_line(struct auth_table *t, char *line, char *err, size_t errlen)
{
    char *hash = strchr(line, '#'), *save = NULL;
    if (hash)
        *hash = '\0';
    const char *f[4];
    int nf = 0;
    for (char *w = strtok_r(line, " \t\r", &save); w && nf < 4; w = strtok_r(NULL, " \t\r", &save))
        f[nf++] = w;
    if (nf == 0)
        return 0;
    if (nf != 3) {
        snprintf(err, errlen, "want ROLE NAME TOKEN");
        return -1;
    }
    struct auth_entry e = {0};
    for (e.role = ROUTE_ROLE_BUYER; e.role < ROUTE_ROLE_COUNT; e.role++)
        if (strcmp(f[0], route_role_name(e.role)) == 0)
            break;
    if (e.role == ROUTE_ROLE_COUNT || !is_name(f[1])) {
        snprintf(err, errlen, e.role == ROUTE_ROLE_COUNT ? "a role is buyer, operator or scrape"
                 : "a name wants 1..%d characters of A-Z a-z 0-9 ._@:-", RULE_TOKEN_NAME_MAX);
        return -1;
    }
    snprintf(e.name, sizeof(e.name), "%s", f[1]);
    if (token_digest(f[2], e.digest, err, errlen) != 0)
        return -1;
    for (size_t i = 0; i < t->n; i++)
        if (memcmp(t->e[i].digest, e.digest, DIGEST_LEN) == 0) {
            snprintf(err, errlen, "the same token as %s's", t->e[i].name);
            return -1;
        }
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 8;
        struct auth_entry *grown = calloc(cap, sizeof(*grown));
        if (grown == NULL) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        if (t->n)
            memcpy(grown, t->e, t->n * sizeof(*grown));
        if (t->e) /* NULL at the first line: explicit_bzero wants a buffer */
            explicit_bzero(t->e, t->cap * sizeof(*t->e));
        free(t->e);
        t->e = grown, t->cap = cap;
    }
    t->e[t->n++] = e;
    t->count[e.role]++;
    return 0;
}

/* The file's text: malloc'd and NUL-terminated, or NULL with err set. */
static char *read_all(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    char *buf = f ? malloc(AUTH_FILE_MAX + 1) : NULL;
    size_t n = buf ? fread(buf, 1, AUTH_FILE_MAX + 1, f) : 0;
    int failed = f == NULL || buf == NULL || ferror(f);
    if (failed)
        snprintf(err, errlen, "%s: %s", path, strerror(f && buf ? EIO : f ? ENOMEM : errno));
    else if (n > AUTH_FILE_MAX)
        snprintf(err, errlen, "%s: longer than %d bytes", path, AUTH_FILE_MAX);
    if (f)
        fclose(f);
    if (failed || n > AUTH_FILE_MAX) {
        if (buf)
            explicit_bzero(buf, n);
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

/* Reads path into a new table; NULL with err set ("path:line: ..."). */
static struct auth_table *table_read(const char *path, char *err, size_t errlen)
{
    char *text = read_all(path, err, errlen), why[160];
    struct auth_table *t = text ? calloc(1, sizeof(*t)) : NULL;
    if (t == NULL) {
        if (text)
            snprintf(err, errlen, "out of memory");
        free(text);
        return NULL;
    }
    size_t size = strlen(text);
    int lineno = 0, rc = 0;
    /* strtok_r would skip blank lines and so miscount: split by hand */
    for (char *line = text, *next; line && rc == 0; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        lineno++;
        if ((rc = parse_line(t, line, why, sizeof(why))) != 0)
            snprintf(err, errlen, "%s:%d: %s", path, lineno, why);
    }
    explicit_bzero(text, size);
    free(text);
    if (rc != 0) {
        table_free(t);
        return NULL;
    }
    t->closed[ROUTE_ROLE_OPERATOR] = 1; /* a file never leaves the catalog open */
    t->closed[ROUTE_ROLE_BUYER] = t->count[ROUTE_ROLE_BUYER] > 0;
    t->closed[ROUTE_ROLE_SCRAPE] = t->count[ROUTE_ROLE_SCRAPE] > 0;
    return t;
}

int auth_open(const char *path, auth **out, char *err, size_t errlen)
{
    *out = NULL;
    auth *a = calloc(1, sizeof(*a));
    if (a == NULL || (a->path = strdup(path)) == NULL) {
        free(a);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if ((a->t = table_read(path, err, errlen)) == NULL) {
        free(a->path);
        free(a);
        return -1;
    }
    pthread_rwlockattr_t attr; /* a reload must not wait behind a stream of checks */
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&a->rw, &attr);
    pthread_rwlockattr_destroy(&attr);
    *out = a;
    return 0;
}

int auth_reload(auth *a, char *err, size_t errlen)
{
    struct auth_table *t = table_read(a->path, err, errlen), *old;
    if (t == NULL)
        return -1;
    pthread_rwlock_wrlock(&a->rw);
    old = a->t;
    a->t = t;
    pthread_rwlock_unlock(&a->rw);
    table_free(old); /* no check can hold it: they hold the read lock while they look */
    return 0;
}

/* The bearer token of an Authorization value (RFC 6750 2.1: the scheme in
 * any case, then spaces), its length in *len; NULL when there is none. */
static const char *bearer(const char *v, size_t *len)
{
    if (v == NULL || strncasecmp(v, "Bearer ", 7) != 0)
        return NULL;
    v += 7;
    v += strspn(v, " ");
    size_t n = strlen(v);
    while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t'))
        n--;
    *len = n;
    return n > 0 && n <= AUTH_TOKEN_MAX ? v : NULL;
}

/* Whether a token of role `has` may ask for a route that needs `need`. */
static int role_covers(enum route_role has, enum route_role need)
{
    return has == need || (has == ROUTE_ROLE_OPERATOR && need == ROUTE_ROLE_BUYER);
}

/* The entry whose digest is d, looked for through every entry, each compared
 * whole (gnutls_memcmp): the time says nothing of how near a guess came. */
static const struct auth_entry *find(const struct auth_table *t, const unsigned char *d)
{
    const struct auth_entry *found = NULL;
    for (size_t i = 0; i < t->n; i++)
        if (gnutls_memcmp(t->e[i].digest, d, DIGEST_LEN) == 0)
            found = &t->e[i];
    return found;
}

enum auth_verdict auth_check(auth *a, const char *authorization, enum route_role role,
                             char *name, size_t namelen)
{
    name[0] = '\0';
    if (a == NULL || role == ROUTE_ROLE_OPEN)
        return AUTH_OK;
    size_t len = 0;
    const char *tok = bearer(authorization, &len);
    unsigned char d[DIGEST_LEN]; /* hashed even for an open role: its name goes in the log */
    int hashed = tok && sha256(tok, len, d) == 0;
    pthread_rwlock_rdlock(&a->rw);
    const struct auth_table *t = a->t;
    const struct auth_entry *e = hashed ? find(t, d) : NULL;
    enum auth_verdict v = !t->closed[role] ? AUTH_OK
                          : tok == NULL    ? AUTH_NO_TOKEN
                          : e == NULL      ? AUTH_BAD_TOKEN
                          : role_covers(e->role, role) ? AUTH_OK
                                                       : AUTH_FORBIDDEN;
    if (e)
        snprintf(name, namelen, "%s", e->name);
    pthread_rwlock_unlock(&a->rw);
    return v;
}

void auth_describe(auth *a, int *count, int *closed)
{
    pthread_rwlock_rdlock(&a->rw);
    memcpy(count, a->t->count, sizeof(a->t->count));
    memcpy(closed, a->t->closed, sizeof(a->t->closed));
    pthread_rwlock_unlock(&a->rw);
}

const char *auth_path(const auth *a) { return a->path; }

void auth_free(auth *a)
{
    if (a == NULL)
        return;
    table_free(a->t);
    pthread_rwlock_destroy(&a->rw);
    free(a->path);
    free(a);
}
