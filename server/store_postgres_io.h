/* store_postgres_io.h - the PostgreSQL backend's lowest layer
 * (store_postgres_io.c): libpq's exchanges, each bounded by a deadline of
 * our own. libpq only: it names nothing of the store. */
#ifndef STORE_POSTGRES_IO_H
#define STORE_POSTGRES_IO_H

#include <libpq-fe.h>
#include <stdint.h>

/* Monotonic milliseconds: the clock deadlines are on. */
int64_t pg_now_ms(void);

/* Connects (keys and values as PQconnectdbParams takes them, dbname
 * expanded) by libpq's non-blocking calls, waiting for the server until
 * deadline at most (only a host name's lookup, in libpq, may outlast it).
 * Returns the connection, in non-blocking mode when CONNECTION_OK, else
 * failed (PQerrorMessage says why) and *timed_out set when the deadline
 * passed; NULL when out of memory. PQfinish it in every case. */
PGconn *pg_io_connect(const char *const *keys, const char *const *values, int64_t deadline,
                      int *timed_out);

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
