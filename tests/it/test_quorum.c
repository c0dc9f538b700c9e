/* test_quorum.c - the lock over several independent redis-servers (Redlock):
 * a majority is enough and a minority is not, servers killed and restarted
 * empty, renewal that needs a majority, a stalled server that must not slow
 * every call, arrival order and hand-off across processes, mutual exclusion
 * while servers die, and fencing tokens that keep growing when the majority
 * changes - including a holder whose fence write-back comes too late, and
 * a fence raised past a record's (written back, and only for the owner). */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lock/dlock.h"
#include "tests/support/harness.h"
#include "tests/support/lockkit.h"

#define NODES 3

static th_redis redis[5];
static int nodes = NODES; /* how many of redis[] the current group uses */

static int group_setup(void **state)
{
    (void)state;
    for (int i = 0; i < 5; i++)
        if (redis[i].pid == 0 && th_redis_start(&redis[i]) != 0)
            return -1;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    for (int i = 0; i < 5; i++)
        if (redis[i].pid)
            th_redis_stop(&redis[i], 0);
    return 0;
}

/* Every server up (restarted empty when it was down), none stopped. */
static void all_up(void)
{
    for (int i = 0; i < 5; i++) {
        if (th_proc_state(redis[i].pid) == 'T')
            th_signal(redis[i].pid, SIGCONT, 0);
        if (redis[i].pid == 0)
            assert_int_equal(th_redis_start(&redis[i]), 0);
    }
}

/* A client of servers ports[0..n-1] on loopback. */
static dlock_client *client_of(const int *ports, int n)
{
    char list[256] = "";
    for (int i = 0; i < n; i++)
        snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s127.0.0.1:%d",
                 i ? "," : "", ports[i]);
    dlock_config cfg;
    dlock_config_defaults(&cfg);
    cfg.command_timeout_ms = 300;
    assert_int_equal(dlock_config_nodes(&cfg, list), DLOCK_OK);
    dlock_client *c;
    assert_int_equal(dlock_client_new(&cfg, &c), DLOCK_OK);
    return c;
}

/* A client of the group's servers: another process, as far as the lock can tell. */
static dlock_client *new_client(void)
{
    int ports[5];
    for (int i = 0; i < nodes; i++)
        ports[i] = redis[i].port;
    return client_of(ports, nodes);
}

static dlock_opts opts(int lease_ms, int wait_ms)
{
    dlock_opts o;
    dlock_opts_defaults(&o);
    o.lease_ms = lease_ms;
    o.wait_ms = wait_ms;
    o.retry_ms = 20;
    return o;
}

/* How many servers hold key for token. */
static int held_by(const char *key, const char *token)
{
    int n = 0;
    char buf[64];
    for (int i = 0; i < nodes; i++)
        n += redis[i].pid && strcmp(th_redis_get(&redis[i], key, buf, sizeof(buf)), token) == 0;
    return n;
}

/* On how many servers key exists. */
static int present(const char *key)
{
    int n = 0;
    for (int i = 0; i < nodes; i++)
        n += redis[i].pid && th_redis_int(&redis[i], "EXISTS %s", key) == 1;
    return n;
}

static long long counter_on(int i, const char *key)
{
    dlock_names names;
    dlock_names_of(key, &names);
    char buf[32];
    return atoll(th_redis_get(&redis[i], names.fence, buf, sizeof(buf)));
}

static void test_config_lists_servers(void **state)
{
    (void)state;
    dlock_config cfg;
    dlock_config_defaults(&cfg);
    assert_int_equal(dlock_config_nodes(&cfg, "a:1,b,[::1]:7000"), DLOCK_OK);
    assert_int_equal(cfg.nodes, 3);
    assert_string_equal(cfg.node[0].host, "a");
    assert_int_equal(cfg.node[0].port, 1);
    assert_int_equal(cfg.node[1].port, 6379);
    assert_string_equal(cfg.node[2].host, "::1");
    assert_int_equal(cfg.node[2].port, 7000);
    const char *bad[] = {"", "a:0", "a:70000", "a:x", ",a:1", "a:1,", "::1:7000", "[::1",
                         "a:1,b:2,c:3,d:4,e:5,f:6,g:7,h:8", NULL};
    for (int i = 0; bad[i]; i++)
        if (dlock_config_nodes(&cfg, bad[i]) != DLOCK_ERR_INVALID)
            fail_msg("\"%s\" accepted", bad[i]);
    assert_int_equal(cfg.nodes, 3); /* unchanged by the refusals */
}

