/* opts.h - loadgen's command line: the options struct with its defaults, the
 * parser (scenario defaults first, then flags, so every scenario value can be
 * overridden), and the table of flags that --help and the man page print. */
#ifndef LG_OPTS_H
#define LG_OPTS_H

#include <stdio.h>

#include "loadgen/err.h"
#include "loadgen/fault.h"

#define LG_MAX_TARGETS 64
#define LG_URL_MAX 200
#define LG_LABEL_MAX 32
#define LG_PATH_MAX 256
#define LG_ITEMS_MAX 100000 /* --items */
#define LG_BUYERS_MAX 1000000 /* --buyers */
#define LG_PROCS_MAX 256      /* --procs */
#define LG_TOKEN_MAX 512      /* --token: characters of a bearer token */
#define LG_HOLD_MS_MAX 3600000 /* --hold-ms: stockd's default --max-hold-ms */

typedef struct lg_target {
    char label[LG_LABEL_MAX]; /* "" or the LABEL in --target LABEL=URL (compare groups) */
    char url[LG_URL_MAX];     /* "http[s]://host:port", no trailing slash */
} lg_target;

struct lg_profile;

typedef struct lg_opts {
    lg_target targets[LG_MAX_TARGETS];
    int ntargets;
    char scenario[32];   /* "" when none */
    int list;            /* --list: print the scenarios and exit */
    int help;            /* --help: print usage and exit */
    long long requests;  /* total requests; 0 = no limit (then duration_s is set) */
    double duration_s;   /* run length; 0 = until requests are done */
    int concurrency;     /* connections, spread round-robin over the targets */
    int threads;         /* event loops (threads), each owning a share of the connections */
    double rate;         /* requests/s over all connections (open loop); 0 = closed loop */
    long long stock;     /* stock of each item created */
    long long item_id;   /* use this existing item instead of creating; 0 = create (with
                            --api and a string id, 1: item_arg has it) */
    char item_arg[LG_PATH_MAX]; /* --item as given, "" when not */
    int stock_set;       /* --stock was given (with --api and --item: set the stock first) */
    int items;           /* items to spread the load over */
    int qmin, qmax;      /* quantity per request (per line of a cart), uniform in [qmin, qmax] */
    int lmin, lmax;      /* lines per cart, uniform in [lmin, lmax]: POST /orders;
                            0 = POST /reduceStock */
    int work_ms;         /* workMs sent with each request; 0 = not sent */
    int retries;         /* resends of a request that timed out (same requestId) */
    int timeout_ms;      /* per request attempt */
    int settle_s;        /* how long the read-back waits for a target to answer */
    int history_ms;      /* the history check's read interval; 0 = no reads, no check */
    char json_path[LG_PATH_MAX]; /* --json FILE, "" when not asked */
    char html_path[LG_PATH_MAX]; /* --html FILE, "" when not asked */
    char get_path[LG_PATH_MAX];  /* --get PATH: raw mode, "" for /reduceStock */
    int buyers;          /* a flash sale of this many buyers (flash.h); 0 = none */
    int procs;           /* loadgen processes the buyers are spread over */
    /* reservations (--scenario reserve, reserve.h) */
    int reserve;         /* 1: buyers reserve, then confirm, cancel or walk away */
    int hold_ms;         /* holdMs each reservation asks for */
    int share[3];        /* percent of buyers who confirm, cancel, let the hold lapse */
    int buyer_ids;       /* distinct buyerIds the reservations cycle through; 0 = one each */
    long long buyer_limit; /* perBuyerLimit of the items loadgen creates; 0 = none */
    char token[LG_TOKEN_MAX + 1]; /* --token or --token-file's line; "" for none. Never
                                   * printed (the reports say only whether one was sent) */
    /* TLS, for https:// targets (tls.h) */
    char cacert[LG_PATH_MAX]; /* --cacert FILE: the CAs to trust; "" = the system's */
    int insecure;             /* --insecure: verify no certificate (the report says so) */
    /* --api FILE: someone else's inventory API (profile.h) */
    char api_path[LG_PATH_MAX]; /* "" for stockd's own */
    const struct lg_profile *api; /* loaded by main from api_path; NULL for stockd's */
    /* --fault and --fault-end (fault.h): the i-th end undoes the i-th fault */
    lg_fault_spec faults[LG_FAULT_MAX];
    int nfaults, nfault_ends;
} lg_opts;

/* Whether any target is an https:// URL. */
int lg_opts_tls(const lg_opts *o);

/* Sets every field to its default (see --help). */
void lg_opts_defaults(lg_opts *o);

/* Parses argv into o (which it first resets to the defaults, then to the
 * scenario's values when --scenario is given) and validates the result.
 * Returns 0, or LG_ERR_USAGE with err->msg naming the flag and what it expects.
 * Not thread-safe (uses getopt). */
int lg_opts_parse(lg_opts *o, int argc, char **argv, lg_err *err);

/* Adds targets from one --target value: "URL[,URL...]", each optionally
 * "LABEL=URL". Returns 0 or LG_ERR_USAGE. */
int lg_opts_add_targets(lg_opts *o, const char *value, lg_err *err);

/* Prints the --help text. */
void lg_usage(FILE *out);

/* Whether a flag takes a value. */
enum lg_arg { LG_ARG_NONE, LG_ARG_REQUIRED, LG_ARG_OPTIONAL };

/* One flag as getopt, --help and the man page (man/mangen.c) see it. */
typedef struct lg_flag {
    const char *name;  /* without the leading "--" */
    int key;           /* getopt's value: the short letter (-n) when below 256 */
    enum lg_arg has_arg;
    const char *arg;   /* the value's name ("N", "URL[,URL]"), "" without one */
    const char *group; /* the heading this flag starts in --help ("Load"), or NULL */
    const char *help;  /* what it does; '\n' where --help breaks the line */
} lg_flag;

/* Flag i (0 <= i < lg_flag_count()), in --help's order; NULL past the end.
 * Static. */
int lg_flag_count(void);
const lg_flag *lg_flag_at(int i);

#endif
