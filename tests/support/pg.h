/* pg.h - a private PostgreSQL server for tests: one cluster in a temp dir on a
 * free loopback port, started and stopped by the postmaster's PID like the
 * harness's other processes (killed at exit, its dir removed). */
#ifndef TEST_PG_H
#define TEST_PG_H

#include <stddef.h>
#include <sys/types.h>

/* The password of the role stock_secret, the one role that must
 * authenticate (scram-sha-256 over TCP); every other role is trusted. */
#define TH_PG_SECRET "stock-test-secret"

typedef struct th_pg {
    pid_t pid;     /* the postmaster, 0 when stopped */
    int port;      /* chosen by th_pg_start on first start, kept across restarts */
    char dir[64];  /* private temp dir (th_tempdir): data/, the socket, postgres.log */
    char url[192]; /* "postgresql://stock@127.0.0.1:<port>/stock" */
    /* set before th_pg_start for a server with ssl=on: its PEM certificate
     * and key (copied into dir, the key readable by the server alone) */
    const char *ssl_cert, *ssl_key;
} th_pg;

/* 1 when the server's binaries (initdb, postgres) are installed: the highest
 * /usr/lib/postgresql/<version>/bin, else `pg_config --bindir`. 0 otherwise;
 * tests then skip. */
int th_pg_available(void);

/* Starts the server on a zero-initialised pg, or restarts a stopped one on
 * its port and data. The first call makes the cluster (initdb --no-sync:
 * superuser "stock", UTF8; pg_hba: local trust, stock_secret by password on
 * 127.0.0.1, everyone else trusted there), then the role stock_secret (LOGIN
 * CREATEDB, TH_PG_SECRET, may create tables in public of every database made
 * later) and the database "stock". The server runs with fsync=off (tests
 * survive server restarts, not OS crashes) and max_connections=200, and
 * with ssl=on when pg->ssl_cert and ssl_key are set. Waits up
 * to 15 s until it accepts connections. As root, initdb and postgres run as
 * the user "postgres", which owns pg->dir. Returns 0, or -1 after printing
 * why and the tail of the log to stderr. */
int th_pg_start(th_pg *pg);

/* Starts a zero-initialised standby as a streaming replica of the running
 * primary: pg_basebackup of primary into its own temp dir, standby.signal,
 * and primary_conninfo to 127.0.0.1:via_port (primary->port, or a proxy's
 * in front of it) as application_name "standby" (the name
 * synchronous_standby_names gives it); then th_pg_start, which takes it
 * as a hot standby once consistent. Returns 0, or -1 (printed). */
int th_pg_start_standby(th_pg *standby, const th_pg *primary, int via_port);

/* Stops the server by its PID: sig is SIGINT (fast shutdown), SIGQUIT
 * (immediate, as a crash would) or SIGKILL (the postmaster alone; its
 * backends follow). Reaps it, then waits until its port is free and no
 * backend is left (at most about 10 s; stragglers are killed). Keeps port and
 * data for th_pg_start. A stopped pg is a no-op. */
void th_pg_stop(th_pg *pg, int sig);

/* Drops database name if it exists (forcing its sessions out) and creates it
 * afresh, owned by stock; its URL goes into url. name must be URL-safe (for
 * example [a-z0-9_]). Returns 0, or -1 (printed). */
int th_pg_create_db(const th_pg *pg, const char *name, char *url, size_t size);

/* Runs sql on a new connection to url and returns the first column of the
 * first row as an integer: -1 when there is no row or it is NULL, -2 on an
 * error (printed). */
long long th_pg_int(const char *url, const char *sql);

/* Runs sql (one or several statements, as one implicit transaction) on a new
 * connection to url. Returns 0, or -1 (printed). */
int th_pg_exec(const char *url, const char *sql);

/* The database a store suite's test runs on, the same tests on each
 * backend in two cmocka groups: a SQLite file in a temp dir, then a
 * database of a private PostgreSQL server; a fresh one for every test.
 * th_be is the suite's: one per process. */
typedef struct th_backend {
    int on_pg;         /* the group running: 0 SQLite, 1 PostgreSQL */
    th_pg server;      /* PostgreSQL's, from th_backend_pg to th_backend_pg_end */
    char dir[64];      /* the SQLite files' temp dir (th_tempdir) */
    char target[256];  /* the current test's database: a file, or a URL */
} th_backend;

extern th_backend th_be;

/* cmocka group set-ups and tear-down (state unused): the SQLite group
 * begins; the PostgreSQL group begins, its server started (-1, printed,
 * when it could not be); the PostgreSQL group ends, its server stopped. */
int th_backend_sqlite(void **state);
int th_backend_pg(void **state);
int th_backend_pg_end(void **state);

/* A fresh database for the next test (prefix names the SQLite files' temp
 * dir), into th_be.target. Returns 0, or -1 (printed). */
int th_backend_fresh(const char *prefix);

#endif
