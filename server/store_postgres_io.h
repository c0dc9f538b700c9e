/* store_postgres_io.h - the PostgreSQL backend's lowest layer
 * (store_postgres_io.c): libpq's exchanges, each bounded by a deadline of
 * our own. libpq only: it names nothing of the store. */
#ifndef STORE_POSTGRES_IO_H
#define STORE_POSTGRES_IO_H

#include <libpq-fe.h>
#include <stddef.h>
#include <stdint.h>

/* Monotonic milliseconds: the clock deadlines are on. */
int64_t pg_now_ms(void);

/* Connects (keys and values as PQconnectdbParams takes them, dbname
 * expanded) by libpq's non-blocking calls. libpq walks the hosts of a
 * conninfo that names several (host=a,b) as psql does, target_session_attrs
 * and all, but each host gets a bound of its own: connect_timeout when the
 * conninfo sets one (seconds, at least 2, as libpq reads it), else ms
 * shared among the hosts, at least min_ms; the whole connect takes at
 * most that times the number of hosts (only a host name's lookup, in libpq, may outlast it). A host
 * that gives no answer in its bound is left out and the walk starts again
 * on the others, those after it first. The hosts left so are named in
 * stalled (size bytes; "" when none): waiting may mend the failure then.
 * Returns the connection, in non-blocking mode when CONNECTION_OK, else
 * failed (PQerrorMessage says why for the hosts tried last); NULL when out
 * of memory. PQfinish it in every case. */
PGconn *pg_io_connect(const char *const *keys, const char *const *values, int ms, int min_ms,
                      char *stalled, size_t size);

/* A failed connect's message: takes the SQLSTATEs the connect's refusals
 * carry out of msg (FATAL:  28P01: password... becomes FATAL:  password...),
 * and returns 1 when the server refused us in a way waiting can't mend
 * (authentication, no such database, no right to connect), 0 otherwise
 * (unreachable, starting up, shutting down, too many connections). */
int pg_io_refused(char *msg);

/* The answer to what PQsend* just queued on pg (non-blocking), read until
 * deadline at most: the first failed result, else the last one (PQclear
 * it); NULL when the connection failed, or with *timed_out set when no
 * whole answer came in time - the session is then out of step: drop it. */
PGresult *pg_io_await(PGconn *pg, int64_t deadline, int *timed_out);

#endif
