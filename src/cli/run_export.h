#ifndef TPF_CLI_RUN_EXPORT_H
#define TPF_CLI_RUN_EXPORT_H

#include <stddef.h>

/* Parse --prometheus [HOST:]PORT and listen. On error prints one line and
 * returns CLI_USAGE (nothing started); else CLI_OK with *fd the listening
 * socket and url the address scrapers use ("http://H:P/metrics\n"). */
int run_export_listen(const char *spec, int *fd, char *url, size_t urllen);
/* Write url to RUN/prometheus.url and tell the user (unless quiet). */
void run_export_note(const char *run_dir, const char *url, int quiet);

#endif
