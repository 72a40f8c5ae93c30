#include "util/human.h"

#include <math.h>
#include <stdio.h>

const char *human_bytes(char *out, size_t n, double b)
{
    static const char *const u[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    if (!isfinite(b)) {
        snprintf(out, n, "?");
        return out;
    }
    int i = 0;
    while (fabs(b) >= 1024 && i < 5) {
        b /= 1024;
        i++;
    }
    snprintf(out, n, i ? "%.1f %s" : "%.0f %s", b, u[i]);
    return out;
}

const char *human_count(char *out, size_t n, double c)
{
    static const char *const u[] = {"", "K", "M", "B", "T"};
    if (!isfinite(c)) {
        snprintf(out, n, "?");
        return out;
    }
    int i = 0;
    while (fabs(c) >= 1000 && i < 4) {
        c /= 1000;
        i++;
    }
    snprintf(out, n, i ? "%.1f%s" : "%.0f%s", c, u[i]);
    return out;
}
