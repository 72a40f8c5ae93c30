/* Log-bucketed relative-error quantile sketch (see sketch.h). */
#include <math.h>
#include <string.h>

#include "core/sketch.h"

/* gamma = (1 + a) / (1 - a); computed once per call site is cheap enough,
 * but keep the constants in one place. */
static double sk_log_gamma(void)
{
    return log((1.0 + SKETCH_REL_ERR) / (1.0 - SKETCH_REL_ERR));
}

void sketch_init(sketch *s)
{
    memset(s, 0, sizeof(*s));
    s->min = INFINITY;
    s->max = -INFINITY;
}

void sketch_add(sketch *s, double v)
{
    if (!(v >= 0)) v = 0; /* NaN / negative: a clock hiccup, count as zero */
    s->count++;
    s->sum += v;
    if (v < s->min) s->min = v;
    if (v > s->max) s->max = v;
    if (v < SKETCH_MIN) {
        s->zeros++;
        return;
    }
    double k = ceil(log(v) / sk_log_gamma());
    long i = (long)k;
    if (i < 0) i = 0;
    /* Values past the last bucket clamp into it; max stays exact. */
    if (i >= SKETCH_NBUCKETS) i = SKETCH_NBUCKETS - 1;
    s->bucket[i]++;
}

void sketch_merge(sketch *dst, const sketch *src)
{
    dst->count += src->count;
    dst->zeros += src->zeros;
    dst->sum += src->sum;
    if (src->min < dst->min) dst->min = src->min;
    if (src->max > dst->max) dst->max = src->max;
    for (int i = 0; i < SKETCH_NBUCKETS; i++) dst->bucket[i] += src->bucket[i];
}

double sketch_quantile(const sketch *s, double q)
{
    if (s->count == 0) return NAN;
    if (!(q >= 0)) q = 0;
    if (q > 1) q = 1;
    uint64_t rank = (uint64_t)floor(q * (double)(s->count - 1));
    /* The extremes are kept exactly. */
    if (rank == 0) return s->min;
    if (rank == s->count - 1) return s->max;
    if (rank < s->zeros) return s->min < SKETCH_MIN ? s->min : 0.0;
    uint64_t seen = s->zeros;
    double lg = sk_log_gamma();
    for (int i = 0; i < SKETCH_NBUCKETS; i++) {
        seen += s->bucket[i];
        if (seen > rank) {
            /* The bucket (gamma^(i-1), gamma^i] is represented by the point
             * with equal relative distance to both ends. */
            double g = exp(lg);
            double est = 2.0 * exp(lg * i) / (1.0 + g);
            if (est < s->min) est = s->min;
            if (est > s->max) est = s->max;
            return est;
        }
    }
    return s->max;
}

double sketch_mean(const sketch *s)
{
    return s->count ? s->sum / (double)s->count : NAN;
}
