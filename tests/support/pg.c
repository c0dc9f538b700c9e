/* pg.c - a private PostgreSQL server for tests: initdb once into a temp dir,
 * then the postmaster started and stopped by PID through the harness, as
 * Debian's postgres user when the tests run as root (postgres refuses root). */
#include "tests/support/pg.h"

#include "tests/support/harness.h"

#include <dirent.h>
#include <glob.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libpq-fe.h>

#define START_MS 15000
#define STOP_MS 10000
#define INITDB_MS 120000
#define LOG_TAIL_LINES 20

/* Where initdb and postgres live; found once by th_pg_available. */
static char bindir[PATH_MAX];

static int has_server(const char *dir)
{
    char initdb[PATH_MAX + 16], postgres[PATH_MAX + 16];
    snprintf(initdb, sizeof(initdb), "%s/initdb", dir);
    snprintf(postgres, sizeof(postgres), "%s/postgres", dir);
    return access(initdb, X_OK) == 0 && access(postgres, X_OK) == 0;
}

/* The highest version's bin directory (strverscmp: 9.6 < 15 < 16). */
static void find_debian_bindir(void)
{
    glob_t g;
    if (glob("/usr/lib/postgresql/*/bin/initdb", 0, NULL, &g) != 0)
        return;
    const char *best = NULL;
    for (size_t i = 0; i < g.gl_pathc; i++)
        if (best == NULL || strverscmp(g.gl_pathv[i], best) > 0)
            best = g.gl_pathv[i];
    if (best) {
        snprintf(bindir, sizeof(bindir), "%s", best);
        *strrchr(bindir, '/') = '\0';
    }
    globfree(&g);
}

static void find_pg_config_bindir(void)
{
    FILE *p = popen("pg_config --bindir 2>/dev/null", "r");
    if (p == NULL)
        return;
    if (fgets(bindir, sizeof(bindir), p) == NULL)
        bindir[0] = '\0';
    bindir[strcspn(bindir, "\n")] = '\0';
    pclose(p);
}

int th_pg_available(void)
{
    if (bindir[0] && has_server(bindir))
        return 1;
    find_debian_bindir();
    if (!bindir[0] || !has_server(bindir))
        find_pg_config_bindir();
    if (bindir[0] && has_server(bindir))
        return 1;
    bindir[0] = '\0';
    return 0;
}

/* The user the server runs as: NULL (the caller) unless that is root. */
static const char *server_user(void)
{
    return getuid() == 0 ? "postgres" : NULL;
}

/* Gives path to the server's user, when that is not the caller. */
static int own(const char *path)
{
    const char *user = server_user();
    if (user == NULL)
        return 0;
    struct passwd *pw = getpwnam(user);
    if (pw == NULL || chown(path, pw->pw_uid, pw->pw_gid) != 0) {
        fprintf(stderr, "harness: cannot give %s to user %s (is postgresql installed?)\n", path,
                user);
        return -1;
    }
    return 0;
}

/* The start of text's last n lines. */
static const char *tail_of(const char *text, int n)
{
    const char *p = text + strlen(text);
    if (p > text && p[-1] == '\n')
        p--; /* the last line's own end */
    while (p > text && !(p[-1] == '\n' && --n == 0))
        p--;
    return p;
}

/* Prints why, then the last lines of the log that says more. */
static void fail(const th_pg *pg, const char *why, const char *log_name)
{
    char log[128];
    snprintf(log, sizeof(log), "%s/%s", pg->dir, log_name);
    fprintf(stderr, "harness: postgres on port %d: %s; the end of %s:\n", pg->port, why, log);
    char *text = th_read_file(log);
    const char *tail = text ? tail_of(text, LOG_TAIL_LINES) : "(no log)\n";
    fprintf(stderr, "%s%s", tail, *tail && tail[strlen(tail) - 1] == '\n' ? "" : "\n");
    free(text);
}

static int write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return -1;
    int ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok ? own(path) : -1;
}

/* initdb into <dir>/data, and a pg_hba.conf where only stock_secret needs a
 * password (first match wins, so its line comes before the trusted ones);
 * stock may stream WAL to a standby (th_pg_start_standby). */
