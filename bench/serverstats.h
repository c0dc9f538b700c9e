/* serverstats.h - what the Redis servers under a benchmark did, read from
 * INFO (serverstats.c): a snapshot before, and after it the lock's
 * commands and the server's CPU per operation. Each call reads one INFO. */
#ifndef SERVERSTATS_H
#define SERVERSTATS_H

#include <hiredis/hiredis.h>

#include "lock/dlock.h"

#define SERVERSTATS_CMDS 64
#define SERVERSTATS_LEN (DLOCK_NODES_MAX * 16) /* "v0,v1,...": a figure per server */

/* What one server has done so far: calls per command (commandstats, which
 * counts the commands that Lua scripts issue too) and its CPU time. */
struct serverstats {
    int n;
    char name[SERVERSTATS_CMDS][32];
    long long calls[SERVERSTATS_CMDS];
    double cpu_s;
};

/* A snapshot of the server on r: one INFO for both, so that only one INFO
 * lands in the next snapshot. */
void serverstats_read(redisContext *r, struct serverstats *st);

/* A connection to each of the n servers on 127.0.0.1 at ports, or exit. */
void serverstats_connect(redisContext *rs[], const int *ports, int n);

/* Each of the n servers' work since its snapshot b[i], per `per`
 * operations: the lock's commands (all but the INFO that read b and, on the
 * first server, the cs GETs and SETs of the critical sections) into cmds
 * and Redis CPU microseconds into cpu, as "v0,v1,...". With LOCKBENCH_CMDS
 * set, each command's share goes to stderr. */
void serverstats_per_op(redisContext *rs[], const int *ports, int n,
                        const struct serverstats b[], long long cs, long long per,
                        char cmds[SERVERSTATS_LEN], char cpu[SERVERSTATS_LEN]);

/* EVALSHA's calls and microseconds, and every command's calls, on r. */
void serverstats_evalsha(redisContext *r, long long *calls, double *usec, long long *all);

#endif
