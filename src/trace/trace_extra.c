/* Kernel sequences, queue length, memory timeline (see trace_extra.h), and
 * the rendering of those and of the per-annotation and bandwidth tables:
 * each table is a list of rows rendered by one small function. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace_extra.h"
#include "trace/trace_int.h"
#include "trainperf.h"
#include "util/human.h"
#include "util/table.h"

/* ---- kernel sequences ---------------------------------------------------- */

int seq_init(seqtab *t, int len)
{
    memset(t, 0, sizeof(*t));
    t->len = len < 2 ? 2 : len > SEQ_MAX_LEN ? SEQ_MAX_LEN : len;
    t->v = malloc(SEQ_CAP * sizeof(*t->v));
    t->slots = calloc(SEQ_CAP * 2, sizeof(*t->slots));
    if (!t->v || !t->slots) {
        seq_free(t);
        return TPF_ENOMEM;
    }
    return 0;
}

void seq_free(seqtab *t)
{
    free(t->v);
    free(t->slots);
    t->v = NULL;
    t->slots = NULL;
}

int seq_add(seqtab *t, seq_ring *r, uint32_t id, int64_t dur)
{
    if (!t->v) return 0;
    if (r->n == t->len) { /* slide: the ring is short, a memmove is cheapest */
        memmove(r->ids, r->ids + 1, (size_t)(t->len - 1) * sizeof(r->ids[0]));
        memmove(r->dur, r->dur + 1, (size_t)(t->len - 1) * sizeof(r->dur[0]));
        r->n--;
    }
    r->ids[r->n] = id;
    r->dur[r->n] = dur;
    r->n++;
    if (r->n < t->len) return 0;
    uint32_t h = 2166136261u;
    int64_t total = 0;
    for (int i = 0; i < t->len; i++) {
        h = (h ^ r->ids[i]) * 16777619u;
        total += r->dur[i];
    }
    uint32_t mask = SEQ_CAP * 2 - 1, j = h & mask;
    while (t->slots[j]) {
        seq_ent *e = &t->v[t->slots[j] - 1];
        if (e->hash == h && memcmp(e->ids, r->ids, (size_t)t->len * sizeof(uint32_t)) == 0) {
            e->count++;
            e->total += total;
            return 0;
        }
        j = (j + 1) & mask;
    }
    if (t->n >= SEQ_CAP) { /* bounded: sequences first seen late are counted as dropped */
        t->dropped++;
        return 0;
    }
    seq_ent *e = &t->v[t->n];
    memset(e, 0, sizeof(*e));
    memcpy(e->ids, r->ids, (size_t)t->len * sizeof(uint32_t));
    e->hash = h;
    e->count = 1;
    e->total = total;
    t->slots[j] = ++t->n;
    return 0;
}

/* ---- queue length -------------------------------------------------------- */

static void heap_push(queue_st *q, int64_t v)
{
    uint32_t i = q->n++;
    while (i) {
        uint32_t p = (i - 1) / 2;
        if (q->end[p] <= v) break;
        q->end[i] = q->end[p];
        i = p;
    }
    q->end[i] = v;
}

static void heap_pop(queue_st *q)
{
    int64_t v = q->end[--q->n];
    uint32_t i = 0;
    for (;;) {
        uint32_t l = 2 * i + 1, s = i;
        int64_t sv = v;
        if (l < q->n && q->end[l] < sv) s = l, sv = q->end[l];
        if (l + 1 < q->n && q->end[l + 1] < sv) s = l + 1, sv = q->end[l + 1];
        if (s == i) break;
        q->end[i] = q->end[s];
        i = s;
    }
    if (q->n) q->end[i] = v;
}

