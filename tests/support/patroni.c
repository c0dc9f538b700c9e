/* patroni.c - etcd and three Patroni-managed PostgreSQL nodes for tests
 * (patroni.h): their configs written into a temp dir, Patroni run as
 * Debian's postgres user when the tests run as root (as pg.c runs postgres),
 * and every process stopped by PID, the detached postmasters included. */
#include "tests/support/patroni.h"

#include "tests/support/harness.h"
#include "tests/support/pg.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <glob.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <libpq-fe.h>

#define START_MS (60000 * TH_SLOWER)
#define STOP_MS 10000
#define LOG_TAIL_LINES 15

/* The cluster that the exit clean-up stops: one per process. */
static th_patroni *running;

/* PostgreSQL's bin dir for Patroni: the highest /usr/lib/postgresql/N/bin
 * (strverscmp: 9.6 < 15 < 16), as pg.c finds it. */
static int find_bindir(char *buf, size_t size)
{
    glob_t g;
    if (glob("/usr/lib/postgresql/*/bin/postgres", 0, NULL, &g) != 0)
        return -1;
    const char *best = NULL;
    for (size_t i = 0; i < g.gl_pathc; i++)
        if (best == NULL || strverscmp(g.gl_pathv[i], best) > 0)
            best = g.gl_pathv[i];
    snprintf(buf, size, "%s", best);
    *strrchr(buf, '/') = '\0';
    globfree(&g);
    return 0;
}

int th_patroni_available(void)
{
    char bin[PATH_MAX];
    return th_have("patroni") && th_have("etcd") && find_bindir(bin, sizeof(bin)) == 0;
}

/* The user Patroni and its PostgreSQL run as: NULL (the caller) unless root. */
static const char *server_user(void)
{
    return getuid() == 0 ? "postgres" : NULL;
}

static int own(const char *path)
{
    const char *user = server_user();
    struct passwd *pw = user ? getpwnam(user) : NULL;
    if (user && (pw == NULL || chown(path, pw->pw_uid, pw->pw_gid) != 0)) {
        fprintf(stderr, "harness: cannot give %s to user %s\n", path, user);
        return -1;
    }
    return 0;
}

/* Prints the last lines of a log, after why. */
static void show_log(const char *why, const char *path)
{
    char *text = th_read_file(path);
    const char *p = text ? text + strlen(text) : NULL;
    for (int n = LOG_TAIL_LINES + 1; p && p > text && n > 0; p--)
        if (p[-1] == '\n' && --n == 0)
            break;
    fprintf(stderr, "harness: %s; the end of %s:\n%s\n", why, path, p ? p : "(no log)");
    free(text);
}

/* ---- processes ---- */

/* Whether process pid (a /proc entry's name) belongs to node i: its cwd is
 * the data dir (a postmaster and its backends run there), or its command
 * line names the node's dir (Patroni's own forks, initdb, pg_basebackup, and
 * a postmaster forked but not yet in its data dir). */
static int of_node(const char *pid, const char *data, const char *dir)
{
    char path[300], cwd[PATH_MAX];
    snprintf(path, sizeof(path), "/proc/%s/cwd", pid);
    ssize_t len = readlink(path, cwd, sizeof(cwd) - 1);
    if (len > 0) {
        cwd[len] = '\0';
        if (strcmp(cwd, data) == 0)
            return 1;
    }
    /* read here, not by th_proc_has: a process may be gone by now */
    char buf[4096];
    snprintf(path, sizeof(path), "/proc/%s/cmdline", pid);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof(buf), f) : 0;
    if (f)
        fclose(f);
    return memmem(buf, n, dir, strlen(dir)) != NULL;
}

/* Processes of node i (of_node) whose command line holds what (NULL: any);
 * each is sent sig (0: only counted). The last one's PID into *pid, if
 * given. */
static int of_node_named(const th_patroni *c, int i, const char *what, int sig, pid_t *pid)
{
    char data[128], real[PATH_MAX];
    snprintf(data, sizeof(data), "%s/data", c->node[i].dir);
    if (realpath(data, real) == NULL)
        snprintf(real, sizeof(real), "%s", data);
    DIR *proc = opendir("/proc");
    struct dirent *e;
    int n = 0;
    while (proc && (e = readdir(proc)) != NULL) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9' || !of_node(e->d_name, real, c->node[i].dir))
            continue;
        if (what && !th_proc_has((pid_t)atoi(e->d_name), "cmdline", what))
            continue;
        n++;
        if (pid)
            *pid = (pid_t)atoi(e->d_name);
        if (sig)
            kill((pid_t)atoi(e->d_name), sig);
    }
    if (proc)
        closedir(proc);
    return n;
}

