/* `trainperf run` profiling options, passed to the Python hook as environment
 * variables (run_prof.h). Checked here so that a bad value stops the run
 * before anything starts (exit 2) rather than in the middle of training. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/run_prof.h"

/* The most steps one schedule field may name: a window longer than this is a
 * typo (and would hold a huge trace in memory). */
#define RUNPROF_MAX_STEPS 1000000L

typedef struct prof_opt {
    const char *opt;
    const char *var;   /* environment variable for the hook */
    int kind;          /* 0 flag, 1 step count (N >= 1 or >= 0), 2 schedule, 3 FLOP/s */
    long min;
} prof_opt;

static const prof_opt prof_opts[] = {
    {"--profile", "TRAINPERF_PROFILE", 2, 0},
    {"--profile-memory", "TRAINPERF_PROFILE_MEMORY", 0, 0},
    {"--record-shapes", "TRAINPERF_RECORD_SHAPES", 0, 0},
    {"--with-stack", "TRAINPERF_WITH_STACK", 0, 0},
    {"--memory-every", "TRAINPERF_MEMORY_EVERY", 1, 1},
    {"--flops-step", "TRAINPERF_FLOPS_STEP", 1, 0},
    {"--comm-log-step", "TRAINPERF_COMM_LOG_STEP", 1, 0},
    {"--peak-flops", "TRAINPERF_PEAK_FLOPS", 3, 0},
};
#define NPROF_OPTS ((int)(sizeof(prof_opts) / sizeof(prof_opts[0])))

static const prof_opt *find(const char *opt)
{
    for (int i = 0; i < NPROF_OPTS; i++)
        if (strcmp(prof_opts[i].opt, opt) == 0) return &prof_opts[i];
    return NULL;
}

int runprof_takes_value(const char *opt)
{
    const prof_opt *o = find(opt);
    if (!o) return -1;
    return o->kind != 0;
}

/* WAIT,WARMUP,ACTIVE[,REPEAT]: ACTIVE >= 1, the others >= 0 (REPEAT 0 means
 * windows until the end, as torch.profiler.schedule has it). */
static int parse_schedule(const char *val, long out[4])
{
    long v[4] = {0, 0, 0, 1};
    int n = 0;
    const char *s = val;
    for (;;) {
        char *end;
        if (n == 4 || *s < '0' || *s > '9') return -1;
        long x = strtol(s, &end, 10);
        if (x < 0 || x > RUNPROF_MAX_STEPS) return -1;
        v[n++] = x;
        if (*end == 0) break;
        if (*end != ',') return -1;
        s = end + 1;
    }
    if (n < 3 || v[2] < 1) return -1;
    memcpy(out, v, sizeof(v));
    return 0;
}

static int put_env(run_prof *p, const char *var, const char *val)
{
    size_t k = strlen(var);
    for (int i = 0; i < p->nenv; i++) {
        if (strncmp(p->env[i], var, k) == 0 && p->env[i][k] == '=') {
            /* repeated option: the last one wins, as for other flags */
            int w = snprintf(p->env[i], sizeof(p->env[i]), "%s=%s", var, val);
            return w > 0 && (size_t)w < sizeof(p->env[i]) ? 0 : -1;
        }
    }
    if (p->nenv == RUNPROF_MAX_ENV) return -1;
    int w = snprintf(p->env[p->nenv], sizeof(p->env[0]), "%s=%s", var, val);
    if (w <= 0 || (size_t)w >= sizeof(p->env[0])) return -1;
    p->nenv++;
    return 0;
}

int runprof_option(run_prof *p, const char *opt, const char *val)
{
    const prof_opt *o = find(opt);
    if (!o) return 0;
    char num[96];
    if (o->kind == 2) {
        long v[4];
        if (!val || parse_schedule(val, v) != 0) {
            cli_error("%s '%s': expected WAIT,WARMUP,ACTIVE[,REPEAT] step counts, e.g. 1,1,3 "
                      "(ACTIVE at least 1)", opt, val ? val : "");
            return -1;
        }
        snprintf(num, sizeof(num), "%ld,%ld,%ld,%ld", v[0], v[1], v[2], v[3]);
        val = num;
    } else if (o->kind == 3) {
        /* cli_parse_double caps at 1e12 (durations): a GPU peak is ~1e15 */
        char *end = NULL;
        double x = val ? strtod(val, &end) : 0;
        if (!val || (strcmp(val, "measure") != 0 && (end == val || *end || !(x > 0) || x > 1e21))) {
            cli_error("%s '%s': expected a peak in FLOP/s per rank (e.g. 312e12) or 'measure'",
                      opt, val ? val : "");
            return -1;
        }
    } else if (o->kind == 1) {
        long n;
        if (!val || cli_parse_long(val, &n) != 0 || n < o->min || n > RUNPROF_MAX_STEPS) {
            cli_error("%s '%s': expected a step %s (%ld or more)", opt, val ? val : "",
                      o->min ? "count" : "index", o->min);
            return -1;
        }
        snprintf(num, sizeof(num), "%ld", n);
        val = num;
    } else {
        val = "1";
    }
    if (put_env(p, o->var, val) != 0) {
        cli_error("%s: too many profiling options", opt);
        return -1;
    }
    p->any = 1;
    if (!p->first) p->first = o->opt;
    return 1;
}

int runprof_overrides(const run_prof *p, const char *env)
{
    for (int i = 0; i < p->nenv; i++) {
        const char *eq = strchr(p->env[i], '=');
        size_t k = (size_t)(eq - p->env[i]);
        if (strncmp(env, p->env[i], k) == 0 && env[k] == '=') return 1;
    }
    return 0;
}

void runprof_usage(FILE *f)
{
    fprintf(f,
            "Profiling (Python/PyTorch commands, through the auto-instrumentation; steps are\n"
            "optimizer steps, counted from 0):\n"
            "  --profile W,WU,A[,R]  torch.profiler windows: wait W, warm up WU, record A steps,\n"
            "                        R times (default 1; 0 = until the end); traces in\n"
            "                        RUN/profile/trace-rank<R>-step<S>.json, analysed by the report\n"
            "  --profile-memory      with --profile: record tensor allocations\n"
            "  --record-shapes       with --profile: record operator input shapes\n"
            "  --with-stack          with --profile: record Python stacks\n"
            "  --memory-every N      CUDA allocator stats every N steps; a memory snapshot on OOM\n"
            "  --flops-step N        count FLOPs by module on step N (RUN/flops/), with TFLOP/s\n"
            "                        and MFU\n"
            "  --peak-flops X|measure  peak FLOP/s of one rank for MFU, instead of the GPU table\n"
            "                        (needed on a CPU): a number, or measure a matmul in each rank\n"
            "  --comm-log-step N     log every collective of step N (distributed runs)\n");
}
