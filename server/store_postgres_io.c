/* store_postgres_io.c - every exchange with PostgreSQL bounded by a deadline
 * of our own: libpq's non-blocking connect (each host of a multi-host
 * conninfo bounded on its own) and queries, each wait a poll() on the
 * session's socket. libpq's blocking calls wait as long as TCP does
 * (minutes on a network that drops packets, for ever behind a stalled
 * server), and statement_timeout only bounds a server that still runs.
 * Beneath the backend's sessions (store_postgres_session.c): libpq only. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/store_postgres_io.h"

int64_t pg_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits until pg's socket is ready for events: 1, or 0 when the deadline
 * passed first, or -1 when there is no socket. */
static int ready(PGconn *pg, short events, int64_t deadline)
{
    int fd = PQsocket(pg);
    if (fd < 0)
        return -1;
    for (;;) {
        int64_t left = deadline - pg_now_ms();
        if (left <= 0)
            return 0;
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, left > INT_MAX ? INT_MAX : (int)left);
        if (n > 0)
            return 1;
        if (n < 0 && errno != EINTR)
            return -1;
    }
}

/* ---- connects: libpq's walk over the hosts, each host bounded ---- */

/* The comma-separated lists of a conninfo's hosts (host, hostaddr, port
 * as libpq resolved them: PQconninfo), and how many hosts they name. */
struct hosts {
    const char *host, *addr, *port;
    int n;
};

static const char *opt_of(const PQconninfoOption *o, const char *key)
{
    for (; o && o->keyword; o++)
        if (strcmp(o->keyword, key) == 0)
            return o->val && o->val[0] ? o->val : NULL;
    return NULL;
}

static int entries(const char *list)
{
    int n = list ? 1 : 0;
    for (const char *p = list; p && (p = strchr(p, ',')) != NULL; p++)
        n++;
    return n;
}

/* Entry i of list (a list of one entry holds for every host), or "". */
static size_t entry(const char *list, int i, const char **at)
{
    const char *p = list ? list : "";
    for (int k = entries(list) > 1 ? i : 0; k > 0 && p; k--)
        if ((p = strchr(p, ',')) != NULL)
            p++;
    p = p ? p : "";
    *at = p;
    return strcspn(p, ",");
}

/* libpq counts the hosts as hostaddr's entries, else host's, else one. */
static struct hosts hosts_of(const PQconninfoOption *o)
{
    struct hosts h = {opt_of(o, "host"), opt_of(o, "hostaddr"), opt_of(o, "port"), 1};
    h.n = h.addr ? entries(h.addr) : h.host ? entries(h.host) : 1;
    return h;
}

/* Whether entry i is what libpq is trying: PQhost (the host, else the
 * hostaddr) and PQport, an entry left empty standing for libpq's default. */
static int is_current(const struct hosts *h, int i, const char *host, const char *port)
{
    const char *at;
    size_t len = entry(h->host, i, &at);
    if (len == 0)
        len = entry(h->addr, i, &at);
    if (len > 0 && (strlen(host) != len || strncmp(at, host, len) != 0))
        return 0;
    len = entry(h->port, i, &at);
    return len == 0 || (strlen(port) == len && strncmp(at, port, len) == 0);
}

/* Appends entry i of list to out, after a comma unless it is out's first
 * (an entry may be empty: libpq's default for that host). */
static void append(char *out, size_t size, const char *list, int i, int first)
{
    const char *at;
    size_t len = entry(list, i, &at), used = strlen(out);
    snprintf(out + used, size - used, "%s%.*s", first ? "" : ",", (int)len, at);
}

/* A host's own bound: connect_timeout, in seconds and at least 2 as
 * libpq reads it, else a share of ms, at least min_ms. */
static int host_ms(const PQconninfoOption *o, int n, int ms, int min_ms)
{
    const char *t = opt_of(o, "connect_timeout");
    long s = t ? strtol(t, NULL, 10) : 0;
    if (s > 0)
        return s < 2 ? 2000 : s > INT_MAX / 1000 ? INT_MAX : (int)s * 1000;
    return ms / n > min_ms ? ms / n : min_ms;
}

