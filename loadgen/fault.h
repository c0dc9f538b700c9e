/* fault.h - faults injected into a run: --fault AT:COMMAND runs a shell
 * command at a time into the load (a replica paused, a Redis restarted, a
 * link slowed), the i-th --fault-end AT:COMMAND undoes the i-th --fault. The
 * commands run on a thread of their own, each in a process group of its own,
 * so the load never waits on them; what each did (when, how long, its exit
 * status, the start of its output) goes to the report, and what the run's
 * answers did around it to a note of the verdict.
 *
 * fault.c holds the pure parts (parsing, the schedule, the note), unit-tested
 * without a process; fault_exec.c the thread that runs the commands. */
#ifndef LG_FAULT_H
#define LG_FAULT_H

#include <stdint.h>

#include "loadgen/err.h"
#include "loadgen/history.h"
#include "loadgen/series.h"
#include "loadgen/verdict.h"

#define LG_FAULT_MAX 8           /* --fault (and --fault-end) given at most this often */
#define LG_FAULT_CMD_MAX 512     /* bytes of one command, its NUL included */
#define LG_FAULT_OUT_MAX 2048    /* bytes of a command's output kept (stdout + stderr) */
#define LG_FAULT_TIMEOUT_MS 30000 /* a command still running after this is killed */
#define LG_FAULT_AT_MAX_S (86400.0 * 7) /* as --duration's bound */

/* One --fault and its --fault-end, as the command line gave them. */
typedef struct lg_fault_spec {
    double at_s;                 /* when cmd runs, seconds after the load's start */
    double end_s;                /* when end_cmd runs; -1 when no --fault-end was given */
    char cmd[LG_FAULT_CMD_MAX];
    char end_cmd[LG_FAULT_CMD_MAX]; /* "" when none */
} lg_fault_spec;

/* "2s", "1500ms" or plain seconds "2.5" (0 allowed) into *at_s. Returns 0, or
 * -1 for anything else (negative, not finite, past LG_FAULT_AT_MAX_S). */
int lg_fault_parse_at(const char *text, double *at_s);

/* Adds one flag's value "AT:COMMAND": a --fault (end 0) as specs[*n] (then
 * ++*n), or a --fault-end (end 1) to specs[*nend] (then ++*nend): the i-th end
 * belongs to the i-th fault, whichever order the flags came in. Returns 0, or
 * LG_ERR_USAGE with err naming the flag and what it expects (bad AT, empty or
 * over-long command, more than LG_FAULT_MAX). specs has LG_FAULT_MAX entries,
 * zeroed by the caller before the first call. */
int lg_fault_add(lg_fault_spec *specs, int *n, int *nend, int end, const char *arg, lg_err *err);

/* After every flag: each --fault-end has its --fault and comes no earlier
 * than it. Returns 0 or LG_ERR_USAGE. */
int lg_fault_check(const lg_fault_spec *specs, int n, int nend, lg_err *err);

/* Where a command stands, for the schedule. */
enum lg_fault_step { LG_FAULT_WAITING = 0, LG_FAULT_RUNNING, LG_FAULT_OVER, LG_FAULT_SKIPPED };

/* The schedule. Command k is fault k/2's command (k even) or its end command
 * (k odd); step[k] says where it stands (enum lg_fault_step). A fault's
 * command is due at its at_s; its end at its end_s, once its command is over
 * (a failed one too: it may have half done its work), never when the command
 * was skipped. When the run is stopping, a waiting end is due at once (a fault
 * never outlives its run) and a waiting fault command is never due (the
 * caller skips it). Returns the earliest due command (ties: the lower k), or
 * -1 when none is due at now_s; *wait_s (may be NULL) gets the seconds until
 * the next waiting one is due, or -1 when none will be without another
 * command ending first. Pure. */
int lg_fault_due(const lg_fault_spec *specs, int n, const int *step, double now_s, int stopping,
                 double *wait_s);