static void test_a_majority_is_enough_and_a_minority_is_not(void **state)
{
    (void)state;
    all_up();
    dlock_client *c = new_client();
    dlock_opts o = opts(5000, 0);
    dlock_handle *h;
    assert_int_equal(dlock_acquire(c, "q:basic", &o, &h), DLOCK_OK);
    assert_int_equal(held_by("q:basic", dlock_token(h)), 3);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    assert_int_equal(present("q:basic"), 0);

    th_redis_stop(&redis[0], 1); /* one down: two of three are a majority */
    assert_int_equal(dlock_acquire(c, "q:basic", &o, &h), DLOCK_OK);
    assert_int_equal(held_by("q:basic", dlock_token(h)), 2);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    assert_int_equal(dlock_ping(c), DLOCK_OK);

    th_redis_stop(&redis[1], 1); /* two down: no majority, an error at once */
    o.wait_ms = 2000;
    int64_t t0 = th_now_ms();
    assert_int_equal(dlock_acquire(c, "q:basic", &o, &h), DLOCK_ERR_REDIS);
    assert_true(th_now_ms() - t0 < 1000);
    assert_non_null(strstr(dlock_errstr(), "2 of 3 Redis servers failed"));
    assert_int_equal(present("q:basic"), 0); /* the one it got was given back */
    assert_int_equal(dlock_ping(c), DLOCK_ERR_REDIS);
    int up[DLOCK_NODES_MAX];
    assert_int_equal(dlock_ping_each(c, up), DLOCK_ERR_REDIS);
    assert_false(up[0]);
    assert_false(up[1]);
    assert_true(up[2]);
    dlock_node_info info;
    dlock_node_info_read(c, 0, &info);
    assert_false(info.up);
    assert_true(info.errors > 0);
    dlock_node_info_read(c, 2, &info);
    assert_true(info.up);
    assert_true(info.calls > info.errors);

    all_up(); /* back, empty: the lock works again */
    th_sleep_ms(1100); /* past the time a failed server is left out */
    assert_int_equal(dlock_acquire(c, "q:basic", &o, &h), DLOCK_OK);
    assert_int_equal(held_by("q:basic", dlock_token(h)), 3);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    dlock_client_free(c);
}

/* Another owner's key on servers: on two of three it keeps us out (and what
 * we took on the third is given back); on one it does not. */
static void test_another_owner_on_a_majority_keeps_us_out(void **state)
{
    (void)state;
    all_up();
    dlock_client *c = new_client();
    dlock_opts o = opts(5000, 150);
    dlock_handle *h;
    th_redis_int(&redis[0], "SET q:other someone-else PX 5000");
    assert_int_equal(dlock_acquire(c, "q:other", &o, &h), DLOCK_OK); /* a minority */
    assert_int_equal(held_by("q:other", dlock_token(h)), 2);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    th_redis_int(&redis[1], "SET q:other someone-else PX 5000");
    assert_int_equal(dlock_acquire(c, "q:other", &o, &h), DLOCK_ERR_TIMEOUT);
    char buf[64];
    assert_string_equal(th_redis_get(&redis[2], "q:other", buf, sizeof(buf)), "");
    dlock_client_free(c);
}

/* Holder A takes the key with the fence of a server whose counter is far
 * ahead (as after a clock that ran ahead); the write-back raises the others
 * to it, so every later holder's fence is larger - whichever majority it
 * gets, with servers killed and restarted empty in between. */
static void test_fences_grow_across_different_majorities(void **state)
{
    (void)state;
    all_up();
    dlock_client *c = new_client();
    dlock_opts o = opts(5000, 2000);
    dlock_handle *h;
    dlock_names names;
    dlock_names_of("q:fence", &names);
    long long ahead = counter_on(0, "q:none") + 4000000000000000LL;
    th_redis_int(&redis[0], "SET %s %lld", names.fence, ahead);
    assert_int_equal(dlock_acquire(c, "q:fence", &o, &h), DLOCK_OK);
    long long last = dlock_fence(h);
    assert_true(last > ahead);
    for (int i = 1; i < NODES; i++) /* written back: without it these lag behind */
        assert_true(counter_on(i, "q:fence") >= last);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    /* each round: one server down (a different one), the last one restarted empty */
    for (int round = 0; round < 6; round++) {
        int down = round % NODES;
        th_redis_stop(&redis[down], 1);
        th_sleep_ms(30);
        assert_int_equal(dlock_acquire(c, "q:fence", &o, &h), DLOCK_OK);
        if (dlock_fence(h) <= last)
            fail_msg("round %d: fence %lld after %lld", round, (long long)dlock_fence(h), last);
        last = dlock_fence(h);
        assert_int_equal(dlock_release(h), DLOCK_OK);
        assert_int_equal(th_redis_start(&redis[down]), 0); /* empty */
        th_sleep_ms(1100); /* no longer left out */
    }
    dlock_client_free(c);
}

