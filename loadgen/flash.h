/* flash.h - a flash sale (--buyers N, --procs P): the descriptors it needs
 * checked against RLIMIT_NOFILE (the soft limit raised to the hard one), the
 * buyers spread over P processes (fork) that connect, wait at one barrier and
 * fire together, the replicas watched meanwhile (watch.h), and everything
 * merged into one lg_sale and one lg_result for the verdict and the report.
 *
 * Thread safety: call from a process with no other thread running (it forks). */
#ifndef LG_FLASH_H
#define LG_FLASH_H

#include "loadgen/err.h"
#include "loadgen/opts.h"
#include "loadgen/result.h"
#include "loadgen/sale.h"
#include "loadgen/shape.h"

/* Descriptors one loadgen process keeps beyond its buyers' (stdio, epoll,
 * the watcher's and the read-back's calls). */
#define LG_FLASH_FD_RESERVE 64

/* Raises the soft RLIMIT_NOFILE to the hard one (s->nofile_was, s->nofile
 * say from what to what) and checks that buyers spread over procs fit in it.
 * 0, or LG_ERR_USAGE naming --procs and the count that would fit. */
int lg_flash_limits(int buyers, int procs, lg_sale *s, lg_err *err);

/* The largest share of buyers one process may hold under a soft limit of nofile. */
int lg_flash_capacity(long long nofile);

typedef struct lg_flash_cfg {
    const lg_target *targets;
    int ntargets;
    int buyers, procs;
    const char *run_id;    /* at most 32 characters */
    const lg_shape *shape; /* one /reduceStock line per buyer */
    int timeout_ms;
} lg_flash_cfg;

/* Runs the sale. s comes from lg_sale_init (and lg_flash_limits); res is
 * filled (free with lg_result_free) with one batch per process. Returns 0
 * (whatever became of the buyers: s says), or LG_ERR_TRANSPORT (a target's
 * name does not resolve) / LG_ERR_NOMEM / LG_ERR_SYS / LG_ERR_USAGE with err
 * filled and res empty. */
int lg_flash_run(const lg_flash_cfg *c, lg_sale *s, lg_result *res, lg_err *err);

#endif
