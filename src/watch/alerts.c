/* Alert rules: parsing, evaluation against collector frames, trend metrics.
 *
 * Everything a set needs is inside the set (rules, per-rule state, trend
 * history), allocated once by alerts_create: alerts_eval never allocates. */
#include "watch/alerts.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "trainperf.h"
#include "util/human.h"

#define ALERT_MAX_RULES 64
#define ALERT_NAME_MAX 48
#define ALERT_EXPR_MAX 192
#define TREND_CAP 256
#define TREND_SPACING_S 1.0   /* at most one trend point per second */
#define TREND_WINDOW_S 180.0  /* fit over the last three minutes */
#define TREND_MIN_SPAN_S 20.0 /* and only once 20 s of history exist */
#define TREND_MIN_POINTS 6
#define TREND_MIN_R2 0.8 /* a noisy cloud is not a trend */
/* trends start at the first step, or after this much of a run that makes
 * none: start-up (imports, the model and the data loaded) grows memory
 * once, it is no leak */
#define TREND_STARTUP_S 120.0
#define ETA_NONE 1e12    /* "not growing": far beyond any threshold */
#define HYST_MARGIN 0.05 /* clear only 5% of the threshold past it */

/* NVML clock-event bits that mean the GPU slowed down for a hardware,
 * thermal or power-brake reason (SwPowerCap is reported separately). */
#define GPU_THROTTLE_SLOW_BITS (0x8u | 0x20u | 0x40u | 0x80u)

enum metric_kind { MK_HOST, MK_GPU };
/* MU_SHARE: 0-1, shown as a percentage */
enum metric_unit { MU_PCT, MU_BYTES, MU_BPS, MU_S, MU_C, MU_RATIO, MU_COUNT, MU_W, MU_FLAG, MU_SHARE };

typedef struct trend {
    double t[TREND_CAP], v[TREND_CAP];
    int head, n; /* ring: head is the next slot */
    double last_t;
} trend;

/* A rule's condition: "metric op thr [for dur_s]", or off ("NAME: off"). */
typedef struct parsed {
    int metric;  /* index into metrics[] */
    int op;
    double thr, dur_s;
    int off;
} parsed;

typedef struct alert_rule {
    char name[ALERT_NAME_MAX];
    char expr[ALERT_EXPR_MAX];
    char text[ALERT_NAME_MAX + ALERT_EXPR_MAX + 4]; /* "name: expr" */
    parsed cond;     /* the expression as parsed */
    int severity;
    int needs_steps; /* only once training steps have started */
    const char *msg; /* default rules: message template id, else NULL */
    /* state */
    int active;  /* fired and not yet cleared */
    int holding; /* condition true since hold_t */
    double hold_t;
    double hold_steps; /* steps when holding began (stall measures: one stall) */
    int clearing;
    double clear_t;
} alert_rule;

struct alert_set {
    alert_rule rule[ALERT_MAX_RULES];
    int nrule;
    int nuser;
    /* trend history */
    trend host_used, tree_rss;
    trend gpu_used[FRAME_MAX_GPUS];
    int have_prev_swap;
    double prev_swap, prev_swap_t;
    /* derived values of the current frame */
    fval oom_eta_s, rss_growth_bps, host_growth_bps, swap_rate_bps;
    fval gpu_oom_eta_s[FRAME_MAX_GPUS], gpu_growth_bps[FRAME_MAX_GPUS];
    int eta_from_tree;
    int trending; /* the trends have started (TREND_STARTUP_S) */
};

enum { OP_LT, OP_LE, OP_GT, OP_GE, OP_EQ, OP_NE };
static const char *const op_text[] = {"<", "<=", ">", ">=", "==", "!="};

/* ---- metrics ----------------------------------------------------------- */

typedef fval (*host_get)(const coll_frame *f, const alert_set *s);
typedef fval (*gpu_get)(const gpu_frame *g, const alert_set *s, int i);

typedef struct metric {
    const char *name;
    int kind;
    int unit;
    host_get host;
    gpu_get gpu;
    const char *what; /* for messages and docs */
} metric;

static fval nofv(void)
{
    return (fval){0, 0};
}

#define HOST_FIELD(fn, field)                                                                      \
    static fval fn(const coll_frame *f, const alert_set *s)                                        \
    {                                                                                              \
        (void)s;                                                                                   \
        return f->field;                                                                           \
    }
HOST_FIELD(m_cpu, cpu_pct)
HOST_FIELD(m_iowait, cpu_iowait_pct)
HOST_FIELD(m_swap, swap_used_bytes)
HOST_FIELD(m_mem_avail_b, mem_available_bytes)
HOST_FIELD(m_psi_cpu, psi_cpu_some_pct)
HOST_FIELD(m_psi_mem, psi_mem_some_pct)
HOST_FIELD(m_psi_mem_full, psi_mem_full_pct)
HOST_FIELD(m_psi_io, psi_io_some_pct)
HOST_FIELD(m_psi_io_full, psi_io_full_pct)
HOST_FIELD(m_disk_r, disk_read_bps)
HOST_FIELD(m_disk_w, disk_write_bps)
HOST_FIELD(m_tree_cpu, tree_cpu_pct)
HOST_FIELD(m_main_cpu, main_cpu_pct)
HOST_FIELD(m_tree_rss, tree_rss_bytes)
HOST_FIELD(m_tree_procs, tree_procs)
HOST_FIELD(m_steps, steps)
HOST_FIELD(m_step_rate, step_rate)
HOST_FIELD(m_data_wait, data_wait_share)
HOST_FIELD(m_step_ms, step_time_ms)
HOST_FIELD(m_shutdown_s, shutdown_s)
HOST_FIELD(m_loop_ended_s, loop_ended_s)
HOST_FIELD(m_straggler, straggler_pct)
#undef HOST_FIELD

