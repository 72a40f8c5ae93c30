/* trainperf compare RUN_A RUN_B [--format text|md|html|json] [--out FILE] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/compare.h"
#include "cli/cli.h"
#include "trainperf.h"

static void compare_usage(FILE *f)
{
    fprintf(f, "usage: trainperf compare RUN_A RUN_B [--format text|md|html|json] [--json]\n"
               "                         [--out FILE]\n\n"
               "Throughput, step breakdown, data wait, resources and diagnosis of two runs side\n"
               "by side; deltas are B - A (absolute, and %% of A).\n\n"
               "  -f, --format F   text (the default), md, html or json\n"
               "  --json           the same as --format json\n"
               "  -o, --out FILE   write to FILE instead of stdout\n\n"
               "Exit status: 0 written; 1 the comparison could not be built or written;\n"
               "2 bad usage or a missing/unreadable run directory.\n");
}

int cmd_compare(int argc, char **argv)
{
    const char *dirs[2] = {NULL, NULL}, *out = NULL;
    int nd = 0, fmt = REPORT_TEXT;
    int k;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            compare_usage(stdout);
            return CLI_OK;
        } else if ((k = cli_output_opt(argc, argv, &i, &fmt, &out)) != 0) {
            if (k < 0) return CLI_USAGE;
        } else if (a[0] == '-' && a[1]) {
            cli_error("compare: unknown option '%s' (see `trainperf compare --help`)", a);
            return CLI_USAGE;
        } else if (nd < 2) {
            dirs[nd++] = a;
        } else {
            cli_error("compare takes exactly two run directories");
            return CLI_USAGE;
        }
    }
    if (nd != 2) {
        compare_usage(stderr);
        return CLI_USAGE;
    }
    buf b;
    buf_init(&b, 0);
    char err[512] = "";
    int color = fmt == REPORT_TEXT && !out && cli_color(stdout);
    int rc = compare_build(dirs[0], dirs[1], (report_format)fmt, color, &b, err, sizeof(err));
    return cli_put_doc(rc, &b, err, out);
}
