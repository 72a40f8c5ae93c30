/* trace_merge: per-rank traces into one Chrome/Perfetto trace (see trace.h).
 *
 * Two streaming passes per file: the first learns the rank and the earliest
 * timestamp, the second copies every event's raw text with its pid, ts and
 * flow id rewritten. Nothing but a small pid map per file stays in memory. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trace/trace.h"
#include "trace/trace_json.h"
#include "trainperf.h"
#include "util/afile.h"
#include "util/jsonw.h"

#define MAX_PIDS_PER_RANK 1000

typedef struct scan_st {
    int have;
    int64_t min_ts;
} scan_st;

typedef struct pidmap {
    char text[64][32];      /* raw pid text, first 64 distinct ones kept by text */
    int named[MAX_PIDS_PER_RANK];
    int n;
    uint64_t shared;        /* events of processes past the 64th, put on the 64th's track */
} pidmap;

typedef struct merge_st {
    FILE *out;
    long rank;
    int index;              /* position of the file: keeps flow ids apart */
    int64_t shift;          /* ns added to every ts */
    pidmap pm;
    int first;              /* no event written yet (comma handling) */
    uint64_t written;
} merge_st;

static int on_scan(void *ud, const trace_ev *ev)
{
    scan_st *s = ud;
    if ((ev->has & TEV_TS) && ev->ph != 'M' && (!s->have || ev->ts_ns < s->min_ts)) {
        s->have = 1;
        s->min_ts = ev->ts_ns;
    }
    return 0;
}

/* Index of a pid's raw text in the file's map (new processes as they come). */
static int pid_index(pidmap *pm, const char *t, size_t n)
{
    if (n >= sizeof(pm->text[0])) n = sizeof(pm->text[0]) - 1;
    int lim = pm->n < 64 ? pm->n : 64;
    for (int i = 0; i < lim; i++)
        if (strlen(pm->text[i]) == n && memcmp(pm->text[i], t, n) == 0) return i;
    if (pm->n >= 64) { /* more than 64 processes in one trace: share the last (said) */
        pm->shared++;
        return 63;
    }
    memcpy(pm->text[pm->n], t, n);
    pm->text[pm->n][n] = '\0';
    return pm->n++;
}

static long new_pid(const merge_st *m, int idx) { return (m->rank + 1) * MAX_PIDS_PER_RANK + idx; }

static void put_ts(FILE *f, int64_t ns)
{
    int64_t a = ns < 0 ? -ns : ns;
    fprintf(f, "%s%lld.%03lld", ns < 0 ? "-" : "", (long long)(a / 1000), (long long)(a % 1000));
}

static void put_meta(merge_st *m, int idx, const char *orig)
{
    buf b;
    buf_init(&b, 4096);
    char label[256];
    if (orig && *orig) snprintf(label, sizeof(label), "rank %ld: %s", m->rank, orig);
    else snprintf(label, sizeof(label), "rank %ld", m->rank);
    json_escape(&b, label, strlen(label));
    fprintf(m->out, "%s\n{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%ld,\"tid\":0,\"args\":{\"name\":%s}}",
            m->first ? "" : ",", new_pid(m, idx), b.data ? b.data : "\"\"");
    fprintf(m->out, ",\n{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":%ld,\"tid\":0,\"args\":{\"sort_index\":%ld}}",
            new_pid(m, idx), new_pid(m, idx));
    m->first = 0;
    buf_free(&b);
}

static int on_copy(void *ud, const trace_ev *ev)
{
    merge_st *m = ud;
    if (!ev->raw || ev->raw_len < 2) return 0;
    int idx = ev->pid_len ? pid_index(&m->pm, ev->raw + ev->pid_off, ev->pid_len) : 0;
    if (ev->ph == 'M' && (ev->has & TEV_NAME) && strcmp(ev->name, "process_name") == 0) {
        if (idx < MAX_PIDS_PER_RANK) m->pm.named[idx] = 1;
        put_meta(m, idx, ev->arg_name);
        return 0;
    }
    if (ev->ph == 'M' && (ev->has & TEV_NAME) && strcmp(ev->name, "process_sort_index") == 0)
        return 0; /* ours orders ranks */
    if (ev->raw_len == 2) return 0;   /* {} */
    /* Spans to rewrite, in text order. */
    struct span { size_t off, len; int what; } sp[3];
    int ns = 0;
    if (ev->pid_len) sp[ns++] = (struct span){ev->pid_off, ev->pid_len, 0};
    if (ev->ts_len && (ev->has & TEV_TS)) sp[ns++] = (struct span){ev->ts_off, ev->ts_len, 1};
    if (ev->id_len) sp[ns++] = (struct span){ev->id_off, ev->id_len, 2};
    for (int i = 1; i < ns; i++)
        for (int j = i; j > 0 && sp[j].off < sp[j - 1].off; j--) {
            struct span t = sp[j];
            sp[j] = sp[j - 1];
            sp[j - 1] = t;
        }
    FILE *f = m->out;
    fputs(m->first ? "\n" : ",\n", f);
    m->first = 0;
    size_t at = 0;
    if (!ev->pid_len) {
        fprintf(f, "{\"pid\":%ld,", new_pid(m, 0));
        at = 1;
    }
    for (int i = 0; i < ns; i++) {
        fwrite(ev->raw + at, 1, sp[i].off - at, f);
        if (sp[i].what == 0) {
            fprintf(f, "%ld", new_pid(m, idx));
        } else if (sp[i].what == 1) {
            put_ts(f, ev->ts_ns + m->shift);
        } else if (ev->has & TEV_ID) {
            /* Flow ids are per process in Kineto; keep ranks apart. */
            fprintf(f, "%lld", (long long)(((int64_t)(m->index + 1) << 40) + ev->id));
        } else if (ev->raw[sp[i].off] == '"') {
            fprintf(f, "\"r%d-", m->index);
            fwrite(ev->raw + sp[i].off + 1, 1, sp[i].len - 1, f);
        } else {
            fwrite(ev->raw + sp[i].off, 1, sp[i].len, f);
        }
        at = sp[i].off + sp[i].len;
    }
    fwrite(ev->raw + at, 1, ev->raw_len - at, f);
    m->written++;
    if (ferror(f)) return TPF_EIO;
    return 0;
}