int queue_add(queue_st *q, int64_t enq, int64_t start)
{
    if (start < enq) start = enq;
    if (!q->first || enq < q->first) q->first = enq;
    if (start > q->last) q->last = start;
    q->area += start - enq;
    /* Kernels arrive in start order on their stream, and a stream runs its
     * work in launch order: what started before this launch is no longer
     * waiting. A start at the launch's very time still counts (HTA orders
     * the +1 of a launch before the -1 of a start at the same time). */
    while (q->n && q->end[0] < enq) heap_pop(q);
    if (q->n == q->cap) {
        if (q->cap >= QUEUE_CAP) {
            q->saturated++;
            heap_pop(q); /* bounded: forget the earliest end */
        } else {
            uint32_t nc = q->cap ? q->cap * 2 : 64;
            int64_t *ne = realloc(q->end, nc * sizeof(*ne));
            if (!ne) return TPF_ENOMEM;
            q->end = ne;
            q->cap = nc;
        }
    }
    heap_push(q, start);
    if (q->n > q->max) q->max = q->n;
    return 0;
}

void queue_free(queue_st *q)
{
    free(q->end);
    q->end = NULL;
    q->n = q->cap = 0;
}

/* ---- memory timeline ------------------------------------------------------- */

mem_dev *mem_dev_get(mem_st *m, int64_t key)
{
    for (int i = 0; i < m->ndev; i++)
        if (m->dev[i].key == key) return &m->dev[i];
    if (m->ndev >= MEM_MAX_DEV) return NULL;
    mem_dev *d = &m->dev[m->ndev++];
    memset(d, 0, sizeof(*d));
    d->key = key;
    return d;
}

void mem_seen(mem_st *m, int64_t key, int64_t ts, int64_t bytes, int64_t total_alloc, int64_t total_reserved)
{
    mem_dev *d = mem_dev_get(m, key);
    if (!d) {
        m->lost++;
        return;
    }
    /* Total Allocated is after this event: before it, total - bytes. */
    if (!d->has_base || ts < d->base_ts) {
        d->has_base = 1;
        d->base_ts = ts;
        d->base = total_alloc - bytes;
    }
    if (total_reserved > d->reserved_peak) d->reserved_peak = total_reserved;
}

int mem_event(mem_st *m, int64_t key, int64_t ts, int64_t bytes, uint32_t cat)
{
    mem_dev *d = mem_dev_get(m, key);
    if (!d) {
        m->lost++;
        return 0;
    }
    if (!d->allocs && !d->frees) d->cur = d->base;
    d->cur += bytes;
    if (bytes >= 0) {
        d->allocs++;
        d->alloc_bytes += bytes;
    } else {
        d->frees++;
        d->free_bytes -= bytes;
    }
    if (d->cur > d->peak || (!d->peak_ts && d->allocs + d->frees == 1)) {
        d->peak = d->cur;
        d->peak_ts = ts;
        d->peak_cat = cat;
    }
    if (bytes <= 0 || !cat) return 0;
    int di = (int)(d - m->dev);
    for (uint32_t i = 0; i < m->ncats; i++)
        if (m->cats[i].cat == cat && m->cats[i].dev == di) {
            m->cats[i].bytes += bytes;
            m->cats[i].count++;
            return 0;
        }
    if (m->ncats >= MEM_MAX_CAT) {
        m->lost++;
        return 0;
    }
    if ((m->ncats & (m->ncats - 1)) == 0) { /* grow at powers of two */
        uint32_t nc = m->ncats ? m->ncats * 2 : 16;
        void *nv = realloc(m->cats, nc * sizeof(*m->cats));
        if (!nv) return TPF_ENOMEM;
        m->cats = nv;
    }
    m->cats[m->ncats].cat = cat;
    m->cats[m->ncats].dev = di;
    m->cats[m->ncats].bytes = bytes;
    m->cats[m->ncats].count = 1;
    m->ncats++;
    return 0;
}

void mem_free_st(mem_st *m)
{
    free(m->cats);
    m->cats = NULL;
    m->ncats = 0;
}

/* ---- time series ---------------------------------------------------------- */

