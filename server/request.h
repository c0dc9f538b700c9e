/* request.h - parsing and validation of request bodies and path/query values.
 * Pure functions (no I/O, no globals): the fuzz targets call them directly. */
#ifndef REQUEST_H
#define REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "server/proxies.h"
#include "server/rules.h"

enum req_code {
    REQ_OK = 0,
    REQ_ERR_JSON = -1,    /* not a JSON object: answer 400 invalid_json */
    REQ_ERR_INVALID = -2, /* a field is missing, mistyped or out of range: 400 invalid_request */
    REQ_ERR_FRAMING = -3, /* the body's length is ambiguous: 400 bad_framing, then close */
    REQ_ERR_CODING = -4,  /* a transfer coding other than chunked: 501, then close */
    REQ_ERR_HEAD = -5,    /* headers past RULE_HEAD_*: 431, then close */
};

typedef struct req_line {
    int64_t item_id, quantity;
} req_line;

/* An order: the one line of POST /reduceStock, or the lines of POST /orders
 * (1..RULE_ORDER_LINES_MAX, distinct items, in the client's order). */
typedef struct req_order {
    int has_request_id;
    char request_id[RULE_REQUEST_ID_MAX + 1];
    int has_buyer_id; /* buyerId: who takes it, counted against items' per-buyer limits */
    char buyer_id[RULE_BUYER_ID_MAX + 1];
    int64_t work_ms; /* 0 when absent */
    char token_name[RULE_TOKEN_NAME_MAX + 1]; /* the caller's API token's name, "" for none
                                               * (set by the handler, for the log) */
    char client[PROXIES_TEXT_MAX]; /* who asked (http_client), for the log; "" unknown */
    int nlines;
    req_line lines[RULE_ORDER_LINES_MAX];
} req_order;

typedef struct req_item {
    int has_name, has_stock;
    char name[RULE_NAME_BYTES + 1];
    int64_t stock;
    int has_request_id; /* POST /items: its idempotency key, as an order's */
    char request_id[RULE_REQUEST_ID_MAX + 1];
    int64_t per_buyer_limit; /* perBuyerLimit: POST 0 when absent (none); PUT -1 when
                              * absent (left as it is), 0 for null (cleared) */
} req_item;

/* POST /reservations: an order's lines, requestId and buyerId, and how long
 * to hold them. */
typedef struct req_reservation {
    req_order order;
    int64_t hold_ms; /* 0 when absent: the server's default */
} req_reservation;

/* POST /orders/{id}/cancel: an optional body. */
typedef struct req_cancel {
    int has_request_id;
    char request_id[RULE_REQUEST_ID_MAX + 1];
} req_cancel;

/* Body of POST /reduceStock: {"itemId","quantity","requestId"?,"workMs"?},
 * an order of one line; unknown fields are ignored, duplicate keys refused.
 * Returns REQ_OK or an error with a message for the client in err. */
int req_parse_reduce(const char *body, size_t len, req_order *out, char *err, size_t errlen);

/* Body of POST /orders: {"lines":[{"itemId","quantity"}, ...],
 * "requestId"?,"workMs"?}: 1..RULE_ORDER_LINES_MAX lines, each checked as
 * /reduceStock checks its fields, no item twice; messages name the line
 * ("lines[2]: ..."). Returns as req_parse_reduce. */
int req_parse_order(const char *body, size_t len, req_order *out, char *err, size_t errlen);

/* Body of POST /items ({"name","stock"} both required, "requestId" and
 * "perBuyerLimit" (1..RULE_STOCK_MAX) optional) or PUT /items/{id}
 * ({"stock"} and "perBuyerLimit" (a number sets it, null clears it), at
 * least one of them; the others ignored) depending on need_name. */
int req_parse_item(const char *body, size_t len, int need_name, req_item *out, char *err,
                   size_t errlen);

/* Body of POST /reservations: {"lines":[...],"holdMs"?,"requestId"?,
 * "buyerId"?}: lines, requestId and buyerId as POST /orders checks them;
 * holdMs RULE_HOLD_MS_MIN..max_hold_ms. Returns as req_parse_reduce. */