static int in_data_dir(const th_patroni *c, int i, int sig)
{
    return of_node_named(c, i, NULL, sig, NULL);
}

pid_t th_patroni_walreceiver(const th_patroni *c, int i)
{
    pid_t pid = 0;
    return of_node_named(c, i, "walreceiver", 0, &pid) == 1 ? pid : 0;
}

pid_t th_patroni_postmaster(const th_patroni *c, int i)
{
    char path[160], cwd[64], link[PATH_MAX], data[128], real[PATH_MAX];
    snprintf(path, sizeof(path), "%s/data/postmaster.pid", c->node[i].dir);
    char *text = th_read_file(path);
    pid_t pid = text ? (pid_t)atoi(text) : 0;
    free(text);
    /* a stale file's PID may be another process's by now */
    snprintf(cwd, sizeof(cwd), "/proc/%d/cwd", (int)pid);
    snprintf(data, sizeof(data), "%s/data", c->node[i].dir);
    ssize_t len = pid > 0 ? readlink(cwd, link, sizeof(link) - 1) : -1;
    if (len <= 0 || realpath(data, real) == NULL)
        return 0;
    link[len] = '\0';
    return strcmp(link, real) == 0 ? pid : 0;
}

/* The id of the System V segment postmaster.pid names (its 7th line: key
 * and id), or -1. */
static int shm_id_of(const th_patroni *c, int i)
{
    char path[160];
    snprintf(path, sizeof(path), "%s/data/postmaster.pid", c->node[i].dir);
    char *text = th_read_file(path), *line = text;
    for (int n = 1; line && n < 7; n++)
        if ((line = strchr(line, '\n')) != NULL)
            line++;
    long key = 0, id = -1;
    if (line == NULL || sscanf(line, "%ld %ld", &key, &id) != 2)
        id = -1;
    free(text);
    return (int)id;
}

/* Waits until nothing runs in node i's data dir, sending the postmaster
 * first_sig (0: none) and, after STOP_MS, everything left SIGKILL. A
 * postmaster killed by SIGKILL leaves its small System V segment: removed
 * once nobody is attached. */
static void stop_postgres(th_patroni *c, int i, int first_sig)
{
    int shm = shm_id_of(c, i);
    struct shmid_ds ds;
    pid_t signalled = 0;
    int64_t end = th_now_ms() + STOP_MS;
    while (in_data_dir(c, i, 0) > 0) {
        pid_t pm = th_patroni_postmaster(c, i); /* one starting may write its file late */
        if (pm > 0 && pm != signalled && first_sig)
            kill(pm, first_sig);
        signalled = pm;
        if (th_now_ms() >= end) {
            fprintf(stderr, "harness: patroni node %d: killing PostgreSQL's processes left\n",
                    i + 1);
            in_data_dir(c, i, SIGKILL);
            break;
        }
        th_sleep_ms(20);
    }
    if (shm >= 0 && shmctl(shm, IPC_STAT, &ds) == 0 && ds.shm_nattch == 0)
        shmctl(shm, IPC_RMID, NULL);
}

void th_patroni_kill(th_patroni *c, int i)
{
    if (c->node[i].pid > 0)
        th_signal(c->node[i].pid, SIGKILL, STOP_MS);
    c->node[i].pid = 0;
    stop_postgres(c, i, SIGKILL);
}

void th_patroni_stop(th_patroni *c)
{
    for (int i = 0; i < TH_PATRONI_NODES; i++)
        if (c->node[i].pid > 0) {
            th_signal(c->node[i].pid, SIGKILL, STOP_MS);
            c->node[i].pid = 0;
        }
    for (int i = 0; i < TH_PATRONI_NODES; i++)
        if (c->node[i].dir[0])
            stop_postgres(c, i, SIGQUIT);
    if (c->etcd > 0)
        th_signal(c->etcd, SIGTERM, STOP_MS);
    c->etcd = 0;
    if (running == c)
        running = NULL;
}

/* At exit, before the harness removes the temp dirs (atexit runs the
 * later-registered first): the postmasters are not the harness's children. */
static void stop_at_exit(void)
{
    if (running)
        th_patroni_stop(running);
}

