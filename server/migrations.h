/* migrations.h - the schema files of schema/, embedded at build time
 * (scripts/embed-sql.sh writes build/gen/migrations.c), in version order. */
#ifndef MIGRATIONS_H
#define MIGRATIONS_H

struct store_migration {
    int version;      /* the file's number: 1 for 001_init.sql */
    const char *name; /* file name, for logs */
    const char *sql;
};

extern const struct store_migration store_migrations[];
extern const int store_migration_count;

#endif
