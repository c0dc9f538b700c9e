/* reaper.h - deadlines for HTTP connections that send too slowly. One
 * thread per server as a connection goes through its phases:
 *
 *   waiting for a request (after accept, or after the previous answer): its
 *       request line must arrive within idle_ms;
 *   request line in: headers and body must be complete within request_ms;
 *   handling and answering: no deadline here (the lock's wait and the
 *       work bound it).
 *
 * A connection past its deadline is shut down (shutdown(2), not close: the
 * server's own thread notices and closes it). This bounds what a client
 * trickling bytes can hold, since libmicrohttpd's idle timeout restarts with
 * every byte. Thread-safe; every call but start/stop is made from the
 * connection's own thread. */
#ifndef REAPER_H
#define REAPER_H

#include <stdint.h>

typedef struct reaper reaper;
typedef struct reaper_conn reaper_conn;

/* Starts the thread. NULL when out of memory or threads. */
reaper *reaper_start(int idle_ms, int request_ms);

/* Stops and joins the thread; connections still known are forgotten. NULL is
 * a no-op. */
void reaper_stop(reaper *r);

/* A connection on socket fd was accepted: its request line is due within
 * idle_ms. Returns its state (NULL when out of memory: no deadline then). */
reaper_conn *reaper_conn_started(reaper *r, int fd);

/* Its request line arrived: headers and body are due within request_ms. */
void reaper_request_line(reaper_conn *c);

/* Its request was read whole: no deadline while it is handled. */
void reaper_request_read(reaper_conn *c);

/* Its answer was sent: the next request line is due within idle_ms. */
void reaper_request_done(reaper_conn *c);

/* The connection is closing (before its socket is closed): forgets and
 * frees c. NULL is a no-op. */
void reaper_conn_closed(reaper *r, reaper_conn *c);

/* Connections shut down at their deadline so far. */
uint64_t reaper_reaped(reaper *r);

#endif