static fval m_mem_avail_pct(const coll_frame *f, const alert_set *s)
{
    (void)s;
    if (!f->mem_available_bytes.ok || !f->mem_total_bytes.ok || f->mem_total_bytes.v <= 0)
        return nofv();
    return fv(100.0 * f->mem_available_bytes.v / f->mem_total_bytes.v);
}

static fval m_mem_used_pct(const coll_frame *f, const alert_set *s)
{
    fval a = m_mem_avail_pct(f, s);
    if (!a.ok) return a;
    return fv(100.0 - a.v);
}

static fval m_step_ratio(const coll_frame *f, const alert_set *s)
{
    (void)s;
    if (!f->step_time_ms.ok || !f->step_time_median_ms.ok || f->step_time_median_ms.v <= 0)
        return nofv();
    return fv(f->step_time_ms.v / f->step_time_median_ms.v);
}

/* A stall is time without a step while a training loop runs: unknown
 * once every loop has ended (the time after it is not awaited steps). */
static fval m_stall_s(const coll_frame *f, const alert_set *s)
{
    (void)s;
    if (f->loop_ended_s.ok) return nofv();
    return f->since_last_step_s;
}

/* Time without a step over the run's usual gap between steps: the larger of
 * the median and the 90th percentile, so that a loop whose steps come in
 * bursts (a loader's workers each finishing a batch at once, a long step
 * every few) is measured against its long gaps, not its short ones. Only
 * meaningful once steps have started: before the first step there is no
 * median and since_last_step_s is unknown. */
static double usual_step_ms(const coll_frame *f)
{
    double usual = f->step_time_median_ms.v;
    if (f->step_time_p90_ms.ok && f->step_time_p90_ms.v > usual) usual = f->step_time_p90_ms.v;
    return usual;
}

static fval m_stall_ratio(const coll_frame *f, const alert_set *s)
{
    (void)s;
    if (!f->since_last_step_s.ok || !f->step_time_median_ms.ok || f->step_time_median_ms.v <= 0 ||
        !f->steps.ok || f->steps.v < 1 || f->loop_ended_s.ok)
        return nofv();
    return fv(f->since_last_step_s.v * 1000.0 / usual_step_ms(f));
}

static fval m_oom_eta(const coll_frame *f, const alert_set *s)
{
    (void)f;
    return s->oom_eta_s;
}
static fval m_rss_growth(const coll_frame *f, const alert_set *s)
{
    (void)f;
    return s->rss_growth_bps;
}
static fval m_host_growth(const coll_frame *f, const alert_set *s)
{
    (void)f;
    return s->host_growth_bps;
}
static fval m_swap_rate(const coll_frame *f, const alert_set *s)
{
    (void)f;
    return s->swap_rate_bps;
}

static fval g_util(const gpu_frame *g, const alert_set *s, int i)
{
    (void)s;
    (void)i;
    return g->util_pct;
}
static fval g_mem_util(const gpu_frame *g, const alert_set *s, int i)
{
    (void)s;
    (void)i;
    return g->mem_util_pct;
}
static fval g_mem_used(const gpu_frame *g, const alert_set *s, int i)
{
    (void)s;
    (void)i;
    return g->mem_used_bytes;
}
static fval g_temp(const gpu_frame *g, const alert_set *s, int i)
{
    (void)s;
    (void)i;
    return g->temp_c;
}
static fval g_power(const gpu_frame *g, const alert_set *s, int i)
{
    (void)s;
    (void)i;
    return g->power_w;
}

static fval g_mem_pct(const gpu_frame *g, const alert_set *s, int i)
{
    (void)s;
    (void)i;
    if (!g->mem_used_bytes.ok || !g->mem_total_bytes.ok || g->mem_total_bytes.v <= 0) return nofv();
    return fv(100.0 * g->mem_used_bytes.v / g->mem_total_bytes.v);
}

static fval g_throttled(const gpu_frame *g, const alert_set *s, int i)
{
    (void)s;
    (void)i;
    if (!g->throttle_mask.ok) return nofv();
    unsigned long long m = (unsigned long long)g->throttle_mask.v;
    return fv((m & GPU_THROTTLE_SLOW_BITS) ? 1.0 : 0.0);
}

static fval g_power_capped(const gpu_frame *g, const alert_set *s, int i)
{
    (void)s;
    (void)i;
    if (!g->throttle_mask.ok) return nofv();
    return fv(((unsigned long long)g->throttle_mask.v & 0x4u) ? 1.0 : 0.0);
}

static fval g_lost(const gpu_frame *g, const alert_set *s, int i)
{
    (void)s;
    (void)i;
    return fv(g->lost ? 1 : 0);
}

static fval g_oom_eta(const gpu_frame *g, const alert_set *s, int i)
{
    (void)g;
    return i < FRAME_MAX_GPUS ? s->gpu_oom_eta_s[i] : nofv();
}

static fval g_growth(const gpu_frame *g, const alert_set *s, int i)
{
    (void)g;
    return i < FRAME_MAX_GPUS ? s->gpu_growth_bps[i] : nofv();
}