static uint32_t ts_hash(int kind, int64_t key, uint32_t name)
{
    uint64_t h = ((uint64_t)key * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)name << 3) ^ (uint64_t)kind;
    return (uint32_t)((h * 0xff51afd7ed558ccdull) >> 40);
}

tseries *ts_get(tsset *t, int kind, int64_t key, uint32_t name)
{
    const uint32_t mask = TS_MAX_SERIES * 4 - 1;
    uint32_t j = ts_hash(kind, key, name) & mask;
    while (t->slots[j]) {
        tseries *s = &t->v[t->slots[j] - 1];
        if (s->kind == kind && s->key == key && s->name == name) return s;
        j = (j + 1) & mask;
    }
    if (t->n >= TS_MAX_SERIES) return NULL;
    if (!t->v && !(t->v = calloc(TS_MAX_SERIES, sizeof(tseries)))) return NULL;
    tseries *s = &t->v[t->n];
    memset(s, 0, sizeof(*s));
    s->kind = kind;
    s->key = key;
    s->name = name;
    t->slots[j] = ++t->n;
    return s;
}

/* Arrays on first use, once the bins are known (after pass A). */
static int ts_alloc(tsset *t, tseries *s)
{
    if (s->area) return 0;
    size_t n = (size_t)t->bins.n + 1;
    double *a = calloc(7 * n, sizeof(double));
    if (!a) return TPF_ENOMEM;
    s->area = a;
    s->darea = a + n;
    s->dcover = a + 2 * n;
    s->max = a + 3 * n;
    s->cov = a + 4 * n;
    s->dcov = a + 5 * n;
    for (size_t i = 0; i < n; i++) s->max[i] = s->kind == TS_COUNTER ? NAN : 0.0;
    return 0;
}

static int ts_bin(const tsbins *b, int64_t x)
{
    if (x <= b->t0) return 0;
    int64_t i = (x - b->t0) / b->w;
    return i >= b->n ? b->n - 1 : (int)i;
}

static int64_t ts_lo(const tsbins *b, int i) { return b->t0 + (int64_t)i * b->w; }

static int64_t ts_width(const tsbins *b, int i)
{
    int64_t hi = i == b->n - 1 ? b->t1 : ts_lo(b, i + 1);
    int64_t wd = hi - ts_lo(b, i);
    return wd > 0 ? wd : 1;
}

/* v over [a, e): partial bins into p directly, whole bins through the
 * difference array d (O(1) whatever the span). */
static void ts_range(const tsbins *b, double *p, double *d, int64_t a, int64_t e, double v)
{
    if (a < b->t0) a = b->t0;
    if (e > b->t1) e = b->t1;
    if (e <= a) return;
    int i = ts_bin(b, a), j = ts_bin(b, e - 1);
    if (i == j) {
        p[i] += v * (double)(e - a);
        return;
    }
    p[i] += v * (double)(ts_lo(b, i + 1) - a);
    p[j] += v * (double)(e - ts_lo(b, j));
    if (j > i + 1) {
        d[i + 1] += v;
        d[j] -= v;
    }
}

int ts_segment(tsset *t, tseries *s, int64_t a, int64_t e, double v, int cover)
{
    int rc = ts_alloc(t, s);
    if (rc) return rc;
    const tsbins *b = &t->bins;
    ts_range(b, s->area, s->darea, a, e, v);
    if (cover && e > a) {
        /* the bins whose start lies in [a, e) */
        int64_t k0 = a <= b->t0 ? 0 : (a - b->t0 + b->w - 1) / b->w;
        int64_t k1 = e - 1 < b->t0 ? -1 : (e - 1 - b->t0) / b->w;
        if (k1 >= b->n) k1 = b->n - 1;
        if (k0 <= k1) {
            s->dcover[k0] += v;
            s->dcover[k1 + 1] -= v;
        }
    }
    return 0;
}

