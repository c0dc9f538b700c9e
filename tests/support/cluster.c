/* cluster.c - a Redis Cluster for tests (cluster.h). */
#include "tests/support/cluster.h"

#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lock/cluster.h"

/* Starts one cluster-mode redis-server as node r: free ports for clients and
 * for the cluster bus (by default port + 10000, which another process may
 * hold), a temp dir. A port taken between the pick and the bind makes it try
 * again with new ones. */
static int node_start(th_redis *r)
{
    if (th_tempdir("dlock-cluster", r->dir, sizeof(r->dir)) != 0)
        return -1;
    char port[16], bus[16], log[128];
    snprintf(log, sizeof(log), "%s/redis.log", r->dir);
    for (int attempt = 0; attempt < 3; attempt++) {
        r->port = th_free_port();
        int bus_port;
        do
            bus_port = th_free_port();
        while (bus_port == r->port);
        snprintf(port, sizeof(port), "%d", r->port);
        snprintf(bus, sizeof(bus), "%d", bus_port);
        unlink(log);
        const char *argv[] = {"redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "",
                              "--appendonly", "no", "--dir", r->dir, "--daemonize", "no",
                              "--logfile", log, "--cluster-enabled", "yes",
                              "--cluster-config-file", "nodes.conf", "--cluster-port", bus,
                              "--cluster-node-timeout", "1000",
                              /* a replica may take over however long it was cut off, and
                               * its first sync starts at once rather than after 5 s */
                              "--cluster-replica-validity-factor", "0",
                              "--repl-diskless-sync-delay", "0", NULL};
        r->pid = th_spawn(argv, NULL);
        for (int64_t end = th_now_ms() + 5000; r->pid > 0 && th_now_ms() < end; th_sleep_ms(10))
            if (th_redis_int(r, "PING") == 0)
                return 0;
        char *text = th_read_file(log);
        int taken = text && strstr(text, "Address already in use");
        fprintf(stderr, "cluster: redis-server did not start on ports %d/%d (pid %d): %s\n",
                r->port, bus_port, (int)r->pid, text ? text : "no log");
        free(text);
        th_signal(r->pid, SIGKILL, 5000);
        r->pid = 0;
        if (!taken)
            break;
    }
    return -1;
}

/* Whether node r's answer to command holds text. */
static int says(const th_redis *r, const char *command, const char *text)
{
    redisContext *ctx = th_redis_connect(r);
    redisReply *rep = ctx ? redisCommand(ctx, command) : NULL;
    int ok = rep && rep->type == REDIS_REPLY_STRING && strstr(rep->str, text);
    freeReplyObject(rep);
    redisFree(ctx);
    return ok;
}

int th_cluster_start(th_cluster *c, int primaries, int replicas)
{
    memset(c, 0, sizeof(*c));
    c->n = primaries * (1 + replicas);
    const char *argv[8 + TH_CLUSTER_MAX] = {"redis-cli", "--cluster", "create"};
    char addr[TH_CLUSTER_MAX][24], reps[8];
    int k = 3;
    for (int i = 0; i < c->n; i++) {
        if (node_start(&c->node[i]) != 0)
            return -1;
        snprintf(addr[i], sizeof(addr[i]), "127.0.0.1:%d", c->node[i].port);
        argv[k++] = addr[i];
        if (i < primaries)
            snprintf(c->seeds + strlen(c->seeds), sizeof(c->seeds) - strlen(c->seeds), "%s%s",
                     i ? "," : "", addr[i]);
    }
    snprintf(reps, sizeof(reps), "%d", replicas);
    argv[k++] = "--cluster-replicas", argv[k++] = reps, argv[k++] = "--cluster-yes";
    argv[k] = NULL;
    char out[160];
    snprintf(out, sizeof(out), "%s/create.log", c->node[0].dir);
    if (th_run(argv, out, 30000) != 0) {
        fprintf(stderr, "cluster: redis-cli --cluster create failed (see %s)\n", out);
        return -1;
    }
    if (th_cluster_wait_ok(c, 0, 20000) != 0)
        return -1;
    for (int64_t end = th_now_ms() + 20000;; th_sleep_ms(50)) { /* every replica synced */
        int synced = 1;
        for (int i = primaries; synced && i < c->n; i++)
            synced = says(&c->node[i], "INFO replication", "master_link_status:up");
        if (synced)
            return 0;
        if (th_now_ms() > end) {
            fprintf(stderr, "cluster: replicas not in sync after 20 s\n");
            return -1;
        }
    }
}

void th_cluster_stop(th_cluster *c)
{
    for (int i = 0; i < c->n; i++)
        if (c->node[i].pid > 0)
            th_redis_stop(&c->node[i], 1);
}

int th_cluster_owner(const th_cluster *c, int slot)
{
    for (int i = 0; i < c->n; i++) {
        if (c->node[i].pid <= 0)
            continue;
        redisContext *ctx = th_redis_connect(&c->node[i]);
        redisReply *r = ctx ? redisCommand(ctx, "CLUSTER SLOTS") : NULL;
        int owner = -1;
        for (size_t j = 0; r && r->type == REDIS_REPLY_ARRAY && j < r->elements; j++) {
            redisReply *range = r->element[j];
            if (slot < range->element[0]->integer || slot > range->element[1]->integer)
                continue;
            long long port = range->element[2]->element[1]->integer;
            for (int m = 0; m < c->n; m++)
                owner = c->node[m].port == port ? m : owner;
        }
        freeReplyObject(r);
        redisFree(ctx);
        if (owner >= 0)
            return owner;
    }
    return -1;
}

