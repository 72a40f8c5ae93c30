/* /proc/PID/stat, read once for the modules that need a field or two of it
 * (record/segdir.c: start time; watch/hangdump.c: parent). */
#ifndef TPF_UTIL_PSTAT_H
#define TPF_UTIL_PSTAT_H

#include <stddef.h>
#include <sys/types.h>

/* The fields of /proc/PID/stat from field 3 (state) on, read into buf (cap
 * bytes; its tail is cut beyond that), or NULL when the process is gone or
 * the file unreadable. The command name may hold spaces and parentheses,
 * so the fields resume after the last ')'. Points into buf. */
const char *pstat_fields(pid_t pid, char *buf, size_t cap);

#endif