void ts_point(tsset *t, tseries *s, int64_t x, double v)
{
    if (!s->area) return;
    int i = ts_bin(&t->bins, x);
    if (isnan(s->max[i]) || v > s->max[i]) s->max[i] = v;
    if (v > s->vmax || !s->samples) s->vmax = v;
    s->samples++;
}

/* A counter's value v over [a, e): means over the covered time, and the
 * maximum of every bin it touches (segments of one series never overlap). */
static void ts_hold(tsset *t, tseries *s, int64_t a, int64_t e, double v)
{
    const tsbins *b = &t->bins;
    if (a < b->t0) a = b->t0;
    if (e > b->t1) e = b->t1;
    if (e <= a) return;
    ts_range(b, s->area, s->darea, a, e, v);
    ts_range(b, s->cov, s->dcov, a, e, 1.0);
    for (int i = ts_bin(b, a), j = ts_bin(b, e - 1); i <= j; i++)
        if (isnan(s->max[i]) || v > s->max[i]) s->max[i] = v;
}

int ts_sample(tsset *t, tseries *s, int64_t x, double v)
{
    int rc = ts_alloc(t, s);
    if (rc) return rc;
    if (s->has_last) ts_hold(t, s, s->last_ts, x, s->last_v);
    s->has_last = 1;
    s->last_ts = x;
    s->last_v = v;
    ts_point(t, s, x, v);
    return 0;
}

static void fl_pop(tseries *s)
{
    ts_flight v = s->fl[--s->nfl];
    uint32_t i = 0;
    for (;;) {
        uint32_t l = 2 * i + 1, m = i;
        int64_t mv = v.end;
        if (l < s->nfl && s->fl[l].end < mv) m = l, mv = s->fl[l].end;
        if (l + 1 < s->nfl && s->fl[l + 1].end < mv) m = l + 1, mv = s->fl[l + 1].end;
        if (m == i) break;
        s->fl[i] = s->fl[m];
        i = m;
    }
    if (s->nfl) s->fl[i] = v;
}

int ts_copy(tsset *t, tseries *s, int64_t a, int64_t e, double v)
{
    int rc = ts_segment(t, s, a, e, v, 1);
    if (rc) return rc;
    while (s->nfl && s->fl[0].end <= a) {
        s->cur -= s->fl[0].v;
        fl_pop(s);
    }
    if (!s->nfl) s->cur = 0.0; /* no drift from the sums */
    if (s->nfl == s->capfl) {
        if (s->capfl >= TS_HEAP_CAP) {
            s->lost++; /* bounded: its bandwidth is in the means, not in the maxima */
            ts_point(t, s, a, s->cur + v);
            return 0;
        }
        uint32_t nc = s->capfl ? s->capfl * 2 : 16;
        ts_flight *nf = realloc(s->fl, nc * sizeof(*nf));
        if (!nf) return TPF_ENOMEM;
        s->fl = nf;
        s->capfl = nc;
    }
    uint32_t i = s->nfl++;
    while (i) {
        uint32_t p = (i - 1) / 2;
        if (s->fl[p].end <= e) break;
        s->fl[i] = s->fl[p];
        i = p;
    }
    s->fl[i] = (ts_flight){e, v};
    s->cur += v;
    ts_point(t, s, a, s->cur);
    return 0;
}

int ts_finish(tsset *t)
{
    const tsbins *b = &t->bins;
    for (uint32_t k = 0; k < t->n; k++) {
        tseries *s = &t->v[k];
        if (!s->area) continue;
        if (s->kind == TS_COUNTER && s->has_last) ts_hold(t, s, s->last_ts, b->t1, s->last_v);
        double da = 0, dc = 0, dv = 0;
        for (int i = 0; i < b->n; i++) {
            da += s->darea[i];
            dc += s->dcover[i];
            dv += s->dcov[i];
            s->area[i] += da * (double)b->w;
            s->cov[i] += dv * (double)b->w;
            if (s->kind != TS_COUNTER && dc > s->max[i]) s->max[i] = dc;
        }
        free(s->fl);
        s->fl = NULL;
        s->nfl = s->capfl = 0;
    }
    return 0;
}

