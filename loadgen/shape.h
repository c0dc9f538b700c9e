/* shape.h - what one request of a run looks like: a POST /reduceStock of one
 * item, or a POST /orders cart of several distinct items. Draws a request's
 * lines, writes its JSON body and reads its answer back into the lines, so the
 * engine sends either kind without knowing which.
 *
 * Thread safety: none needed; the random state belongs to the caller. */
#ifndef LG_SHAPE_H
#define LG_SHAPE_H

#include <stddef.h>
#include <stdint.h>

#include "loadgen/answer.h"
#include "loadgen/profile.h"
#include "loadgen/verdict.h"

typedef struct lg_shape {
    const long long *item_ids; /* the run's items; a line's item indexes this */
    int nitems;
    int qmin, qmax;  /* quantity per line, uniform in [qmin, qmax] */
    int lmin, lmax;  /* lines per cart, uniform in [lmin, lmax]; 0 = POST /reduceStock */
    int work_ms;     /* workMs sent with each request; 0 = not sent */
    /* --api: requests as the profile's buy says (one line each), answers by its
     * rules; api_ids[k] is item k's id as the service has it. NULL: stockd. */
    const lg_profile *api;
    const lg_profile_id *api_ids;
} lg_shape;

/* Room for the body of a cart of LG_ORDER_LINES_MAX lines with the largest
 * ids, quantities and workMs loadgen accepts. */
#define LG_BODY_MAX 2048

/* "/orders" for carts, "/reduceStock" otherwise; with a profile its buy
 * path as written ("/items/{item}/buy"). */
const char *lg_shape_path(const lg_shape *s);

/* Formats the head of a request for host into buf, up to "Content-Length: "
 * (lg_http_head_end completes it). lines and request_id may be NULL when
 * !lg_shape_head_varies(s): the head is then the same for every request.
 * Returns its length, or -1 when it does not fit (or a placeholder has no
 * value). */
int lg_shape_head(const lg_shape *s, const lg_line *lines, const char *request_id,
                  const char *host, char *buf, size_t size);

/* Whether each request needs a head of its own (a profile's path or headers
 * name a placeholder). */
int lg_shape_head_varies(const lg_shape *s);

/* 1 when s can draw requests: items, 1 <= qmin <= qmax, and for carts
 * 1 <= lmin <= lmax <= min(nitems, LG_ORDER_LINES_MAX) (a cart's items are
 * distinct); else 0. */
int lg_shape_valid(const lg_shape *s);

/* Draws request number ticket into lines (room for LG_ORDER_LINES_MAX) and
 * returns how many it drew. A /reduceStock request takes item ticket % nitems
 * (round robin); a cart takes distinct items at random, in random order. Each
 * line's remaining is -1 and seen 0. rng is the caller's xorshift state (not 0). */
int lg_shape_draw(const lg_shape *s, long long ticket, uint64_t *rng, lg_line *lines);

/* Writes the JSON body of a request with these n lines and request_id into buf
 * (size bytes, LG_BODY_MAX is enough); returns its length, or -1 when it does
 * not fit. */
int lg_shape_body(const lg_shape *s, const lg_line *lines, int n, const char *request_id,
                  char *buf, size_t size);

/* Classifies the answer to such a request (lg_answer_parse or
 * lg_answer_parse_order) and stores what it said of each line in
 * lines[].remaining. A /reduceStock 200 for another quantity than asked is
 * LG_OUT_MALFORMED. Never fails. */
void lg_shape_answer(const lg_shape *s, long status, const char *body, size_t len,
                     lg_line *lines, int n, lg_answer *out);

#endif
