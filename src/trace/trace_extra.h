/* Analyses beyond HTA's basic ones, fed by the time-ordered sweep of
 * trace_an.c one event at a time, each with bounded state:
 *  - frequent kernel sequences per stream (fusion candidates),
 *  - queue length per stream (kernels launched and not yet finished),
 *  - memory timeline of profile_memory traces ("[memory]" events),
 *  - time series in fixed bins: queue length per stream, memory-copy
 *    bandwidth per kind of copy, and the trace's own counter tracks
 *    (ph "C" events).
 * GPU time per user annotation and memory-copy bandwidth are kept per name
 * in trace_an.c's name table and only rendered here. */
#ifndef TPF_TRACE_EXTRA_H
#define TPF_TRACE_EXTRA_H

#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"
#include "util/jsonw.h"

#define SEQ_MAX_LEN 8
#define SEQ_CAP 65536            /* distinct sequences kept */
#define QUEUE_CAP 4096           /* pending kernels tracked per stream */
#define MEM_MAX_DEV 16
#define MEM_MAX_CAT 4096

/* ---- kernel sequences ---------------------------------------------------- */

typedef struct seq_ent {
    uint32_t ids[SEQ_MAX_LEN];
    uint32_t hash;
    uint64_t count;
    int64_t total;               /* GPU time of the kernels in the sequence */
} seq_ent;

typedef struct seqtab {
    int len;
    seq_ent *v;
    uint32_t n;
    uint32_t *slots;             /* index+1; SEQ_CAP*2 slots */
    uint64_t dropped;            /* occurrences of sequences past the cap */
} seqtab;

/* Per stream: the last kernels. */
typedef struct seq_ring {
    uint32_t ids[SEQ_MAX_LEN];
    int64_t dur[SEQ_MAX_LEN];
    int n;
} seq_ring;

int seq_init(seqtab *t, int len);
void seq_free(seqtab *t);
/* A kernel on a stream (ring per stream) with its name id and duration. */
int seq_add(seqtab *t, seq_ring *r, uint32_t id, int64_t dur);

/* ---- queue length -------------------------------------------------------- */

/* HTA's definition: work launched on a stream and not yet started (+1 at
 * the launch call, -1 when the kernel starts). */
typedef struct queue_st {
    int64_t *end;                /* min-heap of waiting kernels' starts */
    uint32_t n, cap;
    uint32_t max;
    int64_t area;                /* sum over kernels of (start - launch): mean = area / span */
    int64_t first, last;
    uint64_t saturated;          /* kernels seen with the heap full */
} queue_st;

/* A kernel launched at enq (its launch call's start) that starts at start. */
int queue_add(queue_st *q, int64_t enq, int64_t start);
void queue_free(queue_st *q);

/* ---- memory timeline ------------------------------------------------------- */

typedef struct mem_dev {
    int64_t key;                 /* device type << 8 | (device id + 1) */
    int has_base;
    int64_t base_ts, base;       /* allocated before the first event seen */
    int64_t cur, peak, peak_ts, reserved_peak;
    uint32_t peak_cat;           /* category id + 1 active at the peak */
    uint64_t allocs, frees;
    int64_t alloc_bytes, free_bytes;
} mem_dev;

typedef struct mem_st {
    mem_dev dev[MEM_MAX_DEV];
    int ndev;
    /* bytes allocated per category (a name id), per device index */
    struct { uint32_t cat; int dev; int64_t bytes; uint64_t count; } *cats;
    uint32_t ncats;
    uint64_t lost;               /* events past the device/category caps */
} mem_st;

mem_dev *mem_dev_get(mem_st *m, int64_t key);
/* Pass A: one "[memory]" event (any order): keeps the earliest Total
 * Allocated to start the running sum from, and the peak reserved. */
void mem_seen(mem_st *m, int64_t key, int64_t ts, int64_t bytes, int64_t total_alloc, int64_t total_reserved);
/* Pass B, time order: an allocation (bytes > 0) or free made while category
 * cat (name id + 1; 0 = none) was innermost. */
int mem_event(mem_st *m, int64_t key, int64_t ts, int64_t bytes, uint32_t cat);
void mem_free_st(mem_st *m);

/* ---- time series ------------------------------------------------------------ */

#define TS_DEF_BINS 40
#define TS_MAX_BINS 1000
#define TS_MAX_SERIES 256        /* per rank: streams, copy kinds, counter tracks */
#define TS_HEAP_CAP 4096         /* copies in flight per kind */

enum { TS_QUEUE = 1, TS_BW, TS_COUNTER };

/* n bins of w ns from t0; bin i is [t0 + i*w, t0 + (i+1)*w), the last one
 * cut at t1 (the rank's last event end). */
typedef struct tsbins {
    int64_t t0, t1, w;
    int n;
} tsbins;

typedef struct ts_flight {
    int64_t end;
    double v;
} ts_flight;

/* One series: a step function of time, summarised per bin by its
 * time-weighted mean and its maximum. Arrays are allocated on first use. */
typedef struct tseries {
    int kind;                    /* TS_* */
    int64_t key;                 /* stream (queue), pid (counter), 0 (bandwidth) */
    uint32_t name;               /* name id: copy kind or counter label */
    double *area;                /* value x ns inside each bin (partial bins) */
    double *darea;               /* whole bins: difference array of value x w */
    double *dcover;              /* value at each bin's start: difference array */
    double *max;                 /* NAN = no value in the bin */
    double *cov, *dcov;          /* counters: ns of each bin where the series has a value */
    uint64_t samples;
    double vmax;
    int has_last;                /* counters: the previous sample holds until the next */
    int64_t last_ts;
    double last_v;
    ts_flight *fl;               /* bandwidth: copies in flight (min-heap by end) */
    uint32_t nfl, capfl;
    double cur;
    uint64_t lost;               /* copies past TS_HEAP_CAP in flight */
} tseries;

typedef struct tsset {
    tsbins bins;
    tseries *v;
    uint32_t n;
    uint32_t slots[TS_MAX_SERIES * 4];  /* index + 1 by (kind, key, name) */
    uint64_t dropped;            /* samples of series past TS_MAX_SERIES */
} tsset;

/* The series (kind, key, name), added when new; NULL past the cap (counted). */
tseries *ts_get(tsset *t, int kind, int64_t key, uint32_t name);
/* value v held over [a, e): into the means; cover: also the value at the
 * starts of the bins in [a, e) (for sums of overlapping intervals, whose
 * maximum is then taken by ts_point at each interval start). */
int ts_segment(tsset *t, tseries *s, int64_t a, int64_t e, double v, int cover);
/* The series takes value v at time x (a maximum candidate). */
void ts_point(tsset *t, tseries *s, int64_t x, double v);
/* Counter sample: the previous value holds until x. */
int ts_sample(tsset *t, tseries *s, int64_t x, double v);
/* Bandwidth: a copy of v GB/s over [a, e), copies arriving by start. */
int ts_copy(tsset *t, tseries *s, int64_t a, int64_t e, double v);
/* Close every series at bins.t1; means and maxima then final. */
int ts_finish(tsset *t);
/* Per-bin mean of series s after ts_finish (NAN where it had no value). */
double ts_mean(const tsset *t, const tseries *s, int i);
double ts_max(const tsset *t, const tseries *s, int i);
void ts_free(tsset *t);

#endif
