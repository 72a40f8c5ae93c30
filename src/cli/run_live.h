/* A run that is going now: `trainperf dump`, `profile` (and `attach` for a
 * bare process id) find its processes here. */
#ifndef TPF_CLI_RUN_LIVE_H
#define TPF_CLI_RUN_LIVE_H

#include <stddef.h>
#include <sys/types.h>

#define LR_MAX_HOOKED 256

typedef struct live_run {
    pid_t root;                    /* the command `trainperf run` started (heartbeat.json); 0 none */
    pid_t supervisor;              /* `trainperf run` itself; 0 none (embedded mode) */
    int nhooked;
    pid_t hooked[LR_MAX_HOOKED];   /* live processes with the zero-code hook (RUN/live/ctl-PID) */
} live_run;

/* Fill *lr for the run directory dir. 0 when a live collector holds it;
 * else -1 with one line for people in err ("... is not running"). */
int live_run_find(const char *dir, live_run *lr, char *err, size_t n);

/* 1 when pid names a process that exists now. */
int live_pid_alive(pid_t pid);

/* Parse "1234" as a process id (0 when s is not one). */
pid_t live_parse_pid(const char *s);

/* The run directory a process was started in (TRAINPERF_RUN_DIR of its
 * environment) into out; 0, or -1 when it has none or it is unreadable. */
int live_pid_run_dir(pid_t pid, char *out, size_t n);

#endif
