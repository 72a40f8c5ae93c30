/* trainperf — command-line entry: dispatches to one file per subcommand. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <errno.h>

#include "trainperf.h"
#include "cli/cli.h"

static void say(const char *kind, const char *fmt, va_list ap)
{
    fprintf(stderr, "trainperf: %s: ", kind);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

void cli_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    say("error", fmt, ap);
    va_end(ap);
}

void cli_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    say("warning", fmt, ap);
    va_end(ap);
}

int cli_color(FILE *f)
{
    const char *nc = getenv("NO_COLOR");
    if (nc && *nc) return 0;
    const char *term = getenv("TERM");
    if (term && strcmp(term, "dumb") == 0) return 0;
    return isatty(fileno(f));
}

const char *cli_c(const char *code)
{
    static int on = -1;
    if (on < 0) on = cli_color(stdout);
    return on ? code : "";
}

int cli_parse_double(const char *s, double *out)
{
    char *end;
    if (!s || !*s) return -1;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !(v >= 0) || v > 1e12) return -1;
    *out = v;
    return 0;
}

int cli_parse_long(const char *s, long *out)
{
    char *end;
    if (!s || !*s) return -1;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

struct cli_cmd {
    const char *name;
    const char *help;
    int (*fn)(int, char **);
};

#define CLI_ROW_(name, help) {#name, help, cmd_##name},
static const struct cli_cmd commands[] = {CLI_COMMANDS(CLI_ROW_)};
#undef CLI_ROW_

/* Edit distance (insert, delete, substitute, swap of neighbours) of short
 * words; larger than any threshold for long ones. */
static int edit_distance(const char *a, const char *b)
{
    enum { W = 24 };
    size_t n = strlen(a), m = strlen(b);
    if (n >= W || m >= W) return W;
    int d[W + 1][W + 1];
    for (size_t i = 0; i <= n; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= m; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            int c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < c) c = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < c) c = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < c)
                c = d[i - 2][j - 2] + 1;
            d[i][j] = c;
        }
    return d[n][m];
}

static const char *closest_command(const char *word)
{
    const char *best = NULL;
    int bd = 3; /* more than two edits away is not a typo */
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        if (!commands[i].fn) continue;
        int d = edit_distance(word, commands[i].name);
        /* a prefix ("rep") is as good as a typo */
        if (strncmp(commands[i].name, word, strlen(word)) == 0 && strlen(word) >= 2) d = 1;
        if (d < bd) {
            bd = d;
            best = commands[i].name;
        }
    }
    return best;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: trainperf COMMAND [ARGS...]\n\n"
               "  trainperf run [--out DIR] [--interval S] [--quiet] -- CMD [ARGS...]\n\n"
               "commands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (commands[i].fn) fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\n`trainperf COMMAND --help` shows each command's options.\n"
               "Exit codes (docs/cli.md): 0 success; 1 trainperf failed after reading its\n"
               "input (out of memory, a size cap, output not written); 2 unusable arguments or\n"
               "input, nothing done. `run` exits with the watched command's status (128+N\n"
               "after signal N; 126/127 when it cannot be executed / found).\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    const char *sub = argv[1];
    if (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0 || strcmp(sub, "help") == 0) {
        usage(stdout);
        return CLI_OK;
    }
    if (strcmp(sub, "--version") == 0 || strcmp(sub, "version") == 0) {
        printf("trainperf %s\n", tpf_version());
        return CLI_OK;
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        if (strcmp(sub, commands[i].name) != 0) continue;
        if (!commands[i].fn) {
            cli_error("'%s' is not available in this build", sub);
            return CLI_USAGE;
        }
        return commands[i].fn(argc - 1, argv + 1);
    }
    const char *near = closest_command(sub);
    if (near)
        cli_error("unknown command '%s'; did you mean '%s'? (see `trainperf --help`)", sub, near);
    else
        cli_error("unknown command '%s' (see `trainperf --help`)", sub);
    return CLI_USAGE;
}
