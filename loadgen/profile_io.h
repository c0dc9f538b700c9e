/* profile_io.h - the blocking calls an --api profile describes: create an
 * item, set its stock, read its state, each on the blocking client of api.h,
 * with errors that name the URL and the answer (what a user sees first when
 * the profile and the service disagree).
 *
 * Thread safety: every call is independent (its own connection); the profile
 * is only read. */
#ifndef LG_PROFILE_IO_H
#define LG_PROFILE_IO_H

#include "loadgen/api.h"
#include "loadgen/err.h"
#include "loadgen/profile.h"

/* Creates an item named name with stock units on base ("http://host:port")
 * and fills *id (id->str allocated for a string id: free it with
 * lg_profile_id_free). Returns 0, LG_ERR_TRANSPORT, LG_ERR_SETUP (an answer
 * create's status does not allow, no id at the pointer, or the profile has
 * no create) or LG_ERR_NOMEM, with err naming the URL and the answer. */
int lg_profile_create(const lg_profile *p, const char *base, const char *name, long long stock,
                      lg_profile_id *id, lg_err *err);

/* Sets item id's stock with set_stock. Returns 0, LG_ERR_TRANSPORT or
 * LG_ERR_SETUP (not a 2xx, or no set_stock in the profile). */
int lg_profile_set_stock(const lg_profile *p, const char *base, const lg_profile_id *id,
                         long long stock, lg_err *err);

/* Reads item id with read into *st: stock, and sold / order_count when the
 * profile names them (else -1); reserved and returned -1; st->id = id->num.
 * timeout_ms > 0 bounds the exchange. Returns 0, LG_ERR_TRANSPORT,
 * LG_ERR_LATER (a 429 or 503: ask again), or LG_ERR_SETUP (another non-2xx,
 * or no integer at a pointer). */
int lg_profile_read(const lg_profile *p, const char *base, const lg_profile_id *id,
                    int timeout_ms, lg_item_state *st, lg_err *err);

#endif