double ts_mean(const tsset *t, const tseries *s, int i)
{
    if (!s->area) return NAN;
    /* a bin where a counter only has samples at one instant: the highest */
    if (s->kind == TS_COUNTER) return s->cov[i] > 0 ? s->area[i] / s->cov[i] : s->max[i];
    return s->area[i] / (double)ts_width(&t->bins, i);
}

double ts_max(const tsset *t, const tseries *s, int i)
{
    (void)t;
    return s->area ? s->max[i] : NAN;
}

void ts_free(tsset *t)
{
    for (uint32_t k = 0; t->v && k < t->n; k++) {
        free(t->v[k].area);
        free(t->v[k].fl);
    }
    free(t->v);
    memset(t, 0, sizeof(*t));
}

/* ---- rendering --------------------------------------------------------------- */

void trace_extra_rank_free(tr_rank *k)
{
    for (size_t i = 0; i < k->nanns; i++) free(k->anns[i].name);
    for (size_t i = 0; i < k->nseqs; i++)
        for (int j = 0; j < SEQ_MAX_LEN; j++) free(k->seqs[i].names[j]);
    for (size_t i = 0; i < k->nbws; i++) free(k->bws[i].name);
    for (size_t i = 0; i < k->nmem; i++) free(k->mem[i].peak_cat);
    for (size_t i = 0; i < k->nmemcats; i++) free(k->memcats[i].name);
    for (size_t i = 0; i < k->nseries; i++) {
        free(k->series[i].name);
        free(k->series[i].mean);
    }
    free(k->series);
    free(k->anns);
    free(k->seqs);
    free(k->queues);
    free(k->bws);
    free(k->mem);
    free(k->memcats);
}

/* key: device type << 8 | (device id + 1), as trace_an.c packs it */
static void dev_name(char *b, size_t n, int64_t key)
{
    int type = (int)(key >> 8), id = (int)(key & 0xff) - 1;
    if (type == 0) snprintf(b, n, "CPU");
    else if (type == 1) snprintf(b, n, "cuda:%d", id);
    else snprintf(b, n, "device type %d:%d", type, id);
}

/* GPU time per annotation: text and JSON from one column list. */
static const tr_col ann_cols[] = {
    TR_COL("annotation", 0, TBL_GAP, NAME, PSTR, "name", tr_ann, name),
    TR_COL("ranges", 8, TBL_RIGHT, COUNT, U64, "ranges", tr_ann, ranges),
    TR_COL("CPU ms", 10, TBL_RIGHT, MS, I64, "cpu_ns", tr_ann, cpu),
    TR_COL("kernels", 8, TBL_RIGHT, COUNT, U64, "kernels", tr_ann, kernels),
    TR_COL("GPU kernel ms", 14, TBL_RIGHT, MS, I64, "gpu_kernel_ns", tr_ann, gpu),
    TR_COL("GPU range ms", 13, TBL_RIGHT, MS, I64, "gpu_annotation_ns", tr_ann, gpu_ann),
};

