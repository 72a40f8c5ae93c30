/* The Python stacks of a process tree trainperf did not start (`trainperf
 * attach`), read from outside by py-spy: nothing is injected and the
 * processes are never paused (py-spy record --nonblocking). Each Python
 * process of the tree gets its own `py-spy record`, rotated every chunk
 * (speedscope output: the samples in order, so an optimizer step's period
 * can be told); each finished chunk is folded into per-thread figures and
 * the files are written again (RUN/pyprof/stacks-PID.folded and
 * RUN/pyprof/attach.json, docs/run-format.md), so a killed attach keeps
 * what it had. The tree is rescanned at every tick: processes that come get
 * a sampler, those that go keep their figures. */
#ifndef TPF_CLI_ATTACH_STACKS_H
#define TPF_CLI_ATTACH_STACKS_H

#include <stddef.h>
#include <sys/types.h>

typedef struct astk astk;

/* Sample the Python processes of root's tree at rate_hz into run_dir.
 * Returns 0, or -1 with why (py-spy is not installed; out of memory): the
 * attach goes on with resources only. *out is freed with astk_free (also
 * after -1). */
int astk_create(astk **out, const char *run_dir, pid_t root, double rate_hz, char *why, size_t n);

/* Rescan the tree, start, rotate and reap the samplers, fold the chunks that
 * finished and rewrite the files. Call about once a second. */
void astk_tick(astk *s);

/* Stop every sampler (SIGINT: each writes its chunk), wait for them a few
 * seconds, fold what they wrote and write the files a last time. */
void astk_finish(astk *s);

/* What the sampler saw, for the CLI's closing lines. */
typedef struct astk_info {
    int python_procs;  /* Python processes sampled */
    int failed;        /* Python processes py-spy could not read */
    char error[200];   /* the first failure's reason, "" none */
    unsigned long long samples;
} astk_info;
void astk_get_info(const astk *s, astk_info *out);

void astk_free(astk *s);

#endif
