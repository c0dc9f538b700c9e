/* procinfo.c - the process's own resource use, from /proc/self. */
#include "server/procinfo.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* The system's boot time, seconds since the epoch: /proc/stat's btime. */
static int64_t boot_time(void)
{
    FILE *f = fopen("/proc/stat", "r");
    char line[256];
    long long btime = 0;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "btime %lld", &btime) == 1)
            break;
    if (f)
        fclose(f);
    return btime;
}

/* CPU times, start time and sizes from /proc/self/stat (proc(5)). The
 * command name (field 2) may hold spaces and parentheses, so parsing starts
 * after its last ')'. */
static int read_stat(procinfo *out)
{
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    unsigned long long utime, stime, start, vsize;
    long long rss, threads;
    /* fields 3..24: state, then 10 skipped, utime stime, 4 skipped, num_threads, 1
     * skipped, starttime vsize rss */
    if (p == NULL || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu "
                                   "%*d %*d %*d %*d %lld %*d %llu %llu %lld",
                            &utime, &stime, &threads, &start, &vsize, &rss) != 6)
        return -1;
    out->threads = threads;
    double tick = (double)sysconf(_SC_CLK_TCK);
    long page = sysconf(_SC_PAGESIZE);
    out->cpu_seconds = (double)(utime + stime) / tick;
    out->start_time = (double)boot_time() + (double)start / tick;
    out->virtual_bytes = vsize;
    out->resident_bytes = rss > 0 ? (uint64_t)rss * (uint64_t)page : 0;
    return 0;
}

/* Entries of /proc/self/fd, less the one the directory stream itself holds. */
static int64_t count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return -1;
    int64_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1;
}

int procinfo_read(procinfo *out)
{
    memset(out, 0, sizeof(*out));
    int rc = read_stat(out);
    out->open_fds = count_fds();
    if (out->open_fds < 0) {
        out->open_fds = 0;
        rc = -1;
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        out->max_fds = rl.rlim_cur == RLIM_INFINITY ? INT64_MAX : (int64_t)rl.rlim_cur;
    return rc;
}