void trace_extra_json(jw *w, const tr_rank *k)
{
    tr_table_json(w, "annotations", ann_cols, TR_NCOLS(ann_cols), k->anns, k->nanns, sizeof(tr_ann));
    jw_key(w, "kernel_sequences");
    jw_obj_begin(w);
    jw_kint(w, "length", k->seq_len);
    jw_kuint(w, "dropped", k->seq_dropped);
    jw_key(w, "top");
    jw_arr_begin(w);
    for (size_t i = 0; i < k->nseqs; i++) {
        jw_obj_begin(w);
        jw_key(w, "kernels");
        jw_arr_begin(w);
        for (int j = 0; j < k->seq_len; j++) jw_str(w, k->seqs[i].names[j]);
        jw_arr_end(w);
        jw_kuint(w, "count", k->seqs[i].count);
        jw_kint(w, "total_ns", k->seqs[i].total);
        jw_obj_end(w);
    }
    jw_arr_end(w);
    jw_obj_end(w);
    jw_key(w, "queue_length");
    jw_arr_begin(w);
    for (size_t i = 0; i < k->nqueues; i++) {
        const tr_queue *q = &k->queues[i];
        jw_obj_begin(w);
        jw_kint(w, "stream", q->stream);
        jw_kuint(w, "kernels", q->kernels);
        jw_kuint(w, "max", q->max);
        jw_knum(w, "mean", q->mean);
        jw_obj_end(w);
    }
    jw_arr_end(w);
    jw_key(w, "memcpy_bandwidth");
    jw_arr_begin(w);
    for (size_t i = 0; i < k->nbws; i++) {
        const tr_bw *b = &k->bws[i];
        jw_obj_begin(w);
        jw_kstr(w, "name", b->name);
        jw_kuint(w, "count", b->count);
        jw_kint(w, "bytes", b->bytes);
        jw_kint(w, "time_ns", b->time);
        jw_knum(w, "mean_gb_per_s", b->time > 0 ? (double)b->bytes / (double)b->time : NAN);
        jw_knum(w, "peak_gb_per_s", b->peak);
        jw_obj_end(w);
    }
    jw_arr_end(w);
    jw_key(w, "time_series");
    jw_obj_begin(w);
    jw_kint(w, "start_ns", k->ts_t0);
    jw_kint(w, "end_ns", k->ts_t1);
    jw_kint(w, "bin_ns", k->ts_w);
    jw_kint(w, "bins", k->ts_bins);
    jw_kuint(w, "counter_events", k->counter_events);
    jw_kuint(w, "dropped_samples", k->series_dropped);
    jw_key(w, "series");
    jw_arr_begin(w);
    for (size_t i = 0; i < k->nseries; i++) {
        const tr_series *x = &k->series[i];
        static const char *const kinds[] = {"", "queue_length", "memcpy_bandwidth", "counter"};
        jw_obj_begin(w);
        jw_kstr(w, "kind", kinds[x->kind]);
        jw_kstr(w, "name", x->name);
        if (x->kind == TS_QUEUE) jw_kint(w, "stream", x->key);
        if (x->kind == TS_COUNTER) jw_kint(w, "pid", x->key);
        jw_kstr(w, "unit", x->kind == TS_QUEUE ? "kernels" : x->kind == TS_BW ? "GB/s" : NULL);
        jw_kuint(w, "samples", x->samples);
        jw_knum(w, "max", x->vmax);
        jw_knum(w, "mean", x->overall);
        if (x->kind == TS_BW) jw_kuint(w, "lost", x->lost);
        jw_knums(w, "bin_mean", x->mean, (size_t)k->ts_bins);
        jw_knums(w, "bin_max", x->max, (size_t)k->ts_bins);
        jw_obj_end(w);
    }
    jw_arr_end(w);
    jw_obj_end(w);
    jw_key(w, "memory");
    jw_arr_begin(w);
    for (size_t i = 0; i < k->nmem; i++) {
        const tr_memdev *m = &k->mem[i];
        char dn[64];
        dev_name(dn, sizeof(dn), m->key);
        jw_obj_begin(w);
        jw_kstr(w, "device", dn);
        jw_kint(w, "peak_allocated_bytes", m->peak);
        jw_kint(w, "peak_ts_ns", m->peak_ts);
        jw_kstr(w, "at_peak", m->peak_cat);
        jw_kint(w, "peak_reserved_bytes", m->reserved_peak);
        jw_kuint(w, "allocations", m->allocs);
        jw_kint(w, "allocated_bytes", m->alloc_bytes);
        jw_kuint(w, "frees", m->frees);
        jw_kint(w, "freed_bytes", m->free_bytes);
        jw_key(w, "allocated_by_category");
        jw_arr_begin(w);
        for (size_t j = 0; j < k->nmemcats; j++) {
            const tr_memcat *c = &k->memcats[j];
            if (c->dev != (int)i) continue;
            jw_obj_begin(w);
            jw_kstr(w, "category", c->name);
            jw_kint(w, "bytes", c->bytes);
            jw_kuint(w, "allocations", c->count);
            jw_obj_end(w);
        }
        jw_arr_end(w);
        jw_obj_end(w);
    }
    jw_arr_end(w);
}

