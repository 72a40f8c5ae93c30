/* /proc/PID/stat (see pstat.h). */
#include "util/pstat.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

const char *pstat_fields(pid_t pid, char *buf, size_t cap)
{
    if (cap < 2) return NULL;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    ssize_t n = read(fd, buf, cap - 1);
    close(fd);
    if (n <= 0) return NULL;
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    return p ? p + 1 : NULL;
}
