/* test_proxies.c - --trusted-proxies' list and the X-Forwarded-For walk
 * (server/proxies.h): spoofed hops, chains of proxies, blanks, malformed
 * hops, many header lines. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "server/proxies.h"

/* Parses list, which must be good. */
static proxies trust(const char *list)
{
    proxies p;
    char err[256] = "";
    if (proxies_parse(&p, list, err, sizeof(err)) != 0)
        fail_msg("%s: %s", list, err);
    return p;
}

static proxies_addr addr(const char *text)
{
    proxies_addr a;
    assert_int_equal(proxies_addr_parse(&a, text, strlen(text)), 0);
    return a;
}

/* The client's address as text, and its source, of a request from peer
 * with lines of X-Forwarded-For, behind the proxies of list. */
static enum proxies_source client_of(const char *list, const char *peer,
                                     const char *const *lines, int n, char *out)
{
    proxies p = trust(list);
    proxies_addr from = addr(peer), client;
    enum proxies_source src = proxies_client(&p, &from, lines, n, 0, &client);
    proxies_addr_text(&client, out);
    return src;
}

static void test_list_takes_addresses_networks_and_blanks(void **state)
{
    (void)state;
    proxies p = trust(" 10.0.0.0/8 ,192.168.1.7,\t172.16.0.0/12");
    assert_int_equal(p.n, 3);
    proxies_addr in = addr("10.200.3.4"), host = addr("192.168.1.7"), next = addr("192.168.1.8");
    proxies_addr edge = addr("172.31.255.255"), out = addr("172.32.0.0");
    assert_true(proxies_trusts(&p, &in));
    assert_true(proxies_trusts(&p, &host));
    assert_false(proxies_trusts(&p, &next));
    assert_true(proxies_trusts(&p, &edge));
    assert_false(proxies_trusts(&p, &out));
}

static void test_empty_list_trusts_nobody(void **state)
{
    (void)state;
    proxies p = trust("");
    proxies_addr a = addr("127.0.0.1");
    assert_int_equal(p.n, 0);
    assert_false(proxies_trusts(&p, &a));
    p = trust(NULL);
    assert_false(proxies_trusts(&p, &a));
}

static void test_zero_prefix_trusts_every_ipv4_address_and_no_ipv6(void **state)
{
    (void)state;
    proxies p = trust("0.0.0.0/0");
    proxies_addr v4 = addr("203.0.113.9"), v6 = addr("2001:db8::1");
    assert_true(proxies_trusts(&p, &v4));
    assert_false(proxies_trusts(&p, &v6));
}

static void test_bad_entries_are_refused_by_name(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "10.0.0.1/8",       /* host bits past the prefix */
        "10.0.0.0/33", "10.0.0.0/", "10.0.0.0/-1", "10.0.0.0/8x", "10.0.0.0/ 8",
        "10.0.0", "256.0.0.1", "localhost", "::1", "10.0.0.0/8,", ",10.0.0.1",
        "10.0.0.1,,10.0.0.2", " ", "1.2.3.4:80",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        proxies p;
        char err[256] = "";
        if (proxies_parse(&p, bad[i], err, sizeof(err)) == 0)
            fail_msg("'%s' taken", bad[i]);
        assert_non_null(strstr(err, "--trusted-proxies: bad entry '"));
        assert_int_equal(p.n, 0); /* nothing half-trusted */
    }
}

static void test_list_longer_than_the_max_is_refused(void **state)
{
    (void)state;
    char list[PROXIES_MAX * 16 + 32] = "";
    size_t used = 0;
    for (int i = 0; i <= PROXIES_MAX; i++)
        used += (size_t)snprintf(list + used, sizeof(list) - used, "%s10.0.%d.1", i ? "," : "", i);
    proxies p;
    char err[256] = "";
    assert_int_equal(proxies_parse(&p, list, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "more than"));
}

static void test_untrusted_peer_is_the_client_and_its_header_is_ignored(void **state)
{
    (void)state;
    const char *lines[] = {"1.2.3.4"};
    char out[PROXIES_TEXT_MAX];
    assert_int_equal(client_of("10.0.0.0/8", "127.0.0.2", lines, 1, out), PROXIES_IGNORED);
    assert_string_equal(out, "127.0.0.2");
    assert_int_equal(client_of("10.0.0.0/8", "127.0.0.2", NULL, 0, out), PROXIES_PEER);
    assert_string_equal(out, "127.0.0.2");
    assert_int_equal(client_of("", "127.0.0.1", lines, 1, out), PROXIES_IGNORED);
}