static int init_cluster(th_pg *pg)
{
    char bin[PATH_MAX + 16], data[96], hba[128];
    snprintf(bin, sizeof(bin), "%s/initdb", bindir);
    snprintf(data, sizeof(data), "%s/data", pg->dir);
    snprintf(hba, sizeof(hba), "%s/pg_hba.conf", data);
    const char *argv[] = {bin, "-D", data, "-U", "stock", "-E", "UTF8", "--locale=C.UTF-8",
                          "--auth=trust", "--no-sync", NULL};
    char log[128];
    snprintf(log, sizeof(log), "%s/initdb.log", pg->dir);
    pid_t pid = th_spawn_as(argv, log, server_user());
    /* Interrupted, initdb lets its backend finish the step (which then frees
     * its shared memory) and removes what it made; killed, it leaks both. */
    th_exit_signal(pid, SIGINT);
    int status = pid > 0 ? th_wait(pid, INITDB_MS) : -1;
    if (status != 0) {
        fail(pg, "initdb failed", "initdb.log");
        return -1;
    }
    if (write_file(hba, "local all all trust\n"
                        "host all stock_secret 127.0.0.1/32 scram-sha-256\n"
                        "host all all 127.0.0.1/32 trust\n"
                        "host replication stock 127.0.0.1/32 trust\n") != 0) {
        fprintf(stderr, "harness: cannot write %s\n", hba);
        return -1;
    }
    return 0;
}

/* pg->ssl_cert and ssl_key into dir as server.crt and server.key, the
 * server's, the key 0600 (PostgreSQL refuses one others may read). */
static int copy_ssl(const th_pg *pg)
{
    const char *from[] = {pg->ssl_cert, pg->ssl_key}, *to[] = {"server.crt", "server.key"};
    for (int i = 0; i < 2; i++) {
        char path[128], *text = th_read_file(from[i]);
        snprintf(path, sizeof(path), "%s/%s", pg->dir, to[i]);
        int rc = text ? write_file(path, text) : -1;
        free(text);
        if (rc != 0 || chmod(path, 0600) != 0 || own(path) != 0) {
            fprintf(stderr, "harness: cannot copy %s to %s\n", from[i], path);
            return -1;
        }
    }
    return 0;
}

