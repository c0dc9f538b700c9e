/* cluster.h - a Redis Cluster for tests (cluster.c): cluster-mode
 * redis-servers on free loopback ports, each in a temp dir, joined by
 * `redis-cli --cluster create`, started and stopped by PID; and the hand
 * moves of a slot that make a client meet MOVED and ASK. */
#ifndef TH_CLUSTER_H
#define TH_CLUSTER_H

#include "tests/support/harness.h"

#define TH_CLUSTER_MAX 6

typedef struct th_cluster {
    int n; /* nodes: primaries, then their replicas */
    th_redis node[TH_CLUSTER_MAX];
    char seeds[TH_CLUSTER_MAX * 24]; /* "127.0.0.1:p1,127.0.0.1:p2,..." (the primaries) */
} th_cluster;

/* Starts primaries * (1 + replicas) nodes with cluster-node-timeout
 * 1000 ms and makes them a cluster (replicas per primary), then waits
 * until every node says cluster_state:ok. 0, or -1 (stderr says why). */
int th_cluster_start(th_cluster *c, int primaries, int replicas);

/* SIGKILLs every node still running. */
void th_cluster_stop(th_cluster *c);

/* The index of the node that serves slot now (asked of a live node), or -1. */
int th_cluster_owner(const th_cluster *c, int slot);

/* Waits until every live node says cluster_state:ok and slot's owner is
 * live (after a kill: its replica promoted). 0, or -1 after timeout_ms. */
int th_cluster_wait_ok(const th_cluster *c, int slot, int timeout_ms);

/* A slot's move from node from to node to, by hand, in two halves: begin
 * marks it IMPORTING at to and MIGRATING at from (a command whose keys are
 * all missing at from is then answered ASK; at to, one with several keys of
 * which some are missing gets TRYAGAIN); end moves its keys (MIGRATE) and gives the slot to to
 * on every primary (a client that asks from then gets MOVED). 0 or -1. */
int th_cluster_migrate_begin(const th_cluster *c, int slot, int from, int to);
int th_cluster_migrate_end(const th_cluster *c, int slot, int from, int to);

/* The middle: moves the slot's keys from from to to (MIGRATE, 100 at a time),
 * as migrate_end does first. 0 or -1. */
int th_cluster_migrate_keys(const th_cluster *c, int slot, int from, int to);

/* Moves one key of a migrating slot from from to to (MIGRATE, as a batch
 * of redis-cli's that ends between a lock's keys would): 0, or -1 (a key
 * not there is 0 too). */
int th_cluster_migrate_key(const th_cluster *c, const char *key, int from, int to);

/* A hash tag ("t<n>") whose slot node i serves, the n-th such from start;
 * into buf (16 bytes), its slot in *slot; NULL when i serves none. */
const char *th_cluster_tag_on(const th_cluster *c, int i, int start, char *buf, int *slot);

/* A lock command count of node i: calls of EVALSHA (INFO commandstats). */
long long th_cluster_evalsha_calls(const th_cluster *c, int i);

#endif
