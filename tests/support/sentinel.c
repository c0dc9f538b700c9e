/* sentinel.c - a primary, two replicas and three Sentinels for the tests,
 * and a fake Sentinel that answers what the test says. */
#include "tests/support/sentinel.h"

#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

/* A field of SENTINEL MASTER's flat array as a number, or -1. */
static long master_field(const th_redis *sentinel, const char *field)
{
    redisContext *c = th_redis_connect(sentinel);
    redisReply *r = c && !c->err ? redisCommand(c, "SENTINEL MASTER %s", TH_SENTINEL_MASTER)
                                 : NULL;
    long v = -1;
    for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2)
        if (strcmp(r->element[i]->str, field) == 0)
            v = atol(r->element[i + 1]->str);
    freeReplyObject(r);
    redisFree(c);
    return v;
}

static void wait_in_sync(const th_redis *replica)
{
    for (int64_t end = th_now_ms() + 10000;; th_sleep_ms(20)) {
        redisContext *c = th_redis_connect(replica);
        redisReply *r = c && !c->err ? redisCommand(c, "INFO replication") : NULL;
        int up = r && r->str && strstr(r->str, "master_link_status:up");
        freeReplyObject(r);
        redisFree(c);
        if (up)
            return;
        if (th_now_ms() > end)
            fail_msg("replica on port %d never caught up", replica->port);
    }
}

static void start_data(th_sentinels *s, const char *pw)
{
    for (int i = 0; i < TH_SENTINEL_DATA; i++) {
        snprintf(s->data[i].password, sizeof(s->data[i].password), "%s", pw ? pw : "");
        assert_int_equal(th_redis_start(&s->data[i]), 0);
        if (pw) /* any of them may be a replica one day */
            assert_int_equal(th_redis_int(&s->data[i], "CONFIG SET masterauth %s", pw), 0);
    }
    for (int i = 0; i < TH_SENTINEL_DATA; i++) /* a diskless sync would wait 5 s for more */
        assert_int_equal(th_redis_int(&s->data[i], "CONFIG SET repl-diskless-sync-delay 0"), 0);
    for (int i = 1; i < TH_SENTINEL_DATA; i++)
        assert_int_equal(th_redis_int(&s->data[i], "REPLICAOF 127.0.0.1 %d", s->data[0].port),
                         0);
    for (int i = 1; i < TH_SENTINEL_DATA; i++)
        wait_in_sync(&s->data[i]);
}

/* Sentinel i's config (Sentinel rewrites it, so it lives in the temp dir).
 * Each is told its own id, the other Sentinels and the replicas, which it
 * would otherwise learn from hello messages every 2 s: set-up costs less. */
static void start_sentinel(th_sentinels *s, int i)
{
    th_redis *t = &s->sentinel[i];
    char conf[128];
    snprintf(conf, sizeof(conf), "%s/sentinel-%d.conf", s->dir, t->port);
    FILE *f = fopen(conf, "w");
    assert_non_null(f);
    fprintf(f, "port %d\nbind 127.0.0.1\ndaemonize no\ndir %s\nlogfile %s/sentinel-%d.log\n"
               "sentinel myid %040d\n"
               "sentinel monitor %s 127.0.0.1 %d 2\n"
               "sentinel down-after-milliseconds %s %d\n"
               "sentinel failover-timeout %s 3000\n"
               "sentinel parallel-syncs %s 2\n",
            t->port, s->dir, s->dir, t->port, i + 1, TH_SENTINEL_MASTER, s->data[0].port,
            TH_SENTINEL_MASTER, TH_SENTINEL_DOWN_MS, TH_SENTINEL_MASTER, TH_SENTINEL_MASTER);
    for (int k = 0; k < TH_SENTINELS; k++)
        if (k != i)
            fprintf(f, "sentinel known-sentinel %s 127.0.0.1 %d %040d\n", TH_SENTINEL_MASTER,
                    s->sentinel[k].port, k + 1);
    for (int k = 1; k < TH_SENTINEL_DATA; k++)
        fprintf(f, "sentinel known-replica %s 127.0.0.1 %d\n", TH_SENTINEL_MASTER,
                s->data[k].port);
    if (s->data[0].password[0])
        fprintf(f, "sentinel auth-pass %s %s\n", TH_SENTINEL_MASTER, s->data[0].password);
    if (t->password[0]) /* its own, and the one it gives the other Sentinels */
        fprintf(f, "requirepass %s\nsentinel sentinel-pass %s\n", t->password, t->password);
    fclose(f);
    const char *argv[] = {"redis-sentinel", conf, NULL};
    t->pid = th_spawn(argv, NULL);
    assert_true(t->pid > 0);
    snprintf(s->list + strlen(s->list), sizeof(s->list) - strlen(s->list), "%s127.0.0.1:%d",
             s->list[0] ? "," : "", t->port);
}

void th_sentinels_start(th_sentinels *s) { th_sentinels_start_auth(s, NULL, NULL); }