/* The metric names rules may use; docs/diagnosis.md lists the same table. */
static const metric metrics[] = {
    {"cpu.util", MK_HOST, MU_PCT, m_cpu, NULL, "system CPU busy"},
    {"cpu.iowait", MK_HOST, MU_PCT, m_iowait, NULL, "CPU iowait"},
    {"mem.available_pct", MK_HOST, MU_PCT, m_mem_avail_pct, NULL, "host memory available"},
    {"mem.used_pct", MK_HOST, MU_PCT, m_mem_used_pct, NULL, "host memory used"},
    {"mem.available_bytes", MK_HOST, MU_BYTES, m_mem_avail_b, NULL, "host memory available"},
    {"mem.growth_bps", MK_HOST, MU_BPS, m_host_growth, NULL, "host memory growth"},
    {"mem.oom_eta_s", MK_HOST, MU_S, m_oom_eta, NULL, "projected time to host out-of-memory"},
    {"swap.used_bytes", MK_HOST, MU_BYTES, m_swap, NULL, "swap used"},
    {"swap.rate_bps", MK_HOST, MU_BPS, m_swap_rate, NULL, "swap growth"},
    {"psi.cpu_some", MK_HOST, MU_PCT, m_psi_cpu, NULL, "CPU pressure"},
    {"psi.mem_some", MK_HOST, MU_PCT, m_psi_mem, NULL, "memory pressure (some)"},
    {"psi.mem_full", MK_HOST, MU_PCT, m_psi_mem_full, NULL, "memory pressure (full)"},
    {"psi.io_some", MK_HOST, MU_PCT, m_psi_io, NULL, "I/O pressure (some)"},
    {"psi.io_full", MK_HOST, MU_PCT, m_psi_io_full, NULL, "I/O pressure (full)"},
    {"disk.read_bps", MK_HOST, MU_BPS, m_disk_r, NULL, "disk reads"},
    {"disk.write_bps", MK_HOST, MU_BPS, m_disk_w, NULL, "disk writes"},
    {"tree.cpu", MK_HOST, MU_PCT, m_tree_cpu, NULL, "CPU of the process tree"},
    {"tree.rss_bytes", MK_HOST, MU_BYTES, m_tree_rss, NULL, "RSS of the process tree"},
    {"tree.rss_growth_bps", MK_HOST, MU_BPS, m_rss_growth, NULL, "RSS growth of the process tree"},
    {"tree.procs", MK_HOST, MU_COUNT, m_tree_procs, NULL, "processes in the tree"},
    {"main.cpu", MK_HOST, MU_PCT, m_main_cpu, NULL, "CPU of the main process"},
    {"steps", MK_HOST, MU_COUNT, m_steps, NULL, "steps completed"},
    {"step.rate", MK_HOST, MU_RATIO, m_step_rate, NULL, "steps per second"},
    {"step.time_ms", MK_HOST, MU_RATIO, m_step_ms, NULL, "step time (ms)"},
    {"step.time_ratio", MK_HOST, MU_RATIO, m_step_ratio, NULL, "step time vs the run's median"},
    {"step.stall_s", MK_HOST, MU_S, m_stall_s, NULL, "time since the last step"},
    {"loop.ended_s", MK_HOST, MU_S, m_loop_ended_s, NULL, "time since the training loop ended"},
    {"shutdown.s", MK_HOST, MU_S, m_shutdown_s, NULL, "time the process has been shutting down"},
    {"step.stall_ratio", MK_HOST, MU_RATIO, m_stall_ratio, NULL,
     "time since the last step in usual step times (the larger of median and p90)"},
    {"data_wait.share", MK_HOST, MU_SHARE, m_data_wait, NULL, "data-wait share of step time"},
    {"rank.straggler_pct", MK_HOST, MU_PCT, m_straggler, NULL,
     "step time the other ranks wait for the slowest"},
    {"gpu.util", MK_GPU, MU_PCT, NULL, g_util, "utilisation"},
    {"gpu.mem_util", MK_GPU, MU_PCT, NULL, g_mem_util, "memory-bandwidth utilisation"},
    {"gpu.mem_used_pct", MK_GPU, MU_PCT, NULL, g_mem_pct, "memory used"},
    {"gpu.mem_used_bytes", MK_GPU, MU_BYTES, NULL, g_mem_used, "memory used"},
    {"gpu.mem_growth_bps", MK_GPU, MU_BPS, NULL, g_growth, "memory growth"},
    {"gpu.oom_eta_s", MK_GPU, MU_S, NULL, g_oom_eta, "projected time to out-of-memory"},
    {"gpu.temp", MK_GPU, MU_C, NULL, g_temp, "temperature"},
    {"gpu.power", MK_GPU, MU_W, NULL, g_power, "power"},
    {"gpu.throttled", MK_GPU, MU_FLAG, NULL, g_throttled, "clock slowdown (thermal/hardware)"},
    {"gpu.power_capped", MK_GPU, MU_FLAG, NULL, g_power_capped, "power cap"},
    {"gpu.lost", MK_GPU, MU_FLAG, NULL, g_lost, "lost"},
};
#define NMETRICS ((int)(sizeof(metrics) / sizeof(metrics[0])))

/* ---- default rules ------------------------------------------------------ */

typedef struct default_rule {
    const char *name, *expr;
    int severity;
    int needs_steps;
} default_rule;

/* Thresholds and their reasons are documented in docs/diagnosis.md. */
static const default_rule defaults[] = {
    {"gpu_underused", "gpu.util < 30 for 60s", ALERT_WARNING, 1},
    {"host_mem_low", "mem.available_pct < 5 for 10s", ALERT_CRITICAL, 0},
    {"host_mem_pressure", "psi.mem_some > 10 for 30s", ALERT_WARNING, 0},
    {"swapping", "swap.rate_bps > 1MiB for 10s", ALERT_WARNING, 0},
    {"io_pressure", "psi.io_some > 20 for 30s", ALERT_WARNING, 0},
    {"iowait", "cpu.iowait > 20 for 30s", ALERT_WARNING, 0},
    {"gpu_hot", "gpu.temp >= 85 for 30s", ALERT_WARNING, 0},
    {"gpu_throttled", "gpu.throttled == 1 for 30s", ALERT_WARNING, 0},
    {"gpu_lost", "gpu.lost == 1", ALERT_CRITICAL, 0},
    {"data_wait", "data_wait.share > 0.3 for 60s", ALERT_WARNING, 1},
    {"step_regression", "step.time_ratio > 1.5 for 60s", ALERT_WARNING, 1},
    {"hang", "step.stall_ratio > 50 for 10s", ALERT_CRITICAL, 1},
    {"shutdown_hang", "shutdown.s > 120", ALERT_WARNING, 0},
    {"straggler", "rank.straggler_pct > 10 for 30s", ALERT_WARNING, 1},
    {"host_mem_growth", "mem.oom_eta_s < 10min", ALERT_WARNING, 0},
    {"gpu_mem_growth", "gpu.oom_eta_s < 10min", ALERT_WARNING, 0},
};

