/* test_disk_full.c - a database whose disk fills up, on a real full file
 * system: a small tmpfs the test mounts in a mount namespace of its own, so
 * nothing shows on the host and the kernel takes the mount away with the
 * test even when it dies. SQLite's file there, then a PostgreSQL tablespace
 * there: writes answer 507 storage_full and leave everything as it was,
 * reads still answer, /health says degraded; once space is freed, writes
 * resume in the same processes and /health is ok again, whether a write or
 * /health's own probe finds out first; so too when the disk fills in the
 * middle of a transaction, which SQLite then rolls back whole. Under load, across the full period,
 * no acknowledged order is lost and none is half-written (loadgen's
 * verdict). Where mounting is refused (a chroot without the right), the
 * tests skip saying so. */
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <sqlite3.h>

#include "tests/support/calls.h"
#include "tests/support/harness.h"
#include "tests/support/pg.h"
#include "tests/support/stack.h"

#define REPLICAS 3
#define FULL_WAIT_MS 30000 /* bound on filling a disk until a write fails: a hang */

static th_redis redis;
static th_pg pg;
static int have_pg;
static char dir[64];        /* logs and loadgen's reports, on the real disk */
static char disk[96];       /* where the tmpfs is mounted */
static char filler[128];    /* the file that fills it */
static char no_mount[256];  /* why this system can't mount one, or "" */
static th_stockd r[REPLICAS];

/* A mount namespace of the test's own, every mount in it private: a tmpfs
 * mounted now propagates nowhere. */
static void own_mount_namespace(void)
{
    if (unshare(CLONE_NEWNS) != 0)
        snprintf(no_mount, sizeof(no_mount), "cannot make a mount namespace (unshare: %s)",
                 strerror(errno));
    else if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
        snprintf(no_mount, sizeof(no_mount), "cannot make the mounts private (%s): a tmpfs "
                 "would show on the host", strerror(errno));
}

static int group_setup(void **state)
{
    (void)state;
    own_mount_namespace(); /* first: the servers started below live in it */
    if (th_tempdir("diskfull-it", dir, sizeof(dir)) != 0 || th_redis_start(&redis) != 0)
        return -1;
    snprintf(disk, sizeof(disk), "%s/disk", dir);
    snprintf(filler, sizeof(filler), "%s/filler", disk);
    /* mkdtemp's 0700 would keep PostgreSQL's own user out of its tablespace */
    if (chmod(dir, 0711) != 0 || mkdir(disk, 0755) != 0)
        return -1;
    have_pg = !no_mount[0] && th_pg_available() && th_pg_start(&pg) == 0;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    if (have_pg)
        th_pg_stop(&pg, SIGINT);
    th_redis_stop(&redis, 0);
    return 0;
}

/* Mounts a fresh tmpfs of size at disk, or skips the test saying why. */
static void mount_disk(const char *size)
{
    char opts[64];
    snprintf(opts, sizeof(opts), "size=%s,mode=0755", size);
    if (!no_mount[0] && mount("tmpfs", disk, "tmpfs", 0, opts) != 0)
        snprintf(no_mount, sizeof(no_mount), "cannot mount a tmpfs (%s)", strerror(errno));
    if (no_mount[0])
        th_skip("%s", no_mount);
}

/* Each test's end, also when it failed: its replicas stopped, its disk
 * unmounted (lazily: a server may still hold a file there). */
static int test_teardown(void **state)
{
    (void)state;
    for (int i = 0; i < REPLICAS; i++)
        if (r[i].pid > 0)
            th_stockd_stop(&r[i], SIGTERM);
    umount2(disk, MNT_DETACH);
    return 0;
}

/* Grows the filler until the file system refuses: the disk is full. */
static void fill_disk(void)
{
    static char block[64 * 1024];
    int fd = open(filler, O_WRONLY | O_CREAT | O_APPEND, 0600);
    assert_true(fd >= 0);
    for (size_t size = sizeof(block); size >= 512; size /= 2)
        while (write(fd, block, size) == (ssize_t)size) {
        }
    int why = errno;
    close(fd);
    if (why != ENOSPC)
        fail_msg("filling %s stopped with %s, not ENOSPC", filler, strerror(why));
}

static void free_disk(void) { assert_int_equal(unlink(filler), 0); }

