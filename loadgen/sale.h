/* sale.h - what a flash sale (--buyers) records and how it is put together:
 * one record per buyer (its fate, status and latency from the fire), the
 * source address each buyer connects from, the merge of every process's
 * buyers into one lg_sale and one lg_result (counts summed, histograms
 * merged), and the reading of a replica's /metrics process_* series. Pure:
 * no I/O; the engine is buyers.h, the processes and the fire flash.h.
 *
 * Thread safety: none; an lg_sale is filled by one thread after the sale. */
#ifndef LG_SALE_H
#define LG_SALE_H

#include <netinet/in.h>
#include <stdint.h>

#include "loadgen/hist.h"
#include "loadgen/opts.h"
#include "loadgen/result.h"

/* What became of one buyer. Only ANSWERED got an HTTP answer: a connection
 * closed without one is its own class, never ok. */
enum lg_buyer_fate {
    LG_BUYER_NOT_FIRED = 0,   /* its process failed before the fire */
    LG_BUYER_CONNECT_FAILED,  /* no connection: refused, reset or timed out connecting */
    LG_BUYER_UNANSWERED,      /* connected, then closed without an answer */
    LG_BUYER_TIMED_OUT,       /* no answer within --timeout-ms of the fire */
    LG_BUYER_ANSWERED,
};

/* One buyer, as its process leaves it in shared memory. 16 bytes. */
typedef struct lg_buyer {
    long long remaining; /* the stock its 200 or 409 reported, else -1 */
    uint32_t latency_us; /* from the fire to its answer (ANSWERED only) */
    uint16_t status;     /* HTTP status, 0 without an answer */
    uint8_t outcome;     /* enum lg_outcome (LG_OUT_TRANSPORT without an answer) */
    uint8_t fate;        /* enum lg_buyer_fate */
} lg_buyer;

/* One process's share of the buyers: buyers first .. first + n - 1. */
typedef struct lg_sale_part {
    int first, n;
    int64_t fire_ns;  /* lg_now_ns() at its fire; 0 when it never fired */
    int64_t last_ns;  /* its last buyer's end */
    char error[200];  /* why the process failed, "" */
} lg_sale_part;

#define LG_SALE_STATUS_MAX 600 /* statuses 100..599 are counted, others as 0 */

/* A replica's process_* series at their peak during the sale; -1 when never read. */
typedef struct lg_sale_peak {
    long long threads;   /* process_threads; -1 when the replica does not export it */
    long long rss_bytes; /* process_resident_memory_bytes */
    long long open_fds;  /* process_open_fds */
    int scrapes, failed; /* GET /metrics answered 200 / not */
} lg_sale_peak;

/* The whole sale, merged. */
typedef struct lg_sale {
    int buyers, procs;
    long long nofile_was, nofile; /* the soft RLIMIT_NOFILE before and after raising it */
    uint64_t fates[LG_BUYER_ANSWERED + 1]; /* buyers per enum lg_buyer_fate */
    uint64_t status[LG_SALE_STATUS_MAX];   /* answers per HTTP status */
    hist *fire;                   /* us from the fire to each answer */
    hist *health;                 /* us per /health probe answered during the sale */
    uint64_t health_failed;       /* probes without a 200 within their time-out */
    int ntargets;
    lg_sale_peak peaks[LG_MAX_TARGETS];
    char error[200];              /* the first process failure, "" */
} lg_sale;

/* Zeroes s for ntargets replicas with empty histograms and unread peaks.
 * 0 or LG_ERR_NOMEM (lg_sale_free releases what was made). */
int lg_sale_init(lg_sale *s, int ntargets);

void lg_sale_free(lg_sale *s);

/* The address buyer g (0-based, over every process) connects from:
 * 127.x.y.z with z in 1..254, from 127.1.0.1 on, one address a buyer, so a
 * replica's per-address limit is not what refuses them. Port 0. */
void lg_sale_src(int g, struct sockaddr_in *sa);

/* The target buyer g talks to, as the load engine spreads connections. */
int lg_sale_target(int g, int ntargets);

/* Starts res for a sale: run_id, ntargets tallies, nbatch batches (one per
 * process) empty. 0 or LG_ERR_NOMEM. */
int lg_sale_result_init(lg_result *res, const char *run_id, int ntargets, int nbatch);

/* Merges part b's buyers (buyers[0..part->n), part->first being buyer 0's
 * global index) into s and into res: its fates and statuses summed, its
 * latencies into a histogram merged into s->fire, one record of one line
 * (item 0, quantity qty) per buyer into batch b, whose requestIds are
 * "<run_id>-<b>-<index in part>", and the outcomes into res's tallies.
 * res->start_ns and elapsed_s span the earliest fire to the last end.
 * 0 or LG_ERR_NOMEM. */
int lg_sale_merge(lg_sale *s, lg_result *res, int b, const lg_sale_part *part,
                  const lg_buyer *buyers, int qty);

/* Buyers that got no answer, whatever the reason. */
uint64_t lg_sale_unanswered(const lg_sale *s);

/* The value of the unlabelled series name in Prometheus text (a line
 * "name value"), into *v. 1 when found, 0 when not. */
int lg_sale_metric(const char *text, const char *name, double *v);

/* Raises s's peaks for target t from one /metrics answer (text). */
void lg_sale_peak_from(lg_sale *s, int t, const char *text);

#endif