/* ---- parsing ------------------------------------------------------------ */

static void perr(char *err, size_t errlen, size_t pos, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void perr(char *err, size_t errlen, size_t pos, const char *fmt, ...)
{
    if (!err || !errlen) return;
    char what[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    snprintf(err, errlen, "position %zu: %s", pos + 1, what);
}

static size_t skip_ws(const char *s, size_t i)
{
    while (s[i] == ' ' || s[i] == '\t')
        i++;
    return i;
}

static int ident_char(char c)
{
    return isalnum((unsigned char)c) || c == '_' || c == '.' || c == '-';
}

/* A number with an optional unit. Returns 0 and advances *ip, or -1. */
static int parse_value(const char *s, size_t *ip, double *out, int duration, char *err,
                       size_t errlen)
{
    size_t i = *ip;
    char *end;
    errno = 0;
    double v = strtod(s + i, &end);
    if (end == s + i || errno == ERANGE || !isfinite(v) ||
        (!isdigit((unsigned char)s[i]) && s[i] != '-' && s[i] != '+' && s[i] != '.')) {
        if (duration)
            perr(err, errlen, i, "expected a duration like 30s, 5m, 1h or 500ms");
        else
            perr(err, errlen, i, "expected a number");
        return -1;
    }
    size_t j = (size_t)(end - s);
    size_t u = j;
    while (isalpha((unsigned char)s[u]) || s[u] == '%')
        u++;
    char unit[16];
    if (u - j >= sizeof(unit)) {
        perr(err, errlen, j, "unknown unit");
        return -1;
    }
    memcpy(unit, s + j, u - j);
    unit[u - j] = '\0';
    static const struct {
        const char *u;
        double mul;
        int dur;
    } units[] = {
        {"", 1, 2},
        {"%", 1, 0},
        {"ms", 1e-3, 2},
        {"s", 1, 2},
        {"m", 60, 1},
        {"min", 60, 2},
        {"h", 3600, 2},
        {"B", 1, 0},
        {"k", 1e3, 0},
        {"K", 1e3, 0},
        {"kB", 1e3, 0},
        {"KB", 1e3, 0},
        {"M", 1e6, 0},
        {"MB", 1e6, 0},
        {"G", 1e9, 0},
        {"GB", 1e9, 0},
        {"T", 1e12, 0},
        {"TB", 1e12, 0},
        {"KiB", 1024.0, 0},
        {"MiB", 1048576.0, 0},
        {"GiB", 1073741824.0, 0},
        {"TiB", 1099511627776.0, 0},
        {"C", 1, 0},
        {"x", 1, 0},
        {"W", 1, 0},
    };
    for (size_t k = 0; k < sizeof(units) / sizeof(units[0]); k++) {
        if (strcmp(unit, units[k].u) != 0) continue;
        /* durations take time units only; values take any unit ("m" is
         * minutes only in a duration, to avoid confusion with mega) */
        if (duration && !units[k].dur) break;
        if (!duration && units[k].dur == 1) break;
        *out = v * units[k].mul;
        *ip = u;
        return 0;
    }
    if (duration)
        perr(err, errlen, j, "unknown duration unit '%s' (use ms, s, m, h)", unit);
    else
        perr(err, errlen, j,
             "unknown unit '%s' (use %%, B, kB, MB, GB, KiB, MiB, GiB, ms, s, min, h, C, W, x)",
             unit);
    return -1;
}

static int parse_rule(const char *s, size_t start, parsed *p, char *err, size_t errlen)
{
    size_t i = skip_ws(s, start);
    memset(p, 0, sizeof(*p));
    if (strncmp(s + i, "off", 3) == 0 && s[skip_ws(s, i + 3)] == '\0') {
        p->off = 1;
        return 0;
    }
    size_t m0 = i;
    while (ident_char(s[i]))
        i++;
    if (i == m0) {
        perr(err, errlen, i, "expected a metric name like gpu.util");
        return TPF_EFORMAT;
    }
    char name[64];
    if (i - m0 >= sizeof(name)) {
        perr(err, errlen, m0, "metric name too long");
        return TPF_EFORMAT;
    }
    memcpy(name, s + m0, i - m0);
    name[i - m0] = '\0';
    p->metric = -1;
    for (int k = 0; k < NMETRICS; k++)
        if (strcmp(metrics[k].name, name) == 0) p->metric = k;
    if (p->metric < 0) {
        perr(err, errlen, m0, "unknown metric '%s' (docs/diagnosis.md lists them)", name);
        return TPF_EFORMAT;
    }
    i = skip_ws(s, i);
    p->op = -1;
    if (s[i] == '<' && s[i + 1] == '=')
        p->op = OP_LE, i += 2;
    else if (s[i] == '>' && s[i + 1] == '=')
        p->op = OP_GE, i += 2;
    else if (s[i] == '=' && s[i + 1] == '=')
        p->op = OP_EQ, i += 2;
    else if (s[i] == '!' && s[i + 1] == '=')
        p->op = OP_NE, i += 2;
    else if (s[i] == '<')
        p->op = OP_LT, i += 1;
    else if (s[i] == '>')
        p->op = OP_GT, i += 1;
    if (p->op < 0) {
        perr(err, errlen, i, "expected an operator (< <= > >= == !=)");
        return TPF_EFORMAT;
    }
    i = skip_ws(s, i);
    if (parse_value(s, &i, &p->thr, 0, err, errlen)) return TPF_EFORMAT;
    i = skip_ws(s, i);
    if (s[i] == '\0') return 0;
    if (strncmp(s + i, "for", 3) != 0 ||
        (s[i + 3] != ' ' && s[i + 3] != '\t' && s[i + 3] != '\0')) {
        perr(err, errlen, i, "expected 'for DURATION' or end of rule");
        return TPF_EFORMAT;
    }
    i = skip_ws(s, i + 3);
    if (s[i] == '-') {
        perr(err, errlen, i, "expected a duration like 30s, 5m, 1h or 500ms");
        return TPF_EFORMAT;
    }
    if (parse_value(s, &i, &p->dur_s, 1, err, errlen)) return TPF_EFORMAT;
    i = skip_ws(s, i);
    if (s[i] != '\0') {
        perr(err, errlen, i, "expected end of rule");
        return TPF_EFORMAT;
    }
    return 0;
}

static void rule_settext(alert_rule *r)
{
    snprintf(r->text, sizeof(r->text), "%s: %s", r->name, r->cond.off ? "off" : r->expr);
}

static int rule_set(alert_set *s, const char *name, const char *expr, size_t expr_off,
                    const parsed *p, int severity, int needs_steps, char *err, size_t errlen)
{
    alert_rule *r = NULL;
    for (int k = 0; k < s->nrule; k++)
        if (strcmp(s->rule[k].name, name) == 0) r = &s->rule[k];
    if (!r) {
        if (s->nrule >= ALERT_MAX_RULES) {
            perr(err, errlen, 0, "too many rules");
            return TPF_EFULL;
        }
        r = &s->rule[s->nrule++];
        memset(r, 0, sizeof(*r));
        snprintf(r->name, sizeof(r->name), "%s", name);
        r->severity = severity;
        r->needs_steps = needs_steps;
    } else {
        /* an override keeps the default's severity but starts afresh; a user
         * who writes the rule out means it, so no implicit step gating */
        int sev = r->severity;
        char nm[ALERT_NAME_MAX];
        memcpy(nm, r->name, sizeof(nm));
        memset(r, 0, sizeof(*r));
        memcpy(r->name, nm, sizeof(nm));
        r->severity = sev;
        r->needs_steps = needs_steps;
    }
    r->cond = *p;
    if (!p->off) {
        /* normalised expression: trimmed */
        const char *e = expr + expr_off;
        while (*e == ' ' || *e == '\t')
            e++;
        size_t l = strlen(e);
        while (l && (e[l - 1] == ' ' || e[l - 1] == '\t' || e[l - 1] == '\n' || e[l - 1] == '\r'))
            l--;
        if (l >= sizeof(r->expr)) l = sizeof(r->expr) - 1;
        memcpy(r->expr, e, l);
        r->expr[l] = '\0';
    }
    rule_settext(r);
    return 0;
}

int alerts_create(alert_set **out, int defaults_on)
{
    if (!out) return TPF_EINVAL;
    alert_set *s = calloc(1, sizeof(*s));
    if (!s) return TPF_ENOMEM;
    if (defaults_on) {
        for (size_t k = 0; k < sizeof(defaults) / sizeof(defaults[0]); k++) {
            parsed p;
            int rc = parse_rule(defaults[k].expr, 0, &p, NULL, 0);
            if (rc == 0)
                rc = rule_set(s, defaults[k].name, defaults[k].expr, 0, &p, defaults[k].severity,
                              defaults[k].needs_steps, NULL, 0);
            if (rc) {
                free(s);
                return rc;
            }
        }
    }
    *out = s;
    return 0;
}

void alerts_free(alert_set *s)
{
    free(s);
}

int alerts_add(alert_set *s, const char *rule, char *err, size_t errlen)
{
    if (err && errlen) err[0] = '\0';
    if (!s || !rule) return TPF_EINVAL;
    if (strlen(rule) >= ALERT_EXPR_MAX + ALERT_NAME_MAX) {
        perr(err, errlen, 0, "rule too long");
        return TPF_EFORMAT;
    }
    /* An optional "NAME:" prefix; metric names never contain ':'. */
    size_t i = skip_ws(rule, 0), n0 = i;
    while (isalnum((unsigned char)rule[i]) || rule[i] == '_' || rule[i] == '-')
        i++;
    size_t n1 = i;
    size_t j = skip_ws(rule, i);
    char name[ALERT_NAME_MAX];
    size_t body = 0;
    if (n1 > n0 && rule[j] == ':') {
        if (n1 - n0 >= sizeof(name)) {
            perr(err, errlen, n0, "rule name too long");
            return TPF_EFORMAT;
        }
        memcpy(name, rule + n0, n1 - n0);
        name[n1 - n0] = '\0';
        body = j + 1;
    } else {
        if (strchr(rule, ':')) {
            perr(err, errlen, (size_t)(strchr(rule, ':') - rule),
                 "unexpected ':' (a rule name is letters, digits, '_' or '-')");
            return TPF_EFORMAT;
        }
        snprintf(name, sizeof(name), "user%d", s->nuser + 1);
    }
    parsed p;
    int rc = parse_rule(rule, body, &p, err, errlen);
    if (rc) return rc;
    if (p.off) {
        int found = 0;
        for (int k = 0; k < s->nrule; k++)
            found |= strcmp(s->rule[k].name, name) == 0;
        if (!found) {
            perr(err, errlen, n0, "no rule named '%s' to turn off", name);
            return TPF_EFORMAT;
        }
    }
    rc = rule_set(s, name, rule, body, &p, ALERT_WARNING, 0, err, errlen);
    if (rc == 0 && body == 0) s->nuser++;
    return rc;
}

int alerts_load_file(alert_set *s, const char *path, char *err, size_t errlen)
{
    if (err && errlen) err[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) {
        if (err && errlen) snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return errno == ENOENT ? TPF_ENOENT : TPF_EIO;
    }
    /* fopen opens a directory (or a FIFO that would block): only a file. */
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        if (err && errlen)
            snprintf(err, errlen, "%s: %s", path,
                     S_ISDIR(st.st_mode) ? "is a directory, not a rules file" : "not a regular file");
        fclose(f);
        return TPF_EINVAL;
    }
    char line[512];
    int lineno = 0, rc = 0;
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        size_t l = strlen(line);
        if (l == sizeof(line) - 1 && line[l - 1] != '\n' && !feof(f)) {
            if (err && errlen) snprintf(err, errlen, "%s:%d: line too long", path, lineno);
            rc = TPF_EFORMAT;
            break;
        }
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        l = strlen(line);
        while (l && isspace((unsigned char)line[l - 1]))
            line[--l] = '\0';
        size_t k = 0;
        while (isspace((unsigned char)line[k]))
            k++;
        if (!line[k]) continue;
        char e[200];
        rc = alerts_add(s, line, e, sizeof(e));
        if (rc) {
            if (err && errlen) snprintf(err, errlen, "%s:%d: %s", path, lineno, e);
            break;
        }
    }
    fclose(f);
    return rc;
}

