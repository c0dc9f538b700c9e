/* procinfo.h - the process's own resource use, read from /proc for the
 * standard process_* metrics that every Prometheus client exports. Linux only. */
#ifndef PROCINFO_H
#define PROCINFO_H

#include <stdint.h>

typedef struct procinfo {
    double cpu_seconds;      /* user + system CPU time */
    double start_time;       /* seconds since the Unix epoch */
    uint64_t resident_bytes; /* resident set size */
    uint64_t virtual_bytes;  /* virtual memory size */
    int64_t open_fds;        /* file descriptors open now */
    int64_t max_fds;         /* the soft limit on them */
    int64_t threads;         /* threads now */
} procinfo;

/* Fills *out. Returns 0, or -1 when /proc could not be read (the fields it
 * could not read are 0). */
int procinfo_read(procinfo *out);

#endif