struct attempt {
    dlock_client *c;
    const char *key;
    int lease_ms, rc;
    long long fence;
    pthread_t thread;
};

static void *attempt_run(void *arg)
{
    struct attempt *a = arg;
    dlock_opts o = opts(a->lease_ms, 0);
    dlock_handle *h;
    a->rc = dlock_acquire(a->c, a->key, &o, &h);
    if (a->rc == DLOCK_OK) {
        a->fence = dlock_fence(h);
        dlock_release(h);
    }
    return NULL;
}

/* The danger the write-back rule exists for: holder 1 gets its keys on all
 * three servers, and its fence from server 0, far ahead; while its
 * write-back to servers 1 and 2 is delayed, its keys there vanish (an
 * expiry, a restart) and holder 2 takes them, with a lower fence, server 0
 * being gone. Had holder 1 used its fence without a majority accepting it,
 * the storage would refuse holder 2, the live one. It must not hold. */
static void test_a_holder_whose_write_back_comes_too_late_does_not_hold(void **state)
{
    (void)state;
    all_up();
    th_proxy *p1 = th_proxy_start(redis[1].port), *p2 = th_proxy_start(redis[2].port);
    assert_non_null(p1);
    assert_non_null(p2);
    int ports[] = {redis[0].port, th_proxy_port(p1), th_proxy_port(p2)};
    dlock_client *slow = client_of(ports, 3), *other = new_client();
    dlock_names names;
    dlock_names_of("q:late", &names);
    long long ahead = counter_on(0, "q:none") + 4000000000000000LL;
    th_redis_int(&redis[0], "SET %s %lld", names.fence, ahead);
    /* the write-back is the only 8-part EVALSHA the lock sends */
    th_proxy_delay_next(p1, "*8\r\n$7\r\nEVALSHA", 250);
    th_proxy_delay_next(p2, "*8\r\n$7\r\nEVALSHA", 250);
    struct attempt first = {slow, "q:late", 5000, -99, 0, 0};
    pthread_create(&first.thread, NULL, attempt_run, &first);
    for (int64_t end = th_now_ms() + 3000; th_proxy_delayed(p2) < 1;) {
        assert_true(th_now_ms() < end);
        th_sleep_ms(1);
    }
    /* its keys on 1 and 2 vanish, server 0 goes away, holder 2 takes 1 and 2 */
    th_redis_int(&redis[1], "DEL q:late");
    th_redis_int(&redis[2], "DEL q:late");
    th_redis_stop(&redis[0], 1);
    dlock_opts o = opts(5000, 0);
    dlock_handle *h;
    assert_int_equal(dlock_acquire(other, "q:late", &o, &h), DLOCK_OK);
    long long live = dlock_fence(h);
    assert_true(live < ahead); /* the danger was real: holder 1's fence would win */
    pthread_join(first.thread, NULL);
    if (first.rc == DLOCK_OK)
        fail_msg("holder 1 held with fence %lld while holder 2 held with %lld", first.fence,
                 live);
    assert_int_equal(held_by("q:late", dlock_token(h)), 2); /* holder 2 undisturbed */
    assert_true(counter_on(1, "q:late") < ahead); /* and nothing raised behind its back */
    assert_int_equal(dlock_release(h), DLOCK_OK);
    th_proxy_stop(p1);
    th_proxy_stop(p2);
    dlock_client_free(slow);
    dlock_client_free(other);
}

/* Renewal needs a majority: with one server gone the holder keeps its lock
 * through many leases; with two it is lost within about a lease. */
