/* fuzz_request.c - libFuzzer target over every request-body and path/query
 * parser stockd exposes to clients, and the framing check over the input as
 * a header block. Any crash, leak or UB report is a bug; so is a block the
 * check takes whose body libmicrohttpd and a lenient proxy frame two ways
 * (tests/support/fields.h reads it both ways). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/request.h"
#include "tests/support/fields.h"

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
    req_reservation res;
    req_cancel cancel;
    int64_t hold;
    req_parse_reservation((const char *)data, size, RULE_HOLD_MS_CAP, &res, err, sizeof(err));
    req_parse_extend((const char *)data, size, RULE_HOLD_MS_CAP, &hold, err, sizeof(err));
    req_parse_cancel((const char *)data, size, &cancel, err, sizeof(err));

    char *s = malloc(size + 1); /* path and query values arrive NUL-terminated */
    if (s == NULL)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    int64_t v;
    req_parse_id(s, &v);
    req_parse_int_arg(s, 100, 0, 1000000, &v);
    req_framing f = {0}; /* header values arrive NUL-terminated too */
    req_framing_add(&f, "Transfer-Encoding", s, 0);
    req_framing_add(&f, "Content-Length", s, 0);
    req_framing_add(&f, s, "chunked", 0);
    req_check_framing(&f, err, sizeof(err));
    free(s);

    th_field fields[TH_FIELDS_MAX];
    int n = th_fields_split((const char *)data, size, fields);
    int http10 = size && (data[size - 1] & 1);
    req_head head = {0};
    for (int i = 0; i < n; i++)
        req_head_add(&head, fields[i].name, strlen(fields[i].name), strlen(fields[i].value));
    req_check_head(&head, size, err, sizeof(err));
    if (n >= 0 && th_fields_check(fields, n, http10, err, sizeof(err)) == REQ_OK) {
        th_framing mhd = th_fields_mhd(fields, n);
        th_framing proxy = th_fields_proxy((const char *)data, size);
        /* a refusal by either is no smuggling (libmicrohttpd refuses a
         * length past 64 bits itself, with 413) */
        if (mhd.body == TH_BODY_TO_CLOSE ||
            (mhd.body != TH_BODY_REFUSED && proxy.body != TH_BODY_REFUSED &&
             (proxy.body != mhd.body || proxy.length != mhd.length)))
            abort(); /* taken, and read two ways */
    }
    return 0;
}
