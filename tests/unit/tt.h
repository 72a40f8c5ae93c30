/* A tiny unit-test harness: each tests/unit/test_*.c is its own program, run
 * by pytest (tests/test_unit.py) in its own process with a timeout.
 *
 *   TT_TEST(name) { TT_ASSERT(x == 1); TT_EQ_INT(a, b); }
 *   int main(int argc, char **argv) { return tt_main(argc, argv); }
 *
 * `prog --list` prints test names; `prog NAME` runs one; no argument runs all.
 * Output ends with the line "N passed, N failed". */
#ifndef TT_H
#define TT_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*tt_fn)(void);
struct tt_case { const char *name; tt_fn fn; };

#define TT_MAX_CASES 256
static struct tt_case tt_cases[TT_MAX_CASES];
static int tt_ncases;
static int tt_failed_now;

#define TT_TEST(name)                                                      \
    static void tt_##name(void);                                           \
    __attribute__((constructor)) static void tt_reg_##name(void)           \
    {                                                                      \
        if (tt_ncases < TT_MAX_CASES)                                      \
            tt_cases[tt_ncases++] = (struct tt_case){#name, tt_##name};    \
    }                                                                      \
    static void tt_##name(void)

#define TT_FAIL_(...)                                                      \
    do {                                                                   \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                    \
        fprintf(stderr, __VA_ARGS__);                                      \
        fputc('\n', stderr);                                               \
        tt_failed_now = 1;                                                 \
        return;                                                            \
    } while (0)

#define TT_ASSERT(c)                                                       \
    do {                                                                   \
        if (!(c)) TT_FAIL_("assertion failed: %s", #c);                    \
    } while (0)
#define TT_EQ_INT(a, b)                                                    \
    do {                                                                   \
        long long tt_a_ = (long long)(a), tt_b_ = (long long)(b);          \
        if (tt_a_ != tt_b_)                                                \
            TT_FAIL_("%s == %s: %lld != %lld", #a, #b, tt_a_, tt_b_);      \
    } while (0)
#define TT_EQ_STR(a, b)                                                    \
    do {                                                                   \
        const char *tt_a_ = (a), *tt_b_ = (b);                             \
        if (!tt_a_ || !tt_b_ || strcmp(tt_a_, tt_b_) != 0)                 \
            TT_FAIL_("%s == %s: \"%s\" != \"%s\"", #a, #b,                 \
                     tt_a_ ? tt_a_ : "(null)", tt_b_ ? tt_b_ : "(null)");  \
    } while (0)
#define TT_NEAR(a, b, tol)                                                 \
    do {                                                                   \
        double tt_a_ = (double)(a), tt_b_ = (double)(b);                   \
        if (!(fabs(tt_a_ - tt_b_) <= (tol)))                               \
            TT_FAIL_("%s ~= %s: %g vs %g (tol %g)", #a, #b, tt_a_, tt_b_,  \
                     (double)(tol));                                       \
    } while (0)

static inline int tt_main(int argc, char **argv)
{
    int passed = 0, failed = 0;
    if (argc > 1 && strcmp(argv[1], "--list") == 0) {
        for (int i = 0; i < tt_ncases; i++) printf("%s\n", tt_cases[i].name);
        return 0;
    }
    for (int i = 0; i < tt_ncases; i++) {
        if (argc > 1 && strcmp(argv[1], tt_cases[i].name) != 0) continue;
        tt_failed_now = 0;
        tt_cases[i].fn();
        printf("%s %s\n", tt_failed_now ? "FAIL" : "ok  ", tt_cases[i].name);
        fflush(stdout);
        if (tt_failed_now) failed++; else passed++;
    }
    if (argc > 1 && passed + failed == 0) {
        fprintf(stderr, "no test named %s\n", argv[1]);
        return 2;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

#endif
