/* Shared pieces of the CLI: subcommand entry points and terminal helpers.
 * The CLI owns the terminal; the library never prints. */
#ifndef TPF_CLI_H
#define TPF_CLI_H

#include <stdio.h>

/* Exit codes (docs/cli.md). A child's status passes through `run` unchanged. */
enum {
    CLI_OK = 0,
    CLI_FAIL = 1,   /* the command ran but found a problem (e.g. analysis error) */
    CLI_USAGE = 2,  /* unusable arguments, unwritable output, unreadable input */
};

/* Each subcommand: argv[0] is the subcommand name. Returns the exit code.
 * Declared weak so a subcommand's file can be absent while it is built. */
#define CLI_COMMANDS(X)                                                            \
    X(run, "run a command and watch it: live status, run directory, report")       \
    X(report, "diagnosis and report from a run directory")                         \
    X(compare, "two runs side by side")                                            \
    X(analyze, "analyse torch.profiler (Kineto/Chrome) traces")                     \
    X(merge, "merge per-rank traces into one timeline")                            \
    X(top, "live view of a run directory being written")                           \
    X(attach, "watch a process tree trainperf did not start: resources, Python stacks, report") \
    X(dump, "every process's stacks now, of a running run or any process tree")     \
    X(profile, "a profiler window or a memory snapshot now, in a run already going") \
    X(tune, "try the fixes on the real script as short trials, ranked by measured speedup") \
    X(doctor, "what this machine offers trainperf, and how to fix what is missing")

#define CLI_DECL_(name, help) int cmd_##name(int argc, char **argv) __attribute__((weak));
CLI_COMMANDS(CLI_DECL_)
#undef CLI_DECL_

/* "trainperf: error: <message>" on stderr, one line. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void cli_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* 1 when colour may be used on f: a TTY, NO_COLOR unset, TERM not "dumb". */
int cli_color(FILE *f);

/* Colour escapes, or "" when colour is off for stdout. */
const char *cli_c(const char *code);
#define CLI_BOLD "\033[1m"
#define CLI_RED "\033[31m"
#define CLI_GREEN "\033[32m"
#define CLI_YELLOW "\033[33m"
#define CLI_DIM "\033[2m"
#define CLI_RESET "\033[0m"

/* Parse a non-negative decimal number (seconds etc.); 0 on success. */
int cli_parse_double(const char *s, double *out);
int cli_parse_long(const char *s, long *out);

/* report/compare: "text|md|html|json" to a report_format (0, or -1 when
 * unknown); write b to out (NULL: stdout), returning an exit code. */
int cli_parse_format(const char *s, int *fmt);
/* The output options report and compare share: --format F / -f F / --format=F,
 * --json, --out FILE / -o FILE / --out=FILE at argv[*i] (advances *i past a
 * value). Returns 1 when consumed, 0 when argv[*i] is none of them, -1 after
 * printing the error (exit 2). */
int cli_output_opt(int argc, char **argv, int *i, int *fmt, const char **out);
/* The folder holding the Python package and the auto hook: TRAINPERF_PYTHON_DIR,
 * else <exe>/../python when it holds the package, else <exe>/../share/trainperf.
 * "" when none exists. */
void cli_python_dir(char *out, size_t n);

struct buf;
int cli_write_out(const char *out, const struct buf *b);

/* Columns of the terminal on fd; 0 when fd is not one. */
int cli_term_cols(int fd);
/* The last whole rows of a CSV file f whose header line hdr was just read:
 * at most cap bytes from its end, the first row dropped when the cut falls
 * inside it, and the row being written (no newline yet) left out. A
 * malloc'd string (free it; "" when none), or NULL on a read error. */
char *cli_csv_tail(FILE *f, const char *hdr, long cap);
/* handler for SIGINT, SIGTERM and SIGHUP (and SIGQUIT when quit), no flags
 * (an interrupted wait returns EINTR); SIGPIPE ignored. */
void cli_on_signals(void (*handler)(int), int quit);
/* in[0..len) into out for a terminal of cols columns: a line wider than that
 * is broken at spaces, its continuations indented like its text (past the
 * leading spaces and a list marker, "12. " or "- "). Colour escapes take no
 * column, a UTF-8 character one; a word wider than the row stays whole.
 * cols < 20: copied as is. */
void cli_wrap(const char *in, size_t len, int cols, struct buf *out);
/* The report's text on stderr after a blank line, wrapped to the terminal's
 * width when stderr is one. */
void cli_print_report(const struct buf *text);
/* End of a command that builds a document: rc != 0 prints err (or the code's
 * text) and gives exit 2 for a missing/damaged run, else 1; rc == 0 writes b
 * to out (NULL: stdout). Frees b. Returns the exit code. */
int cli_put_doc(int rc, struct buf *b, const char *err, const char *out);

/* A run rec_recover found interrupted (by `report`, or the next run's sweep
 * of dead segment directories): its summary.json and reports written
 * (report_finish_run), one line on stderr saying so, and one more when they
 * could not be written (none when quiet: a sweep's run is not the current
 * run's business, and `report` on it finishes it later). Returns 0, or the
 * TPF_E* code of the writing. */
struct rec_recovery;
/* Claim run_dir for one run (record/rundir.h, rec_rundir_claim): its lock's
 * fd, or -1 after saying why not in one line (in use, a file of that name,
 * a run there without force, not writable: shown names it then). */
int cli_claim_run_dir(const char *run_dir, int force, const char *shown);
int cli_finish_recovered(const char *dir, const struct rec_recovery *rv, int quiet);

#endif
