/* Stacks of every process of a tree (see hangdump.h). */
#include "watch/hangdump.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "trainperf.h"
#include "util/err.h"
#include "util/jsonr.h"
#include "util/pstat.h"

#define HD_SCAN_MAX 65536       /* /proc entries looked at */
#define HD_FILE_MAX (4u << 20)  /* bytes of one process's stacks kept */
#define HD_OUT_MAX (64u << 20)  /* the whole stacks file */
#define HD_PYSPY_MAX 8          /* processes given to py-spy (fast: it only reads memory) */
#define HD_GDB_MAX 4            /* processes given to gdb (seconds each: it loads symbols) */
#define HD_HELPER_TIMEOUT_S 10.0

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Read at most max bytes of path into a NUL-terminated malloc'd string
 * (caller frees); NULL when unreadable. *len gets the length. */
static char *slurp(const char *path, size_t max, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    size_t cap = 4096, n = 0;
    char *b = malloc(cap + 1);
    while (b) {
        if (n == cap) {
            if (cap >= max) break;
            size_t nc = cap * 2 > max ? max : cap * 2;
            char *nb = realloc(b, nc + 1);
            if (!nb) {
                free(b);
                b = NULL;
                break;
            }
            b = nb;
            cap = nc;
        }
        ssize_t r = read(fd, b + n, cap - n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        n += (size_t)r;
    }
    close(fd);
    if (!b) return NULL;
    b[n] = 0;
    if (len) *len = n;
    return b;
}

static pid_t stat_ppid(pid_t pid)
{
    char line[512];
    const char *p = pstat_fields(pid, line, sizeof(line));
    char st;
    long pp;
    if (!p || sscanf(p, " %c %ld", &st, &pp) != 2) return -1;
    return (pid_t)pp;
}

int hd_tree(pid_t root, pid_t *out, pid_t *ppid_out, int max)
{
    if (max <= 0) return 0;
    pid_t *pids = malloc(sizeof(pid_t) * HD_SCAN_MAX), *pp = malloc(sizeof(pid_t) * HD_SCAN_MAX);
    int n = 0;
    if (pids && pp) {
        DIR *d = opendir("/proc");
        struct dirent *de;
        while (d && n < HD_SCAN_MAX && (de = readdir(d)) != NULL) {
            char *end;
            long v = strtol(de->d_name, &end, 10);
            if (*end || v <= 0) continue;
            pids[n] = (pid_t)v;
            pp[n] = stat_ppid((pid_t)v);
            n++;
        }
        if (d) closedir(d);
    }
    int k = 0;
    out[k] = root;
    if (ppid_out) ppid_out[k] = pids && pp ? stat_ppid(root) : -1;
    k++;
    /* breadth first: out[] is the queue */
    for (int q = 0; q < k && k < max; q++)
        for (int i = 0; i < n && k < max; i++)
            if (pp[i] == out[q] && pids[i] != root) {
                out[k] = pids[i];
                if (ppid_out) ppid_out[k] = pp[i];
                k++;
            }
    free(pids);
    free(pp);
    return k;
}

static int env_rank(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%ld/environ", (long)pid);
    size_t len = 0;
    char *env = slurp(path, 1u << 20, &len);
    if (!env) return -1;
    int rank = -1;
    for (size_t i = 0; i < len;) {
        const char *e = env + i;
        size_t l = strnlen(e, len - i);
        if (strncmp(e, "RANK=", 5) == 0 || (rank < 0 && strncmp(e, "SLURM_PROCID=", 13) == 0)) {
            const char *v = strchr(e, '=') + 1;
            char *end;
            long r = strtol(v, &end, 10);
            if (end != v && *end == 0 && r >= 0 && r < 1000000) rank = (int)r;
            if (e[0] == 'R') break;
        }
        i += l + 1;
    }
    free(env);
    return rank;
}

static void read_comm(pid_t pid, char *out, size_t n)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%ld/comm", (long)pid);
    char *c = slurp(path, 64, NULL);
    snprintf(out, n, "%s", c ? c : "?");
    free(c);
    char *nl = strchr(out, '\n');
    if (nl) *nl = 0;
}

static int is_lib_path(const char *p)
{
    return strstr(p, "/site-packages/") || strstr(p, "/dist-packages/") || strstr(p, "/lib/python") ||
           strstr(p, "/trainperf/") || strncmp(p, "<frozen", 7) == 0;
}

