/* The probe and the segment reader: rings, drops, names, fork, SIGKILL,
 * damaged files, clock. Each case runs in its own process (tests/test_unit.py)
 * and attaches to its own temporary run directory. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "collect/agg.h"
#include "probe/clock.h"
#include "probe/probe.h"
#include "probe/reader.h"
#include "probe/segment.h"
#include "record/recover.h"
#include "record/writers.h"
#include "trainperf.h"
#include "tt.h"

/* ---- helpers ---- */

static char g_self[4096];

static void tmp_run_dir(char *dir, size_t cap)
{
    snprintf(dir, cap, "/tmp/tpf-probe-XXXXXX");
    if (!mkdtemp(dir)) dir[0] = 0;
}

/* Remove RUN/live/<files>, RUN/live, RUN (segments are big sparse files). */
static void rm_run_dir(const char *dir)
{
    char p[4096];
    snprintf(p, sizeof(p), "%s/live", dir);
    DIR *d = opendir(p);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            char f[4352];
            snprintf(f, sizeof(f), "%s/%s", p, e->d_name);
            unlink(f);
        }
        closedir(d);
    }
    rmdir(p);
    rmdir(dir);
}

static void seg_path_of(char *out, size_t cap, const char *dir, pid_t pid)
{
    snprintf(out, cap, "%s/live/seg-%d.tpf", dir, (int)pid);
}

typedef struct collected {
    seg_event ev[4096];
    long n;
} collected;

static void collect_cb(void *ctx, const seg_event *ev)
{
    collected *c = ctx;
    if (c->n < (long)(sizeof(c->ev) / sizeof(c->ev[0]))) c->ev[c->n] = *ev;
    c->n++;
}

static void count_cb(void *ctx, const seg_event *ev)
{
    (void)ev;
    (*(long *)ctx)++;
}

static pid_t my_tid(void)
{
    return (pid_t)syscall(SYS_gettid);
}

/* ---- names ---- */

TT_TEST(names_predefined_and_stable)
{
    TT_EQ_INT(tpf_name_register("data"), TPF_PHASE_DATA);
    TT_EQ_INT(tpf_name_register("forward"), TPF_PHASE_FORWARD);
    TT_EQ_INT(tpf_name_register("backward"), TPF_PHASE_BACKWARD);
    TT_EQ_INT(tpf_name_register("optimizer"), TPF_PHASE_OPTIMIZER);
    TT_EQ_INT(tpf_name_register("comm"), TPF_PHASE_COMM);
    TT_EQ_INT(tpf_name_register("eval"), TPF_PHASE_EVAL);
    TT_EQ_INT(tpf_name_register("checkpoint"), TPF_PHASE_CHECKPOINT);
    TT_EQ_INT(tpf_name_register(NULL), 0);
    TT_EQ_INT(tpf_name_register(""), 0);
    tpf_name a = tpf_name_register("attention");
    TT_ASSERT(a >= TPF_NAME_FIRST_USER);
    TT_EQ_INT(tpf_name_register("attention"), a);
    tpf_name b = tpf_name_register("attention2");
    TT_ASSERT(b != a && b >= TPF_NAME_FIRST_USER);
    TT_EQ_STR(probe_name_str(a), "attention");
    TT_EQ_STR(probe_name_str(TPF_PHASE_COMM), "comm");
    /* Only 127 bytes are kept: strings equal in those are one name. */
    char l1[300], l2[300];
    memset(l1, 'x', 299);
    l1[299] = 0;
    memcpy(l2, l1, sizeof(l1));
    l2[200] = 'y';
    tpf_name la = tpf_name_register(l1);
    TT_ASSERT(la != 0);
    TT_EQ_INT(tpf_name_register(l2), la);
    TT_EQ_INT(strlen(probe_name_str(la)), SEG_NAME_MAX - 1);
}

enum { NT_THREADS = 8, NT_SHARED = 40, NT_OWN = 10 };
static tpf_name g_nt_ids[NT_THREADS][NT_SHARED + NT_OWN];

static void *names_thread(void *arg)
{
    int t = (int)(intptr_t)arg;
    char s[64];
    for (int i = 0; i < NT_SHARED + NT_OWN; i++) {
        /* Each thread walks the shared names in another order. */
        int k = i < NT_SHARED ? (i * 7 + t * 3) % NT_SHARED : i;
        if (k < NT_SHARED)
            snprintf(s, sizeof(s), "shared-%d", k);
        else
            snprintf(s, sizeof(s), "own-%d-%d", t, k);
        g_nt_ids[t][k] = tpf_name_register(s);
    }
    return NULL;
}

TT_TEST(names_concurrent_registration)
{
    pthread_t th[NT_THREADS];
    for (int t = 0; t < NT_THREADS; t++)
        TT_ASSERT(pthread_create(&th[t], NULL, names_thread, (void *)(intptr_t)t) == 0);
    for (int t = 0; t < NT_THREADS; t++)
        pthread_join(th[t], NULL);
    for (int k = 0; k < NT_SHARED; k++) {
        TT_ASSERT(g_nt_ids[0][k] >= TPF_NAME_FIRST_USER);
        for (int t = 1; t < NT_THREADS; t++)
            TT_EQ_INT(g_nt_ids[t][k], g_nt_ids[0][k]);
    }
    /* All distinct strings got distinct ids. */
    static uint8_t seen[SEG_MAX_NAMES];
    int distinct = 0;
    for (int t = 0; t < NT_THREADS; t++)
        for (int k = 0; k < NT_SHARED + NT_OWN; k++) {
            if (k < NT_SHARED && t > 0) continue;
            tpf_name id = g_nt_ids[t][k];
            TT_ASSERT(id > 0 && id < SEG_MAX_NAMES);
            TT_ASSERT(!seen[id]);
            seen[id] = 1;
            distinct++;
        }
    TT_EQ_INT(distinct, NT_SHARED + NT_THREADS * NT_OWN);
    char s[64];
    snprintf(s, sizeof(s), "own-%d-%d", 3, NT_SHARED + 2);
    TT_EQ_STR(probe_name_str(g_nt_ids[3][NT_SHARED + 2]), s);
}

TT_TEST(names_table_full_returns_zero)
{
    tpf_name first = tpf_name_register("kept");
    TT_ASSERT(first != 0);
    char s[64];
    tpf_name last = 0;
    int i = 0, added = 0;
    for (;; i++) {
        snprintf(s, sizeof(s), "n%d", i);
        tpf_name id = tpf_name_register(s);
        if (id == 0) break;
        TT_ASSERT(id > last);
        last = id;
        added++;
        TT_ASSERT(added < 100000);
    }
    TT_EQ_INT(last, SEG_MAX_NAMES - 1);
    /* Full: new names get 0, known names keep their ids. */
    TT_EQ_INT(tpf_name_register("one more"), 0);
    TT_EQ_INT(tpf_name_register("kept"), first);
    TT_EQ_INT(tpf_name_register("data"), TPF_PHASE_DATA);
    snprintf(s, sizeof(s), "n%d", i - 1);
    TT_EQ_INT(tpf_name_register(s), last);
}

/* ---- attach, detach, basic drain ---- */

