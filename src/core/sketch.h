/* A mergeable quantile sketch with bounded relative error (a log-bucketed
 * histogram, as in DDSketch): every value v >= SKETCH_MIN falls into bucket
 * ceil(log_gamma(v)), gamma = (1 + a) / (1 - a), so a quantile read back is
 * within a relative error a = SKETCH_REL_ERR of a value of the right rank.
 * Memory is fixed (no allocation): month-long runs do not grow it. */
#ifndef TPF_CORE_SKETCH_H
#define TPF_CORE_SKETCH_H

#include <stdint.h>

#define SKETCH_REL_ERR 0.01
/* Values below SKETCH_MIN count as zero (they are "nothing": step times and
 * waits are fed in nanoseconds, so this is below one nanosecond). */
#define SKETCH_MIN 1.0
/* Buckets cover [1, ~1e17]: with a = 1%, ln(1e17) / ln(gamma) ~ 1957. */
#define SKETCH_NBUCKETS 1960

typedef struct sketch {
    uint64_t count;   /* all values, zeros included */
    uint64_t zeros;   /* values < SKETCH_MIN (and NaN / negative) */
    double sum, min, max;
    uint64_t bucket[SKETCH_NBUCKETS];
} sketch;

void sketch_init(sketch *s);
void sketch_add(sketch *s, double v);
/* Add every value of src into dst (dst becomes the sketch of the union). */
void sketch_merge(sketch *dst, const sketch *src);
/* The q-quantile (0 <= q <= 1), within SKETCH_REL_ERR of the exact value of
 * rank floor(q * (count - 1)); clamped to [min, max]. NaN when empty. */
double sketch_quantile(const sketch *s, double q);
double sketch_mean(const sketch *s); /* NaN when empty */

#endif