/* Starts replica i on db: lock mode redis (group commit) or atomic. */
static void start_replica(int i, const char *db, const char *mode)
{
    const char *flags[] = {"--lock", mode, "--busy-timeout-ms", "2000", "--wait-ms", "5000",
                           NULL};
    assert_int_equal(th_stockd_start(&r[i], &redis, db, dir, flags), 0);
}

static json_t *reduce(int i, long long item, const char *request_id, long expect)
{
    char body[160];
    snprintf(body, sizeof(body), "{\"itemId\":%lld,\"quantity\":1%s%s%s}", item,
             request_id ? ",\"requestId\":\"" : "", request_id ? request_id : "",
             request_id ? "\"" : "");
    return th_call(&r[i], "POST", "/reduceStock", body, expect);
}

/* A refusal for lack of space: 507 storage_full, saying so, and no
 * Retry-After (every replica shares the disk; only freeing space helps). */
static void expect_full(int i, const char *method, const char *path, const char *body)
{
    char url[160];
    th_resp resp;
    snprintf(url, sizeof(url), "%s%s", r[i].url, path);
    th_http(method, url, body, &resp);
    if (resp.status != 507 || strstr(resp.body, "\"storage_full\"") == NULL ||
        strstr(resp.body, "disk is full") == NULL)
        fail_msg("%s %s on a full disk: %ld %s", method, path, resp.status, resp.body);
    assert_string_equal(resp.retry_after, "");
    th_resp_free(&resp);
}

/* Deducts one unit at a time through replica i until the disk refuses
 * (a write may fit in space the database already has); returns how many
 * were acknowledged on the way. */
static long long deduct_until_full(int i, long long item)
{
    long long acked = 0;
    char url[160], body[64];
    snprintf(url, sizeof(url), "%s/reduceStock", r[i].url);
    snprintf(body, sizeof(body), "{\"itemId\":%lld,\"quantity\":1}", item);
    for (int64_t end = th_now_ms() + FULL_WAIT_MS;; acked++) {
        th_resp resp;
        th_http("POST", url, body, &resp);
        long status = resp.status;
        if (status != 200 && status != 507)
            fail_msg("a deduction on a filling disk: %ld %s", status, resp.body);
        th_resp_free(&resp);
        if (status == 507)
            return acked;
        if (th_now_ms() > end)
            fail_msg("%lld deductions in %d ms and the disk never refused one", acked,
                     FULL_WAIT_MS);
    }
}

/* /health of replica i: full (503 degraded, storageFull, the storage
 * saying disk full) or not (200 ok). */
static void expect_health(int i, int full)
{
    json_t *h = th_call(&r[i], "GET", "/health", NULL, full ? 503 : 200);
    assert_string_equal(th_jstr(h, "status"), full ? "degraded" : "ok");
    assert_int_equal(json_is_true(json_object_get(h, "storageFull")), full);
    if (full && strstr(th_jstr(h, "storage"), "disk full") == NULL)
        fail_msg("/health does not say why: %s", th_jstr(h, "storage"));
    json_decref(h);
}

/* The item as replica 0 reads it: stock, sold and orders as expected. */
static void expect_item(long long item, long long stock, long long sold)
{
    char path[64];
    snprintf(path, sizeof(path), "/items/%lld?limit=0", item);
    json_t *j = th_call(&r[0], "GET", path, NULL, 200);
    assert_int_equal(th_jint(j, "stock"), stock);
    assert_int_equal(th_jint(j, "sold"), sold);
    assert_int_equal(th_jint(j, "orderCount"), sold); /* one unit an order here */
    json_decref(j);
}

/* SQLite's file on the tmpfs, replica 0 in lock mode redis (group commit),
 * replica 1 atomic: every kind of write is refused with nothing written,
 * then everything works again in the same processes. Replica 0 learns it
 * from /health's probe, replica 1 from a write that succeeds. */