static void test_trusted_peer_without_header_is_the_client(void **state)
{
    (void)state;
    char out[PROXIES_TEXT_MAX];
    assert_int_equal(client_of("127.0.0.1", "127.0.0.1", NULL, 0, out), PROXIES_PEER);
    assert_string_equal(out, "127.0.0.1");
    const char *empty[] = {"", " , "};
    assert_int_equal(client_of("127.0.0.1", "127.0.0.1", empty, 2, out), PROXIES_PEER);
    assert_string_equal(out, "127.0.0.1");
}

static void test_rightmost_hop_is_the_client_not_a_spoofed_leftmost(void **state)
{
    (void)state;
    /* the buyer wrote "6.6.6.6" itself; the proxy appended who it saw */
    const char *lines[] = {"6.6.6.6, 203.0.113.5"};
    char out[PROXIES_TEXT_MAX];
    assert_int_equal(client_of("127.0.0.1", "127.0.0.1", lines, 1, out), PROXIES_FORWARDED);
    assert_string_equal(out, "203.0.113.5");
}

static void test_trusted_hops_are_walked_past(void **state)
{
    (void)state;
    /* buyer -> edge proxy 10.0.0.5 -> inner proxy 10.0.0.9 -> stockd */
    const char *lines[] = {"6.6.6.6,203.0.113.5,10.0.0.5"};
    char out[PROXIES_TEXT_MAX];
    assert_int_equal(client_of("10.0.0.0/24", "10.0.0.9", lines, 1, out), PROXIES_FORWARDED);
    assert_string_equal(out, "203.0.113.5");
}

static void test_every_hop_trusted_names_the_leftmost(void **state)
{
    (void)state;
    const char *lines[] = {"10.0.0.3, 10.0.0.4", "10.0.0.5"};
    char out[PROXIES_TEXT_MAX];
    assert_int_equal(client_of("10.0.0.0/8", "10.0.0.9", lines, 2, out), PROXIES_FORWARDED);
    assert_string_equal(out, "10.0.0.3");
}

static void test_lines_are_joined_in_order(void **state)
{
    (void)state;
    /* the last line is the nearest proxy's */
    const char *lines[] = {"198.51.100.1", "203.0.113.5", "10.0.0.5"};
    char out[PROXIES_TEXT_MAX];
    assert_int_equal(client_of("10.0.0.0/8", "10.0.0.9", lines, 3, out), PROXIES_FORWARDED);
    assert_string_equal(out, "203.0.113.5");
    const char *two[] = {"10.0.0.7", "6.6.6.6"};
    assert_int_equal(client_of("10.0.0.0/8", "10.0.0.9", two, 2, out), PROXIES_FORWARDED);
    assert_string_equal(out, "6.6.6.6");
}

static void test_blanks_and_empty_elements_are_skipped(void **state)
{
    (void)state;
    const char *lines[] = {"  198.51.100.1 ,\t, 203.0.113.5\t ,  ,"};
    char out[PROXIES_TEXT_MAX];
    assert_int_equal(client_of("127.0.0.1", "127.0.0.1", lines, 1, out), PROXIES_FORWARDED);
    assert_string_equal(out, "203.0.113.5");
}

static void test_malformed_hop_stops_the_walk_at_the_hop_right_of_it(void **state)
{
    (void)state;
    char out[PROXIES_TEXT_MAX];
    const char *right[] = {"203.0.113.5, unknown"};
    assert_int_equal(client_of("127.0.0.1", "127.0.0.1", right, 1, out), PROXIES_PEER);
    assert_string_equal(out, "127.0.0.1"); /* nothing usable: the proxy itself */
    const char *mid[] = {"6.6.6.6, 1.2.3.4:5678, 10.0.0.5"};
    assert_int_equal(client_of("10.0.0.0/8", "10.0.0.9", mid, 1, out), PROXIES_FORWARDED);
    assert_string_equal(out, "10.0.0.5");
    static const char *const bad[] = {"[2001:db8::1]", "1.2.3", "999.1.1.1", "_hidden",
                                      "1.2.3.4 5.6.7.8", "0x7f.0.0.1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *line[] = {bad[i]};
        assert_int_equal(client_of("127.0.0.1", "127.0.0.1", line, 1, out), PROXIES_PEER);
        assert_string_equal(out, "127.0.0.1");
    }
}

