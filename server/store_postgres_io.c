/* store_postgres_io.c - every exchange with PostgreSQL bounded by a deadline
 * of our own: libpq's non-blocking connect and queries, each wait a poll()
 * on the session's socket. libpq's blocking calls wait as long as TCP does
 * (minutes on a network that drops packets, for ever behind a stalled
 * server), and statement_timeout only bounds a server that still runs.
 * Beneath the backend's sessions (store_postgres_session.c): libpq only. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
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

PGconn *pg_io_connect(const char *const *keys, const char *const *values, int64_t deadline,
                      int *timed_out)
{
    *timed_out = 0;
    PGconn *pg = PQconnectStartParams(keys, values, 1);
    if (pg == NULL)
        return NULL;
    /* a refusal's message then carries its SQLSTATE (pg_io_refused) */
    PQsetErrorVerbosity(pg, PQERRORS_VERBOSE);
    /* libpq's loop: start as if the last poll said WRITING */
    PostgresPollingStatusType st = PGRES_POLLING_WRITING;
    while (PQstatus(pg) != CONNECTION_BAD && st != PGRES_POLLING_OK &&
           st != PGRES_POLLING_FAILED) {
        int r = ready(pg, st == PGRES_POLLING_READING ? POLLIN : POLLOUT, deadline);
        if (r == 0)
            *timed_out = 1;
        if (r <= 0)
            break;
        st = PQconnectPoll(pg);
    }
    PQsetErrorVerbosity(pg, PQERRORS_DEFAULT);
    if (!*timed_out && PQstatus(pg) == CONNECTION_OK && PQsetnonblocking(pg, 1) != 0)
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
