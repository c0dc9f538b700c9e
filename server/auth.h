/* auth.h - who may ask what: the API tokens of --api-tokens-file, each with
 * a role (route.h) and a name, checked against a request's
 * "Authorization: Bearer TOKEN" in constant time, and read again on SIGHUP
 * without a request failing for it.
 *
 * The file has one "ROLE NAME TOKEN" a line, '#' starting a comment: ROLE
 * buyer, operator or scrape; NAME [A-Za-z0-9._@:-], at most
 * RULE_TOKEN_NAME_MAX bytes (what the logs show); TOKEN the token itself
 * (AUTH_TOKEN_MIN.. AUTH_TOKEN_MAX characters of RFC 6750's b64token), or
 * "sha256:" and the 64 hex digits of its SHA-256, so that the file need
 * hold no secret. Only digests are kept in memory.
 *
 * Which roles are closed: with a file, operator always is (its routes
 * answer only an operator's token, even when the file names none); buyer
 * and scrape are once the file has a line of theirs, and are otherwise open
 * to anyone. So a file of operator lines only closes the catalog and leaves
 * buying open, as behind a shop front. Without a file, stockd makes no auth
 * and every route is open. */
#ifndef AUTH_H
#define AUTH_H

#include <stddef.h>

#include "server/route.h"

#define AUTH_TOKEN_MIN 16   /* shorter tokens are refused: guessable */
#define AUTH_TOKEN_MAX 4096
#define AUTH_FILE_MAX (1024 * 1024) /* a longer file is refused */

enum auth_verdict {
    AUTH_OK,        /* the route's role is open, or the token has it */
    AUTH_NO_TOKEN,  /* closed, and no bearer token came: 401 */
    AUTH_BAD_TOKEN, /* closed, and the token is no token of the file's: 401 */
    AUTH_FORBIDDEN, /* a known token without the route's role: 403 */
};

typedef struct auth auth;

/* Reads path. Returns 0 with *out set, or -1 with err filled (naming the
 * line, never a token's text); nothing is kept then. */
int auth_open(const char *path, auth **out, char *err, size_t errlen);

/* Reads the file again and, when it parses, swaps its tokens in at once: a
 * check that starts after this returns sees only the new ones; one already
 * running finishes with the old. When it does not parse, the old tokens stay
 * and err says why: -1. Thread-safe against auth_check. */
int auth_reload(auth *a, char *err, size_t errlen);

/* Whether the Authorization header value authorization (NULL when the
 * request had none) may ask for a route that needs role. When the token is
 * known, its name goes to name (namelen bytes, RULE_TOKEN_NAME_MAX + 1 is
 * enough), else "". a NULL: every route open. Thread-safe; blocks only while
 * a reload swaps its pointer. */
enum auth_verdict auth_check(auth *a, const char *authorization, enum route_role role,
                             char *name, size_t namelen);

/* What the file gave: tokens per role (count[ROUTE_ROLE_COUNT]) and which
 * roles are closed (closed[ROUTE_ROLE_COUNT], 0 or 1), for the start and
 * reload log lines. */
void auth_describe(auth *a, int *count, int *closed);

/* The file's path, as given to auth_open. */
const char *auth_path(const auth *a);

/* Frees a. No check may be running. NULL is a no-op. */
void auth_free(auth *a);

#endif