static void test_ipv6_hops_are_clients_never_trusted(void **state)
{
    (void)state;
    char out[PROXIES_TEXT_MAX];
    const char *lines[] = {"6.6.6.6, 2001:DB8::7"};
    assert_int_equal(client_of("0.0.0.0/0", "127.0.0.1", lines, 1, out), PROXIES_FORWARDED);
    assert_string_equal(out, "2001:db8::7");
    const char *mapped[] = {"::ffff:10.0.0.5"}; /* an IPv4 address written as IPv6 */
    assert_int_equal(client_of("10.0.0.0/8", "10.0.0.9", mapped, 1, out), PROXIES_FORWARDED);
    assert_string_equal(out, "10.0.0.5");
}

static void test_dropped_lines_stop_the_walk_like_a_malformed_hop(void **state)
{
    (void)state;
    proxies p = trust("10.0.0.0/8");
    proxies_addr peer = addr("10.0.0.9"), client;
    char out[PROXIES_TEXT_MAX];
    const char *lines[] = {"10.0.0.4", "10.0.0.5"};
    assert_int_equal(proxies_client(&p, &peer, lines, 2, 3, &client), PROXIES_FORWARDED);
    assert_string_equal(proxies_addr_text(&client, out), "10.0.0.4");
    const char *last[] = {"203.0.113.5"}; /* an untrusted hop is found first */
    assert_int_equal(proxies_client(&p, &peer, last, 1, 40, &client), PROXIES_FORWARDED);
    assert_string_equal(proxies_addr_text(&client, out), "203.0.113.5");
    proxies_addr stranger = addr("127.0.0.2");
    assert_int_equal(proxies_client(&p, &stranger, NULL, 0, 1, &client), PROXIES_IGNORED);
}

static void test_many_lines_each_with_many_hops(void **state)
{
    (void)state;
    const char *lines[PROXIES_LINES_MAX];
    for (int i = 0; i < PROXIES_LINES_MAX; i++)
        lines[i] = i == 2 ? "6.6.6.6, 198.51.100.3, 10.1.1.1" : "10.0.0.1,10.0.0.2 , 10.0.0.3";
    char out[PROXIES_TEXT_MAX];
    assert_int_equal(client_of("10.0.0.0/8", "10.0.0.9", lines, PROXIES_LINES_MAX, out),
                     PROXIES_FORWARDED);
    assert_string_equal(out, "198.51.100.3");
}

static void test_addresses_parse_only_whole_addresses(void **state)
{
    (void)state;
    proxies_addr a;
    assert_int_equal(proxies_addr_parse(&a, "1.2.3.4", 7), 0);
    assert_int_equal(a.family, 4);
    assert_int_equal(proxies_addr_parse(&a, "1.2.3.4", 5), -1); /* "1.2.3" */
    assert_int_equal(proxies_addr_parse(&a, "", 0), -1);
    assert_int_equal(proxies_addr_parse(&a, " 1.2.3.4", 8), -1);
    char longer[80];
    memset(longer, '1', sizeof(longer));
    assert_int_equal(proxies_addr_parse(&a, longer, sizeof(longer)), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_list_takes_addresses_networks_and_blanks),
        cmocka_unit_test(test_empty_list_trusts_nobody),
        cmocka_unit_test(test_zero_prefix_trusts_every_ipv4_address_and_no_ipv6),
        cmocka_unit_test(test_bad_entries_are_refused_by_name),
        cmocka_unit_test(test_list_longer_than_the_max_is_refused),
        cmocka_unit_test(test_untrusted_peer_is_the_client_and_its_header_is_ignored),
        cmocka_unit_test(test_trusted_peer_without_header_is_the_client),
        cmocka_unit_test(test_rightmost_hop_is_the_client_not_a_spoofed_leftmost),
        cmocka_unit_test(test_trusted_hops_are_walked_past),
        cmocka_unit_test(test_every_hop_trusted_names_the_leftmost),
        cmocka_unit_test(test_lines_are_joined_in_order),
        cmocka_unit_test(test_blanks_and_empty_elements_are_skipped),
        cmocka_unit_test(test_malformed_hop_stops_the_walk_at_the_hop_right_of_it),
        cmocka_unit_test(test_ipv6_hops_are_clients_never_trusted),
        cmocka_unit_test(test_dropped_lines_stop_the_walk_like_a_malformed_hop),
        cmocka_unit_test(test_many_lines_each_with_many_hops),
        cmocka_unit_test(test_addresses_parse_only_whole_addresses),
    };
    return cmocka_run_group_tests_name("proxies", tests, NULL, NULL);
}
