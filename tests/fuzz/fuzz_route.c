/* fuzz_route.c - libFuzzer target over HTTP routing: the input is split into
 * a method and a path at the first space, as libmicrohttpd hands them over. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/route.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size + 1);
    if (buf == NULL)
        return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    char *path = strchr(buf, ' ');
    if (path)
        *path++ = '\0';
    route_result r;
    route_match(buf, path ? path : "/", &r);
    (void)route_name(r.id);
    int with_id = r.id == ROUTE_ITEM || r.id == ROUTE_ORDER || r.id == ROUTE_ORDER_CANCEL ||
                  r.id == ROUTE_RESERVATION || r.id == ROUTE_RESERVATION_CONFIRM ||
                  r.id == ROUTE_RESERVATION_CANCEL || r.id == ROUTE_RESERVATION_EXTEND;
    if (with_id && !r.bad_id && r.path_id < 1)
        abort(); /* a valid item route always carries a positive id */
    free(buf);
    return 0;
}
