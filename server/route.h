/* route.h - maps an HTTP method and path to one of stockd's routes.
 * Pure (no I/O, no globals), so it can be fuzzed. */
#ifndef ROUTE_H
#define ROUTE_H

#include <stdint.h>

enum route_id {
    ROUTE_NOT_FOUND, /* no such path: 404 not_found */
    ROUTE_REDUCE,    /* POST /reduceStock */
    ROUTE_ITEMS,     /* GET, POST /items */
    ROUTE_ITEM,      /* GET, PUT /items/{id} */
    ROUTE_ORDERS,    /* POST /orders */
    ROUTE_ORDER,     /* GET /orders/{id} */
    ROUTE_HEALTH,    /* GET /health */
    ROUTE_METRICS,   /* GET /metrics */
    ROUTE_RESERVATIONS,        /* POST /reservations */
    ROUTE_RESERVATION,         /* GET /reservations/{id} */
    ROUTE_RESERVATION_CONFIRM, /* POST /reservations/{id}/confirm */
    ROUTE_RESERVATION_CANCEL,  /* POST /reservations/{id}/cancel */
    ROUTE_RESERVATION_EXTEND,  /* POST /reservations/{id}/extend */
    ROUTE_ORDER_CANCEL,        /* POST /orders/{id}/cancel */
    ROUTE_COUNT
};

/* Who may ask a route: each role's tokens come from --api-tokens-file
 * (auth.h), which also says which roles are closed. An operator may do
 * whatever a buyer may. */
enum route_role {
    ROUTE_ROLE_OPEN,     /* anyone: /health, for load balancers */
    ROUTE_ROLE_BUYER,    /* orders, reservations, an order's cancel, and reading items,
                          * orders and reservations */
    ROUTE_ROLE_OPERATOR, /* the catalog: POST /items, PUT /items/{id} */
    ROUTE_ROLE_SCRAPE,   /* /metrics */
    ROUTE_ROLE_COUNT
};

typedef struct route_result {
    enum route_id id;
    int method_ok;     /* 0: the path exists but not for this method (405) */
    const char *allow; /* the path's methods, for the Allow header */
    int bad_id;        /* a route with an id whose id is not 1..INT64_MAX (400) */
    int64_t path_id;   /* ROUTE_ITEM, ROUTE_ORDER, ROUTE_RESERVATION*, ROUTE_ORDER_CANCEL:
                        * the id in the path */
    enum route_role role; /* the role this method on this path needs */
} route_result;

/* Matches method (GET, HEAD, POST, PUT, ...) and path (no query string). */
void route_match(const char *method, const char *path, route_result *out);

/* Short name of a route for logs and metrics labels ("reduceStock", ...). */
const char *route_name(enum route_id id);

/* "open", "buyer", "operator", "scrape": a role's name in the tokens file
 * and the logs; NULL past ROUTE_ROLE_COUNT. */
const char *route_role_name(enum route_role role);

/* Whether a route is an operator's probe (/health, /metrics): answered on a
 * thread of its own, so that a flood of orders never holds it up. */
int route_is_probe(enum route_id id);

#endif