static PGconn *start(const char *const *keys, const char *const *values, int expand)
{
    PGconn *pg = PQconnectStartParams(keys, values, expand);
    if (pg) /* a refusal's message then carries its SQLSTATE (pg_io_refused) */
        PQsetErrorVerbosity(pg, PQERRORS_VERBOSE);
    return pg;
}

/* Polls pg's connect until it ends (1: connected or failed, or -1: no
 * socket) or the host libpq is on has had ms, or end passed (0: that host
 * stalled; its name and port in host and port). A host is told by PQhost
 * and PQport, which name the one being tried; a host name's several
 * addresses share its bound. */
static int walk(PGconn *pg, int ms, int64_t end, char *host, char *port, size_t size)
{
    /* libpq's loop: start as if the last poll said WRITING */
    PostgresPollingStatusType st = PGRES_POLLING_WRITING;
    int64_t since = pg_now_ms();
    int bad = PQstatus(pg) == CONNECTION_BAD; /* PQhost then names no host */
    snprintf(host, size, "%s", bad ? "" : PQhost(pg));
    snprintf(port, size, "%s", bad ? "" : PQport(pg));
    while (PQstatus(pg) != CONNECTION_BAD && st != PGRES_POLLING_OK &&
           st != PGRES_POLLING_FAILED) {
        int r = ready(pg, st == PGRES_POLLING_READING ? POLLIN : POLLOUT,
                      since + ms < end ? since + ms : end);
        if (r <= 0)
            return r;
        st = PQconnectPoll(pg);
        if (PQstatus(pg) != CONNECTION_BAD &&
            (strcmp(host, PQhost(pg)) != 0 || strcmp(port, PQport(pg)) != 0)) {
            snprintf(host, size, "%s", PQhost(pg)); /* on to the next host: its own bound */
            snprintf(port, size, "%s", PQport(pg));
            since = pg_now_ms();
        }
    }
    return 1;
}

/* A connect like pg's, every option as libpq resolved it, without the
 * hosts that are host:port: the ones after the first of them, then those
 * before it (target_session_attrs=prefer-standby's second pass may want
 * them). NULL when none is left, or host:port is none of pg's hosts. */
static PGconn *without(PGconn *pg, const char *host, const char *port)
{
    PQconninfoOption *o = PQconninfo(pg);
    struct hosts h = hosts_of(o);
    int first = 0, nkeys = 0, left = 0;
    while (first < h.n && !is_current(&h, first, host, port))
        first++;
    size_t size = (h.host ? strlen(h.host) : 0) + (h.addr ? strlen(h.addr) : 0) +
                  (h.port ? strlen(h.port) : 0) + 1;
    char *lists = calloc(3, size);
    for (const PQconninfoOption *p = o; p && p->keyword; p++)
        nkeys++;
    const char **keys = calloc((size_t)nkeys + 1, sizeof(*keys));
    const char **values = calloc((size_t)nkeys + 1, sizeof(*values));
    PGconn *next = NULL;
    if (o == NULL || lists == NULL || keys == NULL || values == NULL || first == h.n)
        goto out;
    for (int k = 1; k < h.n; k++) {
        int i = (first + k) % h.n;
        if (is_current(&h, i, host, port))
            continue;
        append(lists, size, h.host, i, left == 0);
        append(lists + size, size, h.addr, i, left == 0);
        if (entries(h.port) > 1)
            append(lists + 2 * size, size, h.port, i, left == 0);
        left++;
    }
    nkeys = 0;
    for (const PQconninfoOption *p = o; left && p->keyword; p++) {
        const char *v = p->val;
        if (strcmp(p->keyword, "host") == 0 && h.host)
            v = lists;
        else if (strcmp(p->keyword, "hostaddr") == 0 && h.addr)
            v = lists + size;
        else if (strcmp(p->keyword, "port") == 0 && h.port && entries(h.port) > 1)
            v = lists + 2 * size;
        if (v == NULL)
            continue;
        keys[nkeys] = p->keyword;
        values[nkeys++] = v;
    }
    if (left)
        next = start(keys, values, 0); /* dbname is a name by now, not a conninfo */
out:
    free(keys);
    free(values);
    free(lists);
    PQconninfoFree(o);
    return next;
}