const char *alerts_rule_text(const alert_set *s, int i)
{
    if (!s || i < 0 || i >= s->nrule) return NULL;
    return s->rule[i].text;
}

/* ---- trends -------------------------------------------------------------- */

static void trend_push(trend *tr, double t, double v)
{
    if (tr->n && t - tr->last_t < TREND_SPACING_S) return;
    tr->t[tr->head] = t;
    tr->v[tr->head] = v;
    tr->head = (tr->head + 1) % TREND_CAP;
    if (tr->n < TREND_CAP) tr->n++;
    tr->last_t = t;
}

/* Least-squares slope (units per second) over the window ending at now.
 * Returns 0 with *slope when there is enough history and the fit explains
 * the data (R^2), else -1. A flat or falling series counts as a fit with
 * slope <= 0 regardless of R^2, so a steady series reads "not growing". */
static int trend_fit(const trend *tr, double now, double *slope)
{
    double st = 0, sv = 0, stt = 0, stv = 0, svv = 0, t0 = INFINITY;
    int n = 0;
    for (int k = 0; k < tr->n; k++) {
        int idx = (tr->head - 1 - k + TREND_CAP) % TREND_CAP;
        if (now - tr->t[idx] > TREND_WINDOW_S) break;
        t0 = tr->t[idx];
        n++;
    }
    if (n < TREND_MIN_POINTS || now - t0 < TREND_MIN_SPAN_S) return -1;
    for (int k = 0; k < n; k++) {
        int idx = (tr->head - 1 - k + TREND_CAP) % TREND_CAP;
        double x = tr->t[idx] - t0, y = tr->v[idx];
        st += x;
        sv += y;
        stt += x * x;
        stv += x * y;
        svv += y * y;
    }
    double dn = n;
    double vt = stt - st * st / dn, vv = svv - sv * sv / dn, cv = stv - st * sv / dn;
    if (vt <= 0) return -1;
    double b = cv / vt;
    if (b <= 0 || vv <= 0) {
        *slope = b > 0 ? b : 0;
        return 0;
    }
    double r2 = cv * cv / (vt * vv);
    if (r2 < TREND_MIN_R2) {
        *slope = 0; /* no clear trend: treat as not growing */
        return 0;
    }
    *slope = b;
    return 0;
}