static int is_collective(const char *fn)
{
    static const char *const ops[] = {"all_reduce", "all_gather", "all_gather_into_tensor",
                                      "all_gather_object", "reduce_scatter",
                                      "reduce_scatter_tensor", "all_to_all", "all_to_all_single",
                                      "broadcast", "broadcast_object_list", "reduce", "gather",
                                      "scatter", "barrier", "monitored_barrier", "send", "recv",
                                      "isend", "irecv", "batch_isend_irecv", "wait",
                                      /* set-up waits for every rank (rendezvous) */
                                      "init_process_group", "new_group", NULL};
    for (int i = 0; ops[i]; i++)
        if (strcmp(fn, ops[i]) == 0) return 1;
    return 0;
}

/* One Python frame of a stack, innermost first: notes the torch.distributed
 * collective it is in and the first frame (into first, cap bytes), and sets
 * p->where at the first frame outside the libraries, or (workers: 1) at a
 * DataLoader worker's own loop, not the parent's stack it forked with.
 * 1 when p->where is set. */
static int py_frame(hd_proc *p, char *first, size_t cap, const char *fn, const char *file,
                    int line, int workers)
{
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    if (!p->coll[0] && strstr(file, "torch/distributed/") && is_collective(fn) &&
        strcmp(fn, "wait") != 0)
        snprintf(p->coll, sizeof(p->coll), "%.40s", fn);
    if (!first[0]) snprintf(first, cap, "%.90s (%.120s:%d)", fn, base, line);
    if (workers && strcmp(fn, "_worker_loop") == 0 && strstr(file, "torch/utils/data/")) {
        snprintf(p->where, sizeof(p->where), "DataLoader worker loop, %.200s", first);
        return 1;
    }
    if (is_lib_path(file)) return 0;
    snprintf(p->where, sizeof(p->where), "%.90s (%.120s:%d)", fn, base, line);
    return 1;
}

/* From faulthandler's text ("File \"x.py\", line 12 in fn" lines, most recent
 * first, one block per thread): the main thread's innermost user frame and a
 * torch.distributed collective it is in. The main thread is the block whose
 * outermost frame is <module>, else the first. */
static void parse_faulthandler(const char *t, hd_proc *p)
{
    const char *best = NULL, *blk = t;
    while (blk && *blk) {
        const char *next = strstr(blk + 1, "\nThread 0x");
        const char *next2 = strstr(blk + 1, "\nCurrent thread 0x");
        if (next2 && (!next || next2 < next)) next = next2;
        const char *end = next ? next : blk + strlen(blk);
        if (!best) best = blk;
        /* the block's last frame line */
        const char *last = NULL;
        for (const char *q = strstr(blk, "File \""); q && q < end; q = strstr(q + 1, "File \""))
            last = q;
        if (last) {
            const char *le = strchr(last, '\n');
            if (!le || le > end) le = end;
            const char *m = strstr(last, " in <module>");
            if (m && m < le) {
                best = blk;
                break;
            }
        }
        blk = next ? next + 1 : NULL;
    }
    if (!best) return;
    const char *end = strstr(best + 1, "\nThread 0x");
    const char *e2 = strstr(best + 1, "\nCurrent thread 0x");
    if (e2 && (!end || e2 < end)) end = e2;
    if (!end) end = best + strlen(best);
    char first[256] = "";
    for (const char *q = strstr(best, "File \""); q && q < end; q = strstr(q + 1, "File \"")) {
        char file[200], fn[96];
        int line = 0;
        if (sscanf(q, "File \"%199[^\"]\", line %d in %95s", file, &line, fn) != 3) continue;
        if (py_frame(p, first, sizeof(first), fn, file, line, 1)) return;
    }
    if (first[0]) {
        snprintf(p->where, sizeof(p->where), "%s", first);
        return;
    }
    /* no frame: faulthandler says what the thread does ("Garbage-collecting") */
    const char *l = strchr(best, '\n');
    while (l && l < end) {
        l++;
        size_t n = strcspn(l, "\n");
        while (n && (*l == ' ')) {
            l++;
            n--;
        }
        if (n && *l != '<') {
            snprintf(p->where, sizeof(p->where), "%.*s", (int)(n > 100 ? 100 : n), l);
            return;
        }
        l = strchr(l, '\n');
    }
}

