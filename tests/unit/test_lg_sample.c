/* test_lg_sample.c - the stock sampler against replicas that hang: a
 * listening socket that never accepts takes the connection (the kernel does)
 * and the request, and never answers, like a SIGSTOPped stockd. Stopping the
 * sampler must not wait for the API's 60 s call timeout, nor ask one more
 * replica once it is stopped. */
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "loadgen/evloop.h"
#include "loadgen/sample.h"

#define HANGS 2

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A loopback listener that never accepts; *port gets its port. */
static int silent_listener(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(fd, 8), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

static double clock_since(void *arg)
{
    return (double)(lg_now_ns() - *(const int64_t *)arg) / 1e9;
}

static void test_a_sampler_on_hung_replicas_stops_within_one_read_timeout(void **state)
{
    (void)state;
    lg_target targets[HANGS];
    int fds[HANGS];
    for (int i = 0; i < HANGS; i++) {
        int port;
        fds[i] = silent_listener(&port);
        memset(&targets[i], 0, sizeof(targets[i]));
        snprintf(targets[i].url, sizeof(targets[i].url), "http://127.0.0.1:%d", port);
    }
    int64_t start = lg_now_ns();
    lg_sampler *s;
    lg_err err;
    lg_sampler_cfg cfg = {.targets = targets, .ntargets = HANGS, .item = 7,
                          .clock = clock_since, .clock_arg = &start};
    assert_int_equal(lg_sampler_start(&cfg, &s, &err), 0);
    sleep_ms(100); /* the first read is waiting on the first replica */
    lg_samples *got = malloc(sizeof(*got));
    assert_non_null(got);
    lg_samples_init(got, 7);
    int64_t t0 = lg_now_ns();
    lg_sampler_stop(s, got, NULL);
    double took_s = (double)(lg_now_ns() - t0) / 1e9;
    /* hang detection only: one read's deadline plus slack, not 60 s per replica */
    if (took_s > 3.0 * LG_SAMPLE_TIMEOUT_MS / 1000)
        fail_msg("stopping the sampler took %.1f s", took_s);
    assert_int_equal(got->n, 0);
    assert_true(got->failed <= 1);
    /* stopped while the first replica hung: the second was never asked */
    int c = accept(fds[1], NULL, NULL);
    if (c >= 0)
        close(c);
    assert_true(c < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
    for (int i = 0; i < HANGS; i++)
        close(fds[i]);
    free(got);
}

/* A read function of someone else's service: the first target never
 * answers, the second tells a falling stock. */
typedef struct fake_read {
    int calls;
    long long stock;
} fake_read;

static int read_fake(void *arg, const char *base, int timeout_ms, lg_item_state *st, lg_err *err)
{
    fake_read *f = arg;
    assert_true(timeout_ms > 0);
    f->calls++;
    if (strcmp(base, "http://down") == 0)
        return lg_errf(err, LG_ERR_TRANSPORT, "down");
    memset(st, 0, sizeof(*st));
    st->stock = f->stock > 0 ? f->stock-- : 0;
    st->sold = -1, st->reserved = -1, st->returned = -1;
    return LG_OK;
}

static void test_a_sampler_reads_through_the_read_function_it_is_given(void **state)
{
    (void)state;
    lg_target targets[2] = {{.url = "http://down"}, {.url = "http://up"}};
    fake_read f = {0, 1000};
    int64_t start = lg_now_ns();
    lg_sampler_cfg cfg = {.targets = targets, .ntargets = 2, .item = 9, .read = read_fake,
                          .read_arg = &f, .clock = clock_since, .clock_arg = &start};
    lg_sampler *s;
    lg_err err;
    assert_int_equal(lg_sampler_start(&cfg, &s, &err), 0);
    sleep_ms(60);
    lg_samples *got = malloc(sizeof(*got));
    assert_non_null(got);
    lg_samples_init(got, 9);
    lg_sampler_stop(s, got, NULL);
    assert_true(got->n >= 1); /* hang detection only: a busy machine may read once */
    assert_int_equal(got->failed, 0); /* the second target answered each time */
    assert_true(f.calls >= 2 * got->n);
    for (int i = 0; i < got->n; i++) {
        assert_true(got->s[i].stock <= 1000 && got->s[i].stock > 1000 - f.calls);
        assert_true(got->s[i].t0_s <= got->s[i].t1_s);
        if (i > 0)
            assert_true(got->s[i].stock < got->s[i - 1].stock);
    }
    free(got);
}

/* With every_ms, every read is kept for the history check, in order, while
 * the chart keeps its own pace. */
static void test_a_history_sampler_keeps_every_read(void **state)
{
    (void)state;
    lg_target targets[1] = {{.url = "http://up"}};
    fake_read f = {0, 100000};
    int64_t start = lg_now_ns();
    lg_sampler_cfg cfg = {.targets = targets, .ntargets = 1, .item = 9, .read = read_fake,
                          .read_arg = &f, .clock = clock_since, .clock_arg = &start,
                          .every_ms = 1};
    lg_sampler *s;
    lg_err err;
    assert_int_equal(lg_sampler_start(&cfg, &s, &err), 0);
    sleep_ms(60);
    lg_samples *got = malloc(sizeof(*got));
    assert_non_null(got);
    lg_samples_init(got, 9);
    lg_reads reads = {0};
    lg_sampler_stop(s, got, &reads);
    assert_true(reads.n >= 1);
    assert_int_equal(reads.n, f.calls); /* every read answered, every one kept */
    assert_true((size_t)got->n <= reads.n);
    assert_int_equal(reads.interval_ms, 1);
    for (size_t i = 0; i < reads.n; i++) {
        assert_true(reads.r[i].t0_ns <= reads.r[i].t1_ns);
        assert_int_equal(reads.r[i].stock, 100000 - (long long)i);
        if (i > 0)
            assert_true(reads.r[i - 1].t1_ns <= reads.r[i].t0_ns);
    }
    lg_reads_free(&reads);
    free(got);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_sampler_on_hung_replicas_stops_within_one_read_timeout),
        cmocka_unit_test(test_a_sampler_reads_through_the_read_function_it_is_given),
        cmocka_unit_test(test_a_history_sampler_keeps_every_read),
    };
    return cmocka_run_group_tests_name("lg_sample", tests, NULL, NULL);
}