int req_parse_reservation(const char *body, size_t len, int64_t max_hold_ms,
                          req_reservation *out, char *err, size_t errlen);

/* Body of POST /reservations/{id}/extend: {"holdMs"} required,
 * RULE_HOLD_MS_MIN..max_hold_ms. Returns as req_parse_reduce. */
int req_parse_extend(const char *body, size_t len, int64_t max_hold_ms, int64_t *hold_ms,
                     char *err, size_t errlen);

/* Body of POST /orders/{id}/cancel: none (len 0), or {"requestId"?}.
 * Returns as req_parse_reduce. */
int req_parse_cancel(const char *body, size_t len, req_cancel *out, char *err, size_t errlen);

/* How a request's body is framed, from its header fields as libmicrohttpd
 * 0.9.75 hands them over (RFC 9112 6.1 and 6.3). Behind a proxy that frames
 * a request otherwise (one Content-Length of two, Content-Length instead of
 * Transfer-Encoding, "chunked " trimmed to chunked), the bytes one of us
 * takes for a body the other runs as a request: request smuggling. So the
 * check takes only the shapes libmicrohttpd reads as any reader would, and
 * refuses the rest before a byte of the body is read. Zero it (set http10),
 * then req_framing_add each header field. */
typedef struct req_framing {
    int http10;         /* an HTTP/1.0 request: no Transfer-Encoding there */
    int lengths;        /* Content-Length fields */
    int encodings;      /* Transfer-Encoding fields */
    int length_digits;  /* the first Content-Length is digits alone */
    int chunked;        /* the first Transfer-Encoding is "chunked" exactly, in any case */
    int other_coding;   /* a Transfer-Encoding names a coding other than chunked */
    char coding[32];    /* the first Transfer-Encoding field, cut, for the message */
    char bad_name[32];  /* the first field name that is no token, that only looks
                           like a framing field, or that was folded; cut; "" when none */
    const char *bad_why; /* what is wrong with bad_name */
} req_framing;

/* Counts field name: value (any other field is only checked for its shape).
 * folded: the field came on more than one line (obs-fold), which
 * libmicrohttpd 0.9.75 reads by gluing the next line to the field's name. */
void req_framing_add(req_framing *f, const char *name, const char *value, int folded);

/* REQ_OK when libmicrohttpd reads the body's length as the message says it,
 * one way: no body framing, one Content-Length of digits alone, or one
 * Transfer-Encoding "chunked" exactly (in any case; no blank, list or
 * repeat around it) and not in HTTP/1.0; and every field name a token, on
 * one line, with no carriage return in a value. REQ_ERR_CODING: one
 * Transfer-Encoding field naming a coding other than chunked. Else
 * REQ_ERR_FRAMING. A message for the client in err. */
int req_check_framing(const req_framing *f, char *err, size_t errlen);

/* A request's head against the limits of rules.h: zero it, then
 * req_head_add each header field. */
typedef struct req_head {
    int fields;
    size_t longest;     /* the longest field line, "Name: value" */
    char long_name[32]; /* its name, cut */
} req_head;

void req_head_add(req_head *h, const char *name, size_t name_len, size_t value_len);

/* REQ_OK, or REQ_ERR_HEAD with a message in err: a head of head_size bytes
 * (its request line, fields and line ends) over RULE_HEAD_MAX, more than
 * RULE_HEAD_FIELDS_MAX fields, or a field's line over RULE_HEAD_LINE_MAX. */
int req_check_head(const req_head *h, size_t head_size, char *err, size_t errlen);

/* A decimal id 1..INT64_MAX with no sign, spaces or leading zeros. 0 or -1. */
int req_parse_id(const char *s, int64_t *out);

/* An optional integer query value in [min, max] (NULL gives def). 0 or -1. */
int req_parse_int_arg(const char *s, int64_t def, int64_t min, int64_t max, int64_t *out);

#endif