/* py-spy dump: per thread a line `Thread N (state): "name"`, then frames
 * `    fn (path/file.py:12)`, innermost first. The MainThread's innermost
 * user frame, and the torch.distributed call it is in. */
static void parse_pyspy(const char *t, hd_proc *p)
{
    const char *m = strstr(t, "\"MainThread\"");
    const char *q = m ? strchr(m, '\n') : NULL;
    char first[256] = "";
    while (q && q[1] == ' ') {
        char fn[96], file[200];
        int line = 0;
        if (sscanf(q + 1, " %95s (%199[^:]:%d)", fn, file, &line) == 3 &&
            py_frame(p, first, sizeof(first), fn, file, line, 0))
            return;
        q = strchr(q + 1, '\n');
    }
    if (first[0]) snprintf(p->where, sizeof(p->where), "%s", first);
}

/* gdb's first frame line: "#0  0x00007f... in nanosleep () from /lib/..." */
static void parse_gdb(const char *t, hd_proc *p)
{
    const char *f = strstr(t, "\n#0 ");
    if (!f) return;
    const char *in = strstr(f, " in ");
    const char *nl = strchr(f + 1, '\n');
    const char *name = in && (!nl || in < nl) ? in + 4 : f + 4;
    while (*name == ' ') name++;
    size_t n = strcspn(name, " (\n");
    if (n) snprintf(p->where, sizeof(p->where), "%.*s (native)", (int)(n > 120 ? 120 : n), name);
}

/* Run argv with stdout+stderr into out (capped), at most timeout_s; SIGTERM
 * then SIGKILL past it (a debugger killed hard could leave its target
 * stopped: SIGCONT it afterwards). */
static void run_helper(char *const argv[], buf *out, pid_t target)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return;
    pid_t h = fork();
    if (h < 0) {
        close(fds[0]);
        close(fds[1]);
        return;
    }
    if (h == 0) {
        setpgid(0, 0);
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0) dup2(devnull, 0);
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(fds[1]);
    double t0 = now_s();
    int term = 0;
    char tmp[8192];
    for (;;) {
        double left = HD_HELPER_TIMEOUT_S - (now_s() - t0);
        if (left <= 0 && !term) {
            kill(-h, SIGTERM);
            term = 1;
            t0 = now_s() - HD_HELPER_TIMEOUT_S + 2; /* two more seconds */
            buf_puts(out, "[trainperf: helper timed out]\n");
            continue;
        }
        if (left <= 0 && term) {
            kill(-h, SIGKILL);
            break;
        }
        struct pollfd pf = {fds[0], POLLIN, 0};
        int r = poll(&pf, 1, (int)(left * 1000) + 1);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) continue;
        ssize_t n = read(fds[0], tmp, sizeof(tmp));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        if (out->len + (size_t)n < HD_FILE_MAX) buf_append(out, tmp, (size_t)n);
    }
    close(fds[0]);
    int st;
    while (waitpid(h, &st, 0) < 0 && errno == EINTR) {
    }
    if (term) kill(target, SIGCONT);
}

int hd_in_path(const char *name)
{
    const char *path = getenv("PATH");
    if (!path) return 0;
    char full[PATH_MAX];
    while (*path) {
        const char *e = strchr(path, ':');
        size_t len = e ? (size_t)(e - path) : strlen(path);
        int w = snprintf(full, sizeof(full), "%.*s/%s", (int)len, path, name);
        if (len && w > 0 && (size_t)w < sizeof(full) && access(full, X_OK) == 0) return 1;
        if (!e) break;
        path = e + 1;
    }
    return 0;
}

/* Thread states and kernel wait channels: always readable for our own tree. */
static void proc_threads(pid_t pid, buf *b)
{
    char dir[64];
    snprintf(dir, sizeof(dir), "/proc/%ld/task", (long)pid);
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    int n = 0;
    while ((de = readdir(d)) != NULL && n < 512) {
        if (de->d_name[0] == '.') continue;
        char path[384], name[64] = "?", state = '?';
        snprintf(path, sizeof(path), "%s/%s/stat", dir, de->d_name);
        char *st = slurp(path, 4096, NULL);
        if (st) {
            char *o = strchr(st, '('), *c = strrchr(st, ')');
            if (o && c && c > o) {
                snprintf(name, sizeof(name), "%.*s", (int)(c - o - 1), o + 1);
                state = c[2];
            }
            free(st);
        }
        snprintf(path, sizeof(path), "%s/%s/wchan", dir, de->d_name);
        char *wc = slurp(path, 256, NULL);
        buf_printf(b, "  tid %-8s %c %-16s wchan %s\n", de->d_name, state, name,
                   wc && *wc && strcmp(wc, "0") != 0 ? wc : "-");
        free(wc);
        n++;
    }
    closedir(d);
}

