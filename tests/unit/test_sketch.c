/* The quantile sketch against exact quantiles of random data. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/sketch.h"
#include "tt.h"

/* xorshift64*: reproducible without libc rand(). */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double urand(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}
static double nrand(void)
{
    double u = urand(), v = urand();
    if (u < 1e-300) u = 1e-300;
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

enum { D_UNIFORM, D_EXP, D_LOGNORMAL, D_PARETO, D_BIMODAL, D_COUNT };

static double draw(int dist)
{
    switch (dist) {
    case D_UNIFORM: return 1e6 + urand() * 9e6;            /* 1-10 ms in ns */
    case D_EXP: return 1.0 - 2e7 * log(1.0 - urand());     /* mean 20 ms */
    case D_LOGNORMAL: return exp(16.0 + 1.5 * nrand());   /* heavy right tail */
    case D_PARETO: return 1e5 / pow(1.0 - urand(), 1.0 / 1.2);
    default: return urand() < 0.9 ? 5e6 + 1e5 * nrand() : 2e8 + 1e7 * nrand();
    }
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static const double qs[] = {0.0, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 1.0};

TT_TEST(sketch_within_relative_error_on_several_distributions)
{
    enum { N = 50000 };
    double *xs = malloc(N * sizeof(double));
    static sketch s;
    TT_ASSERT(xs != NULL);
    for (int d = 0; d < D_COUNT; d++) {
        sketch_init(&s);
        double sum = 0;
        for (int i = 0; i < N; i++) {
            xs[i] = draw(d);
            sum += xs[i];
            sketch_add(&s, xs[i]);
        }
        qsort(xs, N, sizeof(double), cmp_d);
        TT_EQ_INT(s.count, N);
        TT_NEAR(sketch_mean(&s), sum / N, 1e-9 * sum / N);
        TT_ASSERT(sketch_quantile(&s, 0.0) == xs[0]);
        TT_ASSERT(sketch_quantile(&s, 1.0) == xs[N - 1]);
        for (size_t k = 0; k < sizeof(qs) / sizeof(qs[0]); k++) {
            double exact = xs[(size_t)floor(qs[k] * (N - 1))];
            double est = sketch_quantile(&s, qs[k]);
            double rel = fabs(est - exact) / exact;
            if (!(rel <= SKETCH_REL_ERR * (1 + 1e-9))) {
                free(xs);
                TT_FAIL_("dist %d q %g: est %g exact %g rel %g", d, qs[k], est, exact, rel);
            }
        }
    }
    free(xs);
}

TT_TEST(sketch_merge_equals_sketch_of_union)
{
    static sketch a, b, u;
    sketch_init(&a);
    sketch_init(&b);
    sketch_init(&u);
    for (int i = 0; i < 20000; i++) {
        double x = draw(D_LOGNORMAL), y = draw(D_BIMODAL);
        sketch_add(&a, x);
        sketch_add(&b, y);
        sketch_add(&u, x);
        sketch_add(&u, y);
    }
    sketch_add(&a, 0.0); /* zeros merge too */
    sketch_add(&u, 0.0);
    sketch_merge(&a, &b);
    TT_EQ_INT(a.count, u.count);
    TT_EQ_INT(a.zeros, u.zeros);
    TT_ASSERT(a.min == u.min && a.max == u.max);
    TT_ASSERT(memcmp(a.bucket, u.bucket, sizeof(a.bucket)) == 0);
    for (size_t k = 0; k < sizeof(qs) / sizeof(qs[0]); k++)
        TT_ASSERT(sketch_quantile(&a, qs[k]) == sketch_quantile(&u, qs[k]));
}

TT_TEST(sketch_empty_zero_and_huge_values)
{
    static sketch s;
    sketch_init(&s);
    TT_ASSERT(isnan(sketch_quantile(&s, 0.5)));
    TT_ASSERT(isnan(sketch_mean(&s)));
    for (int i = 0; i < 10; i++) sketch_add(&s, 0.0);
    TT_ASSERT(sketch_quantile(&s, 0.5) == 0.0);
    sketch_add(&s, 1e30); /* past the last bucket: clamped, max exact */
    TT_ASSERT(sketch_quantile(&s, 1.0) == 1e30);
    sketch_add(&s, NAN);
    TT_EQ_INT(s.count, 12);
    TT_EQ_INT(s.zeros, 11);
}

int main(int argc, char **argv) { return tt_main(argc, argv); }