TT_TEST(detached_probe_records_nothing)
{
    char dir[64], seg[256];
    tmp_run_dir(dir, sizeof(dir));
    TT_ASSERT(dir[0]);
    /* Not attached: nothing is written anywhere, calls are harmless. */
    TT_EQ_INT(tpf_attached(), 0);
    TT_ASSERT(tpf_run_dir() == NULL);
    tpf_step_begin();
    tpf_range_push(TPF_PHASE_DATA);
    tpf_range_pop();
    tpf_step_end(1, 2);
    TT_EQ_INT(probe_attach(dir), 0);
    TT_EQ_INT(probe_attach(dir), TPF_EBUSY);
    TT_EQ_INT(tpf_attached(), 1);
    TT_EQ_STR(tpf_run_dir(), dir);
    seg_path_of(seg, sizeof(seg), dir, getpid());
    char got[256];
    TT_EQ_STR(probe_segment_path(got, sizeof(got)), seg);
    for (int i = 0; i < 10; i++)
        tpf_mark(TPF_PHASE_EVAL);
    probe_detach();
    TT_EQ_INT(tpf_attached(), 0);
    TT_ASSERT(tpf_run_dir() == NULL);
    for (int i = 0; i < 10; i++)
        tpf_mark(TPF_PHASE_EVAL);
    seg_reader *r;
    TT_EQ_INT(seg_reader_open(&r, seg), 0);
    long n = 0;
    TT_EQ_INT(seg_reader_drain(r, count_cb, &n), 10);
    TT_EQ_INT(n, 10);
    TT_EQ_INT(seg_reader_drain(r, count_cb, &n), 0);
    TT_EQ_INT(seg_reader_dropped(r), 0);
    seg_reader_close(r);
    rm_run_dir(dir);
}

/* A held reader (the collector's) leaves what it read in the rings until it
 * releases it: another reader (a recovery after the collector was killed)
 * still finds it there, the held one goes on from where it stopped. */
TT_TEST(held_events_stay_in_the_rings_until_released)
{
    char dir[64], seg[256];
    tmp_run_dir(dir, sizeof(dir));
    TT_ASSERT(dir[0]);
    TT_EQ_INT(probe_attach(dir), 0);
    seg_path_of(seg, sizeof(seg), dir, getpid());
    for (int i = 0; i < 10; i++)
        tpf_mark(TPF_PHASE_EVAL);
    seg_reader *a, *b, *c;
    TT_EQ_INT(seg_reader_open(&a, seg), 0);
    seg_reader_hold(a);
    long n = 0;
    TT_EQ_INT(seg_reader_drain(a, count_cb, &n), 10);
    TT_EQ_INT(seg_reader_drain(a, count_cb, &n), 0); /* read once by its reader */
    TT_EQ_INT(seg_reader_open(&b, seg), 0);
    seg_reader_hold(b);
    TT_EQ_INT(seg_reader_drain(b, count_cb, &n), 10); /* still in the rings */
    seg_reader_close(b);
    for (int i = 0; i < 3; i++)
        tpf_mark(TPF_PHASE_EVAL);
    TT_EQ_INT(seg_reader_drain(a, count_cb, &n), 3);
    seg_reader_release(a);
    TT_EQ_INT(seg_reader_open(&c, seg), 0);
    TT_EQ_INT(seg_reader_drain(c, count_cb, &n), 0); /* released: gone */
    seg_reader_close(c);
    tpf_mark(TPF_PHASE_EVAL);
    TT_EQ_INT(seg_reader_drain(a, count_cb, &n), 1);
    TT_EQ_INT(n, 24);
    TT_EQ_INT(seg_reader_dropped(a), 0);
    seg_reader_close(a);
    probe_detach();
    rm_run_dir(dir);
}

/* ---- a collector killed between its drain and the release ---- */

typedef struct kill_sim {
    agg *a;
    agg_proc *p;
    buf rows;
    uint64_t t0;
} kill_sim;

static void sim_step(void *ctx, const agg_step *s)
{
    kill_sim *k = ctx;
    rec_steps_row(&k->rows, s, k->t0);
}

static void sim_event(void *ctx, const seg_event *ev)
{
    kill_sim *k = ctx;
    agg_event(k->a, k->p, ev);
}

static void sim_steps(int n)
{
    for (int i = 0; i < n; i++) {
        tpf_step_begin();
        usleep(300);
        tpf_step_end(1, 0);
    }
}

/* The collector drains 6 steps (held), writes `written` of their rows, and
 * dies before it releases them; the trainee runs 3 more steps. The recovery
 * must give steps.csv the 9 steps, each once, numbered 0..8. */
static void killed_collector_case(int written)
{
    char dir[64], seg[256], path[320];
    tmp_run_dir(dir, sizeof(dir));
    TT_ASSERT(dir[0]);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    kill_sim k = {.t0 = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec};
    snprintf(path, sizeof(path), "%s/run.json", dir);
    FILE *f = fopen(path, "w");
    TT_ASSERT(f);
    fprintf(f, "{\"start_mono_ns\": %llu}\n", (unsigned long long)k.t0);
    fclose(f);
    TT_EQ_INT(probe_attach(dir), 0);
    seg_path_of(seg, sizeof(seg), dir, getpid());
    sim_steps(6);
    agg_sink sink = {&k, sim_step, NULL, NULL, NULL, NULL, NULL};
    TT_EQ_INT(agg_create(&k.a, &sink), 0);
    TT_EQ_INT(agg_proc_create(&k.p, getpid(), -1, -1), 0);
    buf_init(&k.rows, 1 << 20);
    seg_reader *r;
    TT_EQ_INT(seg_reader_open(&r, seg), 0);
    seg_reader_hold(r);
    TT_ASSERT(seg_reader_drain(r, sim_event, &k) >= 12);
    /* steps.csv: the header and the first `written` rows of the round */
    buf out;
    buf_init(&out, 1 << 20);
    rec_steps_header(&out);
    size_t at = 0;
    for (int i = 0; i < written; i++) {
        const char *nl = memchr(k.rows.data + at, '\n', k.rows.len - at);
        TT_ASSERT(nl);
        at = (size_t)(nl - k.rows.data) + 1;
    }
    buf_append(&out, k.rows.data, at);
    snprintf(path, sizeof(path), "%s/steps.csv", dir);
    f = fopen(path, "w");
    TT_ASSERT(f);
    fwrite(out.data, 1, out.len, f);
    fclose(f);
    seg_reader_close(r); /* killed: never released */
    sim_steps(3);
    probe_detach();
    rec_recovery info;
    char err[256];
    TT_EQ_INT(rec_recover(dir, &info, err, sizeof(err)), 1);
    TT_EQ_INT((int)info.steps_before, written);
    TT_EQ_INT((int)info.steps, 9 - written);
    /* every step once, in order: column 5 is the step */
    f = fopen(path, "r");
    TT_ASSERT(f);
    char line[1024];
    int n = 0;
    TT_ASSERT(fgets(line, sizeof(line), f)); /* header */
    while (fgets(line, sizeof(line), f)) {
        const char *c = line;
        for (int col = 0; col < 4; col++) {
            c = strchr(c, ',');
            TT_ASSERT(c);
            c++;
        }
        TT_EQ_INT(atoi(c), n);
        n++;
    }
    fclose(f);
    TT_EQ_INT(n, 9);
    buf_free(&out);
    buf_free(&k.rows);
    agg_proc_free(k.p);
    agg_free(k.a);
    for (const char *const *nm = (const char *const[]){"run.json", "steps.csv", "gpu_steps.csv",
                                                       "recovered.json", NULL}; *nm; nm++) {
        snprintf(path, sizeof(path), "%s/%s", dir, *nm);
        unlink(path);
    }
    rm_run_dir(dir);
}

/* Killed after its rows were on disk: the rings still hold those steps. */
TT_TEST(recovery_skips_steps_on_disk_that_the_rings_still_hold)
{
    killed_collector_case(6);
}

/* Killed before it wrote the round (or in the middle of it): nothing lost. */
TT_TEST(recovery_keeps_steps_drained_but_not_written)
{
    killed_collector_case(0);
    killed_collector_case(3);
}