/* 1 when pid has a handler for sig (SigCgt of /proc/PID/status): a process
 * that exec'd another program since it registered has none, and the signal's
 * default action would end it. */
static int catches(pid_t pid, int sig)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%ld/status", (long)pid);
    char *st = slurp(path, 16384, NULL);
    if (!st) return 0;
    const char *c = strstr(st, "\nSigCgt:");
    unsigned long long mask = 0;
    int ok = c && sscanf(c + 8, " %llx", &mask) == 1;
    free(st);
    return ok && sig >= 1 && sig <= 64 && (mask >> (sig - 1) & 1ull);
}

static void live_path(char *out, size_t n, const char *run_dir, const char *kind, pid_t pid,
                      const char *ext)
{
    snprintf(out, n, "%s/live/%s-%ld%s", run_dir, kind, (long)pid, ext);
}

static off_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? st.st_size : -1;
}

/* Per process while dumping. */
typedef struct hd_work {
    int sig;           /* faulthandler's signal; 0: none registered */
    off_t fh_before;   /* pystack file size before the request */
    off_t fh_last;
    int fh_done, fh_sent;
    int asked;         /* FIFO request written */
    char *state;       /* state text (from the JSON's "text") */
} hd_work;

static int read_state(const char *path, int req, hd_proc *p, hd_work *w)
{
    jr_doc d;
    char err[128];
    if (jr_load_file(&d, path, 8u << 20, err, sizeof(err)) != 0) return 0;
    int ok = 0;
    if (d.root && jr_pnum(d.root, "req") == (double)req) {
        ok = 1;
        const char *where = jr_pstr(d.root, "where");
        const char *coll = jr_pstr(d.root, "collective");
        double seq = jr_pnum(d.root, "seq");
        const char *text = jr_pstr(d.root, "text");
        if (where) snprintf(p->where, sizeof(p->where), "%s", where);
        if (coll) snprintf(p->coll, sizeof(p->coll), "%s", coll);
        p->seq = isfinite(seq) && seq >= 0 && seq < 1e18 ? (long long)seq : -1;
        if (text) w->state = strdup(text);
    }
    jr_free(&d);
    return ok;
}

static const char *who(const hd_proc *p, char *o, size_t n)
{
    if (p->rank >= 0)
        snprintf(o, n, "rank %d", p->rank);
    else
        snprintf(o, n, "pid %ld (%s)", (long)p->pid, p->comm);
    return o;
}

/* One clause per rank (or, when there are no ranks, per process that
 * recorded steps, else per announced process): those not in a collective
 * first (the likely culprits: the others wait for them), then those in one,
 * lowest sequence number first. */