void th_sentinels_start_auth(th_sentinels *s, const char *data_pw, const char *sentinel_pw)
{
    memset(s, 0, sizeof(*s));
    assert_int_equal(th_tempdir("sentinel-it", s->dir, sizeof(s->dir)), 0);
    for (int i = 0; i < TH_SENTINELS; i++)
        snprintf(s->sentinel[i].password, sizeof(s->sentinel[i].password), "%s",
                 sentinel_pw ? sentinel_pw : "");
    start_data(s, data_pw);
    for (int i = 0; i < TH_SENTINELS; i++) { /* each known to the others before it starts */
        int taken;
        do {
            s->sentinel[i].port = th_free_port();
            taken = 0;
            for (int k = 0; k < i; k++)
                taken |= s->sentinel[k].port == s->sentinel[i].port;
        } while (taken);
    }
    for (int i = 0; i < TH_SENTINELS; i++)
        start_sentinel(s, i);
    for (int i = 0; i < TH_SENTINELS; i++) /* told in the config: at once */
        for (int64_t end = th_now_ms() + 15000;; th_sleep_ms(50)) {
            if (master_field(&s->sentinel[i], "num-slaves") == TH_SENTINEL_DATA - 1 &&
                master_field(&s->sentinel[i], "num-other-sentinels") == TH_SENTINELS - 1)
                break;
            if (th_now_ms() > end)
                fail_msg("Sentinel on port %d never saw the others (see %s)",
                         s->sentinel[i].port, s->dir);
        }
}

int th_sentinels_primary(const th_sentinels *s)
{
    for (int i = 0; i < TH_SENTINELS; i++) {
        if (s->sentinel[i].pid <= 0)
            continue;
        redisContext *c = th_redis_connect(&s->sentinel[i]);
        redisReply *r = c && !c->err ? redisCommand(c, "SENTINEL get-master-addr-by-name %s",
                                                    TH_SENTINEL_MASTER)
                                     : NULL;
        int port = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2
                       ? atoi(r->element[1]->str) : 0;
        freeReplyObject(r);
        redisFree(c);
        for (int k = 0; port && k < TH_SENTINEL_DATA; k++)
            if (s->data[k].port == port)
                return k;
    }
    return -1;
}

/* Whether data server i answers ROLE as a master. */
static int is_master(const th_redis *r)
{
    redisContext *c = th_redis_connect(r);
    redisReply *rep = c && !c->err ? redisCommand(c, "ROLE") : NULL;
    int yes = rep && rep->type == REDIS_REPLY_ARRAY && rep->elements > 0 &&
              strcmp(rep->element[0]->str, "master") == 0;
    freeReplyObject(rep);
    redisFree(c);
    return yes;
}

int th_sentinels_wait_failover(const th_sentinels *s, int old, int timeout_ms)
{
    for (int64_t end = th_now_ms() + timeout_ms; th_now_ms() < end; th_sleep_ms(20)) {
        int now = th_sentinels_primary(s);
        if (now >= 0 && now != old && is_master(&s->data[now]))
            return now;
    }
    return -1;
}

void th_sentinels_stop(th_sentinels *s)
{
    for (int i = 0; i < TH_SENTINELS; i++)
        if (s->sentinel[i].pid > 0)
            th_redis_stop(&s->sentinel[i], 1);
    for (int i = 0; i < TH_SENTINEL_DATA; i++)
        if (s->data[i].pid > 0) {
            th_signal(s->data[i].pid, SIGCONT, 0);
            th_redis_stop(&s->data[i], 1);
        }
}

/* ---- a fake Sentinel ---- */

/* Writes text whole to connection i (f->mu held). */
static void fake_send(th_fake_sentinel *f, int i, const char *text)
{
    size_t len = strlen(text), off = 0;
    while (off < len) {
        ssize_t n = send(f->fds[i], text + off, len - off, MSG_NOSIGNAL);
        if (n <= 0)
            return;
        off += (size_t)n;
    }
}

/* Answers one command (its arguments joined by blanks) on connection i. */
static void fake_answer(th_fake_sentinel *f, int i, const char *cmd)
{
    char out[640]; /* a SUBSCRIBE's answer echoes its channel */
    pthread_mutex_lock(&f->mu);
    if (strncasecmp(cmd, "SENTINEL get-master-addr-by-name ", 33) == 0) {
        char port[16];
        int n = snprintf(port, sizeof(port), "%d", atomic_load(&f->primary));
        snprintf(out, sizeof(out), "*2\r\n$9\r\n127.0.0.1\r\n$%d\r\n%s\r\n", n, port);
    } else if (strncasecmp(cmd, "SUBSCRIBE ", 10) == 0) {
        snprintf(out, sizeof(out), "*3\r\n$9\r\nsubscribe\r\n$%zu\r\n%s\r\n:1\r\n",
                 strlen(cmd + 10), cmd + 10);
        f->subscribed[i] = 1;
        atomic_fetch_add(&f->nsubs, 1);
    } else if (strncasecmp(cmd, "PING", 4) == 0) {
        snprintf(out, sizeof(out), "%s", f->subscribed[i] ? "*2\r\n$4\r\npong\r\n$0\r\n\r\n"
                                                          : "+PONG\r\n");
    } else {
        snprintf(out, sizeof(out), "-ERR the fake Sentinel knows no such command\r\n");
    }
    fake_send(f, i, out);
    pthread_mutex_unlock(&f->mu);
}