static void update_derived(alert_set *s, const coll_frame *f)
{
    double t = f->t;
    s->oom_eta_s = s->rss_growth_bps = s->host_growth_bps = s->swap_rate_bps = nofv();
    s->eta_from_tree = 0;
    if (f->swap_used_bytes.ok) {
        if (s->have_prev_swap && t > s->prev_swap_t)
            s->swap_rate_bps = fv((f->swap_used_bytes.v - s->prev_swap) / (t - s->prev_swap_t));
        s->have_prev_swap = 1;
        s->prev_swap = f->swap_used_bytes.v;
        s->prev_swap_t = t;
    } else {
        s->have_prev_swap = 0;
    }
    if (!s->trending && ((f->steps.ok && f->steps.v >= 1) || t >= TREND_STARTUP_S))
        s->trending = 1;
    if (!s->trending) {
        for (int g = 0; g < FRAME_MAX_GPUS; g++) s->gpu_oom_eta_s[g] = s->gpu_growth_bps[g] = nofv();
        return;
    }
    if (f->mem_used_bytes.ok) trend_push(&s->host_used, t, f->mem_used_bytes.v);
    if (f->tree_rss_bytes.ok) trend_push(&s->tree_rss, t, f->tree_rss_bytes.v);
    double sh, sr;
    int okh = f->mem_used_bytes.ok && trend_fit(&s->host_used, t, &sh) == 0;
    int okr = f->tree_rss_bytes.ok && trend_fit(&s->tree_rss, t, &sr) == 0;
    if (okh) s->host_growth_bps = fv(sh);
    if (okr) s->rss_growth_bps = fv(sr);
    if (f->mem_available_bytes.ok && (okh || okr)) {
        /* headroom left / growth rate; the tree's own growth counts even when
         * other processes on the host hide it in the host total */
        double eta = ETA_NONE;
        if (okh && sh > 0) eta = f->mem_available_bytes.v / sh;
        if (okr && sr > 0 && f->mem_available_bytes.v / sr < eta) {
            eta = f->mem_available_bytes.v / sr;
            s->eta_from_tree = 1;
        }
        s->oom_eta_s = fv(eta);
    }
    for (int g = 0; g < f->ngpu && g < FRAME_MAX_GPUS; g++) {
        const gpu_frame *gf = &f->gpu[g];
        s->gpu_oom_eta_s[g] = s->gpu_growth_bps[g] = nofv();
        if (!gf->mem_used_bytes.ok || gf->lost) continue;
        trend_push(&s->gpu_used[g], t, gf->mem_used_bytes.v);
        double sg;
        if (trend_fit(&s->gpu_used[g], t, &sg) != 0) continue;
        s->gpu_growth_bps[g] = fv(sg);
        if (gf->mem_total_bytes.ok) {
            double left = gf->mem_total_bytes.v - gf->mem_used_bytes.v;
            s->gpu_oom_eta_s[g] = fv(sg > 0 ? (left > 0 ? left : 0) / sg : ETA_NONE);
        }
    }
}