static void test_renewal_needs_a_majority(void **state)
{
    (void)state;
    all_up();
    dlock_client *c = new_client();
    /* a renewal a lease apart from the one before loses the lock: on a busy
     * machine under a sanitizer, 300 ms is too short for that margin */
    int lease = 300 * TH_SLOWER;
    dlock_opts o = opts(lease, 0);
    o.max_renewals = 0;
    dlock_handle *h;
    assert_int_equal(dlock_acquire(c, "q:renew", &o, &h), DLOCK_OK);
    th_redis_stop(&redis[0], 1);
    assert_int_equal(dlock_sleep(h, 3 * lease), DLOCK_OK);
    assert_int_equal(held_by("q:renew", dlock_token(h)), 2);
    th_redis_stop(&redis[1], 1);
    int64_t t0 = th_now_ms();
    assert_int_equal(dlock_sleep(h, 10 * lease), DLOCK_ERR_LOST);
    assert_true(th_now_ms() - t0 < 2 * lease);
    dlock_release(h);
    dlock_client_free(c);
}

/* A server that stops answering (SIGSTOP) costs the call that finds out one
 * command timeout; the calls after it leave that server out and stay fast. */
static void test_a_stalled_server_slows_one_call_not_all(void **state)
{
    (void)state;
    all_up();
    dlock_client *c = new_client();
    dlock_opts o = opts(5000, 0);
    dlock_handle *h;
    th_signal(redis[2].pid, SIGSTOP, 0);
    int64_t t0 = th_now_ms();
    assert_int_equal(dlock_acquire(c, "q:stall", &o, &h), DLOCK_OK);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    int64_t first = th_now_ms() - t0;
    t0 = th_now_ms();
    for (int i = 0; i < 20; i++) {
        assert_int_equal(dlock_acquire(c, "q:stall", &o, &h), DLOCK_OK);
        assert_int_equal(dlock_release(h), DLOCK_OK);
    }
    int64_t next20 = th_now_ms() - t0;
    print_message("first call %lld ms, next 20 pairs %lld ms\n", (long long)first,
                  (long long)next20);
    assert_true(first >= 250); /* it waited for the stalled one (timeout 300 ms) */
    assert_true(next20 < 1500); /* ...the others did not, each time */
    th_signal(redis[2].pid, SIGCONT, 0);
    dlock_client_free(c);
}

/* A server left out for not answering is asked after all when another one
 * fails and the rest could not make a majority: server 2 comes back while
 * it is still left out, then server 0 dies - the call must not fail. */
static void test_a_server_left_out_is_asked_when_another_fails(void **state)
{
    (void)state;
    all_up();
    dlock_client *c = new_client();
    dlock_opts o = opts(5000, 0);
    dlock_handle *h;
    th_redis_stop(&redis[2], 1);
    for (int64_t end = th_now_ms() + 600; th_now_ms() < end;) { /* left out longer each time */
        assert_int_equal(dlock_acquire(c, "q:left-out", &o, &h), DLOCK_OK);
        assert_int_equal(dlock_release(h), DLOCK_OK);
        th_sleep_ms(5);
    }
    assert_int_equal(th_redis_start(&redis[2]), 0);
    th_redis_stop(&redis[0], 1);
    assert_int_equal(dlock_acquire(c, "q:left-out", &o, &h), DLOCK_OK);
    assert_int_equal(held_by("q:left-out", dlock_token(h)), 2);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    assert_int_equal(present("q:left-out"), 0);
    dlock_client_free(c);
}

/* Waiters of three processes queue while the key is held and get it in
 * the order they asked, each release granting it on every server to the
 * same waiter. */
static void test_waiters_of_other_processes_get_the_key_in_arrival_order(void **state)
{
    (void)state;
    all_up();
    dlock_client *c = new_client(), *others[3];
    dlock_opts o = opts(5000, 0), wait = opts(5000, 10000);
    wait.retry_ms = 1000; /* only the grant should wake them; it lasts their own 2.1 s grace,
                           * though the holder's retry_ms (20) gives a grace of 140 ms */
    dlock_handle *h;
    assert_int_equal(dlock_acquire(c, "q:fifo", &o, &h), DLOCK_OK);
    for (int i = 0; i < 3; i++)
        others[i] = new_client();
    int order[3];
    int64_t ms;
    assert_int_equal(th_lock_fifo(redis, NODES, h, "q:fifo", &wait, others, 3, order, &ms), 3);
    for (int i = 0; i < 3; i++) {
        dlock_client_free(others[i]);
        assert_int_equal(order[i], i);
    }
    assert_true(ms < 900); /* woken by grants, not by their 1 s retry */
    dlock_client_free(c);
}

