/* TensorBoard event-file encoding (tfevents.c): TFRecord framing with masked
 * CRC-32C around hand-encoded Event/Summary protobufs. */
#ifndef TPF_RECORD_TFEVENTS_H
#define TPF_RECORD_TFEVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"

/* One Summary.Value: a scalar (text NULL) or a text-plugin string. */
typedef struct tfev_value {
    const char *tag;
    double value;
    const char *text;
} tfev_value;

uint32_t tfev_crc32c(const void *p, size_t n);
/* ((crc >> 15) | (crc << 17)) + 0xa282ead8, as TFRecord stores it. */
uint32_t tfev_masked_crc(const void *p, size_t n);

/* Append one framed Event record to out: with file_version set, the
 * file's first record (values ignored); else Event{wall_time, step,
 * summary{values}}. Returns 0, TPF_ETOOBIG (the event is over 64 KiB) or
 * out's sticky error. */
int tfev_event(buf *out, double wall_time, int64_t step, const char *file_version,
               const tfev_value *v, int nv);

#endif
