/* store_backend.c - what every storage backend shares beneath the seam of
 * store_backend.h: helpers the backends call, so that none calls back up
 * into store.c (which calls them). */
#include "store_backend.h"

#include <stdio.h>
#include <string.h>

void store_order_written(const store_new_order *o, store_order *out)
{
    out->info.has_request_id = o->request_id != NULL;
    snprintf(out->info.request_id, sizeof(out->info.request_id), "%s",
             o->request_id ? o->request_id : "");
    snprintf(out->info.instance, sizeof(out->info.instance), "%s", o->instance);
    snprintf(out->info.lock_mode, sizeof(out->info.lock_mode), "%s", o->lock_mode);
    out->nlines = o->nlines;
    memcpy(out->lines, o->lines, (size_t)o->nlines * sizeof(o->lines[0]));
}