/* One character per bin, eight heights scaled to the largest bin; '.' for
 * zero, ' ' where the series has no value. */
static void ts_sparkline(char *dst, size_t n, const double *v, int nb)
{
    static const char *const lv[] = {"\u2581", "\u2582", "\u2583", "\u2584",
                                     "\u2585", "\u2586", "\u2587", "\u2588"};
    double top = 0;
    for (int i = 0; i < nb; i++)
        if (!isnan(v[i]) && v[i] > top) top = v[i];
    size_t o = 0;
    for (int i = 0; i < nb && o + 4 < n; i++) {
        const char *c;
        if (isnan(v[i])) c = " ";
        else if (v[i] <= 0 || top <= 0) c = ".";
        else {
            /* an infinite bin (a damaged trace) is full height, never a cast of NaN */
            double q = v[i] >= top ? 8.0 : v[i] / top * 8.0;
            int l = q > 7 ? 7 : q > 0 ? (int)q : 0;
            c = lv[l];
        }
        size_t cl = strlen(c);
        memcpy(dst + o, c, cl);
        o += cl;
    }
    dst[o] = '\0';
}

static const tbl_col queue_cols[] = {
    {"stream", 8, TBL_RIGHT}, {"kernels", 9, TBL_RIGHT}, {"max", 6, TBL_RIGHT}, {"mean", 8, TBL_RIGHT},
};
static const tbl_col ts_cols[] = {
    {"series", 30, 0}, {"max", 9, TBL_RIGHT}, {"mean", 9, TBL_RIGHT}, {"over time (mean per bin)", 0, TBL_GAP},
};
static const tbl_col bw_cols[] = {
    {"count", 8, TBL_RIGHT}, {"bytes", 11, TBL_RIGHT}, {"ms", 10, TBL_RIGHT}, {"mean GB/s", 10, TBL_RIGHT},
    {"peak GB/s", 10, TBL_RIGHT}, {"copy", 0, TBL_GAP},
};