/* ---- evaluation ------------------------------------------------------------ */

static int cmp(int op, double v, double thr)
{
    switch (op) {
    case OP_LT: return v < thr;
    case OP_LE: return v <= thr;
    case OP_GT: return v > thr;
    case OP_GE: return v >= thr;
    case OP_EQ: return v == thr;
    default: return v != thr;
    }
}

/* Past the threshold by the hysteresis margin, in the clearing direction. */
static int clear_cond(int op, double v, double thr, int unit)
{
    double m = unit == MU_FLAG ? 0 : HYST_MARGIN * fabs(thr);
    switch (op) {
    case OP_LT:
    case OP_LE: return v >= thr + m && (m > 0 || !cmp(op, v, thr));
    case OP_GT:
    case OP_GE: return v <= thr - m && (m > 0 || !cmp(op, v, thr));
    default: return !cmp(op, v, thr);
    }
}

/* The metric's value for rule r: for GPU metrics, the worst GPU (the one
 * that holds the condition most strongly). *gi gets the GPU index, or -1. */
static fval rule_value(const alert_set *s, const alert_rule *r, const coll_frame *f, int *gi)
{
    const metric *m = &metrics[r->cond.metric];
    *gi = -1;
    if (m->kind == MK_HOST) return m->host(f, s);
    fval best = nofv();
    /* When the collector knows which GPUs hold a context of the watched tree,
     * idle neighbours are not "under-used"; otherwise every listed GPU counts.
     * A lost GPU has lost its contexts too, so gpu.lost looks at all. */
    int any_in_use = 0;
    for (int g = 0; g < f->ngpu && g < FRAME_MAX_GPUS; g++)
        any_in_use |= f->gpu[g].in_use;
    int all = m->gpu == g_lost;
    for (int g = 0; g < f->ngpu && g < FRAME_MAX_GPUS; g++) {
        if (any_in_use && !all && !f->gpu[g].in_use) continue;
        fval v = m->gpu(&f->gpu[g], s, g);
        if (!v.ok) continue;
        int better;
        if (!best.ok)
            better = 1;
        else if (r->cond.op == OP_LT || r->cond.op == OP_LE)
            better = v.v < best.v;
        else if (r->cond.op == OP_GT || r->cond.op == OP_GE)
            better = v.v > best.v;
        else
            better = cmp(r->cond.op, v.v, r->cond.thr) && !cmp(r->cond.op, best.v, r->cond.thr);
        if (better) {
            best = v;
            *gi = f->gpu[g].index;
        }
    }
    return best;
}

static void fmt_value(char *o, size_t n, int unit, double v)
{
    double a = fabs(v);
    switch (unit) {
    case MU_PCT: snprintf(o, n, "%.0f%%", v); break;
    case MU_SHARE: snprintf(o, n, "%.0f%%", 100 * v); break;
    case MU_BYTES:
    case MU_BPS: {
        char t[32];
        snprintf(o, n, "%s%s", human_bytes(t, sizeof(t), v), unit == MU_BPS ? "/s" : "");
        break;
    }
    case MU_S:
        if (a >= ETA_NONE)
            snprintf(o, n, "never");
        else if (a >= 7200)
            snprintf(o, n, "%.1f h", v / 3600);
        else if (a >= 120)
            snprintf(o, n, "%.1f min", v / 60);
        else
            snprintf(o, n, "%.0f s", v);
        break;
    case MU_C: snprintf(o, n, "%.0f C", v); break;
    case MU_W: snprintf(o, n, "%.0f W", v); break;
    case MU_FLAG: snprintf(o, n, "%s", v != 0 ? "yes" : "no"); break;
    case MU_COUNT: snprintf(o, n, "%.0f", v); break;
    default: snprintf(o, n, "%.3g", v); break;
    }
}

static void fmt_dur(char *o, size_t n, double s)
{
    if (s >= 3600 && fmod(s, 3600) == 0)
        snprintf(o, n, "%.0f h", s / 3600);
    else if (s >= 120)
        snprintf(o, n, "%.0f min", s / 60);
    else if (s >= 1)
        snprintf(o, n, "%.0f s", s);
    else
        snprintf(o, n, "%.0f ms", s * 1000);
}

