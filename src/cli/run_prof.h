/* `trainperf run` options for the zero-code profiling hooks (--profile,
 * --memory-every, --flops-step, --comm-log-step, ...). They are not read by
 * the collector: each becomes an environment variable of the child that the
 * Python hook (python/trainperf/_profile_hooks.py) reads. docs/cli.md lists
 * the variables; a later `trainperf tune` passes its knobs the same way. */
#ifndef TPF_CLI_RUN_PROF_H
#define TPF_CLI_RUN_PROF_H

#include <stdio.h>

#define RUNPROF_MAX_ENV 8

typedef struct run_prof {
    /* "NAME=value" for the child; fixed storage, so every exit path of
     * `run` is free of cleanup */
    char env[RUNPROF_MAX_ENV][96];
    int nenv;
    int any;                    /* some option given: the auto hook is needed */
    const char *first;          /* the first option given, for error messages */
} run_prof;

/* For option opt (without "=value"): 1 when it is one of ours and takes a
 * value, 0 when it is ours without a value, -1 when it is not ours. */
int runprof_takes_value(const char *opt);

/* Apply opt (val NULL for flags). Returns 1 when consumed, 0 when opt is not
 * ours, -1 after printing a one-line error (exit 2). */
int runprof_option(run_prof *p, const char *opt, const char *val);

/* Usage lines for `run --help`. */
void runprof_usage(FILE *f);

/* 1 when the child's inherited variable env ("NAME=...") is one this run sets. */
int runprof_overrides(const run_prof *p, const char *env);

#endif