void trace_extra_text(buf *o, const tr_rank *k, int md, int color)
{
    const char *ind = md ? "" : "  ";
    int tf = md ? TBL_MD : TBL_TEXT;
    char nm[96], a[64], b[64], c[64], d[64], e[64];
    tbl t;
    if (k->nanns) {
        tr_table(o, tf, color, "GPU time per annotation (record_function ranges)", ann_cols,
                 TR_NCOLS(ann_cols), k->anns, k->nanns, sizeof(tr_ann));
    }
    if (k->nseqs) {
        snprintf(a, sizeof(a), "Frequent kernel sequences (length %d; fusion candidates)", k->seq_len);
        tbl_heading(o, tf, color, a);
        for (size_t i = 0; i < k->nseqs; i++) {
            buf_printf(o, "%s%s%llu x, %.3f ms:", ind, md ? "- " : "", (unsigned long long)k->seqs[i].count,
                       (double)k->seqs[i].total / 1e6);
            for (int j = 0; j < k->seq_len; j++) {
                trace_short_name(nm, 60, k->seqs[i].names[j]);
                buf_printf(o, "%s %s", j ? " ->" : "", nm);
            }
            buf_puts(o, "\n");
        }
    }
    if (k->nqueues) {
        tbl_begin_sub(&t, o, tf, color, "Queue length per stream (kernels launched, not yet started)",
                      queue_cols, 4);
        for (size_t i = 0; i < k->nqueues; i++) {
            const tr_queue *q = &k->queues[i];
            snprintf(a, sizeof(a), "%lld", (long long)q->stream);
            snprintf(b, sizeof(b), "%llu", (unsigned long long)q->kernels);
            snprintf(c, sizeof(c), "%u", q->max);
            snprintf(d, sizeof(d), "%.2f", q->mean);
            const char *cells[] = {a, b, c, d};
            tbl_row(&t, cells, TBL_PLAIN);
        }
        tbl_end(&t);
    }
    if (k->nbws) {
        tbl_begin_sub(&t, o, tf, color, "Memory copies: bandwidth", bw_cols, 6);
        for (size_t i = 0; i < k->nbws; i++) {
            const tr_bw *x = &k->bws[i];
            snprintf(a, sizeof(a), "%llu", (unsigned long long)x->count);
            human_bytes(b, sizeof(b), (double)x->bytes);
            snprintf(c, sizeof(c), "%.3f", (double)x->time / 1e6);
            snprintf(d, sizeof(d), "%.2f", x->time > 0 ? (double)x->bytes / (double)x->time : 0.0);
            snprintf(e, sizeof(e), "%.2f", x->peak);
            trace_short_name(nm, sizeof(nm), x->name);
            const char *cells[] = {a, b, c, d, e, nm};
            tbl_row(&t, cells, TBL_PLAIN);
        }
        tbl_end(&t);
    }
    if (k->nseries) {
        char title[192];
        snprintf(title, sizeof(title),
                 "Over time: %d bins of %.3f ms from the first event (queue length, copy GB/s, counters)",
                 k->ts_bins, (double)k->ts_w / 1e6);
        tbl_begin_sub(&t, o, tf, color, title, ts_cols, 4);
        for (size_t i = 0; i < k->nseries; i++) {
            const tr_series *x = &k->series[i];
            char spark[3 * TS_MAX_BINS + 8];
            ts_sparkline(spark, sizeof(spark), x->mean, k->ts_bins);
            trace_short_name(nm, 31, x->name);
            snprintf(a, sizeof(a), "%.4g", x->vmax);
            snprintf(b, sizeof(b), "%.4g", x->overall);
            const char *cells[] = {nm, a, b, spark};
            tbl_row(&t, cells, TBL_PLAIN);
        }
        tbl_end(&t);
        if (k->series_dropped)
            buf_printf(o, "%s%llu samples of series past the %d kept were not counted\n", ind,
                       (unsigned long long)k->series_dropped, TS_MAX_SERIES);
    }
    for (size_t i = 0; i < k->nmem; i++) {
        const tr_memdev *m = &k->mem[i];
        char dn[64];
        dev_name(dn, sizeof(dn), m->key);
        snprintf(nm, sizeof(nm), "Memory timeline: %s", dn);
        tbl_heading(o, tf, color, nm);
        human_bytes(a, sizeof(a), (double)m->peak);
        human_bytes(b, sizeof(b), (double)m->reserved_peak);
        buf_printf(o, "%speak allocated %s at %.3f ms%s%s%s; peak reserved %s; %llu allocations, %llu frees\n", ind, a,
                   (double)m->peak_ts / 1e6, m->peak_cat ? " (in " : "", m->peak_cat ? m->peak_cat : "",
                   m->peak_cat ? ")" : "", b, (unsigned long long)m->allocs, (unsigned long long)m->frees);
        for (size_t j = 0; j < k->nmemcats; j++) {
            const tr_memcat *mc = &k->memcats[j];
            if (mc->dev != (int)i) continue;
            human_bytes(a, sizeof(a), (double)mc->bytes);
            trace_short_name(nm, sizeof(nm), mc->name);
            buf_printf(o, "%s%s%11s in %llu allocations: %s\n", ind, md ? "- " : "", a, (unsigned long long)mc->count, nm);
        }
    }
}