TT_TEST(events_round_trip)
{
    char dir[64], seg[256];
    tmp_run_dir(dir, sizeof(dir));
    tpf_name before = tpf_name_register("before-attach");
    TT_EQ_INT(probe_attach(dir), 0);
    tpf_name after = tpf_name_register("after-attach");
    uint64_t t0 = clk_mono_ns();
    tpf_step_begin();
    tpf_range_push(TPF_PHASE_FORWARD);
    tpf_range_pop();
    tpf_counter(after, -2.5);
    tpf_mark(before);
    tpf_step_end(32, 4096);
    uint64_t t1 = clk_mono_ns();
    seg_path_of(seg, sizeof(seg), dir, getpid());
    seg_reader *r;
    TT_EQ_INT(seg_reader_open(&r, seg), 0);
    const seg_proc_info *pi = seg_reader_info(r);
    TT_EQ_INT(pi->pid, getpid());
    TT_EQ_INT(pi->ppid, getppid());
    char host[64];
    gethostname(host, sizeof(host));
    host[63] = 0;
    TT_EQ_STR(pi->hostname, host);
    static collected c;
    TT_EQ_INT(seg_reader_drain(r, collect_cb, &c), 6);
    static const uint32_t kinds[] = {SEG_EV_STEP_BEGIN, SEG_EV_PUSH, SEG_EV_POP,
                                     SEG_EV_COUNTER,    SEG_EV_MARK, SEG_EV_STEP_END};
    for (int i = 0; i < 6; i++) {
        TT_EQ_INT(c.ev[i].kind, kinds[i]);
        TT_EQ_INT(c.ev[i].tid, my_tid());
        TT_ASSERT(c.ev[i].ts_ns + 20000 >= t0 && c.ev[i].ts_ns <= t1 + 20000);
        if (i) TT_ASSERT(c.ev[i].ts_ns >= c.ev[i - 1].ts_ns);
    }
    TT_EQ_INT(c.ev[1].name, TPF_PHASE_FORWARD);
    TT_EQ_INT(c.ev[3].name, after);
    TT_ASSERT(c.ev[3].value == -2.5);
    TT_EQ_INT(c.ev[4].name, before);
    TT_EQ_INT(c.ev[5].samples, 32);
    TT_EQ_INT(c.ev[5].tokens, 4096);
    TT_EQ_STR(seg_reader_name(r, TPF_PHASE_FORWARD), "forward");
    TT_EQ_STR(seg_reader_name(r, before), "before-attach");
    TT_EQ_STR(seg_reader_name(r, after), "after-attach");
    TT_ASSERT(seg_reader_name(r, 0) == NULL);
    TT_ASSERT(seg_reader_name(r, 9) == NULL);
    TT_ASSERT(seg_reader_name(r, 5000) == NULL);
    seg_reader_close(r);
    probe_detach();
    rm_run_dir(dir);
}

TT_TEST(rank_from_environment)
{
    char dir[64], seg[256];
    tmp_run_dir(dir, sizeof(dir));
    setenv("RANK", "3", 1);
    unsetenv("LOCAL_RANK");
    setenv("SLURM_LOCALID", "1", 1);
    setenv("WORLD_SIZE", "not-a-number", 1);
    unsetenv("SLURM_NTASKS");
    TT_EQ_INT(probe_attach(dir), 0);
    tpf_mark(TPF_PHASE_EVAL);
    seg_path_of(seg, sizeof(seg), dir, getpid());
    seg_reader *r;
    TT_EQ_INT(seg_reader_open(&r, seg), 0);
    TT_EQ_INT(seg_reader_info(r)->rank, 3);
    TT_EQ_INT(seg_reader_info(r)->local_rank, 1);
    TT_EQ_INT(seg_reader_info(r)->world_size, -1);
    seg_reader_close(r);
    probe_detach();
    /* Re-attach in the same process: a fresh segment, ranks absent. */
    unsetenv("RANK");
    unsetenv("SLURM_PROCID");
    unsetenv("SLURM_LOCALID");
    unsetenv("WORLD_SIZE");
    TT_EQ_INT(probe_attach(dir), 0);
    tpf_mark(TPF_PHASE_EVAL);
    tpf_mark(TPF_PHASE_EVAL);
    TT_EQ_INT(seg_reader_open(&r, seg), 0);
    TT_EQ_INT(seg_reader_info(r)->rank, -1);
    TT_EQ_INT(seg_reader_info(r)->local_rank, -1);
    long n = 0;
    TT_EQ_INT(seg_reader_drain(r, count_cb, &n), 2);
    seg_reader_close(r);
    probe_detach();
    rm_run_dir(dir);
}

/* The rank given in code after the attach (tpf_set_rank): in the header
 * once set, a reserved mark where it began, and for segments made later. */
static void rank_mark_cb(void *ctx, const seg_event *ev)
{
    int *marks = ctx;
    if (ev->kind == SEG_EV_MARK && ev->name == SEG_NAME_RANK_SET) marks[0]++;
    if (ev->kind == SEG_EV_MARK && ev->name == TPF_PHASE_EVAL && marks[0] == 0) marks[1]++;
}

TT_TEST(rank_given_in_code)
{
    char dir[64], seg[256];
    tmp_run_dir(dir, sizeof(dir));
    unsetenv("RANK");
    unsetenv("SLURM_PROCID");
    TT_EQ_INT(probe_attach(dir), 0);
    tpf_mark(TPF_PHASE_EVAL);
    seg_path_of(seg, sizeof(seg), dir, getpid());
    seg_reader *r;
    TT_EQ_INT(seg_reader_open(&r, seg), 0);
    TT_EQ_INT(seg_reader_info(r)->rank, -1);
    TT_EQ_INT(seg_reader_rank_changed(r), 0);
    TT_EQ_INT(tpf_set_rank(-1, 0, 2), TPF_EINVAL);
    TT_EQ_INT(tpf_set_rank(1, 0, -2), TPF_EINVAL); /* a negative world size (issue 27) */
    TT_EQ_INT(tpf_set_rank(1, -5, 2), TPF_EINVAL);
    TT_EQ_INT(tpf_set_rank(1, 0, 0), TPF_EINVAL);
    TT_EQ_INT(tpf_set_rank(2, 0, 2), TPF_EINVAL);  /* rank past the world */
    TT_EQ_INT(tpf_set_rank(5, -1, 8), 0);
    TT_EQ_INT(seg_reader_rank_changed(r), 1);
    TT_EQ_INT(seg_reader_info(r)->rank, 5);
    TT_EQ_INT(seg_reader_info(r)->local_rank, -1);
    TT_EQ_INT(seg_reader_info(r)->world_size, 8);
    TT_EQ_INT(seg_reader_rank_changed(r), 0); /* told once */
    int marks[2] = {0, 0};
    TT_EQ_INT(seg_reader_drain(r, rank_mark_cb, marks), 2);
    TT_EQ_INT(marks[0], 1); /* the rank's mark, after the event before it */
    TT_EQ_INT(marks[1], 1);
    seg_reader_close(r);
    probe_detach();
    /* a segment made after it (a re-attach) has it from the start */
    TT_EQ_INT(probe_attach(dir), 0);
    tpf_mark(TPF_PHASE_EVAL);
    TT_EQ_INT(seg_reader_open(&r, seg), 0);
    TT_EQ_INT(seg_reader_info(r)->rank, 5);
    TT_EQ_INT(seg_reader_info(r)->world_size, 8);
    seg_reader_close(r);
    probe_detach();
    rm_run_dir(dir);
}

/* ---- drops ---- */

