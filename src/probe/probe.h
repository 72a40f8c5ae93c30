/* Probe internals shared with the reader, tests and benches (not API). */
#ifndef TPF_PROBE_PROBE_H
#define TPF_PROBE_PROBE_H

#include <stddef.h>
#include <stdint.h>

#include "trainperf.h"

/* The string registered for id in this process, or NULL. Static storage:
 * valid for the life of the process. */
const char *probe_name_str(tpf_name id);
/* Records per ring: TRAINPERF_RING_EVENTS rounded up to a power of two and
 * clamped to [SEG_RING_MIN, SEG_RING_MAX]; SEG_RING_DEFAULT when unset. */
uint32_t probe_ring_events(void);
/* TRAINPERF_RING_EVENTS text: a whole number 1..SEG_RING_MAX, rounded up to
 * a power of two (at least SEG_RING_MIN). 0 or TPF_EINVAL. */
int probe_ring_events_parse(const char *s, uint32_t *out);
/* Path of this process's current segment written into buf, or NULL when
 * not attached (or buf too small). */
const char *probe_segment_path(char *buf, size_t cap);

/* Name this process's segments seg-<pid>.<tag>.tpf (tag: a few letters;
 * "" for the plain name). Before the first event. */
void probe_set_seg_tag(const char *tag);
/* One record with a timestamp the caller read (in the segment's clock: a
 * producer that calls this takes clk_prefer_mono first). kind is a SEG_EV_*
 * of reader.h. 1 when the probe is on (the record may still be dropped on a
 * full ring: counted), 0 when off. Never blocks; the first call from a
 * thread claims its ring (slow path, locks once). */
int probe_emit_record(uint64_t ts, uint32_t kind, uint32_t name, uint64_t a, uint64_t b);

#endif
