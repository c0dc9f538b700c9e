/* profile.h - a target profile (--api FILE): how to buy from, create, restock
 * and read an item of someone else's inventory API, and how to read its
 * answers, so that loadgen's load and verdict work on any service, not only
 * stockd. The file's grammar is in docs/loadgen.md ("Testing another service").
 *
 * A profile is parsed and checked once (every mistake is refused with the
 * key it is in); afterwards it is read-only and may be shared by threads. */
#ifndef LG_PROFILE_H
#define LG_PROFILE_H

#include <stddef.h>

#include "loadgen/answer.h"
#include "loadgen/api.h"
#include "loadgen/err.h"

/* Room for the header lines a profile adds to one request, rendered. */
#define LG_PROFILE_HEADERS_MAX 1024
/* The longest string id loadgen keeps for an item (longer ones are refused). */
#define LG_PROFILE_ID_MAX 128

typedef struct lg_profile lg_profile;

/* An item's id as the service gave it: an integer, or a string. */
typedef struct lg_profile_id {
    long long num;   /* the integer id; for a string id, what loadgen calls it (k + 1) */
    char *str;       /* NULL for an integer id; else the id (its owner frees it) */
} lg_profile_id;

/* The placeholders' values for one request; a NULL string (or NULL item)
 * has no value, and a template that names it fails to render. */
typedef struct lg_profile_vars {
    const lg_profile_id *item;       /* {item} */
    long long quantity, stock;       /* {quantity}, {stock} */
    const char *request, *buyer, *name; /* {request}, {buyer}, {name} */
} lg_profile_vars;

/* The calls a profile describes. */
enum lg_profile_call { LG_PROFILE_BUY, LG_PROFILE_CREATE, LG_PROFILE_SET_STOCK,
                       LG_PROFILE_READ, LG_PROFILE_CALLS };

/* The parts of a request lg_profile_render writes. */
enum lg_profile_part { LG_PROFILE_PATH, LG_PROFILE_HEADERS, LG_PROFILE_BODY };

/* Reads and checks the profile file at path. Returns 0 with *out set (free
 * with lg_profile_free), or LG_ERR_USAGE with err saying "profile PATH: KEY:
 * what is wrong" (or that the file cannot be read), or LG_ERR_NOMEM. */
int lg_profile_load(const char *path, lg_profile **out, lg_err *err);

/* The same from text (len bytes); name is what messages call it. */
int lg_profile_parse(const char *name, const char *text, size_t len, lg_profile **out,
                     lg_err *err);

void lg_profile_free(lg_profile *p);

/* The "name" key ("" when none). */
const char *lg_profile_name(const lg_profile *p);

/* Whether the profile describes call (create and set_stock are optional). */
int lg_profile_has(const lg_profile *p, int call);

/* Whether its read gives the units sold / the orders counted (the ledger). */
int lg_profile_has_sold(const lg_profile *p);
int lg_profile_has_orders(const lg_profile *p);

/* call's method ("POST") and its path as the profile wrote it ("/items/{item}"). */
const char *lg_profile_method(const lg_profile *p, int call);
const char *lg_profile_path(const lg_profile *p, int call);

/* Whether call's path or headers hold a placeholder (then each request's
 * head is its own). */
int lg_profile_head_varies(const lg_profile *p, int call);

/* Whether call has a body; *json gets 1 when it is a JSON one and no header
 * of the profile names a Content-Type (then it is sent as application/json). */
int lg_profile_has_body(const lg_profile *p, int call, int *json);

/* Writes one part of call's request into buf (size bytes, NUL-terminated):
 * the path (placeholders URL-escaped), the header lines ("Name: value\r\n"
 * each, the profile's then the call's), or the body (in a JSON body a string
 * that is exactly one placeholder becomes the typed value, a placeholder in a
 * longer string is JSON-escaped text; a text body gets the values as they
 * are). Returns the length, or -1 when it does not fit or a placeholder it
 * names has no value in v. Thread-safe. */
int lg_profile_render(const lg_profile *p, int call, int part, const lg_profile_vars *v,
                      char *buf, size_t size);

/* Classifies an answer to a buy by the profile's answers rules (the first
 * that matches decides). An ok rule with a `remaining` pointer fills
 * out->remaining, or makes the answer LG_OUT_MALFORMED when no integer is
 * there. An answer no rule matches: 2xx LG_OUT_MALFORMED, 4xx
 * LG_OUT_OTHER_4XX, else LG_OUT_UNKNOWN. out->quantity stays -1; out->code
 * gets the matched rule's `equals` when it is a string. body may be NULL or
 * unterminated (len counts it). Never fails; thread-safe. */
void lg_profile_classify(const lg_profile *p, long status, const char *body, size_t len,
                         lg_answer *out);

/* What answers to create and read say (profile_io.h makes the calls):
 * whether status is one create.status allows (any 2xx when it names none);
 * the new item's id at create.id (id->str allocated for a string id); the
 * item's stock, and sold / order_count when read names them (else -1;
 * reserved and returned -1). The last two return 0, LG_ERR_SETUP with why
 * saying what is missing, or LG_ERR_NOMEM. */
int lg_profile_created(const lg_profile *p, long status);
int lg_profile_answer_id(const lg_profile *p, const char *body, size_t len, lg_profile_id *id,
                         char *why, size_t whysize);
int lg_profile_answer_state(const lg_profile *p, const char *body, size_t len,
                            lg_item_state *st, char *why, size_t whysize);

/* Parses an id given on the command line (--item): an integer >= 1, or a
 * string id of 1..LG_PROFILE_ID_MAX printable characters (id->str
 * allocated; id->num = k + 1). Returns 0, LG_ERR_USAGE or LG_ERR_NOMEM. */
int lg_profile_id_parse(const char *text, int k, lg_profile_id *id, lg_err *err);

/* Frees id->str. */
void lg_profile_id_free(lg_profile_id *id);

#endif
