/* sweepfill.c - bench/sweep.sh's helper: N reservations of one unit of an
 * item, held HOLD_MS, made through the store's API on stockd's database (what
 * POST /reservations writes), in transactions of 1000, so that they lapse
 * within the time it takes to make them. Prints how long that took.
 * Usage: sweepfill DB ITEM N HOLD_MS */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "server/store.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: sweepfill DB ITEM N HOLD_MS\n");
        return 2;
    }
    long long item = atoll(argv[2]), n = atoll(argv[3]), hold = atoll(argv[4]);
    store_config cfg = {.db = argv[1], .sync_full = 0, .busy_timeout_ms = 30000,
                        .pool_size = 2, .timeout_ms = 30000};
    char err[256];
    store *st;
    store_conn *c;
    if (store_open(&cfg, &st, err, sizeof(err)) != STORE_OK ||
        store_get(st, &c, err, sizeof(err)) != STORE_OK) {
        fprintf(stderr, "sweepfill: %s\n", err);
        return 1;
    }
    double t0 = now_s();
    for (long long done = 0; done < n;) {
        int rc = store_tx_begin(c);
        for (int k = 0; rc == STORE_OK && k < 1000 && done < n; k++, done++) {
            store_new_reservation r = {.instance = "bench", .hold_ms = hold, .nlines = 1};
            r.lines[0] = (store_line){.item_id = item, .quantity = 1};
            store_reservation out;
            rc = store_tx_reserve(c, &r, &out);
        }
        if (rc == STORE_OK)
            rc = store_tx_commit(c, NULL);
        if (rc != STORE_OK) {
            fprintf(stderr, "sweepfill: %d %s\n", rc, store_errstr(c));
            return 1;
        }
    }
    printf("%.2f\n", now_s() - t0);
    store_put(st, c);
    store_close(st);
    return 0;
}
