/* mangen.c - writes a program's man page from its template in man/, with
 * what the program's own tables say put in, so that the page can't drift
 * from the program: stockd's flags (server/config.c, the table that parses
 * them and prints --help), loadgen's flags and scenarios (loadgen/opts.c,
 * loadgen/scenario.c). The rest of a page is written by hand in its
 * template. The Makefile runs it into build/man/.
 *
 * Usage: mangen TEMPLATE > PAGE. A template line that is exactly
 * '.\" @STOCKD_OPTIONS@', '.\" @LOADGEN_OPTIONS@' or
 * '.\" @LOADGEN_SCENARIOS@' becomes that list; other lines are copied.
 * Exit status 0, or 1 after a message on stderr. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loadgen/opts.h"
#include "loadgen/scenario.h"
#include "server/config.h"

/* Text from a table as one line of roff: line breaks become blanks,
 * backslashes print as such, and the dashes of a word that starts with one
 * (--allow-work-ms, a minus) are minus signs, \-, what a reader types,
 * while one inside a word (round-robin) stays a hyphen. A leading '.' or
 * ''' would be read as a request: \& guards it. */
static void roff_text(FILE *out, const char *s)
{
    int dashed = 0; /* in a word that started with a dash */
    if (*s == '.' || *s == '\'')
        fputs("\\&", out);
    for (const char *p = s; *p; p++) {
        if (*p == '-' && (dashed || p == s || !isalnum((unsigned char)p[-1])))
            dashed = 1;
        else if (*p != '-' && !isalnum((unsigned char)*p))
            dashed = 0;
        if (*p == '\n')
            fputc(' ', out);
        else if (*p == '\\')
            fputs("\\e", out);
        else if (*p == '-' && dashed)
            fputs("\\-", out);
        else
            fputc(*p, out);
    }
}

/* A flag's name in bold, "--" included (so each of its dashes is a minus). */
static void roff_flag(FILE *out, const char *name)
{
    char flag[128];
    snprintf(flag, sizeof(flag), "--%s", name);
    fputs("\\fB", out);
    roff_text(out, flag);
    fputs("\\fR", out);
}

/* stockd: every flag, its value, variable, default, and what it does. */
static void stockd_options(FILE *out)
{
    for (size_t i = 0; i < cfg_flag_count(); i++) {
        cfg_flag_doc d;
        cfg_flag_describe(i, &d);
        fputs(".TP\n", out);
        roff_flag(out, d.flag);
        if (d.arg[0])
            fprintf(out, " \\fI%s\\fR", d.arg);
        fputc('\n', out);
        roff_text(out, d.help);
        if (d.choices[0]) {
            fputs("; one of ", out);
            roff_text(out, d.choices);
        }
        fputs(".\n.br\nVariable: \\fB", out);
        roff_text(out, d.env);
        fputs("\\fR; default: ", out);
        roff_text(out, d.def);
        fputc('\n', out);
    }
}

/* loadgen: every flag under its heading, as --help has them. */
static void loadgen_options(FILE *out)
{
    for (int i = 0; i < lg_flag_count(); i++) {
        const lg_flag *f = lg_flag_at(i);
        if (f->group)
            fprintf(out, ".SS %s\n", f->group);
        fputs(".TP\n", out);
        if (f->key < 256)
            fprintf(out, "\\fB\\-%c\\fR, ", f->key);
        roff_flag(out, f->name);
        if (f->has_arg == LG_ARG_OPTIONAL)
            fputs("[=\\fI", out);
        else if (f->arg[0])
            fputs(" \\fI", out);
        if (f->arg[0]) {
            roff_text(out, f->arg);
            fputs(f->has_arg == LG_ARG_OPTIONAL ? "\\fR]" : "\\fR", out);
        }
        fputc('\n', out);
        roff_text(out, f->help);
        fputc('\n', out);
    }
}

/* loadgen: every scenario, as --list has them. */
static void loadgen_scenarios(FILE *out)
{
    for (int i = 0; lg_scenario_at(i); i++) {
        const lg_scenario *s = lg_scenario_at(i);
        fprintf(out, ".TP\n.B %s\n", s->name);
        roff_text(out, s->summary);
        fputs(".\n.br\nstockd flags: ", out);
        roff_text(out, s->server_flags[0] ? s->server_flags : "none");
        fputs(".\n", out);
        if (s->expects[0]) {
            fputs(".br\nBeyond the invariants: ", out);
            roff_text(out, s->expects);
            fputs(".\n", out);
        }
    }
}

/* One template line (without its newline) to out. */
static void page_line(FILE *out, const char *line)
{
    if (strcmp(line, ".\\\" @STOCKD_OPTIONS@") == 0) {
        stockd_options(out);
        return;
    }
    if (strcmp(line, ".\\\" @LOADGEN_OPTIONS@") == 0) {
        loadgen_options(out);
        return;
    }
    if (strcmp(line, ".\\\" @LOADGEN_SCENARIOS@") == 0) {
        loadgen_scenarios(out);
        return;
    }
    fprintf(out, "%s\n", line);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: mangen TEMPLATE > PAGE\n");
        return 1;
    }
    FILE *in = fopen(argv[1], "r");
    if (in == NULL) {
        perror(argv[1]);
        return 1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, in)) > 0) {
        if (line[n - 1] == '\n')
            line[n - 1] = '\0';
        page_line(stdout, line);
    }
    free(line);
    int bad = ferror(in);
    fclose(in);
    if (bad || fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "mangen: %s: read or write failed\n", argv[1]);
        return 1;
    }
    return 0;
}
