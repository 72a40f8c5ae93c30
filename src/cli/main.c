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

static void usage(FILE *f)
{
    fprintf(f, "usage: trainperf COMMAND [ARGS...]\n\n"
               "  trainperf run [--out DIR] [--interval S] [--quiet] -- CMD [ARGS...]\n\n"
               "commands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (commands[i].fn) fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\n`trainperf COMMAND --help` shows each command's options.\n"
               "Exit codes: 0 success, 1 problem found or command failed, 2 bad usage;\n"
               "`run` exits with the watched command's status (128+N after signal N).\n");
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
    cli_error("unknown command '%s' (see `trainperf --help`)", sub);
    return CLI_USAGE;
}