static void make_message(const alert_set *s, const alert_rule *r, const coll_frame *f, int gi,
                         double v, int fired, char *o, size_t n)
{
    const metric *m = &metrics[r->cond.metric];
    char val[48], dur[32], thr[48];
    fmt_value(val, sizeof(val), m->unit, v);
    fmt_value(thr, sizeof(thr), m->unit, r->cond.thr);
    fmt_dur(dur, sizeof(dur), r->cond.dur_s);
    char who[32] = "";
    if (gi >= 0) snprintf(who, sizeof(who), "GPU %d ", gi);
    if (!fired) {
        snprintf(o, n, "cleared: %s%s now %s", who, m->what, val);
        return;
    }
    const char *nm = m->name;
    if (strcmp(nm, "mem.oom_eta_s") == 0) {
        char rate[48];
        double g = s->eta_from_tree ? s->rss_growth_bps.v : s->host_growth_bps.v;
        fmt_value(rate, sizeof(rate), MU_BPS, g);
        snprintf(o, n, "%s grows %s; projected to run out of host memory in %s",
                 s->eta_from_tree ? "process-tree memory" : "host memory used", rate, val);
    } else if (strcmp(nm, "gpu.oom_eta_s") == 0) {
        char rate[48];
        double g = 0;
        for (int k = 0; k < f->ngpu && k < FRAME_MAX_GPUS; k++)
            if (f->gpu[k].index == gi && s->gpu_growth_bps[k].ok) g = s->gpu_growth_bps[k].v;
        fmt_value(rate, sizeof(rate), MU_BPS, g);
        snprintf(o, n, "%smemory grows %s; projected to run out of GPU memory in %s", who, rate,
                 val);
    } else if (strcmp(nm, "step.stall_ratio") == 0) {
        snprintf(o, n, "no step for %.0f s (%.0fx the usual step time %.0f ms): possible hang",
                 f->since_last_step_s.v, v, usual_step_ms(f));
    } else if (strcmp(nm, "shutdown.s") == 0) {
        snprintf(o, n,
                 "the training loop ended and the process has been shutting down for %.0f s "
                 "(threads, child processes or exit handlers that do not end?)",
                 v);
    } else if (strcmp(nm, "step.time_ratio") == 0) {
        snprintf(o, n, "step time %.0f ms is %.1fx the run's median %.0f ms for %s",
                 f->step_time_ms.v, v, f->step_time_median_ms.v, dur);
    } else if (strcmp(nm, "rank.straggler_pct") == 0 && f->straggler_rank >= 0) {
        int loader = f->straggler_data_ms.ok && f->straggler_data_ms.v >= 0.5 * f->straggler_wait_ms.v;
        snprintf(o, n,
                 "rank %d holds the others back: they wait %.1f ms a step in collectives for it "
                 "(%.0f%% of step time); rank %d spends it in its own %s",
                 f->straggler_rank, f->straggler_wait_ms.v, v, f->straggler_rank,
                 loader ? "data loader" : "step");
    } else if (strcmp(nm, "gpu.lost") == 0) {
        snprintf(o, n, "%sfell off the bus (GPU lost)", who[0] ? who : "a GPU ");
    } else if (strcmp(nm, "gpu.throttled") == 0) {
        const char *why = "";
        for (int k = 0; k < f->ngpu && k < FRAME_MAX_GPUS; k++)
            if (f->gpu[k].index == gi) why = f->gpu[k].throttle;
        snprintf(o, n, "%sclocks slowed down%s%s for %s", who, why[0] ? ": " : "", why, dur);
    } else if (r->cond.dur_s > 0) {
        snprintf(o, n, "%s%s %s (%s %s) for %s", who, m->what, val, op_text[r->cond.op], thr, dur);
    } else {
        snprintf(o, n, "%s%s %s (%s %s)", who, m->what, val, op_text[r->cond.op], thr);
    }
}

static int is_stall(const alert_rule *r)
{
    host_get g = metrics[r->cond.metric].host;
    return g == m_stall_s || g == m_stall_ratio;
}

int alerts_eval(alert_set *s, const coll_frame *f, alert_event *out, int max)
{
    if (!s || !f) return 0;
    update_derived(s, f);
    int nout = 0;
    int started = f->steps.ok && f->steps.v >= 1;
    for (int k = 0; k < s->nrule; k++) {
        alert_rule *r = &s->rule[k];
        if (r->cond.off) continue;
        int gi;
        fval v = rule_value(s, r, f, &gi);
        if (r->needs_steps && !started) v = nofv();
        int emit = 0;
        if (!r->active) {
            /* unknown is not a value: it neither fires nor counts as held */
            if (v.ok && cmp(r->cond.op, v.v, r->cond.thr)) {
                /* a stall held "for 10s" is one stall: a step completed
                 * since it began (between two frames) begins another */
                if (r->holding && is_stall(r) && f->steps.ok && f->steps.v != r->hold_steps)
                    r->holding = 0;
                if (!r->holding) {
                    r->holding = 1;
                    r->hold_t = f->t;
                    r->hold_steps = f->steps.ok ? f->steps.v : -1;
                }
                if (f->t - r->hold_t >= r->cond.dur_s - 1e-9) {
                    r->active = 1;
                    r->holding = 0;
                    r->clearing = 0;
                    emit = 1;
                }
            } else {
                r->holding = 0;
            }
        } else {
            if (v.ok && clear_cond(r->cond.op, v.v, r->cond.thr, metrics[r->cond.metric].unit)) {
                if (!r->clearing) {
                    r->clearing = 1;
                    r->clear_t = f->t;
                }
                if (f->t - r->clear_t >= r->cond.dur_s - 1e-9) {
                    r->active = 0;
                    r->clearing = 0;
                    emit = -1;
                }
            } else {
                r->clearing = 0;
            }
        }
        if (!emit || nout >= max || !out) continue;
        alert_event *e = &out[nout++];
        e->t = f->t;
        e->rule = r->name;
        e->expr = r->expr;
        e->fired = emit > 0;
        e->severity = r->severity;
        e->value = v.v;
        make_message(s, r, f, gi, v.v, emit > 0, e->message, sizeof(e->message));
    }
    return nout;
}
