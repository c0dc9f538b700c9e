/* test_db_shown.c - --db as logs and /health show it (store_db_shown): every
 * form of PostgreSQL password replaced by ***, everything else as it was. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "server/store.h"

static const struct {
    const char *db, *shown;
} cases[] = {
    {"stock.db", "stock.db"},
    {"/tmp/a=b c.db", "/tmp/a=b c.db"}, /* a file: nothing to hide, even with '=' */
    {"postgresql://stock@127.0.0.1:5432/stock", "postgresql://stock@127.0.0.1:5432/stock"},
    {"postgresql://stock:s3cret@127.0.0.1:5432/stock", "postgresql://stock:***@127.0.0.1:5432/stock"},
    {"postgres://u:p@ss@h/db", "postgres://u:***@h/db"}, /* a raw '@' in the password */
    {"postgresql://u:pw@h1:5432,h2:5433/db", "postgresql://u:***@h1:5432,h2:5433/db"},
    {"postgresql://u@h/db?password=s3cret&sslmode=disable",
     "postgresql://u@h/db?password=***&sslmode=disable"},
    {"postgresql://h/db?sslmode=disable&sslpassword=k3y&password=s3cret",
     "postgresql://h/db?sslmode=disable&sslpassword=***&password=***"},
    {"postgresql://u:a@h/db?password=b", "postgresql://u:***@h/db?password=***"},
    {"host=h password=s3cret dbname=d", "host=h password=*** dbname=d"},
    {"host=h password = s3cret dbname=d", "host=h password = *** dbname=d"},
    {"host=h password='s3 cr\\'et' dbname=d", "host=h password=*** dbname=d"},
    {"dbname=d sslpassword=k3y password=p", "dbname=d sslpassword=*** password=***"},
    {"host=h password", "host=h ***"},             /* malformed: the rest is hidden */
    {"host=h passw0rd s3cret", "host=h ***"},
    {"host=h user=password dbname=d", "host=h user=password dbname=d"},
    /* a conninfo is told by its start, not by a "://" anywhere in it */
    {"host=h password=ab://cd", "host=h password=***"},
    {"host=h application_name=x://y password=s3cret", "host=h application_name=x://y password=***"},
    /* libpq's userinfo ends at an '@' before the first '/': '?' and '#' are part of it */
    {"postgresql://u:pa?ss@h/db", "postgresql://u:***@h/db"},
    {"postgresql://u:pa#ss@h/db?sslmode=require", "postgresql://u:***@h/db?sslmode=require"},
    /* parameters: only known-harmless values are shown; a key may be percent-encoded */
    {"postgresql://h/db?pass%77ord=s3cret&application_name=a", "postgresql://h/db?pass%77ord=***&application_name=a"},
    {"postgresql://h/db?options=-c%20x%3Dy", "postgresql://h/db?options=***"},
    {"postgresql://h/db#s3cret", "postgresql://h/db#***"},
    /* a raw '/' in the password: up to the last '@'; overlapping secrets join */
    {"postgresql://u:pa/ss@db/stock", "postgresql://u:***@db/stock"},
    {"postgresql://u:pa/ss@db/stock?password=s3cret", "postgresql://u:***@db/stock?password=***"},
    {"postgresql://db:1/s?password=a@b", "postgresql://db:***"},
    /* a conninfo is told by any "keyword=" first, blanks allowed */
    {"sslmode=disable host=h password=s3cret", "sslmode=disable host=h password=***"},
    {"password=s3cret host=h", "password=*** host=h"},
    {"connect_timeout=5 password=s3cret", "connect_timeout=5 password=***"},
    {"  password = s3cret host=h", "  password = *** host=h"},
};

static void test_every_password_form_is_hidden(void **state)
{
    (void)state;
    char buf[256];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        assert_string_equal(store_db_shown(cases[i].db, buf, sizeof(buf)), cases[i].shown);
}

static void test_a_short_buffer_cuts_and_never_shows_the_secret(void **state)
{
    (void)state;
    char buf[24];
    const char *db = "postgresql://u:s3cret@h/db?password=s3cret";
    for (size_t size = 1; size <= sizeof(buf); size++) {
        store_db_shown(db, buf, size);
        assert_true(strlen(buf) < size);
        assert_null(strstr(buf, "s3"));
    }
}

/* More secrets than the table holds: the rest of the text is hidden. */
static void test_many_secrets_hide_them_all(void **state)
{
    (void)state;
    char db[1024] = "host=h", buf[1024];
    for (int i = 0; i < 40; i++)
        snprintf(db + strlen(db), sizeof(db) - strlen(db), " password=s3cret%d", i);
    store_db_shown(db, buf, sizeof(buf));
    assert_null(strstr(buf, "s3"));
    assert_non_null(strstr(buf, "host=h password=***"));
}

/* libpq quotes a malformed --db in its error; store_open's error must not
 * quote the password. Each goes to PostgreSQL (port 1: refused), none to an
 * SQLite file named after it. */
static void test_an_open_error_never_quotes_the_password(void **state)
{
    (void)state;
    const char *dbs[] = {"postgresql://u:s3cr%zzet@127.0.0.1:1/db",
                         "postgresql://u:s3cr/et@127.0.0.1:1/db",
                         "sslmode=disable host=127.0.0.1 port=1 password=s3cret",
                         "hots=127.0.0.1 port=1 password=s3cret"};
    for (size_t i = 0; i < sizeof(dbs) / sizeof(dbs[0]); i++) {
        store_config cfg;
        memset(&cfg, 0, sizeof(cfg));
        cfg.db = dbs[i];
        store *st = NULL;
        char err[512] = "";
        assert_int_not_equal(store_open(&cfg, &st, err, sizeof(err)), STORE_OK);
        assert_null(st);
        assert_true(err[0] != '\0');
        assert_null(strstr(err, "s3cr"));
        assert_int_equal(access(dbs[i], F_OK), -1); /* no SQLite file made */
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_password_form_is_hidden),
        cmocka_unit_test(test_a_short_buffer_cuts_and_never_shows_the_secret),
        cmocka_unit_test(test_many_secrets_hide_them_all),
        cmocka_unit_test(test_an_open_error_never_quotes_the_password),
    };
    return cmocka_run_group_tests_name("db_shown", tests, NULL, NULL);
}
