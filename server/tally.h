/* tally.h - counts per client address (connections open, requests in
 * flight), each held under a limit: what stockd's per-address limits count
 * when libmicrohttpd's own limit can't (it sees a proxy as one client).
 * Thread-safe (one mutex: a count is a few instructions under it). */
#ifndef TALLY_H
#define TALLY_H

#include "server/proxies.h"

typedef struct tally tally;

/* An empty tally, or NULL when out of memory. */
tally *tally_new(void);

/* Frees t (NULL is a no-op); its counts are gone. */
void tally_free(tally *t);

/* Adds one to a's count unless it is at limit already (0: no limit).
 * Returns 1 when counted (give it back with tally_give), 0 when refused
 * (at the limit), -1 when out of memory (not counted). */
int tally_take(tally *t, const proxies_addr *a, int limit);

/* Takes back one that tally_take counted for a. */
void tally_give(tally *t, const proxies_addr *a);

/* a's count now. */
int tally_count(tally *t, const proxies_addr *a);

#endif
