/* answer.h - turns one HTTP exchange with stockd into an outcome: the status
 * code and the JSON `error` code decide the class, and the fields the verdict
 * needs (quantity, remaining, replayed; per line for an order) are read from
 * the body. Malformed bodies never crash it; they become LG_OUT_MALFORMED or an
 * "other" class. */
#ifndef LG_ANSWER_H
#define LG_ANSWER_H

#include <stddef.h>

/* Outcome classes, in report order. Only LG_OUT_OK deducted stock. A
 * transport error or a malformed 2xx leaves it unknown whether the server
 * deducted (the verdict treats those as undetermined, never as acknowledged). */
enum lg_outcome {
    LG_OUT_OK = 0,           /* 200 (201 for a new order) with a well-formed deduction */
    LG_OUT_INSUFFICIENT,     /* 409 insufficient_stock */
    LG_OUT_LOCK_TIMEOUT,     /* 503 lock_timeout */
    LG_OUT_LOCK_INTERRUPTED, /* 503 lock_interrupted */
    LG_OUT_LOCK_LOST,        /* 503 lock_lost */
    LG_OUT_REDIS_UNAVAILABLE,/* 503 redis_unavailable */
    LG_OUT_OTHER_4XX,        /* any other 4xx */
    LG_OUT_OTHER_5XX,        /* any other 5xx (storage_busy, shutting_down, ...) */
    LG_OUT_COMMIT_UNKNOWN,   /* 503 commit_unknown: the database went away during COMMIT */
    LG_OUT_TRANSPORT,        /* no HTTP answer: refused, reset, timed out */
    LG_OUT_MALFORMED,        /* a 2xx (or 1xx/3xx) that is not a valid answer */
    /* what an --api profile's classes (profile.h) name, for services other than stockd */
    LG_OUT_RETRY,            /* class "retry": not applied, the service asks to try later */
    LG_OUT_REFUSED,          /* class "refused": not applied, refused for good */
    LG_OUT_UNKNOWN,          /* class "unknown": the service says it may have applied it */
    LG_OUT_COUNT
};

/* Whether an outcome leaves it unknown if the server deducted. */
#define LG_OUT_UNDETERMINED(o) \
    ((o) == LG_OUT_TRANSPORT || (o) == LG_OUT_MALFORMED || (o) == LG_OUT_COMMIT_UNKNOWN || \
     (o) == LG_OUT_UNKNOWN)

typedef struct lg_answer {
    int outcome;         /* enum lg_outcome */
    long long quantity;  /* 200: quantity deducted; 409 insufficient: requested; else -1 */
    long long remaining; /* 200 / 409 insufficient: stock the server reported; else -1 */
    int replayed;        /* 200: the server answered an earlier deduction again */
    char code[40];       /* the JSON `error` code, "" when none or unreadable */
    char why[120];       /* for MALFORMED / other classes: what was wrong, else "" */
} lg_answer;

/* Classifies a /reduceStock answer. body may be NULL or not NUL-terminated
 * (len counts it). Never fails; always fills *out. */
void lg_answer_parse(long status, const char *body, size_t len, lg_answer *out);

/* The most lines one order may have (stockd's limit for POST /orders). */
#define LG_ORDER_LINES_MAX 32

/* One line of a POST /orders request: what was asked, and what the answer
 * said of it. */
typedef struct lg_answer_line {
    long long item_id, quantity; /* in: as sent */
    long long remaining;         /* out: stock after the order (201/200), the remaining a
                                    409 insufficient_stock named this line short with, or -1 */
} lg_answer_line;

/* Classifies a POST /orders answer to the n lines asked (n >= 1), filling
 * lines[].remaining. A 201 or 200 is LG_OUT_OK only when its "lines" repeat the
 * asked ones in order (item and quantity) with an integer remaining each, else
 * LG_OUT_MALFORMED with the reason in out->why (and every remaining -1). In a
 * 409 insufficient_stock, the lines it names short get their remaining; entries
 * naming an item not asked are ignored. out->quantity and out->remaining stay
 * -1. body as for lg_answer_parse. Never fails. */
void lg_answer_parse_order(long status, const char *body, size_t len, lg_answer_line *lines,
                           int n, lg_answer *out);

/* Classifies a raw-mode (--get) answer by status alone: 2xx ok, 4xx/5xx other. */
void lg_answer_status(long status, lg_answer *out);

/* Stable snake_case name of an outcome ("ok", "insufficient_stock", ...), used
 * in the report and the JSON. */
const char *lg_outcome_name(int outcome);

#endif
