/* Writing the run directory when its file system fills up (issue 11): whole
 * rows only, a trace that always loads, and room kept for the run's last
 * words (summary.json, run.json with the exit status, the reports). */
#ifndef TPF_RECORD_SAFEOUT_H
#define TPF_RECORD_SAFEOUT_H

#include <stddef.h>
#include <stdint.h>

#include "core/sink.h"

/* Append len bytes of whole lines to fd (opened O_APPEND), all or nothing:
 * a write that fails part way (ENOSPC, EIO) is cut back with ftruncate to
 * *size, the file's length before, so a reader never sees half a row.
 * *size advances by len on success. On failure *lost grows by the lines in
 * data ('\n' count) and the error is returned. */
int rec_append_whole(int fd, uint64_t *size, const char *data, size_t len, uint64_t *lost);

/* Reserve space in the run directory (a hidden, fully allocated file) for
 * the files written at the end. Best effort: as much as can be had up to
 * REC_RESERVE_BYTES. Returns the bytes reserved. */
#define REC_RESERVE_BYTES (2u << 20)
#define REC_RESERVE_NAME ".trainperf-reserve"
uint64_t rec_reserve_make(const char *run_dir);
/* Give the reserved space back (before the last files are written). */
void rec_reserve_release(const char *run_dir);

/* What a full (or failing) file system cost the run, for summary.json "io"
 * (core/sink.h: the sinks count it in their tally). */
typedef sink_lost rec_loss;

/* summary.json "io": {"error": null|"...", "lost": {"steps": n, ...}}. l may
 * be NULL (nothing lost). */
struct jw;
void rec_loss_json(struct jw *w, const rec_loss *l);

/* One sentence for people ("" when nothing was lost). */
void rec_loss_text(const rec_loss *l, char *out, size_t cap);

#endif
