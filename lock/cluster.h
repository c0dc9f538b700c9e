/* cluster.h - the lock over a Redis Cluster: each call goes to the primary
 * that owns its key's hash slot, as to a single server (no vote: one owner
 * per key). The slot map comes from CLUSTER SLOTS, fetched at the first
 * call, on MOVED and after a failed call (at most every REFRESH_MS); MOVED
 * also fixes the slot at once and the call is redone there, ASK sends the
 * call once to the named node after ASKING, without changing the map (a
 * script then names only its first key: node.c), and TRYAGAIN (a
 * migration half done under a script's keys) waits and redoes it, for a
 * while (cluster.c); at most DLOCK_REDIRECTS_MAX MOVED or ASK in a row. A
 * node is made for each
 * primary seen (a promoted replica included), up to DLOCK_NODES_MAX over
 * the client's life; nodes are never removed. Thread-safe.
 *
 * Every key of a script must hash to one slot, so a lock's key needs a hash
 * tag ("order:{42}"): key:fence, key:queue, ... then carry it too. A key
 * without one is refused (DLOCK_ERR_INVALID). lock/README.md, "Cluster". */
#ifndef DLOCK_CLUSTER_H
#define DLOCK_CLUSTER_H

#include <hiredis/hiredis.h>
#include <stdint.h>

#include "lock/counters.h"
#include "lock/node.h"

#define DLOCK_SLOTS 16384
#define DLOCK_REDIRECTS_MAX 5

/* CRC16 (XMODEM), as Redis Cluster hashes keys. */
uint16_t dlock__crc16(const char *buf, size_t len);

/* key's hash slot: of its hash tag (the first "{...}" with something
 * inside) or, without one, of the whole key; *tagged (may be NULL) tells. */
int dlock__slot_of(const char *key, int *tagged);

typedef struct dlock_cluster dlock_cluster;

/* A cluster reached through cfg's seed nodes (cfg->node[]), none contacted
 * yet. NULL when out of memory. */
dlock_cluster *dlock__cluster_new(const dlock_config *cfg, dlock_counters *counters);
void dlock__cluster_free(dlock_cluster *cl);

/* The nodes known so far (the seeds, then the primaries found), and node i. */
int dlock__cluster_size(const dlock_cluster *cl);
dlock_node *dlock__cluster_node(dlock_cluster *cl, int i);

/* The index of the node that owns key's slot, from the map (fetched first
 * if it has none for that slot and fetch is 1); -1 with errstr set when no
 * node is known to. With fetch 0 it sends nothing: for a caller that holds
 * a lock. */
int dlock__cluster_owner(dlock_cluster *cl, const char *key, int fetch);

/* Pings every known node (up[i]); returns how many of those owning slots
 * answered, and *owners how many own slots (at least 1). */
int dlock__cluster_ping(dlock_cluster *cl, int up[DLOCK_NODES_MAX], int *owners);

/* The calls of quorum.h, routed to the key's owner with the arguments of a
 * single server (no queue score, no seed slack): the same results as
 * dlock__node_*_end on that server, or DLOCK_ERR_INVALID for a key without a
 * hash tag, or DLOCK_ERR_REDIS when still redirected after
 * DLOCK_REDIRECTS_MAX MOVED or ASK, or answered TRYAGAIN for a command
 * timeout; an acquire answered TRYAGAIN is DLOCK_ERR_TIMEOUT at once (busy,
 * pttl unknown), so that its wait tries again. */
int dlock__cluster_acquire(dlock_cluster *cl, const dlock_node_acquire_args *a,
                           dlock_acquired *out);
int dlock__cluster_raise(dlock_cluster *cl, const dlock_node_raise_args *a, int64_t *fence);
int dlock__cluster_release(dlock_cluster *cl, const dlock_node_release_args *a, int *queued);

/* Script s (argv[0] its first key, which routes it): the checked reply
 * (caller frees), or NULL with the error set; *sent (may be NULL) or-ed
 * with whether it may have run. */
redisReply *dlock__cluster_script(dlock_cluster *cl, enum dlock_script s, int nkeys, int nargs,
                                  const char *const *argv, int *sent);

/* Renews count leases, grouped by owner, one pipeline per owner on the
 * caller's connection own[i] for node i. rcs[j]: DLOCK_OK, DLOCK_ERR_LOST,
 * or the failure (a redirected lease included: the caller retries soon). */
void dlock__cluster_renew(dlock_cluster *cl, redisContext **own, int count,
                          const dlock_node_renewal *renewals, int *rcs);

#endif
