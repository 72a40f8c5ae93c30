/* `trainperf run` options for the live exporters (docs/exporters.md), kept
 * apart from cmd_run.c so the option parsing there stays one call. */
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/run_export.h"
#include "record/exporter.h"
#include "record/writers.h"
#include "trainperf.h"
#include "util/buf.h"

int run_export_listen(const char *spec, int *fd, char *url, size_t urllen)
{
    char host[256], err[256];
    int port = 0, bound = 0;
    *fd = -1;
    if (prom_parse_addr(spec, host, sizeof(host), &port, err, sizeof(err)) != 0) {
        cli_error("--prometheus '%s': %s", spec, err);
        return CLI_USAGE;
    }
    int s = prom_listen(host, port, &bound, err, sizeof(err));
    if (s < 0) {
        cli_error("--prometheus %s: %s", spec, err);
        return CLI_USAGE;
    }
    /* The address as a scraper reaches it, for tools and for port 0. */
    const char *shown = strcmp(host, "0.0.0.0") == 0 ? "127.0.0.1" : strcmp(host, "::") == 0 ? "::1" : host;
    snprintf(url, urllen, strchr(shown, ':') ? "http://[%s]:%d/metrics\n" : "http://%s:%d/metrics\n",
             shown, bound);
    *fd = s;
    return CLI_OK;
}

void run_export_note(const char *run_dir, const char *url, int quiet)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/prometheus.url", run_dir);
    buf b;
    buf_init(&b, 1024);
    buf_puts(&b, url);
    rec_write_atomic(path, &b);
    buf_free(&b);
    if (!quiet) fprintf(stderr, "trainperf: Prometheus metrics at %s", url);
}