int th_cluster_wait_ok(const th_cluster *c, int slot, int timeout_ms)
{
    for (int64_t end = th_now_ms() + timeout_ms; th_now_ms() < end; th_sleep_ms(50)) {
        int ok = 1;
        for (int i = 0; ok && i < c->n; i++)
            ok = c->node[i].pid <= 0 || says(&c->node[i], "CLUSTER INFO", "cluster_state:ok");
        int owner = ok ? th_cluster_owner(c, slot) : -1;
        if (owner >= 0 && c->node[owner].pid > 0)
            return 0;
    }
    fprintf(stderr, "cluster: not ok after %d ms\n", timeout_ms);
    return -1;
}

/* Node i's cluster id, into id (41 bytes). */
static const char *node_id(const th_cluster *c, int i, char *id)
{
    redisContext *ctx = th_redis_connect(&c->node[i]);
    redisReply *r = ctx ? redisCommand(ctx, "CLUSTER MYID") : NULL;
    snprintf(id, 41, "%s", r && r->type == REDIS_REPLY_STRING ? r->str : "");
    freeReplyObject(r);
    redisFree(ctx);
    return id;
}

int th_cluster_migrate_begin(const th_cluster *c, int slot, int from, int to)
{
    char from_id[41], to_id[41];
    node_id(c, from, from_id), node_id(c, to, to_id);
    if (th_redis_int(&c->node[to], "CLUSTER SETSLOT %d IMPORTING %s", slot, from_id) != 0)
        return -1;
    return th_redis_int(&c->node[from], "CLUSTER SETSLOT %d MIGRATING %s", slot, to_id) == 0
               ? 0 : -1;
}

int th_cluster_migrate_keys(const th_cluster *c, int slot, int from, int to)
{
    redisContext *ctx = th_redis_connect(&c->node[from]);
    int rc = ctx ? 0 : -1;
    for (;;) {
        redisReply *keys = rc == 0 ? redisCommand(ctx, "CLUSTER GETKEYSINSLOT %d 100", slot) : NULL;
        if (keys == NULL || keys->type != REDIS_REPLY_ARRAY || keys->elements == 0) {
            rc = keys && keys->type == REDIS_REPLY_ARRAY ? rc : -1;
            freeReplyObject(keys);
            break;
        }
        const char *argv[8 + 100];
        char port[16];
        snprintf(port, sizeof(port), "%d", c->node[to].port);
        int k = 0;
        argv[k++] = "MIGRATE", argv[k++] = "127.0.0.1", argv[k++] = port, argv[k++] = "";
        argv[k++] = "0", argv[k++] = "5000", argv[k++] = "REPLACE", argv[k++] = "KEYS";
        for (size_t i = 0; i < keys->elements; i++)
            argv[k++] = keys->element[i]->str;
        redisReply *m = redisCommandArgv(ctx, k, argv, NULL);
        rc = m && m->type == REDIS_REPLY_STATUS ? 0 : -1;
        if (rc != 0)
            fprintf(stderr, "cluster: MIGRATE: %s\n", m ? m->str : ctx->errstr);
        freeReplyObject(m);
        freeReplyObject(keys);
    }
    redisFree(ctx);
    return rc;
}

int th_cluster_migrate_key(const th_cluster *c, const char *key, int from, int to)
{
    redisContext *ctx = th_redis_connect(&c->node[from]);
    redisReply *m = ctx ? redisCommand(ctx, "MIGRATE 127.0.0.1 %d %s 0 5000 REPLACE",
                                       c->node[to].port, key) : NULL;
    int rc = m && m->type == REDIS_REPLY_STATUS ? 0 : -1; /* OK, or NOKEY when not there */
    if (rc != 0)
        fprintf(stderr, "cluster: MIGRATE %s: %s\n", key, m ? m->str : "no connection");
    freeReplyObject(m);
    redisFree(ctx);
    return rc;
}

int th_cluster_migrate_end(const th_cluster *c, int slot, int from, int to)
{
    char to_id[41];
    node_id(c, to, to_id);
    if (th_cluster_migrate_keys(c, slot, from, to) != 0 ||
        th_redis_int(&c->node[to], "CLUSTER SETSLOT %d NODE %s", slot, to_id) != 0 ||
        th_redis_int(&c->node[from], "CLUSTER SETSLOT %d NODE %s", slot, to_id) != 0)
        return -1;
    for (int i = 0; i < c->n; i++) /* the other primaries learn it now, not by gossip */
        if (i != from && i != to && c->node[i].pid > 0)
            th_redis_int(&c->node[i], "CLUSTER SETSLOT %d NODE %s", slot, to_id);
    return 0;
}

const char *th_cluster_tag_on(const th_cluster *c, int i, int start, char *buf, int *slot)
{
    for (int n = start; n < start + 100000; n++) {
        snprintf(buf, 16, "t%d", n);
        char key[24];
        snprintf(key, sizeof(key), "{%s}", buf);
        *slot = dlock__slot_of(key, NULL);
        if (th_cluster_owner(c, *slot) == i)
            return buf;
    }
    return NULL;
}

long long th_cluster_evalsha_calls(const th_cluster *c, int i)
{
    redisContext *ctx = th_redis_connect(&c->node[i]);
    redisReply *r = ctx ? redisCommand(ctx, "INFO commandstats") : NULL;
    const char *p = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "cmdstat_evalsha:calls=")
                                                        : NULL;
    long long calls = p ? atoll(p + strlen("cmdstat_evalsha:calls=")) : 0;
    freeReplyObject(r);
    redisFree(ctx);
    return calls;
}
