/* clusterbench.c - the lock over a Redis Cluster, for bench/cluster.sh:
 *   clusterbench SEEDS THREADS SECONDS one|all
 * THREADS threads of one client (dlock_config_cluster(SEEDS)) acquire and
 * release keys of their own, uncontended, for SECONDS: with "one" every key
 * carries the same hash tag (one slot, one shard), with "all" each its own
 * (slots all over the cluster). Prints one line of key=value results:
 * acquisitions, their rate, the client's CPU, the redirects met. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "lock/dlock.h"

#define KEYS_PER_THREAD 64
#define THREADS_MAX 64

static dlock_client *client;
static int spread_all;
static _Atomic int stop;
static _Atomic unsigned long long done, failed;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *worker(void *arg)
{
    int t = (int)(long)arg;
    dlock_opts o;
    dlock_opts_defaults(&o);
    o.lease_ms = 5000;
    for (unsigned i = 0; !atomic_load(&stop); i++) {
        char key[64];
        int k = (int)(i % KEYS_PER_THREAD);
        if (spread_all)
            snprintf(key, sizeof(key), "cb:{%d.%d}", t, k);
        else
            snprintf(key, sizeof(key), "cb:{one}:%d.%d", t, k);
        dlock_handle *h;
        if (dlock_acquire(client, key, &o, &h) != DLOCK_OK || dlock_release(h) != DLOCK_OK)
            atomic_fetch_add(&failed, 1);
        else
            atomic_fetch_add(&done, 1);
    }
    return NULL;
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: clusterbench SEEDS THREADS SECONDS one|all\n");
        return 2;
    }
    int threads = atoi(argv[2]), seconds = atoi(argv[3]);
    spread_all = strcmp(argv[4], "all") == 0;
    if (threads < 1 || threads > THREADS_MAX || seconds < 1)
        return 2;
    dlock_config cfg;
    dlock_config_defaults(&cfg);
    if (dlock_config_cluster(&cfg, argv[1]) != DLOCK_OK ||
        dlock_client_new(&cfg, &client) != DLOCK_OK) {
        fprintf(stderr, "clusterbench: %s\n", dlock_errstr());
        return 1;
    }
    pthread_t tid[THREADS_MAX];
    double t0 = now_s(), c0 = cpu_s();
    for (int t = 0; t < threads; t++)
        pthread_create(&tid[t], NULL, worker, (void *)(long)t);
    struct timespec wait = {.tv_sec = seconds};
    nanosleep(&wait, NULL);
    atomic_store(&stop, 1);
    for (int t = 0; t < threads; t++)
        pthread_join(tid[t], NULL);
    double elapsed = now_s() - t0, cpu = cpu_s() - c0;
    dlock_stats st;
    dlock_stats_read(client, &st);
    printf("acquired=%llu failed=%llu rate=%.0f client_cpu_per_s=%.2f moved=%llu asked=%llu\n",
           atomic_load(&done), atomic_load(&failed), atomic_load(&done) / elapsed,
           cpu / elapsed, (unsigned long long)st.moved, (unsigned long long)st.asked);
    dlock_client_free(client);
    return 0;
}
