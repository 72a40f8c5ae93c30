/* The procfs source: system resources (CPU per core, memory, PSI, disk, net)
 * and the whole process tree of ctx->root_pid, read from /proc.
 *
 * sample() fills only the system and tree fields of a coll_frame (ncpu,
 * cpu_core_pct[], tree_pids/ntree included). Rates and percentages need two
 * samples: on the first they are unknown, never 0. Not thread-safe: one
 * collector thread owns a state. */
#ifndef TPF_COLLECT_PROCFS_H
#define TPF_COLLECT_PROCFS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/frame.h"

extern const src_ops procfs_source;

/* At most this many processes of the tree are followed in detail; the rest
 * are counted (procfs_overflow) and still count in tree_procs. */
#define PROCFS_MAX_PROCS 4096

/* One process of the watched tree, as of the last sample (procs.csv). */
typedef frame_proc procfs_proc;

/* The processes of the last sample. *out points into state and stays valid
 * until the next sample or close. Returns the count (0 before any sample),
 * or TPF_EINVAL. */
int procfs_procs(void *state, const procfs_proc **out);

/* Tree processes seen in the last sample beyond PROCFS_MAX_PROCS (not detailed). */
int procfs_overflow(void *state);

/* procfs_source.init: on failure *state may still be set, holding only the
 * reason for last_error(state); close() it. last_error(NULL) gives the reason
 * of the last failed init too.
 *
 * Like procfs_source.init, but reads <root>/proc/... and <root>/sys/block
 * instead of /proc and /sys (tests point it at captured files). root is
 * copied; NULL or "" means the real system. */
int procfs_init_at(void **state, const src_ctx *ctx, const char *root);

/* ---- parsers, exposed for tests; each reads text of length n (need not be
 * NUL-terminated) and returns 0 or TPF_EFORMAT. ---- */

typedef struct procfs_pidstat {
    pid_t pid, ppid;
    char comm[16];
    char state;
    uint64_t utime, stime; /* clock ticks */
    long threads;
    uint64_t starttime; /* clock ticks since boot */
    uint64_t rss_pages;
} procfs_pidstat;

/* /proc/PID/stat. comm may hold spaces and ')': the last ')' ends it. */
int procfs_parse_pidstat(const char *s, size_t n, procfs_pidstat *out);

/* /proc/PID/io: read_bytes and write_bytes. */
int procfs_parse_io(const char *s, size_t n, uint64_t *read_bytes, uint64_t *write_bytes);

typedef struct procfs_cpu_times {
    uint64_t busy, iowait, total; /* ticks; total excludes guest (already in user) */
    uint8_t ok;
} procfs_cpu_times;

/* /proc/stat cpu lines: *all gets the "cpu" line, cores[N] the "cpuN" line
 * for N < maxcores (others keep ok == 0). */
int procfs_parse_stat(const char *s, size_t n, procfs_cpu_times *all, procfs_cpu_times *cores,
                      int maxcores);

/* Values in bytes; ok flags say which lines were present. */
typedef struct procfs_meminfo {
    uint64_t total, available, swap_total, swap_free;
    uint8_t total_ok, available_ok, swap_ok;
} procfs_meminfo;

int procfs_parse_meminfo(const char *s, size_t n, procfs_meminfo *out);

/* /proc/pressure/<res>: the total= microsecond counters of "some" and "full". */
typedef struct procfs_psi {
    uint64_t some_us, full_us;
    uint8_t some_ok, full_ok;
} procfs_psi;

int procfs_parse_psi(const char *s, size_t n, procfs_psi *out);

/* One line of /proc/diskstats (without its '\n'). name gets at most 31 bytes. */
int procfs_parse_diskstats_line(const char *s, size_t n, unsigned *major, unsigned *minor,
                                char name[32], uint64_t *rd_sectors, uint64_t *wr_sectors);

/* One interface line of /proc/net/dev; returns TPF_EFORMAT for the header lines. */
int procfs_parse_netdev_line(const char *s, size_t n, char name[32], uint64_t *rx_bytes,
                             uint64_t *tx_bytes);

#endif