/* How one command went. */
enum lg_fault_state {
    LG_FAULT_NOT_RUN = 0, /* its time never came (the run ended first): skipped */
    LG_FAULT_EXITED,      /* ran to its end: status is its exit status */
    LG_FAULT_KILLED,      /* still running after the time limit: its group was killed */
    LG_FAULT_NO_START,    /* could not be started: why says why */
};

typedef struct lg_fault_cmd {
    int state;          /* enum lg_fault_state */
    int early;          /* an end command run when the run ended, before its time */
    int64_t start_ns, end_ns; /* lg_now_ns() when it was started and when it ended */
    int status;         /* exit status; 128 + N when a signal N ended it; -1 when not run */
    char out[LG_FAULT_OUT_MAX]; /* the first bytes of its stdout and stderr, NUL-ended */
    int out_cut;        /* 1 when it wrote more than out holds */
    char why[160];      /* LG_FAULT_NO_START: what failed */
} lg_fault_cmd;

/* One fault as it went: its spec, its command and its end command. */
typedef struct lg_fault_result {
    lg_fault_spec spec;
    lg_fault_cmd run, end;
} lg_fault_result;

/* Whether a command's outcome is a failure the verdict must report: it could
 * not start, was killed, or exited non-zero. A command never run is none. */
int lg_fault_failed(const lg_fault_cmd *c);

/* When fault i's (0-based) command (end 0) or end command (end 1) failed
 * (lg_fault_failed), writes one line saying how into buf ("fault 1's command
 * 'kill -STOP 42' exited 1: kill: No such process") and returns 1; else 0. */
int lg_fault_failure(const lg_fault_result *f, int i, int end, char *buf, size_t size);

/* The first line of c's output (at most size - 1 bytes), into buf. */
const char *lg_fault_first_line(const lg_fault_cmd *c, char *buf, size_t size);

/* The span [*t0_s, *t1_s] of fault f on the load's clock (start_ns its
 * start): from its command's start to its end command's end, or to the
 * command's end when there is no end command. Returns 0, or -1 when its
 * command never ran. */
int lg_fault_span(const lg_fault_result *f, int64_t start_ns, double *t0_s, double *t1_s);

/* What the answers did around fault i (0-based), from the run's outcome
 * series s: ok and error answers per second before, during and after it, the
 * error outcomes during it, and how soon after its end the first ok came.
 * history_violations < 0 leaves the history check out of the text. Writes
 * an LG_N_FAULT note (violation 0, amount: errors during it) into *out.
 * Returns 0, or -1 (nothing written) when the fault never ran. */
int lg_fault_note(const lg_fault_result *f, int i, const lg_series *s, int64_t start_ns,
                  double elapsed_s, long long history_violations, lg_finding *out);

/* The history check's violations in [t0_s, t1_s] of the load's clock: the
 * reads outside their band (stale or impossible) whose GET overlapped the
 * span. -1 when h was not checked. Pure. */
long long lg_fault_history_in(const lg_history *h, double t0_s, double t1_s);

typedef struct lg_faults lg_faults;

/* Starts the thread that runs specs[0..n) against the load's clock (start_ns:
 * lg_now_ns() at the load's start), killing a command after timeout_ms
 * (0: LG_FAULT_TIMEOUT_MS). n == 0 starts nothing and sets *out NULL.
 * specs is copied. Returns 0, or LG_ERR_NOMEM / LG_ERR_SYS with err set and
 * *out NULL. */
int lg_faults_start(const lg_fault_spec *specs, int n, int64_t start_ns, int timeout_ms,
                    lg_faults **out, lg_err *err);

/* The run is over (or stopped): faults not yet begun are skipped, and every
 * end command not yet run runs at once. Returns at once; NULL is a no-op.
 * Thread-safe. */
void lg_faults_stop(lg_faults *f);

/* Stops (as lg_faults_stop), waits for every command started (each bounded
 * by the time limit) and the thread, and frees f. *out gets a malloc'd array
 * of *n results (the caller frees it), or NULL and 0 for f NULL or when out
 * of memory. */
void lg_faults_join(lg_faults *f, lg_fault_result **out, int *n);

#endif