TT_TEST(overfilled_ring_drops_exactly)
{
    char dir[64], seg[256];
    tmp_run_dir(dir, sizeof(dir));
    setenv("TRAINPERF_RING_EVENTS", "1000", 1); /* rounds up to 1024 */
    TT_EQ_INT(probe_ring_events(), 1024);
    TT_EQ_INT(probe_attach(dir), 0);
    const long C = 1024, K = 777;
    for (long i = 0; i < C + K; i++)
        tpf_counter(TPF_PHASE_DATA, (double)i);
    TT_EQ_INT(tpf_dropped(), K);
    seg_path_of(seg, sizeof(seg), dir, getpid());
    seg_reader *r;
    TT_EQ_INT(seg_reader_open(&r, seg), 0);
    TT_EQ_INT(seg_reader_dropped(r), K);
    static collected c;
    TT_EQ_INT(seg_reader_drain(r, collect_cb, &c), C);
    /* The first C were kept, in order; the rest were dropped. */
    for (long i = 0; i < C; i++)
        TT_ASSERT(c.ev[i].value == (double)i);
    /* Drained: room again, and the drop count does not move. */
    for (long i = 0; i < 10; i++)
        tpf_mark(TPF_PHASE_DATA);
    long n = 0;
    TT_EQ_INT(seg_reader_drain(r, count_cb, &n), 10);
    TT_EQ_INT(seg_reader_dropped(r), K);
    seg_reader_close(r);
    probe_detach();
    TT_EQ_INT(tpf_dropped(), K); /* kept across detach */
    rm_run_dir(dir);
}

enum { EX_THREADS = SEG_MAX_RINGS + 5 };
static pthread_barrier_t g_ex_bar;

static void *exhaust_thread(void *arg)
{
    (void)arg;
    tpf_mark(TPF_PHASE_EVAL);
    pthread_barrier_wait(&g_ex_bar); /* everyone alive at once */
    tpf_mark(TPF_PHASE_EVAL);
    return NULL;
}

TT_TEST(threads_beyond_max_rings_count_as_drops)
{
    char dir[64], seg[256];
    tmp_run_dir(dir, sizeof(dir));
    setenv("TRAINPERF_RING_EVENTS", "1024", 1);
    TT_EQ_INT(probe_attach(dir), 0);
    pthread_barrier_init(&g_ex_bar, NULL, EX_THREADS);
    pthread_t th[EX_THREADS];
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, 64 * 1024);
    int made = 0;
    for (int i = 0; i < EX_THREADS; i++)
        if (pthread_create(&th[i], &at, exhaust_thread, NULL) == 0) made++;
    TT_EQ_INT(made, EX_THREADS);
    for (int i = 0; i < EX_THREADS; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&g_ex_bar);
    /* 256 threads got rings (2 events each), 5 got none (2 drops each). */
    TT_EQ_INT(tpf_dropped(), 2 * (EX_THREADS - SEG_MAX_RINGS));
    seg_path_of(seg, sizeof(seg), dir, getpid());
    seg_reader *r;
    TT_EQ_INT(seg_reader_open(&r, seg), 0);
    long n = 0;
    TT_EQ_INT(seg_reader_drain(r, count_cb, &n), 2 * SEG_MAX_RINGS);
    TT_EQ_INT(seg_reader_dropped(r), 2 * (EX_THREADS - SEG_MAX_RINGS));
    seg_reader_close(r);
    probe_detach();
    rm_run_dir(dir);
}

static void *one_mark_thread(void *arg)
{
    *(pid_t *)arg = my_tid();
    tpf_mark(TPF_PHASE_COMM);
    return NULL;
}

