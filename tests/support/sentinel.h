/* sentinel.h - Redis watched by Sentinel for the tests: one primary, two
 * replicas and three redis-sentinel processes on free loopback ports, with
 * a generated config in a temp dir and a short down-after (1 s), so that a
 * primary killed or stopped is failed over within seconds. Every process
 * is stopped by its PID (harness.h). */
#ifndef TEST_SENTINEL_H
#define TEST_SENTINEL_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "tests/support/harness.h"

#define TH_SENTINEL_DATA 3 /* data servers: data[0] starts as the primary */
#define TH_SENTINELS 3
#define TH_SENTINEL_MASTER "mymaster"
#define TH_SENTINEL_DOWN_MS 1000 /* down-after-milliseconds */

typedef struct th_sentinels {
    th_redis data[TH_SENTINEL_DATA];
    th_redis sentinel[TH_SENTINELS]; /* pid, port, and the Sentinels' password */
    char dir[64];
    char list[128]; /* "127.0.0.1:p1,127.0.0.1:p2,...": --redis-sentinel's value */
} th_sentinels;

/* Starts the data servers (the replicas in sync before going on), then the
 * Sentinels, and waits until each sees both replicas and the other
 * Sentinels. With data_pw, the data servers require it (and the replicas
 * and Sentinels use it); with sentinel_pw, so do the Sentinels. Either may
 * be NULL. Fails the running test when something does not start. */
void th_sentinels_start_auth(th_sentinels *s, const char *data_pw, const char *sentinel_pw);

/* The same without passwords. */
void th_sentinels_start(th_sentinels *s);

/* The index in data[] of the server the first Sentinel that answers names
 * as primary, or -1. */
int th_sentinels_primary(const th_sentinels *s);

/* Waits up to timeout_ms until a Sentinel names a primary other than
 * data[old] and that server answers ROLE as a master: its index, or -1. */
int th_sentinels_wait_failover(const th_sentinels *s, int old, int timeout_ms);

/* Stops every Sentinel and data server still running (SIGCONT first for
 * one stopped). */
void th_sentinels_stop(th_sentinels *s);

/* A fake Sentinel: answers what real Sentinels can't be made to on demand -
 * a primary address the test chooses (a replica's: a stale answer), and a
 * +switch-master the test sends while the old primary stays alive, as one
 * cut off from the Sentinels would. It speaks enough RESP for libdlock:
 * SENTINEL get-master-addr-by-name, SUBSCRIBE and PING (anything else
 * gets an error). On a free loopback port; its threads are the test's. */
#define TH_FAKE_SENTINEL_CONNS 32

typedef struct th_fake_sentinel {
    int lfd, port;
    _Atomic int primary;     /* the port it names (host 127.0.0.1) */
    _Atomic int stop, nsubs; /* subscribers so far */
    pthread_mutex_t mu;      /* guards fds, nconns and each connection's writes */
    int fds[TH_FAKE_SENTINEL_CONNS], subscribed[TH_FAKE_SENTINEL_CONNS], nconns;
    pthread_t acceptor, threads[TH_FAKE_SENTINEL_CONNS];
} th_fake_sentinel;

/* Starts one naming 127.0.0.1:primary_port as the primary of
 * TH_SENTINEL_MASTER; its list entry is "127.0.0.1:<f->port>". */
void th_fake_sentinel_start(th_fake_sentinel *f, int primary_port);

/* Names 127.0.0.1:new_port from now on and tells every subscriber so with
 * a +switch-master message. */
void th_fake_sentinel_switch(th_fake_sentinel *f, int new_port);

/* Waits (10 s at most, TH_SLOWER times) until n connections subscribed. */
void th_fake_sentinel_wait_subscribed(th_fake_sentinel *f, int n);

/* Closes every connection and joins the threads. */
void th_fake_sentinel_stop(th_fake_sentinel *f);

#endif
