/* request.h - parsing and validation of request bodies and path/query values.
 * Pure functions (no I/O, no globals): the fuzz targets call them directly. */
#ifndef REQUEST_H
#define REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "rules.h"

enum req_code {
    REQ_OK = 0,
    REQ_ERR_JSON = -1,    /* not a JSON object: answer 400 invalid_json */
    REQ_ERR_INVALID = -2, /* a field is missing, mistyped or out of range: 400 invalid_request */
};

typedef struct req_reduce {
    int64_t item_id;
    int64_t quantity;
    int has_request_id;
    char request_id[RULE_REQUEST_ID_MAX + 1];
    int64_t work_ms; /* 0 when absent */
} req_reduce;

typedef struct req_item {
    int has_name, has_stock;
    char name[RULE_NAME_BYTES + 1];
    int64_t stock;
} req_item;

/* Body of POST /reduceStock: {"itemId","quantity","requestId"?,"workMs"?};
 * unknown fields are ignored, duplicate keys refused. Returns REQ_OK or an
 * error with a message for the client in err. */
int req_parse_reduce(const char *body, size_t len, req_reduce *out, char *err, size_t errlen);

/* Body of POST /items ({"name","stock"} both required) or PUT /items/{id}
 * ({"stock"} required, "name" ignored) depending on need_name. */
int req_parse_item(const char *body, size_t len, int need_name, req_item *out, char *err,
                   size_t errlen);

/* A decimal id 1..INT64_MAX with no sign, spaces or leading zeros. 0 or -1. */
int req_parse_id(const char *s, int64_t *out);

/* An optional integer query value in [min, max] (NULL gives def). 0 or -1. */
int req_parse_int_arg(const char *s, int64_t def, int64_t min, int64_t max, int64_t *out);

#endif