static int merge(const char *const *paths, int n, const char *out_path, int align_start,
                 const double *offsets_s, char *err, size_t errlen);

int trace_merge(const char *const *paths, int n, const char *out_path, int align_start,
                char *err, size_t errlen)
{
    return merge(paths, n, out_path, align_start, NULL, err, errlen);
}

int trace_merge_offsets(const char *const *paths, int n, const char *out_path,
                        const double *offsets_s, char *err, size_t errlen)
{
    return merge(paths, n, out_path, 0, offsets_s, err, errlen);
}

static int merge(const char *const *paths, int n, const char *out_path, int align_start,
                 const double *offsets_s, char *err, size_t errlen)
{
    if (err && errlen) err[0] = '\0';
    if (!paths || n <= 0 || !out_path) {
        snprintf(err, errlen, "no trace files given");
        return TPF_EINVAL;
    }
    int64_t *mins = calloc((size_t)n, sizeof(*mins));
    long *ranks = calloc((size_t)n, sizeof(*ranks));
    int64_t *bases = calloc((size_t)n, sizeof(*bases));
    if (!mins || !ranks || !bases) {
        free(mins);
        free(ranks);
        free(bases);
        snprintf(err, errlen, "out of memory");
        return TPF_ENOMEM;
    }
    int rc = 0;
    char e2[512];
    int64_t gmin = 0;
    int have = 0;
    for (int i = 0; i < n && !rc; i++) {
        scan_st s = {0, 0};
        trace_meta meta;
        rc = trace_read(paths[i], on_scan, &s, 0, &meta, e2, sizeof(e2));
        if (rc) {
            if (strncmp(e2, "cannot ", 7) == 0) snprintf(err, errlen, "%s", e2);
            else snprintf(err, errlen, "%s: %s", paths[i], e2);
            break;
        }
        if (!meta.has_events) {
            snprintf(err, errlen, "%s: not a Chrome/Kineto trace: no \"traceEvents\" array", paths[i]);
            rc = TPF_EFORMAT;
            break;
        }
        long r = meta.has_rank ? meta.rank : trace_rank_from_name(paths[i]);
        ranks[i] = r >= 0 ? r : i;
        for (int j = 0; j < i; j++)
            if (ranks[j] == ranks[i]) ranks[i] = 100000 + i; /* duplicate rank: keep apart */
        bases[i] = meta.has_base ? meta.base_ns : 0;
        mins[i] = s.have ? s.min_ts : 0;
        if (s.have && (!have || bases[i] + mins[i] < gmin)) {
            gmin = bases[i] + mins[i];
            have = 1;
        }
    }
    /* The output the user named (util/afile.h): a regular file replaced
     * when whole, a device or FIFO written through, anything else refused. */
    afile_out o;
    FILE *f = NULL;
    if (!rc) {
        rc = afile_out_open(&o, out_path, err, errlen);
        f = rc ? NULL : o.f;
    }
    uint64_t shared_events = 0;
    int shared_files = 0;
    char first_shared[300] = "";
    if (!rc) {
        fputs("{\"displayTimeUnit\":\"ms\",\"otherData\":{\"merged_by\":\"trainperf\"},\"traceEvents\":[", f);
        int first = 1;
        for (int i = 0; i < n && !rc; i++) {
            merge_st *m = calloc(1, sizeof(*m));
            if (!m) {
                rc = TPF_ENOMEM;
                snprintf(err, errlen, "out of memory");
                break;
            }
            m->out = f;
            m->rank = ranks[i];
            m->index = i;
            m->first = first;
            m->shift = align_start ? -mins[i] : bases[i] - gmin;
            /* the nodes of a job: their own clocks, put on the first's */
            if (offsets_s) m->shift = (int64_t)(offsets_s[i] * 1e9);
            rc = trace_read(paths[i], on_copy, m, 1, NULL, e2, sizeof(e2));
            if (rc == TPF_EIO && !e2[0]) snprintf(e2, sizeof(e2), "write error: %s", strerror(errno));
            if (rc) {
                snprintf(err, errlen, "%s: %s", paths[i], e2);
            } else if (m->pm.shared) {
                shared_files++;
                shared_events += m->pm.shared;
                if (shared_files == 1)
                    snprintf(first_shared, sizeof(first_shared), "%s", paths[i]);
            }
            if (!rc) {
                for (int p = 0; p < m->pm.n && p < MAX_PIDS_PER_RANK; p++)
                    if (!m->pm.named[p]) put_meta(m, p, NULL);
            }
            first = m->first;
            free(m);
        }
        fputs("\n]}\n", f);
        if (rc)
            rc = afile_out_fail(&o, rc, err, errlen);
        else
            rc = afile_out_commit(&o, err, errlen);
    }
    /* merged, with a note: what was not kept apart */
    if (!rc && shared_files && err && errlen)
        snprintf(err, errlen,
                 "%d trace(s) have more than 64 processes (first %s): %llu events of the "
                 "processes past the 64th share its track",
                 shared_files, first_shared, (unsigned long long)shared_events);
    free(mins);
    free(ranks);
    free(bases);
    return rc;
}
