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

#endif