/* Threads of two clients increment a plain counter under the lock while a
 * server is killed, and another restarted empty: no increment is lost. */
static _Atomic int stop_increments;
static long counter;

struct incrementer {
    dlock_client *c;
    long done;
};

static void *increment_loop(void *arg)
{
    struct incrementer *in = arg;
    dlock_opts o = opts(2000, 5000);
    while (!atomic_load(&stop_increments)) {
        dlock_handle *h;
        if (dlock_acquire(in->c, "q:counter", &o, &h) != DLOCK_OK)
            continue;
        long v = counter;
        th_sleep_ms(0);
        counter = v + 1;
        in->done++;
        dlock_release(h);
    }
    return NULL;
}

static void test_no_lost_update_while_servers_die_and_return(void **state)
{
    (void)state;
    all_up();
    dlock_client *c[2] = {new_client(), new_client()};
    struct incrementer in[4];
    pthread_t t[4];
    counter = 0;
    atomic_store(&stop_increments, 0);
    for (int i = 0; i < 4; i++) {
        in[i] = (struct incrementer){c[i % 2], 0};
        pthread_create(&t[i], NULL, increment_loop, &in[i]);
    }
    th_sleep_ms(300);
    th_redis_stop(&redis[1], 1);
    th_sleep_ms(300);
    assert_int_equal(th_redis_start(&redis[1]), 0); /* empty */
    th_sleep_ms(300);
    th_redis_stop(&redis[2], 1);
    th_sleep_ms(300);
    atomic_store(&stop_increments, 1);
    long done = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        done += in[i].done;
    }
    print_message("%ld increments\n", done);
    assert_true(done > 50);
    assert_int_equal(counter, done);
    dlock_client_free(c[0]);
    dlock_client_free(c[1]);
}

/* A server whose name does not resolve (in Docker: a stopped container,
 * whose IPv6 lookup the embedded DNS leaves unanswered for 5 s) costs a
 * call at most the connect timeout, however slow the name server. */
static void test_a_name_that_does_not_resolve_costs_at_most_the_connect_timeout(void **state)
{
    (void)state;
    all_up();
    char list[200];
    /* not "localhost" for the others: a fresh root may have no /etc/hosts */
    snprintf(list, sizeof(list), "127.0.0.1:%d,no-such-redis.invalid:6379,127.0.0.1:%d",
             redis[0].port, redis[2].port);
    dlock_config cfg;
    dlock_config_defaults(&cfg);
    cfg.connect_timeout_ms = 200;
    assert_int_equal(dlock_config_nodes(&cfg, list), DLOCK_OK);
    dlock_client *c;
    assert_int_equal(dlock_client_new(&cfg, &c), DLOCK_OK);
    dlock_opts o = opts(5000, 0);
    dlock_handle *h;
    int64_t t0 = th_now_ms();
    assert_int_equal(dlock_acquire(c, "q:names", &o, &h), DLOCK_OK); /* two of three */
    assert_int_equal(dlock_release(h), DLOCK_OK);
    int64_t took = th_now_ms() - t0;
    int up[DLOCK_NODES_MAX];
    assert_int_equal(dlock_ping_each(c, up), DLOCK_OK);
    assert_false(up[1]);
    dlock_client_free(c);
    print_message("acquire + release with an unresolvable server: %lld ms\n", (long long)took);
    assert_true(took < 1000);
}

/* Five servers: two may be down. */
static void test_five_servers_tolerate_two_down(void **state)
{
    (void)state;
    all_up();
    nodes = 5;
    dlock_client *c = new_client();
    dlock_opts o = opts(5000, 0);
    dlock_handle *h;
    th_redis_stop(&redis[1], 1);
    th_redis_stop(&redis[3], 1);
    assert_int_equal(dlock_acquire(c, "q:five", &o, &h), DLOCK_OK);
    assert_int_equal(held_by("q:five", dlock_token(h)), 3);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    th_redis_stop(&redis[4], 1);
    assert_int_equal(dlock_acquire(c, "q:five", &o, &h), DLOCK_ERR_REDIS);
    assert_non_null(strstr(dlock_errstr(), "3 of 5 Redis servers failed, a majority is 3"));
    dlock_client_free(c);
    nodes = NODES;
}