static void test_sqlite_full_disk_refuses_writes_and_resumes_when_space_is_freed(void **state)
{
    (void)state;
    char db[160], cart[160], one[96], again[96], path[32];
    mount_disk("8m");
    snprintf(db, sizeof(db), "%s/stock.db", disk);
    start_replica(0, db, "redis");
    start_replica(1, db, "atomic");
    long long item = th_new_item(&r[0], "full", 100), other = th_new_item(&r[0], "other", 100);
    json_decref(reduce(0, item, NULL, 200));
    json_decref(reduce(1, item, NULL, 200));
    snprintf(cart, sizeof(cart), "{\"lines\":[{\"itemId\":%lld,\"quantity\":1},{\"itemId\":"
             "%lld,\"quantity\":2}]}", item, other);
    snprintf(one, sizeof(one), "{\"itemId\":%lld,\"quantity\":1}", item);
    snprintf(again, sizeof(again), "{\"itemId\":%lld,\"quantity\":1,\"requestId\":\"f-1\"}",
             item);
    snprintf(path, sizeof(path), "/items/%lld", other);

    fill_disk();
    expect_full(0, "POST", "/reduceStock", again);
    expect_full(1, "POST", "/reduceStock", one);
    expect_full(0, "POST", "/orders", cart);
    expect_full(1, "POST", "/orders", cart);
    expect_full(0, "PUT", path, "{\"stock\":500}");
    expect_full(1, "POST", "/items", "{\"name\":\"new\",\"stock\":5}");
    expect_item(item, 98, 2); /* nothing written, and reads still answer */
    expect_health(0, 1);
    expect_health(1, 1);

    free_disk();
    expect_health(0, 0); /* its probe writes: no deduction needed */
    json_t *j = reduce(1, item, NULL, 200); /* a write clears it too */
    json_decref(j);
    expect_health(1, 0);
    j = reduce(0, item, "f-1", 200); /* the refused requestId was never written */
    assert_false(json_is_true(json_object_get(j, "replayed")));
    json_decref(j);
    json_decref(th_call(&r[1], "POST", "/orders", cart, 201));
    expect_item(item, 95, 5);
    json_decref(th_call(&r[0], "PUT", path, "{\"stock\":500}", 200));
    json_decref(th_call(&r[1], "POST", "/items", "{\"name\":\"new\",\"stock\":5}", 201));
}

/* SQLite's file created with a page cache of 2 pages for every connection
 * (default_cache_size, kept in the file's header): a transaction spills
 * pages into the WAL from its first order on. */
