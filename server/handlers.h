/* handlers.h - stockd's routes (/reduceStock, /orders, /orders/{id}, /items,
 * /items/{id}, /health, /metrics), one handler each: it parses the request
 * with request.h, calls one service_* function and answers JSON. main gives
 * handlers_answer to http_start; http.c calls it for every request it did not
 * refuse itself. */
#ifndef HANDLERS_H
#define HANDLERS_H

#include "server/http.h"

/* Answers rq (its route matched and allowed, its body read whole), asking
 * rq->svc, once the service is done with it. An http_handler: runs on the
 * connection's event thread and never blocks there (an order or a stock set
 * waits as memory; a read goes to a service thread, /health and /metrics to
 * the probes' one). Thread-safe, as the service is. */
void handlers_answer(http_request *rq);

#endif
