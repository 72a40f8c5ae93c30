/* Streaming reader for Chrome/Kineto trace files (.json or .json.gz).
 *
 * The file is read as it is, or inflated with zlib when it starts like gzip
 * (members one after the other, as gzip does; bytes after the last one are
 * counted in trace_meta.trailing), into one fixed-size buffer and tokenized
 * in place; events are handed to a
 * callback one at a time and never kept, so memory does not grow with the
 * file. Both layouts are accepted: {"traceEvents": [...], ...} and the old
 * bare array [...], where a missing closing bracket is legal.
 *
 * Times are parsed as decimal fixed point into integer nanoseconds (the file
 * says microseconds), never through a double, so 1.001 us is exactly 1001 ns. */
#ifndef TPF_ANALYZE_TRACE_JSON_H
#define TPF_ANALYZE_TRACE_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"

/* Field presence bits of trace_ev.has. */
enum {
    TEV_TS = 1 << 0,
    TEV_DUR = 1 << 1,
    TEV_PID = 1 << 2,
    TEV_TID = 1 << 3,
    TEV_STREAM = 1 << 4,      /* args.stream was an integer */
    TEV_CORR = 1 << 5,        /* args.correlation was an integer */
    TEV_CAT = 1 << 6,
    TEV_NAME = 1 << 7,
    TEV_TS_FRAC = 1 << 8,     /* ts literal was not an integer (HTA: float column) */
    TEV_ID = 1 << 9,
    TEV_STREAM_ANY = 1 << 10, /* args.stream present in any form */
    TEV_BADNUM = 1 << 11,     /* ts or dur was a number out of range (1e999) */
    TEV_BYTES = 1 << 12,      /* args.bytes (memcpy/memset size) */
    TEV_MEM = 1 << 13,        /* "[memory]" args: Bytes, Total Allocated/Reserved */
    TEV_DEV = 1 << 14,        /* args."Device Id" */
    TEV_DUR_FRAC = 1 << 15,   /* dur literal was not an integer */
    TEV_WAIT = 1 << 16,       /* cuda_sync args: wait_on_stream, wait_on_cuda_event_record_corr_id */
    TEV_MEMBW = 1 << 17,      /* args."memory bandwidth (GB/s)" (Kineto, from the exact ns duration) */
};

/* Flags of trace_read's mode argument. */
enum {
    TRACE_RAW = 1,            /* fill ev.raw (merge) */
    TRACE_DOUBLE = 2,         /* fill ev.ts_us/dur_us as Python's float() reads them */
};

/* A numeric member of the args of a counter event (ph "C"): one series. */
typedef struct trace_carg {
    char key[64];
    double v;
} trace_carg;

#define TRACE_CARGS_MAX 8

/* One event, valid only during the callback. Strings are NUL-terminated and
 * may be truncated to TRACE_STR_MAX bytes. */
typedef struct trace_ev {
    unsigned has;
    char ph;
    const char *name;
    size_t name_len;
    const char *cat;
    size_t cat_len;
    const char *arg_name;     /* args.name (metadata events), "" when absent */
    int64_t ts_ns, dur_ns;
    int64_t pid, tid;         /* when numeric (TEV_PID / TEV_TID) */
    int64_t stream, corr, id;
    int64_t bytes;            /* args.bytes, or "Bytes" of a [memory] event */
    int64_t mem_alloc, mem_reserved; /* "Total Allocated"/"Total Reserved" */
    int64_t dev;              /* args."Device Id" */
    int64_t devtype;          /* args."Device Type" (0 CPU, 1 CUDA, ...) */
    int64_t wait_stream, wait_corr; /* TEV_WAIT */
    /* ph "C": the numeric args (finite values; at most TRACE_CARGS_MAX).
     * Collected for every event whose "ph" is "C" or comes after "args". */
    const trace_carg *cargs;
    int ncargs;
    double mem_bw;            /* TEV_MEMBW */
    double ts_us, dur_us;     /* TRACE_DOUBLE: the literals as doubles (HTA's pandas) */
    /* Raw text of the event object when capture is on (merge), with the byte
     * spans of some values inside it (offset, length; length 0 = absent). */
    const char *raw;
    size_t raw_len;
    size_t pid_off, pid_len, ts_off, ts_len, id_off, id_len;
} trace_ev;

#define TRACE_STR_MAX 65536

/* What was learnt about the file besides its events. */
typedef struct trace_meta {
    int has_rank;
    long rank;                /* distributedInfo.rank */
    int has_base;
    int64_t base_ns;          /* baseTimeNanoseconds */
    int array_form;           /* bare array layout */
    int has_events;           /* an event array was found (either layout) */
    int unterminated;         /* array form without its closing bracket */
    uint64_t bytes;           /* uncompressed bytes read */
    uint64_t events;          /* elements of the event array */
    uint64_t skipped;         /* elements that were not objects */
    uint64_t nonfinite;       /* NaN / Infinity / -Infinity literals (Python's json reads them) */
    uint64_t trailing;        /* bytes after the last gzip member (zlib and so we ignore them) */
} trace_meta;

/* Return non-zero from the callback to stop with that code. */
typedef int (*trace_ev_fn)(void *ud, const trace_ev *ev);

/* Read path, calling fn for every event. mode: TRACE_RAW and/or TRACE_DOUBLE
 * (any other non-zero value means TRACE_RAW, as callers passed 1 before).
 * Returns 0, TPF_ENOENT/TPF_EACCES/TPF_EIO for an unreadable file,
 * TPF_EFORMAT for corrupt gzip or invalid JSON (err names the byte offset),
 * or the callback's code. err gets one line (no trailing newline). */
int trace_read(const char *path, trace_ev_fn fn, void *ud, int mode, trace_meta *meta,
               char *err, size_t errlen);

/* The same over a memory buffer (tests, fuzzing). */
int trace_read_mem(const void *data, size_t len, trace_ev_fn fn, void *ud, int mode,
                   trace_meta *meta, char *err, size_t errlen);

/* Parse a JSON number literal as microseconds into nanoseconds, exactly when
 * representable, rounding half away from zero below 1 ns. 0 or TPF_EFORMAT
 * (syntax) / TPF_ETOOBIG (out of int64 range). *frac: literal had a fraction
 * or exponent. */
int trace_parse_us(const char *s, size_t n, int64_t *ns, int *frac);

#endif
