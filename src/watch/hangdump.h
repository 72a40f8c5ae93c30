/* Stacks of every process of a tree, for the hang watch.
 *
 * Python processes started under `trainperf run` with the auto hook announce
 * themselves in RUN/live/: pystack-PID.txt (faulthandler registered on a
 * real-time signal named in its first line: every thread's Python stack,
 * written by C code even while the GIL is held) and ctl-PID (a FIFO a small
 * thread of the process reads: it answers with state-PID.json, the innermost
 * user frame and the collective in progress). Other processes are read from
 * outside: Python stacks from py-spy (Python processes) and native stacks
 * from gdb (every process), each when installed, and always their threads'
 * states and kernel wait channels from /proc. Nothing
 * is ever signalled that did not ask for it. */
#ifndef TPF_WATCH_HANGDUMP_H
#define TPF_WATCH_HANGDUMP_H

#include <stddef.h>
#include <sys/types.h>

#include "util/buf.h"
#include "util/jsonw.h"

#define HD_MAX_PROCS 256

typedef struct hd_proc {
    pid_t pid, ppid;
    int rank;          /* RANK of its environment; -1 none */
    int rank_root;     /* the rank's own process (not a DataLoader worker of it) */
    char comm[32];
    int python;        /* announced itself (auto hook) */
    int stepped;       /* recorded steps: a process that was training */
    int answered;      /* its state file came back */
    char where[256];   /* "wait_for_peer (train.py:12)", "" unknown */
    char coll[48];     /* collective in progress ("all_reduce"), "" none */
    long long seq;     /* its sequence number; -1 unknown */
    char how[24];      /* where the stack came from: "python", "faulthandler", "py-spy+gdb",
                          "py-spy", "gdb", "proc" */
} hd_proc;

typedef struct hd_result {
    char verdict[640]; /* "rank 1 in wait_for_peer (train.py:12); rank 0 in all_reduce #183" */
    char stacks[64];   /* file written, relative to the run directory ("hangs/1.txt") */
    int nprocs;
    hd_proc procs[HD_MAX_PROCS];
} hd_result;

/* Save the stacks of root's process tree as RUN/hangs/<n>.txt (headed by
 * `headline`) and fill *res. stepped (nstepped pids, may be NULL): the
 * processes that recorded steps; without ranks the verdict names those (the
 * hung trainee, never a child of it sleeping meanwhile). Waits at most a few seconds for the processes to
 * answer. Returns 0 or a negative TPF_E code (the file could not be written;
 * res is still filled as far as it got). */
int hd_dump(const char *run_dir, pid_t root, int n, const char *headline, const pid_t *stepped,
            int nstepped, hd_result *res);

/* The same stacks into b (capped; b->err set past its cap), nothing written:
 * `trainperf dump`. run_dir: where the processes announced themselves
 * (RUN/live/), or NULL to read every process from outside. req: the request
 * number the hook's answer carries (distinct from the hang numbers a
 * supervisor of the same run uses). HD_NATIVE: gdb's native stacks also for
 * the processes the hook answered for (each is stopped while gdb reads it).
 * Returns 0 or TPF_ENOMEM. */
#define HD_NATIVE 0x1u
int hd_collect(const char *run_dir, pid_t root, int req, unsigned flags, const pid_t *stepped,
               int nstepped, hd_result *res, buf *b);

/* Embedded mode (no supervisor): the stacks of the calling process, from a
 * thread of its own that is no Python thread (the collector). Python
 * threads' stacks through faulthandler, when trainperf.start() registered it
 * (RUN/live/pystack-PID.txt names its signal): the signal is raised on the
 * calling thread, so the dump is complete when this returns; every thread's
 * state and wait channel from /proc. No debugger is attached: it would stop
 * the training process itself. Writes RUN/hangs/<n>.txt; fills *res (one
 * process). Returns 0 or a negative TPF_E code. */
int hd_dump_self(const char *run_dir, int n, const char *headline, hd_result *res);

/* The "processes" array of a hangs.jsonl line (docs/run-format.md). */
void hd_procs_json(jw *w, const hd_result *res);

/* 1 when an executable of that name is on PATH (py-spy, gdb). */
int hd_in_path(const char *name);

/* 1 when pid is a CPython interpreter: its executable is python* or it maps
 * libpython (an embedding program). */
int hd_is_python(pid_t pid);

/* The processes of root's tree (root first), at most max. */
int hd_tree(pid_t root, pid_t *out, pid_t *ppid, int max);

#endif