static void create_db_with_a_tiny_cache(const char *db)
{
    sqlite3 *h;
    assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
    assert_int_equal(sqlite3_exec(h, "PRAGMA default_cache_size = 2", NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(h);
}

/* The disk fills while group commit's transaction is open: the page SQLite
 * spills from its cache for the order's first row can't be written, and
 * SQLite rolls the whole transaction back (no savepoint left to go back
 * to). Every order of it answers 507, not 500 storage_error, and /health
 * says the disk is full; once space is freed the refused requestId is
 * written as new. */
static void test_sqlite_a_transaction_rolled_back_by_a_full_disk_answers_507(void **state)
{
    (void)state;
    char db[160], cart[160], again[96];
    mount_disk("8m");
    snprintf(db, sizeof(db), "%s/spill.db", disk);
    create_db_with_a_tiny_cache(db);
    start_replica(0, db, "redis");
    long long item = th_new_item(&r[0], "spill", 100), other = th_new_item(&r[0], "o", 100);
    json_decref(reduce(0, item, NULL, 200));
    snprintf(cart, sizeof(cart), "{\"lines\":[{\"itemId\":%lld,\"quantity\":1},{\"itemId\":"
             "%lld,\"quantity\":2}]}", item, other);
    snprintf(again, sizeof(again), "{\"itemId\":%lld,\"quantity\":1,\"requestId\":\"s-1\"}",
             item);

    fill_disk();
    expect_full(0, "POST", "/reduceStock", again);
    expect_full(0, "POST", "/orders", cart);
    expect_item(item, 99, 1);
    expect_health(0, 1);

    free_disk();
    json_t *j = reduce(0, item, "s-1", 200);
    assert_false(json_is_true(json_object_get(j, "replayed")));
    json_decref(j);
    expect_health(0, 0);
    expect_item(item, 98, 2);
}

/* Three replicas (two in redis mode, group commit, one atomic) under
 * loadgen's carts and single lines while the disk fills until writes fail,
 * then empties: every order answered ok is in the ledger and every one that
 * failed left nothing (PASS), and the 507s were there. */
static void test_sqlite_no_order_is_lost_or_half_written_across_a_full_period(void **state)
{
    (void)state;
    char db[160], targets[256], json[160], out[160];
    mount_disk("16m");
    snprintf(db, sizeof(db), "%s/load.db", disk);
    start_replica(0, db, "redis");
    start_replica(1, db, "redis");
    start_replica(2, db, "atomic");
    long long probe = th_new_item(&r[0], "probe", 1000000);
    snprintf(targets, sizeof(targets), "%s,%s,%s", r[0].url, r[1].url, r[2].url);
    snprintf(json, sizeof(json), "%s/full-load.json", dir);
    snprintf(out, sizeof(out), "%s/full-load.out", dir);
    char bin[128];
    snprintf(bin, sizeof(bin), "%s/loadgen", th_build_dir());
    const char *argv[] = {bin, "--target", targets, "--items", "4", "--cart-lines", "1-3",
                          "--stock", "1000000", "-n", "0", "-d", "6s", "-c", "12", "--json",
                          json, "--timeout-ms", "20000", NULL};
    pid_t lg = th_spawn(argv, out);
    th_sleep_ms(1500);
    fill_disk();
    long long acked = deduct_until_full(0, probe); /* full for writes from here on */
    th_sleep_ms(1000);
    free_disk();
    json_decref(reduce(0, probe, NULL, 200));
    th_stack s = {.dir = dir};
    th_loadgen_expect(&s, lg, "full-load", 0);
    long long ok = th_loadgen_outcome(&s, "full-load", "ok");
    long long failed = th_loadgen_outcome(&s, "full-load", "other_5xx");
    print_message("loadgen: %lld ok, %lld refused while full; %lld probe deductions before "
                  "the disk refused one\n", ok, failed, acked);
    assert_true(ok > 0);
    assert_true(failed > 0);
    expect_item(probe, 1000000 - acked - 1, acked + 1);
}

/* PostgreSQL with the tables in a tablespace on the tmpfs (its WAL stays on
 * the real disk: a full pg_wal stops the server, which is another fault).
 * Deductions fit in pages the tables have until one needs a new page: then
 * 507 (SQLSTATE 53100), with group commit's transaction and the atomic mode
 * alike, nothing half-written; /health's probe needs a page every time. */
static void test_postgres_full_tablespace_refuses_writes_and_resumes(void **state)
{
    (void)state;
    char ts[128], sql[256], url[256];
    mount_disk("4m");
    if (!have_pg)
        th_skip("no PostgreSQL server to run (th_pg_available)");
    snprintf(ts, sizeof(ts), "%s/ts", disk);
    struct passwd *pw = getuid() == 0 ? getpwnam("postgres") : NULL;
    assert_int_equal(mkdir(ts, 0700), 0);
    assert_true(pw == NULL || chown(ts, pw->pw_uid, pw->pw_gid) == 0);
    snprintf(sql, sizeof(sql), "CREATE TABLESPACE tiny LOCATION '%s'", ts);
    assert_int_equal(th_pg_exec(pg.url, sql), 0);
    assert_int_equal(th_pg_create_db(&pg, "diskfull", url, sizeof(url)), 0);
    assert_int_equal(th_pg_exec(pg.url, "ALTER DATABASE diskfull SET default_tablespace = tiny"),
                     0);
    start_replica(0, url, "redis");
    start_replica(1, url, "atomic");
    long long item = th_new_item(&r[0], "full", 100000);
    for (int i = 0; i < 20; i++) /* pages with room left, as a database in use has */
        json_decref(reduce(i % 2, item, NULL, 200));

    fill_disk();
    long long acked = 20 + deduct_until_full(0, item);
    acked += deduct_until_full(1, item);
    expect_item(item, 100000 - acked, acked); /* the 507s wrote nothing */
    expect_health(0, 1);

    free_disk();
    expect_health(0, 0);
    json_decref(reduce(0, item, NULL, 200));
    json_decref(reduce(1, item, NULL, 200));
    expect_item(item, 100000 - acked - 2, acked + 2);
    assert_int_equal(th_pg_int(url, "SELECT sum(quantity) FROM order_lines"), acked + 2);
    print_message("%lld deductions fitted before the tablespace refused one\n", acked - 20);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, NULL, test_teardown)
    const struct CMUnitTest tests[] = {
        T(test_sqlite_full_disk_refuses_writes_and_resumes_when_space_is_freed),
        T(test_sqlite_a_transaction_rolled_back_by_a_full_disk_answers_507),
        T(test_sqlite_no_order_is_lost_or_half_written_across_a_full_period),
        T(test_postgres_full_tablespace_refuses_writes_and_resumes),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