/* A host that gave no answer within ms, in libpq's words, onto out. */
static void note_stall(char *out, size_t size, const char *host, const char *port, int ms)
{
    size_t used = strlen(out);
    snprintf(out + used, size - used, "%sconnection to server at \"%s\", port %s failed: no "
             "answer within %d ms", used ? "; " : "", host, port, ms);
}

PGconn *pg_io_connect(const char *const *keys, const char *const *values, int ms, int min_ms,
                      char *stalled, size_t size)
{
    char host[256], port[256];
    stalled[0] = '\0';
    PGconn *pg = start(keys, values, 1);
    if (pg == NULL)
        return NULL;
    PQconninfoOption *o = PQconninfo(pg);
    struct hosts h = hosts_of(o);
    int each = host_ms(o, h.n, ms, min_ms);
    PQconninfoFree(o);
    int64_t end = pg_now_ms() + (int64_t)each * h.n;
    int r;
    /* libpq ignores connect_timeout under PQconnectPoll: a host that
     * accepts and never answers would keep it there. Left, it is dropped
     * from the walk, which goes on from the host after it. */
    while ((r = walk(pg, each, end, host, port, sizeof(host))) == 0) {
        note_stall(stalled, size, host, port, each);
        PGconn *next = pg_now_ms() < end ? without(pg, host, port) : NULL;
        if (next == NULL)
            break;
        PQfinish(pg);
        pg = next;
    }
    PQsetErrorVerbosity(pg, PQERRORS_DEFAULT);
    if (r == 1 && PQstatus(pg) == CONNECTION_OK && PQsetnonblocking(pg, 1) != 0)
        PQfinish(pg), pg = NULL; /* not reachable in practice: libpq only flips a flag */
    return pg;
}

/* SQLSTATEs of a refusal that waiting can't mend: a role or password the
 * server does not take (class 28), no such database, no right to connect. */
static int refusal_is_final(const char *state)
{
    return strncmp(state, "28", 2) == 0 || strcmp(state, "3D000") == 0 ||
           strcmp(state, "42501") == 0;
}

int pg_io_refused(char *msg)
{
    int found = 0, final = 1;
    for (char *p = msg; (p = strstr(p, "FATAL:  ")) != NULL;) {
        p += 8;
        char state[6];
        int n = 0;
        while (n < 5 && (isdigit((unsigned char)p[n]) || isupper((unsigned char)p[n])))
            state[n] = p[n], n++;
        state[n] = '\0';
        if (n < 5 || strncmp(p + 5, ": ", 2) != 0)
            continue;
        found = 1;
        final = final && refusal_is_final(state);
        memmove(p, p + 7, strlen(p + 7) + 1); /* "28P01: password..." -> "password..." */
    }
    return found && final;
}

/* Sends what PQsend* queued, reading meanwhile so that a server writing to
 * us never waits for our reads: 1 sent, 0 timed out, -1 failed. */
static int flush(PGconn *pg, int64_t deadline)
{
    int f;
    while ((f = PQflush(pg)) == 1) {
        int r = ready(pg, POLLIN | POLLOUT, deadline);
        if (r <= 0)
            return r;
        if (!PQconsumeInput(pg))
            return -1;
    }
    return f == 0 ? 1 : -1;
}

PGresult *pg_io_await(PGconn *pg, int64_t deadline, int *timed_out)
{
    PGresult *keep = NULL, *r;
    int ok = flush(pg, deadline);
    *timed_out = ok == 0;
    while (ok > 0) {
        while (PQisBusy(pg)) {
            int w = ready(pg, POLLIN, deadline);
            *timed_out = w == 0;
            if (w <= 0 || !PQconsumeInput(pg))
                break;
        }
        if (*timed_out || (r = PQgetResult(pg)) == NULL)
            break;
        /* PQexec's rule: the first failure is the answer, else the last result */
        ExecStatusType st = keep ? PQresultStatus(keep) : PGRES_COMMAND_OK;
        if (st == PGRES_FATAL_ERROR || st == PGRES_BAD_RESPONSE) {
            PQclear(r);
        } else {
            PQclear(keep);
            keep = r;
        }
    }
    if (*timed_out) {
        PQclear(keep);
        return NULL;
    }
    return keep;
}
