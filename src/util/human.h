/* Numbers for people: one formatter shared by the CLI and the reports. */
#ifndef TPF_UTIL_HUMAN_H
#define TPF_UTIL_HUMAN_H

#include <stddef.h>

/* "512 B", "1.5 MiB", ... (binary units); "?" when b is not finite.
 * Returns out, so that it can stand in an argument list. The one byte
 * formatter of the project: the CLI, reports, diagnosis and alerts use it. */
const char *human_bytes(char *out, size_t n, double b);

/* "512", "5.1K", "2.1M", "1.3B" (decimal units, for counts); "?" when c is
 * not finite. Returns out. */
const char *human_count(char *out, size_t n, double c);

#endif