/* One complete RESP array command at the start of buf (len bytes) into cmd
 * (arguments joined by blanks): its length in buf, or 0 when incomplete. */
static size_t fake_parse(const char *buf, size_t len, char *cmd, size_t size)
{
    const char *p = buf, *end = buf + len;
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    if (*p != '*' || nl == NULL)
        return 0;
    int argc = atoi(p + 1);
    p = nl + 1;
    cmd[0] = '\0';
    for (int a = 0; a < argc; a++) {
        if (p >= end || *p != '$' || (nl = memchr(p, '\n', (size_t)(end - p))) == NULL)
            return 0;
        long n = atol(p + 1);
        p = nl + 1;
        if (end - p < n + 2)
            return 0;
        size_t used = strlen(cmd);
        snprintf(cmd + used, size - used, "%s%.*s", a ? " " : "", (int)n, p);
        p += n + 2;
    }
    return (size_t)(p - buf);
}

struct fake_conn {
    th_fake_sentinel *f;
    int i;
};

static void *fake_serve(void *arg)
{
    struct fake_conn c = *(struct fake_conn *)arg;
    free(arg);
    char buf[4096], cmd[512];
    size_t have = 0;
    for (;;) {
        ssize_t n = recv(c.f->fds[c.i], buf + have, sizeof(buf) - have, 0);
        if (n <= 0)
            return NULL;
        have += (size_t)n;
        size_t used;
        while ((used = fake_parse(buf, have, cmd, sizeof(cmd))) > 0) {
            fake_answer(c.f, c.i, cmd);
            memmove(buf, buf + used, have - used);
            have -= used;
        }
        if (have == sizeof(buf))
            return NULL; /* no command is that long */
    }
}

static void *fake_accept(void *arg)
{
    th_fake_sentinel *f = arg;
    while (!atomic_load(&f->stop)) {
        struct pollfd p = {.fd = f->lfd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0)
            continue;
        int fd = accept(f->lfd, NULL, NULL);
        if (fd < 0)
            continue;
        pthread_mutex_lock(&f->mu);
        struct fake_conn *c = malloc(sizeof(*c));
        if (f->nconns == TH_FAKE_SENTINEL_CONNS || c == NULL) {
            pthread_mutex_unlock(&f->mu);
            free(c);
            close(fd);
            continue;
        }
        *c = (struct fake_conn){f, f->nconns};
        f->fds[f->nconns] = fd;
        if (pthread_create(&f->threads[f->nconns], NULL, fake_serve, c) == 0)
            f->nconns++;
        else
            close(fd), free(c);
        pthread_mutex_unlock(&f->mu);
    }
    return NULL;
}

void th_fake_sentinel_start(th_fake_sentinel *f, int primary_port)
{
    memset(f, 0, sizeof(*f));
    atomic_store(&f->primary, primary_port);
    pthread_mutex_init(&f->mu, NULL);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(f->lfd >= 0);
    assert_int_equal(bind(f->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(f->lfd, 16), 0);
    assert_int_equal(getsockname(f->lfd, (struct sockaddr *)&a, &alen), 0);
    f->port = ntohs(a.sin_port);
    assert_int_equal(pthread_create(&f->acceptor, NULL, fake_accept, f), 0);
}

void th_fake_sentinel_switch(th_fake_sentinel *f, int new_port)
{
    int old = atomic_exchange(&f->primary, new_port);
    char msg[96], out[160];
    int n = snprintf(msg, sizeof(msg), "%s 127.0.0.1 %d 127.0.0.1 %d", TH_SENTINEL_MASTER, old,
                     new_port);
    snprintf(out, sizeof(out), "*3\r\n$7\r\nmessage\r\n$14\r\n+switch-master\r\n$%d\r\n%s\r\n",
             n, msg);
    pthread_mutex_lock(&f->mu);
    for (int i = 0; i < f->nconns; i++)
        if (f->subscribed[i])
            fake_send(f, i, out);
    pthread_mutex_unlock(&f->mu);
}

void th_fake_sentinel_wait_subscribed(th_fake_sentinel *f, int n)
{
    for (int64_t end = th_now_ms() + 10000 * TH_SLOWER; atomic_load(&f->nsubs) < n;
         th_sleep_ms(10))
        if (th_now_ms() > end)
            fail_msg("the fake Sentinel has %d subscribers, not %d", atomic_load(&f->nsubs), n);
}

void th_fake_sentinel_stop(th_fake_sentinel *f)
{
    atomic_store(&f->stop, 1);
    pthread_join(f->acceptor, NULL);
    pthread_mutex_lock(&f->mu);
    for (int i = 0; i < f->nconns; i++)
        shutdown(f->fds[i], SHUT_RDWR); /* its thread's recv returns */
    pthread_mutex_unlock(&f->mu);
    for (int i = 0; i < f->nconns; i++) {
        pthread_join(f->threads[i], NULL);
        close(f->fds[i]);
    }
    close(f->lfd);
    pthread_mutex_destroy(&f->mu);
}