static void build_verdict(hd_result *r)
{
    int idx[HD_MAX_PROCS], k = 0, have_ranks = 0, have_stepped = 0;
    for (int i = 0; i < r->nprocs; i++) {
        if (r->procs[i].rank >= 0 && r->procs[i].rank_root) have_ranks = 1;
        if (r->procs[i].stepped) have_stepped = 1;
    }
    for (int i = 0; i < r->nprocs; i++) {
        const hd_proc *p = &r->procs[i];
        int pick = have_ranks     ? (p->rank >= 0 && p->rank_root)
                   : have_stepped ? p->stepped
                                  : (p->python && p->answered);
        if (pick) idx[k++] = i;
    }
    if (!k) {
        /* nothing announced itself: the deepest process with a known place, else the root */
        for (int i = r->nprocs - 1; i >= 0; i--)
            if (r->procs[i].where[0]) {
                idx[k++] = i;
                break;
            }
        if (!k && r->nprocs) idx[k++] = 0;
    }
    /* insertion sort: culprits (no collective) first, then by seq, then rank */
    for (int i = 1; i < k; i++) {
        int v = idx[i], j = i;
        while (j > 0) {
            const hd_proc *a = &r->procs[idx[j - 1]], *b = &r->procs[v];
            int ka = a->coll[0] != 0, kb = b->coll[0] != 0;
            long long sa = a->seq < 0 ? (1ll << 62) : a->seq, sb = b->seq < 0 ? (1ll << 62) : b->seq;
            int after = ka > kb || (ka == kb && (sa > sb || (sa == sb && a->rank > b->rank)));
            if (!after) break;
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = v;
    }
    size_t off = 0;
    r->verdict[0] = 0;
    for (int i = 0; i < k && off + 8 < sizeof(r->verdict); i++) {
        const hd_proc *p = &r->procs[idx[i]];
        char w[64], what[320];
        if (p->coll[0] && p->seq >= 0)
            snprintf(what, sizeof(what), "%s #%lld", p->coll, p->seq);
        else if (p->coll[0])
            snprintf(what, sizeof(what), "%s%s%s%s", p->coll, p->where[0] ? " (" : "",
                     p->where[0] ? p->where : "", p->where[0] ? ")" : "");
        else
            snprintf(what, sizeof(what), "%s", p->where[0] ? p->where : "an unknown place");
        /* "all_reduce (train.py:20)" wants only the file:line of where */
        if (p->coll[0] && p->seq < 0 && p->where[0]) {
            const char *paren = strchr(p->where, '(');
            if (paren) snprintf(what, sizeof(what), "%s %s", p->coll, paren);
        }
        int wr = snprintf(r->verdict + off, sizeof(r->verdict) - off, "%s%s in %s", i ? "; " : "",
                          who(p, w, sizeof(w)), what);
        if (wr < 0) break;
        off += (size_t)wr;
        if (off >= sizeof(r->verdict)) {
            off = sizeof(r->verdict) - 1;
            break;
        }
    }
}

/* A CPython interpreter: its executable is python* or it maps libpython
 * (an embedding program). */
int hd_is_python(pid_t pid)
{
    char path[64], exe[PATH_MAX];
    snprintf(path, sizeof(path), "/proc/%ld/exe", (long)pid);
    ssize_t n = readlink(path, exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = 0;
        const char *base = strrchr(exe, '/');
        if (strncmp(base ? base + 1 : exe, "python", 6) == 0) return 1;
    }
    snprintf(path, sizeof(path), "/proc/%ld/maps", (long)pid);
    char *maps = slurp(path, 16u << 20, NULL);
    int py = maps && strstr(maps, "/libpython") != NULL;
    free(maps);
    return py;
}

/* A process that did not announce itself (no auto hook, or not Python):
 * read from outside with ptrace. Python stacks from py-spy for a Python
 * process, native stacks from gdb for every process, each when installed
 * (and within its count); the dump says which tool gave what. */
static void from_outside(hd_proc *p, buf *b, int have_pyspy, int have_gdb, int *npyspy, int *ngdb,
                         int python_too)
{
    char pidtxt[24];
    snprintf(pidtxt, sizeof(pidtxt), "%ld", (long)p->pid);
    int python = python_too && hd_is_python(p->pid);
    if (python_too) p->how[0] = 0;
    if (python && have_pyspy && *npyspy < HD_PYSPY_MAX) {
        /* full paths: the library's frames are told from the user's by them */
        char *argv[] = {"py-spy", "dump", "--full-filenames", "--pid", pidtxt, NULL};
        buf_puts(b, "Python stacks (py-spy dump):\n");
        size_t before = b->len;
        run_helper(argv, b, p->pid);
        (*npyspy)++;
        snprintf(p->how, sizeof(p->how), "py-spy");
        if (b->len > before) {
            char *t = strndup(b->data + before, b->len - before);
            if (t) parse_pyspy(t, p);
            free(t);
        }
        if (b->len && b->data[b->len - 1] != '\n') buf_putc(b, '\n');
    } else if (python) {
        if (have_pyspy)
            buf_printf(b, "(Python stacks: py-spy skipped, already run on %d processes)\n",
                       HD_PYSPY_MAX);
        else
            buf_puts(b, "(Python stacks: py-spy is not installed; pip install py-spy)\n");
    }
    if (have_gdb && *ngdb < HD_GDB_MAX) {
        /* no auto-loaded python-gdb.py: its warning is noise, its loading slow */
        char *argv[] = {"gdb", "-nx", "-batch", "-iex", "set auto-load python-scripts off", "-p",
                        pidtxt, "-ex", "thread apply all bt 64", NULL};
        buf_puts(b, "Native stacks (gdb):\n");
        size_t before = b->len;
        run_helper(argv, b, p->pid);
        (*ngdb)++;
        size_t hl = strlen(p->how);
        snprintf(p->how + hl, sizeof(p->how) - hl, "%sgdb", hl ? "+" : "");
        if (!p->where[0] && b->len > before) {
            char *t = strndup(b->data + before, b->len - before);
            if (t) parse_gdb(t, p);
            free(t);
        }
        if (b->len && b->data[b->len - 1] != '\n') buf_putc(b, '\n');
    } else {
        if (have_gdb)
            buf_printf(b, "(native stacks: gdb skipped, already run on %d processes)\n", HD_GDB_MAX);
        else
            buf_puts(b, "(native stacks: gdb is not installed)\n");
    }
    if (!p->how[0]) snprintf(p->how, sizeof(p->how), "proc");
}

/* RUN/hangs/<n>.txt: the headline, the verdict, then b. */
static int write_stacks(const char *run_dir, int n, const char *headline, hd_result *res,
                        const buf *b)
{
    char path[PATH_MAX];
    int rc = 0;
    snprintf(path, sizeof(path), "%s/hangs", run_dir);
    if (mkdir(path, 0755) != 0 && errno != EEXIST) rc = err_from_errno(errno);
    snprintf(res->stacks, sizeof(res->stacks), "hangs/%d.txt", n);
    snprintf(path, sizeof(path), "%s/%s", run_dir, res->stacks);
    if (!rc && !b->err) {
        FILE *f = fopen(path, "we");
        if (f) fprintf(f, "%s\nverdict: %s\n\n", headline, res->verdict);
        if (!f || fwrite(b->data, 1, b->len, f) != b->len) rc = err_from_errno(errno ? errno : EIO);
        if (f && fclose(f) != 0 && !rc) rc = err_from_errno(errno);
    } else if (!rc) {
        rc = b->err;
    }
    return rc;
}

/* The process's threads from /proc into b; then, where no stack said where
 * it is (wchan: 1 to look), its main thread's kernel wait channel as a last
 * resort. */
static void threads_and_wchan(hd_proc *p, buf *b, int wchan)
{
    buf_puts(b, "Threads (/proc: state, kernel wait channel):\n");
    proc_threads(p->pid, b);
    buf_putc(b, '\n');
    if (!wchan || p->where[0]) return;
    char wp[64];
    snprintf(wp, sizeof(wp), "/proc/%ld/wchan", (long)p->pid);
    char *wc = slurp(wp, 128, NULL);
    if (wc && *wc && strcmp(wc, "0") != 0)
        snprintf(p->where, sizeof(p->where), "kernel wait %s", wc);
    free(wc);
}

/* The stacks faulthandler appended to path beyond its first `before` bytes
 * (-1: its size was unknown), into b and p (how, where); 0 and a note in b
 * when it wrote none. */
static int fh_answer(const char *path, off_t before, hd_proc *p, buf *b)
{
    size_t len = 0;
    char *all = before >= 0 ? slurp(path, HD_FILE_MAX + (size_t)before, &len) : NULL;
    int ok = all && (off_t)len > before;
    if (ok) {
        const char *chunk = all + before;
        snprintf(p->how, sizeof(p->how), "faulthandler");
        buf_puts(b, "Python stacks (faulthandler):\n");
        buf_puts(b, chunk);
        parse_faulthandler(chunk, p);
    } else {
        buf_puts(b, "(no answer to faulthandler's signal)\n");
    }
    free(all);
    return ok;
}

int hd_collect(const char *run_dir, pid_t root, int req, unsigned flags, const pid_t *stepped,
               int nstepped, hd_result *res, buf *b)
{
    memset(res, 0, sizeof(*res));
    pid_t pids[HD_MAX_PROCS], ppids[HD_MAX_PROCS];
    int np = hd_tree(root, pids, ppids, HD_MAX_PROCS);
    /* a dumper inside the tree it dumps (`trainperf dump $$`) leaves itself out */
    for (int i = 1; i < np; i++)
        if (pids[i] == getpid()) {
            memmove(pids + i, pids + i + 1, sizeof(pid_t) * (size_t)(np - i - 1));
            memmove(ppids + i, ppids + i + 1, sizeof(pid_t) * (size_t)(np - i - 1));
            np--;
            break;
        }
    hd_work *w = calloc((size_t)np, sizeof(hd_work));
    if (!w) return TPF_ENOMEM;
    res->nprocs = np;
    char path[PATH_MAX];
    for (int i = 0; i < np; i++) {
        hd_proc *p = &res->procs[i];
        p->pid = pids[i];
        p->ppid = ppids[i];
        p->seq = -1;
        p->rank = env_rank(p->pid);
        for (int j = 0; j < nstepped && !p->stepped; j++)
            p->stepped = stepped[j] == p->pid;
        read_comm(p->pid, p->comm, sizeof(p->comm));
        if (!run_dir) continue; /* no hook to ask: everything from outside */
        live_path(path, sizeof(path), run_dir, "pystack", p->pid, ".txt");
        char *head = slurp(path, 256, NULL);
        if (head) {
            const char *s = strstr(head, "signal=");
            long sig = s ? strtol(s + 7, NULL, 10) : 0;
            w[i].sig = sig > 0 && sig < 65 ? (int)sig : 0;
            w[i].fh_before = file_size(path);
            p->python = 1;
            free(head);
        }
        live_path(path, sizeof(path), run_dir, "ctl", p->pid, "");
        int fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        if (fd >= 0) {
            /* no reader (ENXIO) means no thread: nothing is sent */
            char line[32];
            int l = snprintf(line, sizeof(line), "%d\n", req);
            w[i].asked = write(fd, line, (size_t)l) == l;
            close(fd);
        }
    }
    for (int i = 0; i < np; i++) {
        hd_proc *p = &res->procs[i];
        p->rank_root = p->rank >= 0;
        for (int j = 0; j < np; j++)
            if (res->procs[j].pid == p->ppid && res->procs[j].rank == p->rank) p->rank_root = 0;
    }
    /* The threads answer within a second; the processes whose thread cannot
     * run (the GIL held by C code) get faulthandler's signal. */
    double t0 = now_s();
    for (;;) {
        int pending = 0;
        for (int i = 0; i < np; i++) {
            hd_proc *p = &res->procs[i];
            if (w[i].asked && !p->answered) {
                live_path(path, sizeof(path), run_dir, "state", p->pid, ".json");
                if (read_state(path, req, p, &w[i]))
                    p->answered = 1;
                else
                    pending++;
            }
        }
        if (!pending || now_s() - t0 > 1.5) break;
        nap_ms(50);
    }
    for (int i = 0; i < np; i++)
        if (w[i].sig && !res->procs[i].answered && catches(res->procs[i].pid, w[i].sig) &&
            kill(res->procs[i].pid, w[i].sig) == 0)
            w[i].fh_sent = 1;
    t0 = now_s();
    for (;;) {
        int pending = 0;
        for (int i = 0; i < np; i++) {
            if (!w[i].fh_sent || w[i].fh_done) continue;
            live_path(path, sizeof(path), run_dir, "pystack", res->procs[i].pid, ".txt");
            off_t sz = file_size(path);
            /* done once it grew and stopped growing */
            if (sz > w[i].fh_before && sz == w[i].fh_last)
                w[i].fh_done = 1;
            else
                pending++;
            w[i].fh_last = sz;
        }
        if (!pending || now_s() - t0 > 2.0) break;
        nap_ms(100);
    }

    int npyspy = 0, ngdb = 0, have_gdb = hd_in_path("gdb"), have_pyspy = hd_in_path("py-spy");
    for (int i = 0; i < np; i++) {
        hd_proc *p = &res->procs[i];
        if (p->rank >= 0)
            buf_printf(b, "==== rank %d, pid %ld (%s), parent %ld ====\n", p->rank, (long)p->pid,
                       p->comm, (long)p->ppid);
        else
            buf_printf(b, "==== pid %ld (%s), parent %ld ====\n", (long)p->pid, p->comm,
                       (long)p->ppid);
        int native = 1;
        if (w[i].state) {
            snprintf(p->how, sizeof(p->how), "python");
            buf_puts(b, w[i].state);
            if (b->len && b->data[b->len - 1] != '\n') buf_putc(b, '\n');
        } else if (w[i].fh_sent) {
            live_path(path, sizeof(path), run_dir, "pystack", p->pid, ".txt");
            fh_answer(path, w[i].fh_before, p, b);
        } else {
            from_outside(p, b, have_pyspy, have_gdb, &npyspy, &ngdb, 1);
            native = 0;
        }
        /* the hook gave the Python stacks: gdb adds the native ones when asked */
        if (native && (flags & HD_NATIVE)) from_outside(p, b, 0, have_gdb, &npyspy, &ngdb, 0);
        threads_and_wchan(p, b, !p->python);
        free(w[i].state);
    }
    free(w);
    build_verdict(res);
    return 0;
}

int hd_dump(const char *run_dir, pid_t root, int n, const char *headline, const pid_t *stepped,
            int nstepped, hd_result *res)
{
    buf b;
    buf_init(&b, HD_OUT_MAX);
    int rc = hd_collect(run_dir, root, n, 0, stepped, nstepped, res, &b);
    if (!rc) rc = write_stacks(run_dir, n, headline, res, &b);
    buf_free(&b);
    return rc;
}

/* hd_dump_self: a thread whose signals are all blocked (the collector's)
 * takes faulthandler's signal itself, so the handler has written every
 * Python thread's stack when pthread_kill returns. */
int hd_dump_self(const char *run_dir, int n, const char *headline, hd_result *res)
{
    memset(res, 0, sizeof(*res));
    res->nprocs = 1;
    hd_proc *p = &res->procs[0];
    p->pid = getpid();
    p->ppid = getppid();
    p->seq = -1;
    p->rank = env_rank(p->pid);
    p->rank_root = p->rank >= 0;
    read_comm(p->pid, p->comm, sizeof(p->comm));
    buf b;
    buf_init(&b, HD_OUT_MAX);
    if (p->rank >= 0)
        buf_printf(&b, "==== rank %d, pid %ld (%s), this process (embedded mode) ====\n", p->rank,
                   (long)p->pid, p->comm);
    else
        buf_printf(&b, "==== pid %ld (%s), this process (embedded mode) ====\n", (long)p->pid,
                   p->comm);
    char path[PATH_MAX];
    live_path(path, sizeof(path), run_dir, "pystack", p->pid, ".txt");
    char *head = slurp(path, 256, NULL);
    const char *sp = head ? strstr(head, "signal=") : NULL;
    long sig = sp ? strtol(sp + 7, NULL, 10) : 0;
    free(head);
    snprintf(p->how, sizeof(p->how), "proc");
    if (sig > 0 && sig < 65 && catches(p->pid, (int)sig)) {
        p->python = 1;
        off_t before = file_size(path);
        sigset_t one, old;
        sigemptyset(&one);
        sigaddset(&one, (int)sig);
        pthread_sigmask(SIG_UNBLOCK, &one, &old);
        int sent = pthread_kill(pthread_self(), (int)sig) == 0;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (sent)
            p->answered = fh_answer(path, before, p, &b);
        else
            buf_puts(&b, "(no answer to faulthandler's signal)\n");
    } else {
        buf_puts(&b, "(no Python stacks: faulthandler is registered by trainperf.start() in "
                     "Python; native stacks are not taken in embedded mode)\n");
    }
    threads_and_wchan(p, &b, 1);
    build_verdict(res);
    int rc = write_stacks(run_dir, n, headline, res, &b);
    buf_free(&b);
    return rc;
}

void hd_procs_json(jw *w, const hd_result *res)
{
    jw_arr_begin(w);
    for (int i = 0; i < res->nprocs; i++) {
        const hd_proc *p = &res->procs[i];
        jw_obj_begin(w);
        jw_kint(w, "pid", p->pid);
        jw_kint(w, "ppid", p->ppid);
        jw_key(w, "rank");
        if (p->rank >= 0)
            jw_int(w, p->rank);
        else
            jw_null(w);
        jw_kstr(w, "comm", p->comm);
        jw_kstr(w, "where", p->where[0] ? p->where : NULL);
        jw_kstr(w, "collective", p->coll[0] ? p->coll : NULL);
        jw_key(w, "seq");
        if (p->seq >= 0)
            jw_int(w, p->seq);
        else
            jw_null(w);
        jw_kstr(w, "source", p->how);
        jw_kbool(w, "stepped", p->stepped);
        jw_obj_end(w);
    }
    jw_arr_end(w);
}
