/* rules.h - the service's data rules, each defined once: what an item name, a
 * quantity, a stock, a requestId, a page or a request body may be. The
 * parser checks them, the store sizes its rows by them, the HTTP layer pages
 * by them, and docs/http-api.md states them. */
#ifndef RULES_H
#define RULES_H

#define RULE_QUANTITY_MAX 1000000          /* units per line */
#define RULE_STOCK_MAX 1000000000000LL     /* 10^12 */
#define RULE_WORK_MS_MAX 86400000          /* simulated work a request may ask for */
#define RULE_REQUEST_ID_MAX 128            /* printable ASCII characters */
#define RULE_NAME_MAX 200                  /* characters of an item name */
#define RULE_NAME_BYTES (RULE_NAME_MAX * 4) /* ... in UTF-8 bytes at the most */
#define RULE_BUYER_ID_MAX 128              /* printable ASCII characters of a buyerId */
#define RULE_INSTANCE_MAX 128              /* bytes of a replica's name in the ledger */
#define RULE_LOCK_MODE_MAX 7               /* bytes of "redis", "none", "atomic" */
#define RULE_ORDER_LINES_MAX 32            /* lines in one order */
#define RULE_PAGE_MAX 1000                 /* rows in one listing answer; more by ?after= */
#define RULE_BODY_MAX (16 * 1024)          /* request body bytes; larger gets 413 */
#define RULE_HEAD_MAX (16 * 1024)          /* a request's head: its line and header fields
                                            * (nginx 4 x 8k, Apache 100 x 8 KiB); larger 431 */
#define RULE_HEAD_FIELDS_MAX 100           /* header fields in one request; more gets 431 */
#define RULE_HEAD_LINE_MAX (8 * 1024)      /* bytes of one field's line, "Name: value" */
#define RULE_TOKEN_NAME_MAX 64             /* bytes of an API token's name (logged) */
#define RULE_HOLD_MS_MIN 1000              /* a reservation's holdMs, at least */
#define RULE_HOLD_MS_CAP 604800000LL       /* ... and at most (--max-hold-ms can't exceed it):
                                            * a week */

#endif
