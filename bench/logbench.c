/* logbench.c - what an order's log line costs a replica in CPU: log_event
 * with the fields of an "order placed" line (its key made as the service
 * makes it), in text and in JSON, written to a file and to /dev/null (the
 * formatting alone), and a line below the level (what --log-level warn
 * leaves). CPU time, not wall time: it holds on a shared machine.
 * Usage: logbench FILE [LINES] */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "server/log.h"

static double cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* ns of CPU per line, LINES lines to path at level. */
static double run(const char *path, enum log_format format, enum log_level level, long lines)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0600);
    if (fd < 0 || dup2(fd, STDERR_FILENO) < 0)
        return -1;
    close(fd);
    log_set_format(format);
    double t0 = cpu_ns();
    for (long i = 0; i < lines; i++) {
        if (!log_enabled(level)) /* as the service does: nothing made for nobody */
            continue;
        char key[64];
        long long item = i % 1000 + 1, fence = 1795421808891655LL + i, seq = 0;
        snprintf(key, sizeof(key), "%s{%lld}", "stock:lock:", item);
        const char *keys[] = {key};
        log_kv(level, "order placed", LOG_STR("requestId", "order-123456"),
               LOG_STR("outcome", "ok"), LOG_INT("orderId", i + 1), LOG_INT("units", 1),
               LOG_MS("ms", 2.375), LOG_STR("instance", "replica-1"),
               LOG_INTS("items", &item, 1), LOG_INTS("fences", &fence, 1),
               LOG_INTS("fenceSeqs", &seq, 1), LOG_STRS("keys", keys, 1));
    }
    return (cpu_ns() - t0) / (double)lines;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: logbench FILE [LINES]\n");
        return 2;
    }
    long lines = argc > 2 ? atol(argv[2]) : 500000;
    int out = dup(STDOUT_FILENO);
    FILE *report = fdopen(out, "w");
    log_set_level(LOG_INFO);
    static const char *const names[] = {"text", "json"};
    for (int f = LOG_FORMAT_TEXT; f <= LOG_FORMAT_JSON; f++) {
        double file = run(argv[1], (enum log_format)f, LOG_INFO, lines);
        double null = run("/dev/null", (enum log_format)f, LOG_INFO, lines);
        fprintf(report, "%s: %.0f ns CPU a line to a file, %.0f to /dev/null (formatting)\n",
                names[f], file, null);
    }
    log_set_level(LOG_WARN);
    fprintf(report, "below the level (--log-level warn): %.0f ns a line\n",
            run("/dev/null", LOG_FORMAT_TEXT, LOG_INFO, lines));
    fclose(report);
    return 0;
}
