/* Numbers for people: one formatter shared by the CLI and the reports. */
#ifndef TPF_UTIL_HUMAN_H
#define TPF_UTIL_HUMAN_H

#include <stddef.h>

/* "512 B", "1.5 MiB", ... (binary units); "?" when b is not finite. */
void human_bytes(char *out, size_t n, double b);

#endif