/* SIGINT and SIGTERM: the harness's handler cleans up and dies without
 * running atexit, so the cluster is stopped first, then that handler runs. */
static void (*harness_on_int)(int), (*harness_on_term)(int);

static void stop_on_signal(int sig)
{
    stop_at_exit();
    void (*next)(int) = sig == SIGINT ? harness_on_int : harness_on_term;
    if (next != SIG_DFL && next != SIG_IGN && next != SIG_ERR) {
        next(sig);
        return;
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

static long long ask(const th_patroni *c, int i, const char *sql);

/* ---- start ---- */

static int write_owned(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return -1;
    int ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok ? own(path) : -1;
}

/* A port for a listener that binds it seconds later (a standby's, after
 * its pg_basebackup): below the kernel's ephemeral range
 * (ip_local_port_range), which it hands out for every outgoing connection
 * on the host (libpq's, curl's, other tests') and th_free_port's with
 * them - one taken meanwhile would cost a node. Free now, and never one
 * handed out before by this process. */
static int listener_port(void)
{
    static int given[4 * TH_PATRONI_NODES + 8], n_given;
    int low = 32768, high = 0;
    char *range = th_read_file("/proc/sys/net/ipv4/ip_local_port_range");
    if (range && sscanf(range, "%d %d", &low, &high) < 1)
        low = 32768;
    free(range);
    int span = low - 10000 > 1024 ? 10000 : low - 1024;
    if (span < 64 || n_given >= (int)(sizeof(given) / sizeof(given[0])))
        return th_free_port(); /* no room below: the ephemeral range it is */
    int start = (int)((unsigned)getpid() * 7919u + (unsigned)th_now_ms()) % span;
    for (int k = 0; k < span; k++) {
        int port = low - span + (start + k) % span, taken = 0;
        for (int j = 0; j < n_given; j++)
            taken |= given[j] == port;
        int fd = taken ? -1 : socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        int ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
        if (fd >= 0)
            close(fd);
        if (ok) {
            given[n_given++] = port;
            return port;
        }
    }
    return th_free_port();
}

static int start_etcd(th_patroni *c)
{
    char bin[] = "etcd", data[96], client[64], peer[64], initial[80], log[96];
    c->etcd_port = listener_port();
    c->etcd_peer_port = listener_port();
    snprintf(data, sizeof(data), "%s/etcd", c->dir);
    snprintf(client, sizeof(client), "http://127.0.0.1:%d", c->etcd_port);
    snprintf(peer, sizeof(peer), "http://127.0.0.1:%d", c->etcd_peer_port);
    snprintf(initial, sizeof(initial), "e=%s", peer);
    snprintf(log, sizeof(log), "%s/etcd.log", c->dir);
    const char *argv[] = {bin, "--name", "e", "--data-dir", data, "--listen-client-urls", client,
                          "--advertise-client-urls", client, "--listen-peer-urls", peer,
                          "--initial-advertise-peer-urls", peer, "--initial-cluster", initial,
                          "--log-level", "warn", NULL};
    c->etcd = th_spawn(argv, log);
    char url[96];
    snprintf(url, sizeof(url), "%s/health", client);
    for (int64_t end = th_now_ms() + START_MS; c->etcd > 0 && th_now_ms() < end;
         th_sleep_ms(50)) {
        th_resp r;
        int up = th_http("GET", url, NULL, &r) == 0 && r.status == 200 && r.body &&
                 strstr(r.body, "true") != NULL;
        th_resp_free(&r);
        if (up)
            return 0;
        if (th_proc_state(c->etcd) == 'Z')
            break;
    }
    show_log("etcd did not become healthy", log);
    return -1;
}

/* Node i's patroni.yml: the cluster's settings (bootstrap.dcs, written to
 * etcd by the first node) and the node's own ports and dirs. */
static int write_config(const th_patroni *c, int i, const char *bindir)
{
    const th_patroni_node *n = &c->node[i];
    char path[128], text[4096];
    snprintf(text, sizeof(text),
             "scope: stockd\nname: n%d\nlog:\n  level: INFO\n"
             "restapi:\n  listen: 127.0.0.1:%d\n  connect_address: 127.0.0.1:%d\n"
             "etcd3:\n  hosts: 127.0.0.1:%d\n"
             "bootstrap:\n  dcs:\n    ttl: %d\n    loop_wait: %d\n    retry_timeout: %d\n"
             "    synchronous_mode: true\n    postgresql:\n      use_pg_rewind: false\n"
             "      parameters:\n        fsync: 'off'\n        max_connections: 200\n"
             "  initdb:\n    - encoding: UTF8\n    - locale: C.UTF-8\n"
             "postgresql:\n  listen: 127.0.0.1:%d\n  connect_address: 127.0.0.1:%d\n"
             "  data_dir: %s/data\n  bin_dir: %s\n  pgpass: %s/pgpass\n"
             "  authentication:\n    superuser:\n      username: stock\n"
             "    replication:\n      username: replicator\n"
             /* the socket in the node's dir, shared memory in the data dir: a
              * killed node leaves nothing outside the temp dir */
             "  parameters:\n    unix_socket_directories: '%s'\n"
             "    dynamic_shared_memory_type: mmap\n"
             "  pg_hba:\n    - local all all trust\n    - host all all 127.0.0.1/32 trust\n"
             "    - host replication all 127.0.0.1/32 trust\n",
             i + 1, n->api, n->api, c->etcd_port, TH_PATRONI_TTL, TH_PATRONI_LOOP_WAIT,
             TH_PATRONI_RETRY_TIMEOUT, n->port, n->port, n->dir, bindir, n->dir, n->dir);
    snprintf(path, sizeof(path), "%s/patroni.yml", n->dir);
    return write_owned(path, text);
}

static int start_node(th_patroni *c, int i, const char *bindir)
{
    th_patroni_node *n = &c->node[i];
    n->port = listener_port();
    n->api = listener_port();
    snprintf(n->dir, sizeof(n->dir), "%s/n%d", c->dir, i + 1);
    if (mkdir(n->dir, 0700) != 0 || own(n->dir) != 0 || write_config(c, i, bindir) != 0) {
        fprintf(stderr, "harness: cannot prepare %s\n", n->dir);
        return -1;
    }
    char bin[] = "/usr/bin/patroni", conf[128], log[128];
    snprintf(conf, sizeof(conf), "%s/patroni.yml", n->dir);
    snprintf(log, sizeof(log), "%s/patroni.log", n->dir);
    const char *argv[] = {bin, conf, NULL};
    n->pid = th_spawn_as(argv, log, server_user());
    return n->pid > 0 ? 0 : -1;
}

int th_patroni_start(th_patroni *c)
{
    char bindir[128];
    if (!th_patroni_available()) {
        fprintf(stderr, "harness: patroni, etcd or PostgreSQL missing (scripts/deps.sh)\n");
        return -1;
    }
    find_bindir(bindir, sizeof(bindir));
    if (th_tempdir("stockd-patroni", c->dir, sizeof(c->dir)) != 0 || own(c->dir) != 0)
        return -1;
    running = c;
    static int registered;
    if (!registered++) { /* after th_tempdir: the harness's clean-up is registered */
        atexit(stop_at_exit);
        harness_on_int = signal(SIGINT, stop_on_signal);
        harness_on_term = signal(SIGTERM, stop_on_signal);
    }
    if (start_etcd(c) != 0)
        return -1;
    for (int i = 0; i < TH_PATRONI_NODES; i++)
        if (start_node(c, i, bindir) != 0)
            return -1;
    int len = snprintf(c->conninfo, sizeof(c->conninfo), "postgresql://stock@");
    for (int i = 0; i < TH_PATRONI_NODES; i++)
        len += snprintf(c->conninfo + len, sizeof(c->conninfo) - (size_t)len, "%s127.0.0.1:%d",
                        i ? "," : "", c->node[i].port);
    snprintf(c->conninfo + len, sizeof(c->conninfo) - (size_t)len,
             "/stock?target_session_attrs=read-write");
    int leader = th_patroni_leader(c, START_MS);
    if (leader < 0 || th_patroni_wait_streaming(c, leader, TH_PATRONI_NODES - 1, START_MS) != 0) {
        for (int i = 0; i < TH_PATRONI_NODES; i++) {
            char log[128];
            snprintf(log, sizeof(log), "%s/patroni.log", c->node[i].dir);
            show_log(leader < 0 ? "no leader within a minute" : "standbys not streaming", log);
        }
        return -1;
    }
    char url[128];
    snprintf(url, sizeof(url), "postgresql://stock@127.0.0.1:%d/postgres", c->node[leader].port);
    if (th_pg_exec(url, "CREATE DATABASE stock OWNER stock") != 0)
        return -1;
    /* on every node before a client comes: libpq tries no further host
     * after one that refused its database */
    for (int i = 0; i < TH_PATRONI_NODES; i++)
        for (int64_t end = th_now_ms() + START_MS;
             ask(c, i, "SELECT count(*) FROM pg_database WHERE datname = 'stock'") != 1;
             th_sleep_ms(50))
            if (th_now_ms() >= end) {
                fprintf(stderr, "harness: patroni node %d: no database stock\n", i + 1);
                return -1;
            }
    return 0;
}

/* ---- what the cluster says ---- */

const char *th_patroni_url(const th_patroni *c, int i, char *buf, size_t size)
{
    snprintf(buf, size, "postgresql://stock@127.0.0.1:%d/stock", c->node[i].port);
    return buf;
}

/* Runs sql on node i's database "postgres" quietly: its integer, or -2 when
 * it could not be asked (a node down is no error here). */
static long long ask(const th_patroni *c, int i, const char *sql)
{
    char conninfo[160];
    snprintf(conninfo, sizeof(conninfo), "host=127.0.0.1 port=%d dbname=postgres user=stock "
             "connect_timeout=2", c->node[i].port);
    if (PQping(conninfo) != PQPING_OK)
        return -2;
    char url[128];
    snprintf(url, sizeof(url), "postgresql://stock@127.0.0.1:%d/postgres", c->node[i].port);
    return th_pg_int(url, sql);
}

int th_patroni_leader(const th_patroni *c, int wait_ms)
{
    for (int64_t end = th_now_ms() + wait_ms; th_now_ms() < end; th_sleep_ms(100))
        for (int i = 0; i < TH_PATRONI_NODES; i++) {
            if (c->node[i].pid <= 0)
                continue;
            char url[64];
            th_resp r;
            snprintf(url, sizeof(url), "http://127.0.0.1:%d/primary", c->node[i].api);
            int primary = th_http("GET", url, NULL, &r) == 0 && r.status == 200;
            th_resp_free(&r);
            if (primary && ask(c, i, "SELECT (NOT pg_is_in_recovery())::int") == 1)
                return i;
        }
    return -1;
}

int th_patroni_wait_streaming(const th_patroni *c, int i, int n, int wait_ms)
{
    char sql[200];
    snprintf(sql, sizeof(sql), "SELECT (count(*) >= %d AND count(*) FILTER (WHERE sync_state = "
             "'sync') >= 1 AND NOT pg_is_in_recovery())::int FROM pg_stat_replication WHERE "
             "state = 'streaming'", n);
    for (int64_t end = th_now_ms() + wait_ms; th_now_ms() < end; th_sleep_ms(100))
        if (ask(c, i, sql) == 1)
            return 0;
    return -1;
}

/* One POST to etcd's v3 JSON gateway: the answer, or NULL. */
static json_t *etcd_post(const th_patroni *c, const char *path, const char *body)
{
    char url[96];
    th_resp r;
    snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", c->etcd_port, path);
    json_t *j = th_http("POST", url, body, &r) == 0 && r.status == 200 && r.body
                    ? json_loads(r.body, 0, NULL) : NULL;
    th_resp_free(&r);
    return j;
}

/* An int64 of etcd's JSON (written as a string of digits), or -1. */
static long long etcd_int(const json_t *j, const char *key)
{
    const json_t *v = json_object_get(j, key);
    return json_is_string(v) ? atoll(json_string_value(v))
           : json_is_integer(v) ? json_integer_value(v) : -1;
}

int th_patroni_leader_ttl(const th_patroni *c)
{
    /* "/service/stockd/leader": Patroni's namespace, then the scope */
    json_t *kv = etcd_post(c, "/v3/kv/range", "{\"key\":\"L3NlcnZpY2Uvc3RvY2tkL2xlYWRlcg==\"}");
    if (kv == NULL)
        return -2;
    long long lease = etcd_int(json_array_get(json_object_get(kv, "kvs"), 0), "lease");
    json_decref(kv);
    if (lease <= 0)
        return -1;
    char body[64];
    snprintf(body, sizeof(body), "{\"ID\":%lld}", lease);
    json_t *t = etcd_post(c, "/v3/lease/timetolive", body);
    long long ttl = t ? etcd_int(t, "TTL") : -2;
    json_decref(t);
    return ttl < -1 ? -2 : ttl < 0 ? -1 : (int)ttl;
}
