/* trainer — a small MLP trained with SGD in plain C on synthetic data,
 * instrumented with the public trainperf API only.
 *
 * The data come from a fixed random "teacher" network, so the student can
 * really learn them and the loss goes down. Knobs make the run input-bound
 * (--data-delay-ms 20 --hidden 64) or compute-bound (--hidden 1024).
 *
 *   trainer [--steps N] [--batch B] [--hidden H] [--data-delay-ms D]
 *           [--workers W] [--seed S] [--lr LR] [--quiet]
 *
 * Under `trainperf run` (TRAINPERF_RUN_DIR set) the probe attaches by itself.
 * Exit: 0, 2 on bad arguments, 1 when out of memory. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "trainperf.h"

#define IN_DIM 32
#define TEACHER_HIDDEN 16

typedef struct opts {
    long steps, batch, hidden, delay_ms, workers;
    unsigned long long seed;
    double lr;
    int quiet;
} opts;

/* ---- random numbers (splitmix64; Box-Muller for normals) ---- */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rng_unit(uint64_t *s)
{
    return ((double)(rng_next(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static float rng_normal(uint64_t *s)
{
    double u = rng_unit(s), v = rng_unit(s);
    return (float)(sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v));
}

/* ---- the teacher: fixed weights, tanh hidden layer ---- */

typedef struct teacher {
    float w1[IN_DIM][TEACHER_HIDDEN], b1[TEACHER_HIDDEN], w2[TEACHER_HIDDEN];
} teacher;

static void teacher_init(teacher *t, uint64_t seed)
{
    uint64_t s = seed ^ 0x7eac4e7ull;
    for (int k = 0; k < IN_DIM; k++)
        for (int j = 0; j < TEACHER_HIDDEN; j++)
            t->w1[k][j] = rng_normal(&s) / sqrtf((float)IN_DIM) * 2.0f;
    for (int j = 0; j < TEACHER_HIDDEN; j++) {
        t->b1[j] = 0.1f * rng_normal(&s);
        t->w2[j] = rng_normal(&s) / sqrtf((float)TEACHER_HIDDEN);
    }
}

static float teacher_eval(const teacher *t, const float *x)
{
    float y = 0;
    for (int j = 0; j < TEACHER_HIDDEN; j++) {
        float z = t->b1[j];
        for (int k = 0; k < IN_DIM; k++)
            z += x[k] * t->w1[k][j];
        y += tanhf(z) * t->w2[j];
    }
    return y;
}

/* ---- batches and their production ---- */

typedef struct batch {
    float *x; /* [B][IN_DIM] */
    float *y; /* [B] */
} batch;

static batch *batch_new(long b)
{
    batch *bt = calloc(1, sizeof(*bt));
    if (!bt) return NULL;
    bt->x = malloc(sizeof(float) * (size_t)b * IN_DIM);
    bt->y = malloc(sizeof(float) * (size_t)b);
    if (!bt->x || !bt->y) {
        free(bt->x);
        free(bt->y);
        free(bt);
        return NULL;
    }
    return bt;
}

static void batch_free(batch *bt)
{
    if (!bt) return;
    free(bt->x);
    free(bt->y);
    free(bt);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Make one batch: simulated slow input (storage, decoding), then samples. */
static void batch_fill(batch *bt, long b, const teacher *t, long delay_ms, uint64_t *s)
{
    if (delay_ms > 0) sleep_ms(delay_ms);
    for (long i = 0; i < b; i++) {
        float *x = bt->x + i * IN_DIM;
        for (int k = 0; k < IN_DIM; k++)
            x[k] = rng_normal(s);
        bt->y[i] = teacher_eval(t, x);
    }
}

/* A bounded queue fed by worker threads. */
typedef struct loader {
    pthread_mutex_t mu;
    pthread_cond_t not_empty, not_full;
    batch **q;
    long cap, head, count;
    int stop;
    const opts *o;
    const teacher *t;
    pthread_t *th;
    long nth;
    void *args; /* the workers' worker_arg array */
} loader;

typedef struct worker_arg {
    loader *l;
    long id;
} worker_arg;

static void *worker_main(void *arg)
{
    worker_arg *wa = arg;
    loader *l = wa->l;
    uint64_t s = l->o->seed * 1000003ull + (uint64_t)wa->id + 1;
    for (;;) {
        batch *bt = batch_new(l->o->batch);
        if (!bt) break;
        batch_fill(bt, l->o->batch, l->t, l->o->delay_ms, &s);
        pthread_mutex_lock(&l->mu);
        while (l->count == l->cap && !l->stop)
            pthread_cond_wait(&l->not_full, &l->mu);
        if (l->stop) {
            pthread_mutex_unlock(&l->mu);
            batch_free(bt);
            break;
        }
        l->q[(l->head + l->count) % l->cap] = bt;
        l->count++;
        pthread_cond_signal(&l->not_empty);
        pthread_mutex_unlock(&l->mu);
    }
    return NULL;
}

static batch *loader_get(loader *l)
{
    pthread_mutex_lock(&l->mu);
    while (l->count == 0)
        pthread_cond_wait(&l->not_empty, &l->mu);
    batch *bt = l->q[l->head];
    l->head = (l->head + 1) % l->cap;
    l->count--;
    pthread_cond_signal(&l->not_full);
    pthread_mutex_unlock(&l->mu);
    return bt;
}

/* ---- the student MLP: IN_DIM -> H -> H -> 1, ReLU ---- */

typedef struct mlp {
    long h, b;
    float *w1, *b1, *w2, *b2, *w3, b3; /* w1 [IN][H], w2 [H][H] (in-major), w3 [H] */
    float *g1, *gb1, *g2, *gb2, *g3, gb3;
    float *z1, *a1, *z2, *a2, *out; /* activations [B][H], out [B] */
    float *d2, *d1;                 /* deltas [B][H] */
} mlp;

static float *falloc(size_t n, int *ok)
{
    float *p = calloc(n, sizeof(float));
    if (!p) *ok = 0;
    return p;
}

static int mlp_init(mlp *m, long h, long b, uint64_t seed)
{
    int ok = 1;
    memset(m, 0, sizeof(*m));
    m->h = h;
    m->b = b;
    size_t H = (size_t)h, B = (size_t)b;
    m->w1 = falloc(IN_DIM * H, &ok);
    m->g1 = falloc(IN_DIM * H, &ok);
    m->b1 = falloc(H, &ok);
    m->gb1 = falloc(H, &ok);
    m->w2 = falloc(H * H, &ok);
    m->g2 = falloc(H * H, &ok);
    m->b2 = falloc(H, &ok);
    m->gb2 = falloc(H, &ok);
    m->w3 = falloc(H, &ok);
    m->g3 = falloc(H, &ok);
    m->z1 = falloc(B * H, &ok);
    m->a1 = falloc(B * H, &ok);
    m->z2 = falloc(B * H, &ok);
    m->a2 = falloc(B * H, &ok);
    m->d1 = falloc(B * H, &ok);
    m->d2 = falloc(B * H, &ok);
    m->out = falloc(B, &ok);
    if (!ok) return -1;
    uint64_t s = seed ^ 0x5eedull;
    /* He initialisation keeps ReLU activations at a steady scale. */
    for (size_t i = 0; i < IN_DIM * H; i++)
        m->w1[i] = rng_normal(&s) * sqrtf(2.0f / IN_DIM);
    for (size_t i = 0; i < H * H; i++)
        m->w2[i] = rng_normal(&s) * sqrtf(2.0f / (float)H);
    for (size_t i = 0; i < H; i++)
        m->w3[i] = rng_normal(&s) * sqrtf(1.0f / (float)H);
    return 0;
}

static void mlp_free(mlp *m)
{
    float *all[] = {m->w1, m->g1, m->b1, m->gb1, m->w2, m->g2, m->b2, m->gb2, m->w3,
                    m->g3, m->z1, m->a1, m->z2,  m->a2, m->d1, m->d2, m->out};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        free(all[i]);
}

/* y[B][n] = relu?(x[B][k] . w[k][n] + bias) */
static void dense(const float *x, long B, long K, const float *w, const float *bias, long N,
                  float *z, float *a)
{
    for (long b = 0; b < B; b++) {
        float *zr = z + b * N;
        for (long j = 0; j < N; j++)
            zr[j] = bias[j];
        const float *xr = x + b * K;
        for (long k = 0; k < K; k++) {
            const float xv = xr[k], *wr = w + k * N;
            for (long j = 0; j < N; j++)
                zr[j] += xv * wr[j];
        }
        float *ar = a + b * N;
        for (long j = 0; j < N; j++)
            ar[j] = zr[j] > 0 ? zr[j] : 0;
    }
}

/* Returns the batch loss: 0.5 * mean squared error. */
static double mlp_forward(mlp *m, const batch *bt)
{
    long B = m->b, H = m->h;
    dense(bt->x, B, IN_DIM, m->w1, m->b1, H, m->z1, m->a1);
    dense(m->a1, B, H, m->w2, m->b2, H, m->z2, m->a2);
    double loss = 0;
    for (long b = 0; b < B; b++) {
        float o = m->b3;
        const float *ar = m->a2 + b * H;
        for (long j = 0; j < H; j++)
            o += ar[j] * m->w3[j];
        m->out[b] = o;
        double e = (double)o - bt->y[b];
        loss += 0.5 * e * e;
    }
    return loss / (double)B;
}

/* gw[k][n] = sum_b x[b][k] * d[b][n]; gb[n] = sum_b d[b][n] */
static void dense_grad(const float *x, long B, long K, const float *d, long N, float *gw, float *gb)
{
    memset(gw, 0, sizeof(float) * (size_t)(K * N));
    memset(gb, 0, sizeof(float) * (size_t)N);
    for (long b = 0; b < B; b++) {
        const float *dr = d + b * N, *xr = x + b * K;
        for (long j = 0; j < N; j++)
            gb[j] += dr[j];
        for (long k = 0; k < K; k++) {
            const float xv = xr[k];
            float *gr = gw + k * N;
            for (long j = 0; j < N; j++)
                gr[j] += xv * dr[j];
        }
    }
}

static void mlp_backward(mlp *m, const batch *bt)
{
    long B = m->b, H = m->h;
    memset(m->g3, 0, sizeof(float) * (size_t)H);
    m->gb3 = 0;
    for (long b = 0; b < B; b++) {
        float dout = (m->out[b] - bt->y[b]) / (float)B;
        const float *ar = m->a2 + b * H, *zr = m->z2 + b * H;
        float *dr = m->d2 + b * H;
        m->gb3 += dout;
        for (long j = 0; j < H; j++) {
            m->g3[j] += ar[j] * dout;
            dr[j] = zr[j] > 0 ? dout * m->w3[j] : 0;
        }
    }
    dense_grad(m->a1, B, H, m->d2, H, m->g2, m->gb2);
    /* d1[b][i] = relu'(z1) * sum_j d2[b][j] * w2[i][j] */
    for (long b = 0; b < B; b++) {
        const float *dr = m->d2 + b * H, *zr = m->z1 + b * H;
        float *d1r = m->d1 + b * H;
        for (long i = 0; i < H; i++) {
            float acc = 0;
            const float *wr = m->w2 + i * H;
            for (long j = 0; j < H; j++)
                acc += dr[j] * wr[j];
            d1r[i] = zr[i] > 0 ? acc : 0;
        }
    }
    dense_grad(bt->x, B, IN_DIM, m->d1, H, m->g1, m->gb1);
}

static void sgd(float *w, const float *g, size_t n, float lr)
{
    for (size_t i = 0; i < n; i++)
        w[i] -= lr * g[i];
}

static void mlp_step(mlp *m, float lr)
{
    size_t H = (size_t)m->h;
    sgd(m->w1, m->g1, IN_DIM * H, lr);
    sgd(m->b1, m->gb1, H, lr);
    sgd(m->w2, m->g2, H * H, lr);
    sgd(m->b2, m->gb2, H, lr);
    sgd(m->w3, m->g3, H, lr);
    m->b3 -= lr * m->gb3;
}

/* ---- command line ---- */

static void usage(FILE *f)
{
    fprintf(f, "usage: trainer [--steps N] [--batch B] [--hidden H] [--data-delay-ms D]\n"
               "               [--workers W] [--seed S] [--lr LR] [--quiet]\n");
}

static int parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int parse_args(int argc, char **argv, opts *o)
{
    *o = (opts){.steps = 200,
                .batch = 64,
                .hidden = 128,
                .delay_ms = 0,
                .workers = 0,
                .seed = 1,
                .lr = 0.02,
                .quiet = 0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n;
        int bad = 0;
        if (strcmp(a, "--quiet") == 0) {
            o->quiet = 1;
            continue;
        }
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            exit(0);
        }
        if (strcmp(a, "--steps") == 0)
            bad = parse_long(v, 0, 100000000, &o->steps);
        else if (strcmp(a, "--batch") == 0)
            bad = parse_long(v, 1, 65536, &o->batch);
        else if (strcmp(a, "--hidden") == 0)
            bad = parse_long(v, 1, 8192, &o->hidden);
        else if (strcmp(a, "--data-delay-ms") == 0)
            bad = parse_long(v, 0, 600000, &o->delay_ms);
        else if (strcmp(a, "--workers") == 0)
            bad = parse_long(v, 0, 256, &o->workers);
        else if (strcmp(a, "--seed") == 0) {
            bad = parse_long(v, 0, INT32_MAX, &n);
            o->seed = (unsigned long long)n;
        } else if (strcmp(a, "--lr") == 0) {
            char *end;
            errno = 0;
            o->lr = v ? strtod(v, &end) : 0;
            bad = !v || errno || end == v || *end || !(o->lr > 0 && o->lr < 10);
        } else {
            fprintf(stderr, "trainer: error: unknown option %s\n", a);
            usage(stderr);
            return -1;
        }
        if (bad) {
            fprintf(stderr, "trainer: error: %s needs a valid value (got %s)\n", a,
                    v ? v : "nothing");
            return -1;
        }
        i++;
    }
    return 0;
}

int main(int argc, char **argv)
{
    opts o;
    if (parse_args(argc, argv, &o) != 0) return 2;
    tpf_name loss_name = tpf_name_register("loss");

    static teacher t;
    teacher_init(&t, 12345); /* the task stays the same across --seed */
    mlp m;
    batch *own = batch_new(o.batch);
    if (mlp_init(&m, o.hidden, o.batch, o.seed) != 0 || !own) {
        fprintf(stderr, "trainer: error: out of memory for --hidden %ld --batch %ld\n", o.hidden,
                o.batch);
        return 1;
    }
    loader l;
    memset(&l, 0, sizeof(l));
    if (o.workers > 0) {
        pthread_mutex_init(&l.mu, NULL);
        pthread_cond_init(&l.not_empty, NULL);
        pthread_cond_init(&l.not_full, NULL);
        l.cap = 2 * o.workers;
        l.q = calloc((size_t)l.cap, sizeof(*l.q));
        l.th = calloc((size_t)o.workers, sizeof(*l.th));
        worker_arg *wa = calloc((size_t)o.workers, sizeof(*wa));
        l.args = wa;
        l.o = &o;
        l.t = &t;
        if (!l.q || !l.th || !wa) {
            fprintf(stderr, "trainer: error: out of memory\n");
            return 1;
        }
        for (long i = 0; i < o.workers; i++) {
            wa[i] = (worker_arg){&l, i};
            if (pthread_create(&l.th[i], NULL, worker_main, &wa[i]) != 0) break;
            l.nth++;
        }
        if (l.nth == 0) {
            fprintf(stderr, "trainer: error: cannot start data-loading threads\n");
            return 1;
        }
    }

    uint64_t s = o.seed;
    double first = NAN, last = NAN, recent = 0;
    long nrecent = 0;
    for (long step = 0; step < o.steps; step++) {
        tpf_step_begin();
        tpf_range_push(TPF_PHASE_DATA);
        batch *bt;
        if (o.workers > 0) {
            bt = loader_get(&l);
        } else {
            batch_fill(own, o.batch, &t, o.delay_ms, &s);
            bt = own;
        }
        tpf_range_pop();

        tpf_range_push(TPF_PHASE_FORWARD);
        double loss = mlp_forward(&m, bt);
        tpf_range_pop();

        tpf_range_push(TPF_PHASE_BACKWARD);
        mlp_backward(&m, bt);
        tpf_range_pop();

        tpf_range_push(TPF_PHASE_OPTIMIZER);
        mlp_step(&m, (float)o.lr);
        tpf_range_pop();

        tpf_counter(loss_name, loss);
        tpf_step_end((uint64_t)o.batch, 0);
        if (bt != own) batch_free(bt);

        if (step == 0) first = loss;
        last = loss;
        /* The last tenth of the run, averaged: one batch is noisy. */
        if (step >= o.steps - (o.steps + 9) / 10) {
            recent += loss;
            nrecent++;
        }
        if (!o.quiet && (step % 50 == 0 || step == o.steps - 1))
            printf("step %ld loss %.6f\n", step, loss);
    }

    if (o.workers > 0) {
        pthread_mutex_lock(&l.mu);
        l.stop = 1;
        pthread_cond_broadcast(&l.not_full);
        pthread_mutex_unlock(&l.mu);
        for (long i = 0; i < l.nth; i++)
            pthread_join(l.th[i], NULL);
        for (long i = 0; i < l.count; i++)
            batch_free(l.q[(l.head + i) % l.cap]);
        free(l.q);
        free(l.th);
        free(l.args);
        pthread_mutex_destroy(&l.mu);
        pthread_cond_destroy(&l.not_empty);
        pthread_cond_destroy(&l.not_full);
    }
    (void)last;
    printf("initial loss %.6f final loss %.6f steps %ld\n", first,
           nrecent ? recent / (double)nrecent : NAN, o.steps);
    batch_free(own);
    mlp_free(&m);
    return 0;
}
