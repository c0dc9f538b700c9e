/* evloop.h - one epoll instance: the event-driven core of a load thread (and
 * of each blocking call in api.c). It knows nothing of HTTP; connections
 * (conn.h) register their sockets with a tag and get it back with the events.
 *
 * Thread safety: none; one loop per thread, used only by that thread. */
#ifndef LG_EVLOOP_H
#define LG_EVLOOP_H

#include <stdint.h>

#include "loadgen/err.h"

typedef struct lg_evloop lg_evloop;

/* What a socket waits for (lg_evloop_watch) or what happened to it. */
#define LG_EV_READ 1u
#define LG_EV_WRITE 2u
#define LG_EV_ERROR 4u /* an error or hang-up: only ever reported, never asked for */

typedef struct lg_event {
    void *tag;       /* as given to lg_evloop_watch */
    unsigned events; /* LG_EV_* */
} lg_event;

/* A new loop. Returns 0 with *out set, or LG_ERR_SYS / LG_ERR_NOMEM with *out
 * NULL and err filled. */
int lg_evloop_new(lg_evloop **out, lg_err *err);

/* Closes the loop; the sockets it watched stay open. NULL is a no-op. */
void lg_evloop_free(lg_evloop *l);

/* Starts (old == 0), changes or stops (events == 0) watching fd for events
 * (LG_EV_READ | LG_EV_WRITE), reporting tag with them. old is what was asked
 * before, so the caller, who knows it, spares the kernel a failing call.
 * Returns 0 or -1 with errno set. */
int lg_evloop_watch(lg_evloop *l, int fd, unsigned old, unsigned events, void *tag);

/* Waits until an event or until wake (CLOCK_MONOTONIC ns; at once when past),
 * fills up to max events and returns how many (0 on time-out or EINTR). */
int lg_evloop_wait(lg_evloop *l, int64_t wake, lg_event *ev, int max);

/* CLOCK_MONOTONIC in nanoseconds. */
int64_t lg_now_ns(void);

#endif