/* Starts the postmaster and waits until it accepts connections, or exits. */
static int run_server(th_pg *pg)
{
    char bin[PATH_MAX + 16], data[96], port[16], log[128], conninfo[192];
    snprintf(bin, sizeof(bin), "%s/postgres", bindir);
    snprintf(data, sizeof(data), "%s/data", pg->dir);
    snprintf(port, sizeof(port), "%d", pg->port);
    snprintf(log, sizeof(log), "%s/postgres.log", pg->dir);
    /* Asked through its socket in our dir: only our server answers there, and
     * it makes that socket after its TCP one (a foreign server holding the
     * port would answer on TCP, while ours exits). */
    snprintf(conninfo, sizeof(conninfo),
             "host=%s port=%d dbname=postgres user=stock connect_timeout=2", pg->dir, pg->port);
    /* Dynamic shared memory in the data dir rather than /dev/shm, so that a
     * killed server leaves nothing behind once its temp dir is removed. */
    const char *argv[] = {bin, "-D", data, "-p", port, "-k", pg->dir,
                          "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
                          "-c", "max_connections=200", "-c", "dynamic_shared_memory_type=mmap",
                          NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    char cert[128], key[128];
    if (pg->ssl_cert && pg->ssl_key) {
        if (copy_ssl(pg) != 0)
            return -1;
        snprintf(cert, sizeof(cert), "ssl_cert_file=%s/server.crt", pg->dir);
        snprintf(key, sizeof(key), "ssl_key_file=%s/server.key", pg->dir);
        const char *ssl[] = {"-c", "ssl=on", "-c", cert, "-c", key};
        memcpy(argv + 15, ssl, sizeof(ssl));
    }
    pg->pid = th_spawn_as(argv, log, server_user());
    th_exit_signal(pg->pid, SIGQUIT);
    for (int64_t end = th_now_ms() + START_MS; pg->pid > 0 && th_now_ms() < end;
         th_sleep_ms(20)) {
        char state = th_proc_state(pg->pid);
        if (state == 'Z' || state == 0) {
            th_wait(pg->pid, 1000);
            pg->pid = 0;
            fail(pg, "the server exited", "postgres.log");
            return -1;
        }
        if (PQping(conninfo) == PQPING_OK)
            return 0;
    }
    fail(pg, "not accepting connections within 15 s", "postgres.log");
    if (pg->pid > 0)
        th_signal(pg->pid, SIGQUIT, STOP_MS);
    pg->pid = 0;
    return -1;
}

/* The role that must log in with TH_PG_SECRET, and the database "stock".
 * The grant in template1 passes to every database created from it later,
 * "stock" included; in its own databases stock_secret is the owner anyway. */
static int bootstrap(const th_pg *pg)
{
    char template1[192], postgres[192];
    snprintf(template1, sizeof(template1), "postgresql://stock@127.0.0.1:%d/template1", pg->port);
    snprintf(postgres, sizeof(postgres), "postgresql://stock@127.0.0.1:%d/postgres", pg->port);
    if (th_pg_exec(template1, "CREATE ROLE stock_secret LOGIN CREATEDB PASSWORD '" TH_PG_SECRET
                              "';"
                              "GRANT CREATE ON SCHEMA public TO stock_secret") != 0 ||
        th_pg_exec(postgres, "CREATE DATABASE stock OWNER stock") != 0) {
        fprintf(stderr, "harness: postgres on port %d: could not create stock_secret and the "
                        "database stock\n", pg->port);
        return -1;
    }
    return 0;
}

int th_pg_start(th_pg *pg)
{
    if (!th_pg_available()) {
        fprintf(stderr, "harness: no PostgreSQL server installed (make deps)\n");
        return -1;
    }
    if (!pg->dir[0] && (th_tempdir("stockd-pg", pg->dir, sizeof(pg->dir)) != 0 || own(pg->dir)))
        return -1;
    if (pg->port == 0)
        pg->port = th_free_port();
    snprintf(pg->url, sizeof(pg->url), "postgresql://stock@127.0.0.1:%d/stock", pg->port);

    char version[128];
    snprintf(version, sizeof(version), "%s/data/PG_VERSION", pg->dir);
    int fresh = access(version, F_OK) != 0;
    if (fresh && init_cluster(pg) != 0)
        return -1;
    if (run_server(pg) != 0)
        return -1;
    return fresh ? bootstrap(pg) : 0;
}

int th_pg_start_standby(th_pg *standby, const th_pg *primary, int via_port)
{
    if (!th_pg_available())
        return th_pg_start(standby); /* which says why */
    if (!standby->dir[0] && (th_tempdir("stockd-pg", standby->dir, sizeof(standby->dir)) != 0 ||
                             own(standby->dir)))
        return -1;
    char bin[PATH_MAX + 16], data[96], port[16], log[128], path[128], line[160];
    snprintf(bin, sizeof(bin), "%s/pg_basebackup", bindir);
    snprintf(data, sizeof(data), "%s/data", standby->dir);
    snprintf(port, sizeof(port), "%d", primary->port);
    snprintf(log, sizeof(log), "%s/basebackup.log", standby->dir);
    const char *argv[] = {bin, "-D", data, "-h", "127.0.0.1", "-p", port, "-U", "stock",
                          "-X", "stream", "-c", "fast", "--no-sync", NULL};
    pid_t pid = th_spawn_as(argv, log, server_user());
    if ((pid > 0 ? th_wait(pid, INITDB_MS) : -1) != 0) {
        fail(standby, "pg_basebackup failed", "basebackup.log");
        return -1;
    }
    snprintf(path, sizeof(path), "%s/standby.signal", data);
    if (write_file(path, "") != 0)
        return -1;
    snprintf(path, sizeof(path), "%s/postgresql.auto.conf", data);
    snprintf(line, sizeof(line), "primary_conninfo = 'host=127.0.0.1 port=%d user=stock "
             "application_name=standby'\n", via_port);
    char *conf = th_read_file(path);
    size_t size = (conf ? strlen(conf) : 0) + strlen(line) + 1;
    char *text = malloc(size);
    if (text)
        snprintf(text, size, "%s%s", conf ? conf : "", line);
    int rc = text ? write_file(path, text) : -1;
    free(conf);
    free(text);
    return rc == 0 ? th_pg_start(standby) : -1;
}

/* Processes whose cwd is the data dir: the postmaster's children, who may
 * outlive it a moment; each is sent sig (0: only counted). */
static int backends(const char *data, int sig)
{
    DIR *proc = opendir("/proc");
    struct dirent *e;
    int n = 0;
    while (proc && (e = readdir(proc)) != NULL) {
        char path[300], cwd[PATH_MAX];
        if (e->d_name[0] < '1' || e->d_name[0] > '9')
            continue;
        snprintf(path, sizeof(path), "/proc/%s/cwd", e->d_name);
        ssize_t len = readlink(path, cwd, sizeof(cwd) - 1);
        if (len <= 0)
            continue;
        cwd[len] = '\0';
        if (strcmp(cwd, data) == 0) {
            n++;
            if (sig)
                kill((pid_t)atoi(e->d_name), sig);
        }
    }
    if (proc)
        closedir(proc);
    return n;
}

static int port_listens(int port)
{
    int fd = th_connect(port);
    if (fd >= 0)
        close(fd);
    return fd >= 0;
}

void th_pg_stop(th_pg *pg, int sig)
{
    if (pg->pid <= 0)
        return;
    char data[96], real[PATH_MAX];
    snprintf(data, sizeof(data), "%s/data", pg->dir);
    if (realpath(data, real) == NULL)
        snprintf(real, sizeof(real), "%s", data);
    int64_t end = th_now_ms() + STOP_MS;
    th_signal(pg->pid, sig, STOP_MS - 2000);
    pg->pid = 0;
    /* A new postmaster refuses to start while old backends still hold the
     * cluster's shared memory, so wait for them, not only for the postmaster. */
    while (backends(real, 0) > 0 || port_listens(pg->port)) {
        if (th_now_ms() >= end) {
            fprintf(stderr, "harness: postgres on port %d: killing backends left after "
                            "stopping it\n", pg->port);
            backends(real, SIGKILL);
            break;
        }
        th_sleep_ms(20);
    }
}

/* A connection to url whose NOTICEs ("does not exist, skipping") stay quiet;
 * NULL after printing why. */
static void no_notice(void *arg, const char *message)
{
    (void)arg, (void)message;
}

/* url without its password, for messages: "postgresql://user:***@host...". */
static const char *redact(const char *url, char *buf, size_t size)
{
    const char *user = strstr(url, "://");
    const char *at = user ? strchr(user + 3, '@') : NULL;
    const char *colon = at ? memchr(user + 3, ':', (size_t)(at - user - 3)) : NULL;
    if (colon == NULL)
        return url;
    snprintf(buf, size, "%.*s:***%s", (int)(colon - url), url, at);
    return buf;
}

static PGconn *connect_url(const char *url)
{
    const char *const keys[] = {"dbname", "connect_timeout", NULL};
    const char *const values[] = {url, "10", NULL};
    PGconn *c = PQconnectdbParams(keys, values, 1);
    if (c && PQstatus(c) == CONNECTION_OK) {
        PQsetNoticeProcessor(c, no_notice, NULL);
        return c;
    }
    char shown[256];
    fprintf(stderr, "harness: cannot connect to %s: %s", redact(url, shown, sizeof(shown)),
            c ? PQerrorMessage(c) : "out of memory\n");
    PQfinish(c);
    return NULL;
}

/* Runs sql on c; the result when it succeeded, else NULL (printed). */
static PGresult *run(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(r);
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
        return r;
    fprintf(stderr, "harness: postgres: %s: %s", sql, PQerrorMessage(c));
    PQclear(r);
    return NULL;
}

int th_pg_exec(const char *url, const char *sql)
{
    PGconn *c = connect_url(url);
    PGresult *r = c ? run(c, sql) : NULL;
    PQclear(r);
    PQfinish(c);
    return r ? 0 : -1;
}

long long th_pg_int(const char *url, const char *sql)
{
    PGconn *c = connect_url(url);
    PGresult *r = c ? run(c, sql) : NULL;
    long long v = r == NULL ? -2 : -1;
    if (r && PQntuples(r) > 0 && PQnfields(r) > 0 && !PQgetisnull(r, 0, 0))
        v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    PQfinish(c);
    return v;
}

int th_pg_create_db(const th_pg *pg, const char *name, char *url, size_t size)
{
    char admin[192], sql[256];
    snprintf(admin, sizeof(admin), "postgresql://stock@127.0.0.1:%d/postgres", pg->port);
    PGconn *c = connect_url(admin);
    char *id = c ? PQescapeIdentifier(c, name, strlen(name)) : NULL;
    int rc = -1;
    /* Two round trips: neither statement may run inside a transaction block,
     * which several statements in one query string would make. */
    snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS %s WITH (FORCE)", id ? id : "");
    PGresult *r = id ? run(c, sql) : NULL;
    if (r) {
        PQclear(r);
        snprintf(sql, sizeof(sql), "CREATE DATABASE %s OWNER stock", id);
        r = run(c, sql);
        rc = r ? 0 : -1;
        PQclear(r);
    }
    PQfreemem(id);
    PQfinish(c);
    snprintf(url, size, "postgresql://stock@127.0.0.1:%d/%s", pg->port, name);
    return rc;
}

th_backend th_be;

int th_backend_sqlite(void **state)
{
    (void)state;
    th_be.on_pg = 0;
    return 0;
}

int th_backend_pg(void **state)
{
    (void)state;
    th_be.on_pg = 1;
    return th_pg_start(&th_be.server);
}

int th_backend_pg_end(void **state)
{
    (void)state;
    th_pg_stop(&th_be.server, SIGINT);
    return 0;
}

int th_backend_fresh(const char *prefix)
{
    static int n;
    char name[32];
    th_backend *b = &th_be;
    if (!b->dir[0] && th_tempdir(prefix, b->dir, sizeof(b->dir)) != 0)
        return -1;
    snprintf(name, sizeof(name), "%s%d", b->on_pg ? "db" : "file", n++);
    if (b->on_pg)
        return th_pg_create_db(&b->server, name, b->target, sizeof(b->target));
    if ((size_t)snprintf(b->target, sizeof(b->target), "%s/%s.db", b->dir, name) >=
        sizeof(b->target))
        return -1;
    return 0;
}
