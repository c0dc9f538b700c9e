/* patroni.h - a PostgreSQL cluster run as operators run one, for tests: one
 * etcd and three Patroni-managed PostgreSQL nodes (Debian's patroni and
 * etcd-server) with synchronous_mode, all on free loopback ports below the
 * ephemeral range in a temp dir; each Patroni and each postmaster stopped
 * by its PID, also at exit. */
#ifndef TEST_PATRONI_H
#define TEST_PATRONI_H

#include <stddef.h>
#include <sys/types.h>

#define TH_PATRONI_NODES 3
/* Patroni's timings (seconds): the leader key lives ttl after its holder's
 * last renewal; loop_wait + 2 * retry_timeout must stay within ttl. */
#define TH_PATRONI_TTL 10
#define TH_PATRONI_LOOP_WAIT 1
#define TH_PATRONI_RETRY_TIMEOUT 4

typedef struct th_patroni_node {
    pid_t pid;  /* Patroni, 0 once stopped */
    int port;   /* its PostgreSQL's */
    int api;    /* its REST API's */
    char dir[96]; /* <cluster dir>/nI: patroni.yml, patroni.log, data/ */
} th_patroni_node;

typedef struct th_patroni {
    pid_t etcd;
    int etcd_port, etcd_peer_port;
    char dir[64]; /* private temp dir (th_tempdir) */
    th_patroni_node node[TH_PATRONI_NODES];
    /* every node, for a client: "postgresql://stock@127.0.0.1:P1,...,127.0.0.1:P3/stock
     * ?target_session_attrs=read-write" */
    char conninfo[256];
} th_patroni;

/* 1 when patroni, etcd and PostgreSQL's server binaries are installed;
 * 0 otherwise (a test then skips, naming scripts/deps.sh). */
int th_patroni_available(void);

/* Starts etcd and three nodes on a zero-initialised c (scope "stockd", ttl
 * TH_PATRONI_TTL, synchronous_mode; superuser "stock", every role trusted on
 * 127.0.0.1; fsync off), Patroni as the user "postgres" when run as root,
 * and waits up to a minute (times TH_SLOWER) until one node leads and both
 * others stream from it, one of them synchronous; then creates the database
 * "stock". Only one cluster per process. Returns 0, or -1 after printing why
 * and the end of the logs that say more (what started is stopped at exit). */
int th_patroni_start(th_patroni *c);

/* The node whose Patroni says it is the primary (GET /primary answers 200)
 * and whose PostgreSQL takes writes, waiting up to wait_ms for one: its
 * index, or -1. Stopped nodes are not asked. */
int th_patroni_leader(const th_patroni *c, int wait_ms);

/* Waits up to wait_ms until node i's PostgreSQL is a primary with n
 * standbys streaming from it: 0, or -1. */
int th_patroni_wait_streaming(const th_patroni *c, int i, int n, int wait_ms);

/* Node i's postmaster as its data dir's postmaster.pid names it, when that
 * process runs there; else 0. Patroni starts it detached: it is not ours. */
pid_t th_patroni_postmaster(const th_patroni *c, int i);

/* Node i's walreceiver (a standby's), or 0 when it runs none. */
pid_t th_patroni_walreceiver(const th_patroni *c, int i);

/* The seconds left before the leader key in etcd lapses unless renewed (its
 * lease's TTL, whole seconds), -1 when there is no leader key, -2 when etcd
 * could not be asked. */
int th_patroni_leader_ttl(const th_patroni *c);

/* "postgresql://stock@127.0.0.1:<node i's port>/stock" into buf. */
const char *th_patroni_url(const th_patroni *c, int i, char *buf, size_t size);

/* Stops node i as a lost host would go: SIGKILL to Patroni and to its
 * PostgreSQL's processes (those may be gone already: a test's fault may have
 * killed them by PID). Reaps Patroni and waits until no process is left in
 * its data dir (at most about 10 s). */
void th_patroni_kill(th_patroni *c, int i);

/* Stops every node (Patroni killed first, so that none promotes or restarts
 * its PostgreSQL; then each postmaster by SIGQUIT, an immediate shutdown that
 * frees its shared memory) and etcd. A stopped cluster is a no-op. */
void th_patroni_stop(th_patroni *c);

#endif