/* A holder refused by a record that carries a token from the future
 * (fences that went back) raises its fence on every server; one server's
 * counter ran further ahead, so the fence is that server's, and it is
 * written back to the others, as an acquisition's: a later holder that
 * gets its keys without that server still draws a larger fence. */
static void test_a_raised_fence_is_written_back_to_a_majority(void **state)
{
    (void)state;
    all_up();
    dlock_client *c = new_client();
    dlock_opts o = opts(5000, 2000);
    dlock_handle *h;
    dlock_names names;
    dlock_names_of("q:raise", &names);
    assert_int_equal(dlock_acquire(c, "q:raise", &o, &h), DLOCK_OK);
    long long row = dlock_fence(h) + 1000000000000LL;
    th_redis_int(&redis[0], "SET %s %lld", names.fence, row + 5000);
    assert_int_equal(dlock_fence_raise(h, row), DLOCK_OK);
    long long raised = dlock_fence(h);
    assert_int_equal(raised, row + 5001);
    for (int i = 0; i < NODES; i++)
        assert_true(counter_on(i, "q:raise") >= raised);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    th_redis_stop(&redis[0], 1);
    assert_int_equal(dlock_acquire(c, "q:raise", &o, &h), DLOCK_OK); /* from servers 1 and 2 */
    if (dlock_fence(h) <= raised)
        fail_msg("fence %lld after the raised %lld", (long long)dlock_fence(h), raised);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    dlock_client_free(c);
}

/* A holder whose key is another's on a majority (its lease ran out there,
 * and the key was taken) gets no raised fence: it is lost, and the
 * counters where the key is no longer its own are left alone. With the key
 * gone from one server only, a majority still holds it, and it raises. */
static void test_a_holder_without_a_majority_gets_no_raised_fence(void **state)
{
    (void)state;
    all_up();
    dlock_client *c = new_client();
    dlock_opts o = opts(5000, 2000);
    dlock_handle *h;
    assert_int_equal(dlock_acquire(c, "q:stale", &o, &h), DLOCK_OK);
    long long row = dlock_fence(h) + 1000000000000LL;
    th_redis_int(&redis[2], "SET q:stale intruder PX 10000");
    assert_int_equal(dlock_fence_raise(h, row), DLOCK_OK);
    assert_int_equal(dlock_fence(h), row + 1);
    assert_true(counter_on(2, "q:stale") < row); /* not ours there: left alone */
    th_redis_int(&redis[1], "SET q:stale intruder PX 10000");
    long long before[NODES];
    for (int i = 0; i < NODES; i++)
        before[i] = counter_on(i, "q:stale");
    assert_int_equal(dlock_fence_raise(h, row + 1000), DLOCK_ERR_LOST);
    assert_int_equal(dlock_fence(h), row + 1);
    for (int i = 1; i < NODES; i++)
        assert_int_equal(counter_on(i, "q:stale"), before[i]);
    assert_int_equal(dlock_check(h), DLOCK_ERR_LOST);
    assert_int_equal(dlock_release(h), DLOCK_ERR_LOST);
    for (int i = 1; i < NODES; i++)
        th_redis_int(&redis[i], "DEL q:stale");
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_lists_servers),
        cmocka_unit_test(test_a_majority_is_enough_and_a_minority_is_not),
        cmocka_unit_test(test_another_owner_on_a_majority_keeps_us_out),
        cmocka_unit_test(test_fences_grow_across_different_majorities),
        cmocka_unit_test(test_a_holder_whose_write_back_comes_too_late_does_not_hold),
        cmocka_unit_test(test_renewal_needs_a_majority),
        cmocka_unit_test(test_a_stalled_server_slows_one_call_not_all),
        cmocka_unit_test(test_a_server_left_out_is_asked_when_another_fails),
        cmocka_unit_test(test_waiters_of_other_processes_get_the_key_in_arrival_order),
        cmocka_unit_test(test_no_lost_update_while_servers_die_and_return),
        cmocka_unit_test(test_a_name_that_does_not_resolve_costs_at_most_the_connect_timeout),
        cmocka_unit_test(test_five_servers_tolerate_two_down),
        cmocka_unit_test(test_a_raised_fence_is_written_back_to_a_majority),
        cmocka_unit_test(test_a_holder_without_a_majority_gets_no_raised_fence),
    };
    return cmocka_run_group_tests_name("quorum", tests, group_setup, group_teardown);
}