TT_TEST(ring_of_exited_thread_is_reused_after_drain)
{
    char dir[64], seg[256];
    tmp_run_dir(dir, sizeof(dir));
    setenv("TRAINPERF_RING_EVENTS", "1024", 1);
    TT_EQ_INT(probe_attach(dir), 0);
    seg_path_of(seg, sizeof(seg), dir, getpid());
    seg_reader *r;
    TT_EQ_INT(seg_reader_open(&r, seg), 0);
    pid_t tids[2];
    pthread_t th;
    pthread_create(&th, NULL, one_mark_thread, &tids[0]);
    pthread_join(th, NULL);
    /* Not drained yet: a new thread must not take that ring. */
    pthread_create(&th, NULL, one_mark_thread, &tids[1]);
    pthread_join(th, NULL);
    static collected c;
    TT_EQ_INT(seg_reader_drain(r, collect_cb, &c), 2);
    TT_EQ_INT(c.ev[0].tid, tids[0]);
    TT_EQ_INT(c.ev[1].tid, tids[1]);
    const seg_header *h;
    int fd = open(seg, O_RDONLY);
    h = mmap(NULL, SEG_HEADER_SIZE, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    TT_ASSERT(h != MAP_FAILED);
    TT_EQ_INT(h->rings_used, 2);
    /* The file grew by one ring per claimed ring, no more. */
    struct stat st;
    TT_ASSERT(stat(seg, &st) == 0);
    TT_EQ_INT(st.st_size, h->rings_off + 2 * h->ring_stride);
    TT_ASSERT(h->map_size > (uint64_t)st.st_size);
    /* Both drained and exited: the next thread reuses one. */
    pid_t t3;
    pthread_create(&th, NULL, one_mark_thread, &t3);
    pthread_join(th, NULL);
    TT_EQ_INT(h->rings_used, 2);
    TT_ASSERT(stat(seg, &st) == 0);
    TT_EQ_INT(st.st_size, h->rings_off + 2 * h->ring_stride);
    c.n = 0;
    TT_EQ_INT(seg_reader_drain(r, collect_cb, &c), 1);
    TT_EQ_INT(c.ev[0].tid, t3);
    munmap((void *)h, SEG_HEADER_SIZE);
    seg_reader_close(r);
    probe_detach();
    rm_run_dir(dir);
}

/* ---- concurrency ---- */

enum { CC_THREADS = 4, CC_EVENTS = 300000 };
static _Atomic long g_cc_recv[CC_THREADS];
static _Atomic int g_cc_done;
static uint32_t g_cc_ring;

typedef struct cc_state {
    pid_t tid_of[CC_THREADS];
    uint64_t next[CC_THREADS];
    uint64_t last_ts[CC_THREADS];
    long errors;
} cc_state;

static void cc_cb(void *ctx, const seg_event *ev)
{
    cc_state *s = ctx;
    int t = (int)ev->name - TPF_NAME_FIRST_USER;
    if (ev->kind != SEG_EV_COUNTER || t < 0 || t >= CC_THREADS) {
        s->errors++;
        return;
    }
    if (s->tid_of[t] == 0) s->tid_of[t] = ev->tid;
    /* Exactly once, in order: each thread's values are 0, 1, 2, ... */
    if (ev->tid != s->tid_of[t] || ev->value != (double)s->next[t] || ev->ts_ns < s->last_ts[t]) {
        if (s->errors < 5)
            fprintf(stderr, "t%d: tid %d/%d value %g/%llu ts %llu/%llu\n", t, (int)ev->tid,
                    (int)s->tid_of[t], ev->value, (unsigned long long)s->next[t],
                    (unsigned long long)ev->ts_ns, (unsigned long long)s->last_ts[t]);
        s->errors++;
    }
    s->next[t]++;
    s->last_ts[t] = ev->ts_ns;
    atomic_fetch_add(&g_cc_recv[t], 1);
}

static void *cc_producer(void *arg)
{
    int t = (int)(intptr_t)arg;
    char s[32];
    snprintf(s, sizeof(s), "cc-%d", t);
    tpf_name id = tpf_name_register(s);
    for (long i = 0; i < CC_EVENTS; i++) {
        /* Never overrun the drainer: this test wants zero drops. The tail
         * moves only after a whole batch, so stay within a quarter ring of
         * what was received (batch + in flight < ring). */
        while (i - atomic_load(&g_cc_recv[t]) >= (long)g_cc_ring / 4)
            sched_yield();
        tpf_counter(id, (double)i);
    }
    return NULL;
}

typedef struct cc_drainer {
    seg_reader *r;
    cc_state st;
    long drains;
} cc_drainer;

static void *cc_drain(void *arg)
{
    cc_drainer *d = arg;
    for (;;) {
        int done = atomic_load(&g_cc_done);
        if (seg_reader_drain(d->r, cc_cb, &d->st) < 0) d->st.errors++;
        d->drains++;
        if (done) break;
        sched_yield();
    }
    return NULL;
}

TT_TEST(rings_under_concurrency_exactly_once_in_order)
{
    char dir[64], seg[256];
    tmp_run_dir(dir, sizeof(dir));
    setenv("TRAINPERF_RING_EVENTS", "4096", 1);
    g_cc_ring = probe_ring_events();
    /* Names first so thread t owns id FIRST_USER + t. */
    for (int t = 0; t < CC_THREADS; t++) {
        char s[32];
        snprintf(s, sizeof(s), "cc-%d", t);
        TT_EQ_INT(tpf_name_register(s), TPF_NAME_FIRST_USER + t);
    }
    TT_EQ_INT(probe_attach(dir), 0);
    tpf_counter(TPF_NAME_FIRST_USER, 0); /* the main thread's ring exists first */
    seg_path_of(seg, sizeof(seg), dir, getpid());
    static cc_drainer d;
    TT_EQ_INT(seg_reader_open(&d.r, seg), 0);
    /* Drop the main thread's event before the race starts. */
    long n0 = 0;
    TT_EQ_INT(seg_reader_drain(d.r, count_cb, &n0), 1);
    pthread_t dth, pth[CC_THREADS];
    pthread_create(&dth, NULL, cc_drain, &d);
    for (int t = 0; t < CC_THREADS; t++)
        pthread_create(&pth[t], NULL, cc_producer, (void *)(intptr_t)t);
    for (int t = 0; t < CC_THREADS; t++)
        pthread_join(pth[t], NULL);
    atomic_store(&g_cc_done, 1);
    pthread_join(dth, NULL);
    TT_EQ_INT(d.st.errors, 0);
    for (int t = 0; t < CC_THREADS; t++) {
        TT_EQ_INT(atomic_load(&g_cc_recv[t]), CC_EVENTS);
        TT_ASSERT(d.st.tid_of[t] != 0);
        for (int u = 0; u < t; u++)
            TT_ASSERT(d.st.tid_of[t] != d.st.tid_of[u]);
    }
    TT_EQ_INT(seg_reader_dropped(d.r), 0);
    TT_EQ_INT(tpf_dropped(), 0);
    TT_ASSERT(d.drains > 1);
    seg_reader_close(d.r);
    probe_detach();
    rm_run_dir(dir);
}

/* Detach and re-attach while threads keep emitting: no crash, the threads
 * move to the new segment by themselves (the generation changed). */
static _Atomic int g_rd_stop;
static _Atomic long g_rd_emitted;

static void *rd_emitter(void *arg)
{
    (void)arg;
    while (!atomic_load(&g_rd_stop)) {
        tpf_range_push(TPF_PHASE_FORWARD);
        tpf_range_pop();
        atomic_fetch_add(&g_rd_emitted, 2);
        sched_yield();
    }
    return NULL;
}

TT_TEST(reattach_while_threads_emit)
{
    char d1[64], d2[64], seg[256];
    tmp_run_dir(d1, sizeof(d1));
    tmp_run_dir(d2, sizeof(d2));
    setenv("TRAINPERF_RING_EVENTS", "1024", 1);
    TT_EQ_INT(probe_attach(d1), 0);
    pthread_t th[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&th[i], NULL, rd_emitter, NULL);
    while (atomic_load(&g_rd_emitted) < 1000)
        sched_yield();
    for (int round = 0; round < 20; round++) {
        probe_detach();
        TT_EQ_INT(probe_attach(round % 2 ? d1 : d2), 0);
    }
    /* Now attached to d1 (round 19): wait for fresh events there. */
    seg_path_of(seg, sizeof(seg), d1, getpid());
    seg_reader *r;
    TT_EQ_INT(seg_reader_open(&r, seg), 0);
    long n = 0;
    for (int spins = 0; n < 300 && spins < 1000000; spins++) {
        seg_reader_drain(r, count_cb, &n);
        sched_yield();
    }
    atomic_store(&g_rd_stop, 1);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    TT_ASSERT(n >= 300);
    /* Three emitting threads, three rings: none leaked per re-attach. */
    int fd = open(seg, O_RDONLY);
    const seg_header *h = mmap(NULL, SEG_HEADER_SIZE, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    TT_ASSERT(h != MAP_FAILED);
    TT_ASSERT(h->rings_used >= 1 && h->rings_used <= 3);
    munmap((void *)h, SEG_HEADER_SIZE);
    seg_reader_close(r);
    probe_detach();
    rm_run_dir(d1);
    rm_run_dir(d2);
}

/* ---- processes: fork, SIGKILL, environment ---- */

static long drain_file(const char *path, collected *c, uint64_t *drops)
{
    seg_reader *r;
    int rc = seg_reader_open(&r, path);
    if (rc) return rc;
    long n = seg_reader_drain(r, collect_cb, c);
    if (drops) *drops = seg_reader_dropped(r);
    seg_reader_close(r);
    return n;
}

static void *child_thread(void *arg)
{
    long n = (long)(intptr_t)arg;
    for (long i = 0; i < n; i++)
        tpf_mark(TPF_PHASE_COMM);
    return NULL;
}

TT_TEST(fork_children_write_their_own_segments)
{
    char dir[64], seg[256];
    tmp_run_dir(dir, sizeof(dir));
    tpf_name pre = tpf_name_register("pre-fork");
    TT_EQ_INT(probe_attach(dir), 0);
    for (int i = 0; i < 5; i++) {
        tpf_step_begin();
        tpf_step_end(1000, 0);
    }
    enum { KIDS = 3 };
    pid_t kids[KIDS];
    for (int k = 0; k < KIDS; k++) {
        kids[k] = fork();
        if (kids[k] == 0) {
            /* Child k: (k + 2) steps with samples = k, a name of its own,
             * and a second thread with k + 1 marks. */
            tpf_name own = tpf_name_register("child-only");
            for (int i = 0; i < k + 2; i++) {
                tpf_step_begin();
                tpf_range_push(pre);
                tpf_range_pop();
                tpf_counter(own, k);
                tpf_step_end((uint64_t)k, 0);
            }
            pthread_t th;
            if (pthread_create(&th, NULL, child_thread, (void *)(intptr_t)(k + 1)) != 0) _exit(3);
            pthread_join(th, NULL);
            _exit(tpf_attached() ? 0 : 4);
        }
        TT_ASSERT(kids[k] > 0);
        /* The parent keeps emitting while children run. */
        tpf_step_begin();
        tpf_step_end(1000, 0);
    }
    for (int k = 0; k < KIDS; k++) {
        int status;
        TT_EQ_INT(waitpid(kids[k], &status, 0), kids[k]);
        TT_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    /* Parent: 5 + KIDS steps, all its own. */
    static collected c;
    seg_path_of(seg, sizeof(seg), dir, getpid());
    uint64_t drops = 99;
    TT_EQ_INT(drain_file(seg, &c, &drops), 2 * (5 + KIDS));
    TT_EQ_INT(drops, 0);
    for (long i = 0; i < c.n; i++) {
        TT_EQ_INT(c.ev[i].tid, getpid());
        if (c.ev[i].kind == SEG_EV_STEP_END) TT_EQ_INT(c.ev[i].samples, 1000);
    }
    for (int k = 0; k < KIDS; k++) {
        c.n = 0;
        seg_path_of(seg, sizeof(seg), dir, kids[k]);
        long want = 5L * (k + 2) + (k + 1);
        TT_EQ_INT(drain_file(seg, &c, &drops), want);
        TT_EQ_INT(drops, 0);
        long steps = 0, marks = 0;
        for (long i = 0; i < c.n; i++) {
            const seg_event *e = &c.ev[i];
            if (e->kind == SEG_EV_STEP_END) {
                TT_EQ_INT(e->samples, k);
                steps++;
            }
            if (e->kind == SEG_EV_PUSH) TT_EQ_INT(e->name, pre);
            if (e->kind == SEG_EV_MARK) {
                TT_ASSERT(e->tid != kids[k]);
                marks++;
            }
        }
        TT_EQ_INT(steps, k + 2);
        TT_EQ_INT(marks, k + 1);
        seg_reader *r;
        TT_EQ_INT(seg_reader_open(&r, seg), 0);
        TT_EQ_INT(seg_reader_info(r)->ppid, getpid());
        TT_EQ_STR(seg_reader_name(r, pre), "pre-fork");
        seg_reader_close(r);
    }
    /* The child's name never reached the parent's table. */
    tpf_name parent_own = tpf_name_register("parent-after");
    TT_ASSERT(parent_own != 0);
    probe_detach();
    rm_run_dir(dir);
}

/* fork() while other threads of the parent keep emitting: the parent's
 * counts stay exact and each child's events land in its own segment. */
static _Atomic int g_fk_stop;

static void *fk_emitter(void *arg)
{
    long *sent = arg;
    while (!atomic_load(&g_fk_stop)) {
        tpf_step_begin();
        tpf_step_end(1, 0);
        *sent += 2;
        if (*sent % 1024 == 0) sched_yield();
    }
    return NULL;
}

typedef struct fk_count {
    long events;
    pid_t tid;
    long foreign_tid;
} fk_count;

static void fk_cb(void *ctx, const seg_event *ev)
{
    fk_count *c = ctx;
    c->events++;
    if (c->tid && ev->tid != c->tid) c->foreign_tid++;
}

TT_TEST(fork_while_other_threads_emit)
{
    char dir[64], seg[256];
    tmp_run_dir(dir, sizeof(dir));
    TT_EQ_INT(probe_attach(dir), 0);
    seg_path_of(seg, sizeof(seg), dir, getpid());
    seg_reader *r;
    TT_EQ_INT(seg_reader_open(&r, seg), 0);
    long sent[2] = {0, 0};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, fk_emitter, &sent[i]);
    enum { KIDS = 6 };
    pid_t kids[KIDS];
    fk_count parent = {0, 0, 0};
    long main_sent = 0;
    for (int k = 0; k < KIDS; k++) {
        /* Keep the parent's rings from filling while the children run. */
        seg_reader_drain(r, fk_cb, &parent);
        kids[k] = fork();
        if (kids[k] == 0) {
            for (int i = 0; i < 100 * (k + 1); i++)
                tpf_mark(TPF_PHASE_EVAL);
            _exit(0);
        }
        tpf_mark(TPF_PHASE_COMM);
        main_sent++;
    }
    for (int k = 0; k < KIDS; k++) {
        int st;
        TT_EQ_INT(waitpid(kids[k], &st, 0), kids[k]);
        TT_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    atomic_store(&g_fk_stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    seg_reader_drain(r, fk_cb, &parent);
    uint64_t drops = seg_reader_dropped(r);
    TT_EQ_INT(parent.events + (long)drops, sent[0] + sent[1] + main_sent);
    seg_reader_close(r);
    for (int k = 0; k < KIDS; k++) {
        fk_count c = {0, kids[k], 0};
        seg_path_of(seg, sizeof(seg), dir, kids[k]);
        TT_EQ_INT(seg_reader_open(&r, seg), 0);
        TT_EQ_INT(seg_reader_drain(r, fk_cb, &c), 100 * (k + 1));
        TT_EQ_INT(c.foreign_tid, 0);
        TT_EQ_INT(seg_reader_dropped(r), 0);
        seg_reader_close(r);
    }
    probe_detach();
    rm_run_dir(dir);
}

TT_TEST(events_published_before_sigkill_are_drained)
{
    char dir[64], seg[256];
    tmp_run_dir(dir, sizeof(dir));
    int p[2];
    TT_ASSERT(pipe(p) == 0);
    const int N = 1234;
    pid_t kid = fork();
    if (kid == 0) {
        close(p[0]);
        if (probe_attach(dir) != 0) _exit(2);
        for (int i = 0; i < N; i++) {
            tpf_step_begin();
            tpf_step_end((uint64_t)i, 0);
        }
        char b = 'k';
        if (write(p[1], &b, 1) != 1) _exit(3);
        for (;;)
            pause();
    }
    close(p[1]);
    char b = 0;
    TT_EQ_INT(read(p[0], &b, 1), 1);
    close(p[0]);
    kill(kid, SIGKILL);
    int status;
    TT_EQ_INT(waitpid(kid, &status, 0), kid);
    TT_ASSERT(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    seg_path_of(seg, sizeof(seg), dir, kid);
    static collected c;
    TT_EQ_INT(drain_file(seg, &c, NULL), 2 * N);
    for (int i = 0; i < N; i++) {
        TT_EQ_INT(c.ev[2 * i].kind, SEG_EV_STEP_BEGIN);
        TT_EQ_INT(c.ev[2 * i + 1].kind, SEG_EV_STEP_END);
        TT_EQ_INT(c.ev[2 * i + 1].samples, i);
    }
    rm_run_dir(dir);
}

/* Re-executed with TRAINPERF_RUN_DIR set: attaches from the environment. */
static int env_child(void)
{
    /* Lazy: no segment before the first tpf_* call (asking counts). */
    char seg[512];
    snprintf(seg, sizeof(seg), "%s/live/seg-%d.tpf", getenv("TRAINPERF_RUN_DIR"), (int)getpid());
    if (access(seg, F_OK) == 0) return 10;
    if (!tpf_attached()) return 11;
    if (access(seg, F_OK) != 0 || !tpf_run_dir()) return 12;
    tpf_step_begin();
    tpf_step_end(7, 0);
    return tpf_attached() ? 0 : 13;
}

static int run_env_child(const char *run_dir)
{
    pid_t kid = fork();
    if (kid == 0) {
        setenv("TRAINPERF_RUN_DIR", run_dir, 1);
        execl(g_self, g_self, "--env-child", (char *)NULL);
        _exit(127);
    }
    int status;
    if (waitpid(kid, &status, 0) != kid || !WIFEXITED(status)) return -1;
    return WEXITSTATUS(status) == 0 ? (int)kid : -WEXITSTATUS(status);
}

TT_TEST(attaches_from_environment)
{
    char dir[64], seg[256];
    tmp_run_dir(dir, sizeof(dir));
    int kid = run_env_child(dir);
    TT_ASSERT(kid > 0);
    seg_path_of(seg, sizeof(seg), dir, kid);
    static collected c;
    TT_EQ_INT(drain_file(seg, &c, NULL), 2);
    TT_EQ_INT(c.ev[1].samples, 7);
    rm_run_dir(dir);
}

TT_TEST(unusable_run_dir_leaves_probe_off)
{
    /* A run dir below a regular file cannot be made: the child runs on. */
    char dir[64], bad[128];
    tmp_run_dir(dir, sizeof(dir));
    snprintf(bad, sizeof(bad), "%s/file", dir);
    int fd = open(bad, O_CREAT | O_WRONLY, 0644);
    TT_ASSERT(fd >= 0);
    close(fd);
    strncat(bad, "/run", sizeof(bad) - strlen(bad) - 1);
    TT_EQ_INT(run_env_child(bad), -11);
    TT_ASSERT(probe_attach(bad) < 0);
    TT_EQ_INT(tpf_attached(), 0);
    snprintf(bad, sizeof(bad), "%s/file", dir);
    unlink(bad);
    rm_run_dir(dir);
}

/* ---- damaged files ---- */

static int write_file(const char *path, const void *p, size_t n)
{
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    if (fd < 0) return -1;
    ssize_t w = write(fd, p, n);
    close(fd);
    return w == (ssize_t)n ? 0 : -1;
}

/* Copy the header of a good segment, apply a change, and open the result. */
static int open_patched(const char *good, const char *bad, size_t off, const void *val, size_t vlen,
                        off_t size)
{
    static char hdr[SEG_HEADER_SIZE];
    int fd = open(good, O_RDONLY);
    if (fd < 0 || read(fd, hdr, sizeof(hdr)) != (ssize_t)sizeof(hdr)) return -100;
    close(fd);
    memcpy(hdr + off, val, vlen);
    if (write_file(bad, hdr, sizeof(hdr)) != 0 || truncate(bad, size) != 0) return -101;
    seg_reader *r = NULL;
    int rc = seg_reader_open(&r, bad);
    if (rc == 0) {
        long n = 0;
        seg_reader_drain(r, count_cb, &n);
        seg_reader_close(r);
    }
    return rc;
}

TT_TEST(damaged_segments_give_errors)
{
    char dir[64], seg[256], bad[256];
    tmp_run_dir(dir, sizeof(dir));
    setenv("TRAINPERF_RING_EVENTS", "1024", 1);
    TT_EQ_INT(probe_attach(dir), 0);
    tpf_mark(TPF_PHASE_DATA);
    seg_path_of(seg, sizeof(seg), dir, getpid());
    snprintf(bad, sizeof(bad), "%s/bad.tpf", dir);
    seg_reader *r = NULL;
    struct stat st;
    TT_ASSERT(stat(seg, &st) == 0);
    off_t size = st.st_size;

    TT_EQ_INT(seg_reader_open(&r, "/nonexistent/seg.tpf"), TPF_ENOENT);
    TT_EQ_INT(seg_reader_open(&r, dir), TPF_EFORMAT); /* a directory */
    TT_EQ_INT(write_file(bad, "short", 5), 0);
    TT_EQ_INT(seg_reader_open(&r, bad), TPF_EFORMAT);
    static char junk[SEG_HEADER_SIZE * 2];
    for (size_t i = 0; i < sizeof(junk); i++)
        junk[i] = (char)(i * 131 + 7);
    TT_EQ_INT(write_file(bad, junk, sizeof(junk)), 0);
    TT_EQ_INT(seg_reader_open(&r, bad), TPF_EFORMAT);

    uint32_t u32;
    uint64_t u64;
    u32 = 99;
    TT_EQ_INT(open_patched(seg, bad, offsetof(seg_header, layout_version), &u32, 4, size),
              TPF_EVERSION);
    u32 = SEG_STATE_INIT;
    TT_EQ_INT(open_patched(seg, bad, offsetof(seg_header, state), &u32, 4, size), TPF_ESTATE);
    u32 = 3000; /* not a power of two */
    TT_EQ_INT(open_patched(seg, bad, offsetof(seg_header, ring_events), &u32, 4, size),
              TPF_EFORMAT);
    u32 = 1u << 30;
    TT_EQ_INT(open_patched(seg, bad, offsetof(seg_header, ring_events), &u32, 4, size),
              TPF_EFORMAT);
    u32 = 100000;
    TT_EQ_INT(open_patched(seg, bad, offsetof(seg_header, max_rings), &u32, 4, size), TPF_EFORMAT);
    u64 = UINT64_MAX - 4095;
    TT_EQ_INT(open_patched(seg, bad, offsetof(seg_header, rings_off), &u64, 8, size), TPF_EFORMAT);
    u32 = 7;
    TT_EQ_INT(open_patched(seg, bad, offsetof(seg_header, clock_kind), &u32, 4, size), TPF_EFORMAT);
    struct {
        uint32_t kind, pad;
        double npt;
    } clk = {SEG_CLOCK_TSC, 0, 0.0 / 0.0};
    TT_EQ_INT(open_patched(seg, bad, offsetof(seg_header, clock_kind), &clk, sizeof(clk), size),
              TPF_EFORMAT);
    clk.npt = 0.4;
    TT_EQ_INT(open_patched(seg, bad, offsetof(seg_header, clock_kind), &clk, sizeof(clk), size), 0);
    /* Truncated into the name table. */
    TT_EQ_INT(open_patched(seg, bad, 0, SEG_MAGIC, 8,
                           (off_t)offsetof(seg_header, magic) + SEG_HEADER_SIZE + 100),
              TPF_EFORMAT);
    /* Truncated before ring 0 that rings_used says exists: opens (names are
     * there) but the ring is never touched, and the drain reports damage. */
    {
        int bfd = open(seg, O_RDONLY);
        static char whole[SEG_HEADER_SIZE];
        TT_ASSERT(read(bfd, whole, sizeof(whole)) == (ssize_t)sizeof(whole));
        close(bfd);
        const seg_header *gh = (const seg_header *)whole;
        TT_EQ_INT(gh->rings_used, 1);
        TT_EQ_INT(write_file(bad, whole, sizeof(whole)), 0);
        TT_ASSERT(truncate(bad, (off_t)gh->rings_off) == 0);
        TT_EQ_INT(seg_reader_open(&r, bad), 0);
        long got = 0;
        TT_EQ_INT(seg_reader_drain(r, count_cb, &got), TPF_EFORMAT);
        TT_EQ_INT(got, 0);
        TT_EQ_INT(seg_reader_dropped(r), 0);
        seg_reader_close(r);
    }

    /* Damage inside a valid segment: impossible head, bad record kind,
     * a name slot with an absurd length. The reader reports, no crash. */
    int fd = open(seg, O_RDWR);
    void *base = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    TT_ASSERT(base != MAP_FAILED);
    seg_header *h = base;
    seg_ring_hdr *ring = seg_ring_at(base, h, 0);
    TT_EQ_INT(seg_reader_open(&r, seg), 0);
    atomic_store(&ring->head, atomic_load(&ring->tail) + 5000000);
    long n = 0;
    TT_EQ_INT(seg_reader_drain(r, count_cb, &n), TPF_EFORMAT);
    TT_EQ_INT(n, 0);
    uint64_t t = atomic_load(&ring->tail);
    seg_ring_recs(ring)[t & (h->ring_events - 1)].kind = 77;
    atomic_store(&ring->head, t + 1);
    TT_EQ_INT(seg_reader_drain(r, count_cb, &n), TPF_EFORMAT);
    TT_EQ_INT(n, 0);
    seg_name_slot *slots = (seg_name_slot *)((char *)base + h->names_off);
    tpf_name nm = tpf_name_register("to-be-damaged");
    atomic_store(&slots[nm].len, 100000);
    TT_ASSERT(seg_reader_name(r, nm) == NULL);
    atomic_store(&slots[nm].len, 2); /* shorter than the bytes: embedded NUL check */
    slots[nm].s[0] = 0;
    TT_ASSERT(seg_reader_name(r, nm) == NULL);
    /* More rings claimed than the file holds: those are never touched. */
    atomic_store(&h->rings_used, 1000000);
    TT_EQ_INT(seg_reader_drain(r, count_cb, &n), TPF_EFORMAT);
    TT_EQ_INT(n, 0);
    atomic_store(&h->rings_used, 1);
    seg_reader_close(r);
    munmap(base, (size_t)size);
    probe_detach();
    unlink(bad);
    rm_run_dir(dir);
}

/* Random damage to the header and the first ring of a real segment: the
 * reader either refuses the file or reads it without crashing. */
TT_TEST(fuzzed_segments_never_crash_the_reader)
{
    char dir[64], seg[256], bad[256];
    tmp_run_dir(dir, sizeof(dir));
    setenv("TRAINPERF_RING_EVENTS", "1024", 1);
    TT_EQ_INT(probe_attach(dir), 0);
    tpf_name nm = tpf_name_register("fuzz");
    for (int i = 0; i < 100; i++)
        tpf_counter(nm, i);
    seg_path_of(seg, sizeof(seg), dir, getpid());
    snprintf(bad, sizeof(bad), "%s/fuzz.tpf", dir);
    struct stat st;
    TT_ASSERT(stat(seg, &st) == 0);
    int fd = open(seg, O_RDONLY);
    const char *good = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    TT_ASSERT(good != MAP_FAILED);
    const seg_header *gh = (const seg_header *)good;
    size_t ring0 = (size_t)gh->rings_off;
    static char img[SEG_HEADER_SIZE], names[SEG_PAGE], rh[256];
    uint64_t s = 42;
    int opened = 0, refused = 0;
    for (int it = 0; it < 1500; it++) {
        memcpy(img, good, sizeof(img));
        memcpy(names, good + SEG_HEADER_SIZE, sizeof(names));
        memcpy(rh, good + ring0, sizeof(rh));
        int flips = 1 + (int)(s % 4);
        for (int f = 0; f < flips; f++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            uint64_t x = s >> 24;
            /* Mostly the fields that matter: header start, names, ring 0. */
            switch (x % 3) {
            case 0: img[(x >> 2) % 256] = (char)(x >> 12); break;
            case 1: names[(x >> 2) % sizeof(names)] = (char)(x >> 16); break;
            default: rh[(x >> 2) % sizeof(rh)] = (char)(x >> 16); break;
            }
        }
        /* Rewritten in place (size kept): truncating each time makes ext4
         * flush on close, which is slow. */
        int wfd = open(bad, O_CREAT | O_RDWR, 0644);
        TT_ASSERT(wfd >= 0);
        TT_ASSERT(pwrite(wfd, img, sizeof(img), 0) == (ssize_t)sizeof(img));
        TT_ASSERT(pwrite(wfd, names, sizeof(names), SEG_HEADER_SIZE) == (ssize_t)sizeof(names));
        TT_ASSERT(pwrite(wfd, rh, sizeof(rh), (off_t)ring0) == (ssize_t)sizeof(rh));
        if (it == 0) TT_ASSERT(ftruncate(wfd, st.st_size) == 0);
        close(wfd);
        seg_reader *r;
        if (seg_reader_open(&r, bad) != 0) {
            refused++;
            continue;
        }
        opened++;
        long n = 0;
        for (int d = 0; d < 2; d++)
            seg_reader_drain(r, count_cb, &n);
        for (uint32_t id = 0; id < 40; id++) {
            const char *str = seg_reader_name(r, id);
            if (str) TT_ASSERT(strlen(str) < SEG_NAME_MAX);
        }
        (void)seg_reader_dropped(r);
        seg_reader_close(r);
    }
    TT_ASSERT(opened > 0 && refused > 0); /* both paths were exercised */
    munmap((void *)good, (size_t)st.st_size);
    unlink(bad);
    probe_detach();
    rm_run_dir(dir);
}

/* ---- clock ---- */

static void check_clock_against_mono(const char *mode)
{
    char dir[64], seg[256];
    tmp_run_dir(dir, sizeof(dir));
    setenv("TRAINPERF_CLOCK", mode, 1);
    TT_EQ_INT(probe_attach(dir), 0);
    seg_path_of(seg, sizeof(seg), dir, getpid());
    seg_reader *r;
    TT_EQ_INT(seg_reader_open(&r, seg), 0);
    /* Later events too, after the reader refines the rate. */
    for (int round = 0; round < 3; round++) {
        uint64_t before = clk_mono_ns();
        tpf_mark(TPF_PHASE_EVAL);
        uint64_t after = clk_mono_ns();
        static collected c;
        c.n = 0;
        TT_EQ_INT(seg_reader_drain(r, collect_cb, &c), 1);
        /* Well under a millisecond: allow 20 us around the bracket. */
        TT_ASSERT(c.ev[0].ts_ns + 20000 >= before);
        TT_ASSERT(c.ev[0].ts_ns <= after + 20000);
        struct timespec ts = {0, 60 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    seg_reader_close(r);
    probe_detach();
    rm_run_dir(dir);
}

TT_TEST(clock_mono_matches_clock_gettime)
{
    check_clock_against_mono("mono");
}

TT_TEST(clock_tsc_matches_clock_gettime)
{
    if (!clk_tsc_invariant()) {
        printf("skip: no invariant TSC here\n");
        return;
    }
    check_clock_against_mono("tsc");
    TT_EQ_INT(clk_setup()->kind, SEG_CLOCK_TSC);
}

/* --dump SEG: drain a segment once and print what it held, one key=value
 * per line (tests/test_probe.py reads this). */
typedef struct dump_state {
    long kinds[SEG_EV_MARK + 1];
    long per_name_push[SEG_MAX_NAMES];
    long depth, min_depth, bad_order;
    uint64_t last_ts;
    double last_counter;
    /* Range time per name, assuming one emitting thread (the trainer). */
    uint64_t range_ns[SEG_MAX_NAMES];
    struct {
        tpf_name name;
        uint64_t ts;
    } stack[32];
    int sp;
} dump_state;

static void dump_cb(void *ctx, const seg_event *ev)
{
    dump_state *d = ctx;
    d->kinds[ev->kind]++;
    if (ev->kind == SEG_EV_PUSH && ev->name < SEG_MAX_NAMES) d->per_name_push[ev->name]++;
    if (ev->kind == SEG_EV_PUSH) {
        d->depth++;
        if (d->sp < 32) {
            d->stack[d->sp].name = ev->name;
            d->stack[d->sp].ts = ev->ts_ns;
        }
        d->sp++;
    }
    if (ev->kind == SEG_EV_POP) {
        if (--d->depth < d->min_depth) d->min_depth = d->depth;
        if (d->sp > 0 && --d->sp < 32 && d->stack[d->sp].name < SEG_MAX_NAMES)
            d->range_ns[d->stack[d->sp].name] += ev->ts_ns - d->stack[d->sp].ts;
    }
    if (ev->kind == SEG_EV_COUNTER) d->last_counter = ev->value;
    if (ev->ts_ns < d->last_ts) d->bad_order++;
    d->last_ts = ev->ts_ns;
}

static int dump(const char *path)
{
    seg_reader *r;
    int rc = seg_reader_open(&r, path);
    if (rc) {
        printf("error=%s\n", tpf_errname(rc));
        return 1;
    }
    static dump_state d;
    long n = seg_reader_drain(r, dump_cb, &d);
    const seg_proc_info *pi = seg_reader_info(r);
    printf("events=%ld\ndropped=%llu\npid=%d\nppid=%d\nrank=%d\nlocal_rank=%d\n"
           "world_size=%d\n",
           n, (unsigned long long)seg_reader_dropped(r), (int)pi->pid, (int)pi->ppid, pi->rank,
           pi->local_rank, pi->world_size);
    static const char *const kn[] = {"",    "step_begin", "step_end", "push",
                                     "pop", "counter",    "mark"};
    for (int k = 1; k <= SEG_EV_MARK; k++)
        printf("%s=%ld\n", kn[k], d.kinds[k]);
    for (uint32_t id = 1; id < SEG_MAX_NAMES; id++) {
        const char *s = seg_reader_name(r, id);
        if (s)
            printf("name.%s=%u\npushes.%s=%ld\nrange_ns.%s=%llu\n", s, id, s, d.per_name_push[id],
                   s, (unsigned long long)d.range_ns[id]);
    }
    printf("final_depth=%ld\nmin_depth=%ld\nbad_order=%ld\nlast_counter=%.9g\n", d.depth,
           d.min_depth, d.bad_order, d.last_counter);
    seg_reader_close(r);
    return 0;
}

int main(int argc, char **argv)
{
    ssize_t n = readlink("/proc/self/exe", g_self, sizeof(g_self) - 1);
    g_self[n > 0 ? n : 0] = 0;
    if (argc > 1 && strcmp(argv[1], "--env-child") == 0) return env_child();
    if (argc > 2 && strcmp(argv[1], "--dump") == 0) return dump(argv[2]);
    return tt_main(argc, argv);
}
