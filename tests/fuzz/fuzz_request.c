/* fuzz_request.c - libFuzzer target over every request-body and path/query
 * parser stockd exposes to clients. Any crash, leak or UB report is a bug. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    req_order r;
    req_item it;
    req_parse_reduce((const char *)data, size, &r, err, sizeof(err));
    req_parse_order((const char *)data, size, &r, err, sizeof(err));
    req_parse_item((const char *)data, size, 1, &it, err, sizeof(err));
    req_parse_item((const char *)data, size, 0, &it, err, sizeof(err));

    char *s = malloc(size + 1); /* path and query values arrive NUL-terminated */
    if (s == NULL)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    int64_t v;
    req_parse_id(s, &v);
    req_parse_int_arg(s, 100, 0, 1000000, &v);
    req_framing f = {0}; /* header values arrive NUL-terminated too */
    req_framing_add(&f, "Transfer-Encoding", s);
    req_framing_add(&f, "Transfer-Encoding", s);
    req_check_framing(&f, err, sizeof(err));
    free(s);
    return 0;
}
