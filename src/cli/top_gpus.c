/* The GPU rows of `trainperf top` (see top_gpus.h). */
#include "cli/top_gpus.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "collect/gpusel.h"
#include "util/afile.h"
#include "util/human.h"

#define TOP_GPUS_MAX 16
#define TOP_PROCS_TAIL 65536 /* procs.csv's last sample is in its last 64 KiB */
#define TOP_NS_DEPTH 4

/* A process of the run: its pid in every PID namespace, and its rank. */
typedef struct run_proc {
    long pid;
    int rank; /* -1 none; -2: in the tree, no steps */
    int nids;
    pid_t ids[TOP_NS_DEPTH];
} run_proc;

typedef struct run_procs {
    int n;
    run_proc p[TOP_PIDS_MAX];
} run_procs;

static void add_proc(run_procs *rp, long pid, int rank)
{
    for (int i = 0; i < rp->n; i++)
        if (rp->p[i].pid == pid) return;
    if (rp->n == TOP_PIDS_MAX || pid <= 0 || pid > INT_MAX) return;
    run_proc *p = &rp->p[rp->n++];
    p->pid = pid;
    p->rank = rank;
    p->nids = gpusel_nspids((pid_t)pid, p->ids, TOP_NS_DEPTH);
    if (p->nids < 1) {
        p->nids = 1; /* gone, or not visible here: its pid as written */
        p->ids[0] = (pid_t)pid;
    }
}

/* The pids of procs.csv's last sample (the run's tree now), with the rank
 * steps.csv gives them or -2. */
static void tree_procs(const char *dir, run_procs *rp)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof(path), "%s/procs.csv", dir) >= (int)sizeof(path)) return;
    FILE *f = afile_fopen_read(path);
    if (!f) return;
    char hdr[512];
    if (!fgets(hdr, sizeof(hdr), f) || strncmp(hdr, "t,pid,", 6) != 0) {
        fclose(f);
        return;
    }
    char *tail = cli_csv_tail(f, hdr, TOP_PROCS_TAIL);
    fclose(f);
    if (!tail) return;
    char *p = tail;
    /* t and pid lead every row: the rows of the largest t are the last sample */
    double last = -1;
    for (int pass = 0; pass < 2; pass++) {
        for (char *l = p; l && *l;) {
            char *nl = strchr(l, '\n');
            char *e1, *e2;
            double t = strtod(l, &e1);
            long pid = *e1 == ',' ? strtol(e1 + 1, &e2, 10) : 0;
            if (pass == 0 && pid > 0 && t > last) last = t;
            if (pass == 1 && pid > 0 && t == last) add_proc(rp, pid, -2);
            l = nl ? nl + 1 : NULL;
        }
    }
    free(tail);
}

static const run_proc *find(const run_procs *rp, unsigned pid)
{
    for (int i = 0; i < rp->n; i++)
        for (int k = 0; k < rp->p[i].nids; k++)
            if ((unsigned)rp->p[i].ids[k] == pid) return &rp->p[i];
    return NULL;
}

/* /proc/PID/comm, or "?" when the process is not visible here */
static void comm_of(unsigned pid, char *out, size_t n)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%u/comm", pid);
    FILE *f = fopen(path, "r");
    if (!f || !fgets(out, (int)n, f)) snprintf(out, n, "?");
    if (f) fclose(f);
    out[strcspn(out, "\n")] = 0;
}

static const char *pct(char *out, size_t n, fval v)
{
    if (v.ok)
        snprintf(out, n, "%.0f%%", v.v);
    else
        snprintf(out, n, "?");
    return out;
}

int top_gpus_print(nvml_top *nv, const char *dir, const top_pids *pids, int color)
{
    static nvml_top_gpu g[TOP_GPUS_MAX];
    int ng = nvml_top_read(nv, g, TOP_GPUS_MAX);
    if (ng <= 0) return 0;
    static run_procs rp;
    rp.n = 0;
    for (int i = 0; pids && i < pids->n; i++)
        add_proc(&rp, pids->pid[i], pids->rank[i]);
    tree_procs(dir, &rp);
    const char *b = color ? CLI_BOLD : "", *z = color ? CLI_RESET : "";
    printf("  %s%-6s %5s  %-21s  %s%s\n", b, "gpu", "util", "memory", "name; processes: pid, rank, memory, SM", z);
    for (int i = 0; i < ng; i++) {
        char u[16], used[32], total[32], mem[80];
        human_bytes(used, sizeof(used), g[i].mem_used_bytes.ok ? g[i].mem_used_bytes.v : NAN);
        human_bytes(total, sizeof(total), g[i].mem_total_bytes.ok ? g[i].mem_total_bytes.v : NAN);
        snprintf(mem, sizeof(mem), "%s / %s", used, total);
        char gpu[16];
        snprintf(gpu, sizeof(gpu), "GPU%d", g[i].index);
        printf("  %-6s %5s  %-21s  %s%s\n", gpu, g[i].lost ? "lost" : pct(u, sizeof(u), g[i].util_pct),
               mem, g[i].name, g[i].lost ? "  (GPU is lost)" : "");
        if (g[i].lost) continue;
        if (!g[i].procs_ok) {
            printf("    (its processes cannot be read)\n");
            continue;
        }
        if (g[i].nproc == 0) printf("    no processes\n");
        for (int k = 0; k < g[i].nproc; k++) {
            const nvml_top_proc *p = &g[i].proc[k];
            const run_proc *r = find(&rp, p->pid);
            char who[24], rank[24], pm[32], sm[16], comm[64];
            snprintf(who, sizeof(who), "pid %u", p->pid);
            if (!r)
                snprintf(rank, sizeof(rank), "-");
            else if (r->rank >= 0)
                snprintf(rank, sizeof(rank), "rank %d", r->rank);
            else
                snprintf(rank, sizeof(rank), "run");
            human_bytes(pm, sizeof(pm), p->mem_bytes.ok ? p->mem_bytes.v : NAN);
            comm_of(p->pid, comm, sizeof(comm));
            printf("    %-11s %-8s %10s  SM %4s  %s\n", who, rank, pm, pct(sm, sizeof(sm), p->sm_pct),
                   comm);
        }
    }
    return ng;
}
