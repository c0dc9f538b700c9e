/* handlers.h - stockd's routes (/reduceStock, /orders, /orders/{id}, /items,
 * /items/{id}, /health, /metrics), one handler each: it parses the request
 * with request.h, calls one service_* function and answers JSON. main gives
 * handlers_answer to http_start; http.c calls it for every request it did not
 * refuse itself. */
#ifndef HANDLERS_H
#define HANDLERS_H

#include "server/http.h"

/* Answers rq (its route matched and allowed, its body read whole), asking
 * rq->svc: an order once the service is done with it (perhaps later, from
 * its batch leader's thread), the rest before returning. An http_handler:
 * thread-safe, as the service is. */
void handlers_answer(const http_request *rq);

#endif
