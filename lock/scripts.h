/* scripts.h - the Lua scripts of the lock (scripts.c), by number: node.c
 * loads them (SCRIPT LOAD) and runs them by SHA, their body as fallback.
 * Their keys and arguments are documented with each in scripts.c. */
#ifndef DLOCK_SCRIPTS_H
#define DLOCK_SCRIPTS_H

enum dlock_script {
    DLOCK_SCRIPT_ACQUIRE,
    DLOCK_SCRIPT_RELEASE,
    DLOCK_SCRIPT_RENEW,
    DLOCK_SCRIPT_FENCE,
    DLOCK_SCRIPT_SEM_ACQUIRE,
    DLOCK_SCRIPT_SEM_RENEW,
    DLOCK_SCRIPT_SEM_RELEASE,
    DLOCK_SCRIPT_RW_READ,
    DLOCK_SCRIPT_RW_WRITE,
    DLOCK_SCRIPT_RW_WRITE_RELEASE,
    DLOCK_SCRIPT_RAISE,
    DLOCK_SCRIPT_COUNT
};

extern const char *const dlock__script_body[DLOCK_SCRIPT_COUNT];

/* 1 for a script of several keys whose body also takes all but the first
 * from its first arguments (scripts.c, LUA_ASKED): what node.c sends to a
 * Redis Cluster node after ASK. */
extern const unsigned char dlock__script_asked_form[DLOCK_SCRIPT_COUNT];

/* Script s's body; sharded: for a Redis Cluster, its PUBLISH calls made
 * SPUBLISH, so a release reaches only the subscribers of its key's shard
 * (built once; the plain body when out of memory: PUBLISH still reaches
 * every node, only not an SSUBSCRIBE, and waiters poll at retry_ms). */
const char *dlock__script_text(enum dlock_script s, int sharded);

#endif
