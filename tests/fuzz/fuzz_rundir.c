/* libFuzzer target for the run-directory readers: run.json, summary.json,
 * steps.csv, metrics.csv, procs.csv, alerts.jsonl, a live/ segment and a
 * pyprof/ profile (the zero-code hook's events-<pid>.json), as
 * `trainperf report` (and its recovery of an interrupted run) reads them.
 *
 *   make fuzz BUILD=build-fuzz
 *   build-fuzz/fuzz/fuzz_rundir -max_total_time=60 CORPUS_DIR
 *
 * An input is the files joined by FUZZ_SEP, in the order of fuzz_files;
 * missing parts are missing files. Each input is written to a fresh
 * directory under /dev/shm (or /tmp), then every report format is built and
 * the segment is opened and drained. */
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "probe/reader.h"
#include "record/recover.h"
#include "report/report.h"
#include "util/buf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_SEP "\n--TPF-FILE--\n"
static const char *const fuzz_files[] = {"run.json",     "summary.json", "steps.csv",
                                         "metrics.csv",  "procs.csv",    "alerts.jsonl",
                                         "live/seg-1.tpf", "recovered.json",
                                         "pyprof/events-1.json"};
#define FUZZ_NFILES (sizeof(fuzz_files) / sizeof(fuzz_files[0]))

static char fuzz_dir[256];

static void put(const char *name, const uint8_t *p, size_t n)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", fuzz_dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return;
    if (n && write(fd, p, n) != (ssize_t)n) {
    }
    close(fd);
}

static void clear(void)
{
    char path[512];
    for (size_t i = 0; i < FUZZ_NFILES; i++) {
        snprintf(path, sizeof(path), "%s/%s", fuzz_dir, fuzz_files[i]);
        unlink(path);
    }
    static const char *const made[] = {"report.md", "report.html", "summary.json", "recovered.json"};
    for (size_t i = 0; i < sizeof(made) / sizeof(made[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", fuzz_dir, made[i]);
        unlink(path);
    }
}

static void on_ev(void *ctx, const seg_event *ev)
{
    size_t *n = ctx;
    *n += ev->kind + ev->name;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!fuzz_dir[0]) {
        const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(fuzz_dir, sizeof(fuzz_dir), "%s/tpf-fuzz-rundir-%d", base, (int)getpid());
        mkdir(fuzz_dir, 0755);
        char sub[300];
        snprintf(sub, sizeof(sub), "%s/live", fuzz_dir);
        mkdir(sub, 0755);
        snprintf(sub, sizeof(sub), "%s/pyprof", fuzz_dir);
        mkdir(sub, 0755);
    }
    clear();
    const uint8_t *p = data, *end = data + size;
    size_t sl = strlen(FUZZ_SEP);
    for (size_t i = 0; i < FUZZ_NFILES && p <= end; i++) {
        const uint8_t *q = p;
        while (q + sl <= end && memcmp(q, FUZZ_SEP, sl) != 0) q++;
        if (q + sl > end) q = end;
        put(fuzz_files[i], p, (size_t)(q - p));
        p = q + sl;
    }
    for (int fmt = REPORT_TEXT; fmt <= REPORT_JSON; fmt++) {
        buf b;
        buf_init(&b, 64u << 20);
        char err[512];
        report_build(fuzz_dir, (report_format)fmt, fmt == REPORT_TEXT, &b, err, sizeof(err));
        buf_free(&b);
    }
    char seg[300];
    snprintf(seg, sizeof(seg), "%s/live/seg-1.tpf", fuzz_dir);
    seg_reader *r = NULL;
    if (seg_reader_open(&r, seg) == 0) {
        size_t n = 0;
        seg_reader_drain(r, on_ev, &n);
        seg_reader_close(r);
    }
    /* The recovery of an interrupted run reads (and repairs) them all. */
    rec_recovery rv;
    char err[256];
    rec_recover(fuzz_dir, &rv, err, sizeof(err));
    return 0;
}
