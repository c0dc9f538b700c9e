/* fifobench.c - how often processes waiting for a key get it in the order
 * they asked (issue 23, part 8):
 *   fifobench PORT ROUNDS WAITERS HOLDER_RETRY_MS WAITER_RETRY_MS
 * Each round, a holder process takes the key; WAITERS processes ask for it
 * one after the other (each once the one before is in the key's Redis
 * queue), in notify mode with no hand-off; the holder releases; each
 * waiter holds 20 ms once it has the key. The holder's and the waiters'
 * retry_ms set their graces (2 retry_ms + 100), which size the grants. A
 * waiter is in order when it is the k-th to hold and the k-th to ask.
 * Every process is forked from this one before it makes a client, so no
 * lock client is ever forked. Prints one line of key=value results. */
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lock/dlock.h"

#define KEY "bench:fifo"
#define MAX_WAITERS 16

struct shared {
    _Atomic int held, release;     /* the holder's round: it holds; it may release */
    _Atomic int n;                 /* waiters that held so far this round */
    int order[MAX_WAITERS];        /* who held k-th (written while holding the key) */
    _Atomic int failures;
};

static struct shared *sh;
static int port;

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static dlock_client *client(void)
{
    dlock_config cfg;
    dlock_config_defaults(&cfg);
    cfg.port = port;
    dlock_client *c;
    return dlock_client_new(&cfg, &c) == DLOCK_OK ? c : NULL;
}

static dlock_opts opts(int retry_ms)
{
    dlock_opts o;
    dlock_opts_defaults(&o);
    o.lease_ms = 5000;
    o.wait_ms = 10000;
    o.retry_ms = retry_ms;
    o.handoff_max = 0;
    return o;
}

/* A process's turn: takes the key; the holder (id -1) says so and releases
 * it when told, a waiter notes its place and holds it 20 ms. */
static int take(int id, int retry_ms)
{
    dlock_client *c = client();
    dlock_opts o = opts(retry_ms);
    dlock_handle *h;
    if (c == NULL || dlock_acquire(c, KEY, &o, &h) != DLOCK_OK)
        return 1;
    if (id < 0) {
        atomic_store(&sh->held, 1);
        while (!atomic_load(&sh->release))
            sleep_ms(1);
    } else {
        sh->order[atomic_fetch_add(&sh->n, 1)] = id;
        sleep_ms(20);
    }
    int rc = dlock_release(h);
    dlock_client_free(c);
    return rc == DLOCK_OK ? 0 : 1;
}

/* A child dies with this process (the holder would wait for its release
 * for ever), also when this one died before the prctl. */
static pid_t spawn(int id, int retry_ms)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
            _exit(1);
        _exit(take(id, retry_ms));
    }
    return pid;
}

static long long queued(redisContext *r)
{
    redisReply *rep = redisCommand(r, "ZCARD %s:queue", KEY);
    long long n = rep && rep->type == REDIS_REPLY_INTEGER ? rep->integer : -1;
    freeReplyObject(rep);
    return n;
}

/* Waits up to 10 s for the holder to hold (r NULL) or for n in line. */
static int wait_for(redisContext *r, long long n)
{
    for (int ms = 0; ms < 10000; ms++) {
        if (r ? queued(r) == n : atomic_load(&sh->held))
            return 0;
        sleep_ms(1);
    }
    atomic_fetch_add(&sh->failures, 1);
    return -1;
}

/* One round; returns how many waiters held in their arrival place. */
static int round_once(redisContext *r, int waiters, int holder_retry, int waiter_retry)
{
    atomic_store(&sh->held, 0);
    atomic_store(&sh->release, 0);
    atomic_store(&sh->n, 0);
    pid_t pids[MAX_WAITERS + 1];
    pids[0] = spawn(-1, holder_retry);
    wait_for(NULL, 0);
    for (int i = 0; i < waiters; i++) {
        pids[i + 1] = spawn(i, waiter_retry);
        wait_for(r, i + 1);
    }
    atomic_store(&sh->release, 1);
    for (int i = 0; i <= waiters; i++) {
        int status;
        waitpid(pids[i], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            atomic_fetch_add(&sh->failures, 1);
    }
    int in_order = 0;
    for (int k = 0; k < atomic_load(&sh->n); k++)
        in_order += sh->order[k] == k;
    return in_order;
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: fifobench PORT ROUNDS WAITERS HOLDER_RETRY_MS WAITER_RETRY_MS\n");
        return 2;
    }
    port = atoi(argv[1]);
    int rounds = atoi(argv[2]), waiters = atoi(argv[3]);
    int holder_retry = atoi(argv[4]), waiter_retry = atoi(argv[5]);
    if (waiters < 1 || waiters > MAX_WAITERS || rounds < 1) {
        fprintf(stderr, "fifobench: 1..%d waiters, 1 or more rounds\n", MAX_WAITERS);
        return 2;
    }
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    redisContext *r = redisConnect("127.0.0.1", port);
    if (sh == MAP_FAILED || r == NULL || r->err) {
        fprintf(stderr, "fifobench: no shared memory or no Redis at %d\n", port);
        return 2;
    }
    int in_order = 0, whole = 0;
    for (int i = 0; i < rounds; i++) {
        int k = round_once(r, waiters, holder_retry, waiter_retry);
        in_order += k;
        whole += k == waiters;
    }
    printf("rounds=%d waiters=%d holder_retry_ms=%d waiter_retry_ms=%d in_order_pct=%.1f "
           "rounds_in_order_pct=%.1f failures=%d\n",
           rounds, waiters, holder_retry, waiter_retry, 100.0 * in_order / (rounds * waiters),
           100.0 * whole / rounds, atomic_load(&sh->failures));
    redisFree(r);
    return 0;
}
