/* The procfs source: parsers on captured /proc text, the system part on a
 * fake /proc tree with known counters, and the process tree on real
 * processes (CPU burners, sleepers, a 200 MB memory hog, an fsync writer). */
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "collect/procfs.h"
#include "trainperf.h"
#include "tt.h"

#define LEN(s) (sizeof(s) - 1)

/* ------------------------------------------------------------- parsers */

TT_TEST(pidstat_comm_with_spaces_and_parens)
{
    /* a comm like "a) b (c)" is legal: only the last ')' ends it */
    static const char line[] =
        "4242 (a) b (c)) S 17 4242 4242 0 -1 4194560 1234 0 5 0 "
        "311 42 0 0 20 0 7 0 98765 123456789 2500 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 "
        "0 17 1 0 0 0 0 0\n";
    procfs_pidstat st;
    TT_EQ_INT(procfs_parse_pidstat(line, LEN(line), &st), 0);
    TT_EQ_INT(st.pid, 4242);
    TT_EQ_STR(st.comm, "a) b (c)");
    TT_EQ_INT(st.state, 'S');
    TT_EQ_INT(st.ppid, 17);
    TT_EQ_INT(st.utime, 311);
    TT_EQ_INT(st.stime, 42);
    TT_EQ_INT(st.threads, 7);
    TT_EQ_INT(st.starttime, 98765);
    TT_EQ_INT(st.rss_pages, 2500);
}

TT_TEST(pidstat_long_comm_truncated_and_bad_input)
{
    static const char line[] =
        "1 (0123456789abcdefXYZ) R 0 1 1 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 5 0 9";
    procfs_pidstat st;
    TT_EQ_INT(procfs_parse_pidstat(line, LEN(line), &st), 0);
    TT_EQ_INT(strlen(st.comm), 15);
    TT_EQ_INT(st.rss_pages, 9);
    /* truncated before rss, missing parens, empty */
    TT_EQ_INT(procfs_parse_pidstat(line, LEN(line) - 2, &st), TPF_EFORMAT);
    TT_EQ_INT(procfs_parse_pidstat("12 sh S 1", 9, &st), TPF_EFORMAT);
    TT_EQ_INT(procfs_parse_pidstat("", 0, &st), TPF_EFORMAT);
}

TT_TEST(io_parser)
{
    static const char io[] = "rchar: 6976\nwchar: 12\nsyscr: 10\nsyscw: 1\n"
                             "read_bytes: 4096\nwrite_bytes: 8192000\ncancelled_write_bytes: 0\n";
    uint64_t rd, wr;
    TT_EQ_INT(procfs_parse_io(io, LEN(io), &rd, &wr), 0);
    TT_EQ_INT(rd, 4096);
    TT_EQ_INT(wr, 8192000);
    TT_EQ_INT(procfs_parse_io("rchar: 1\n", 9, &rd, &wr), TPF_EFORMAT);
}

TT_TEST(stat_parser_cores_and_guest)
{
    /* guest (9th, 10th) is already inside user: total must not count it twice */
    static const char st[] = "cpu  100 10 50 800 40 1 2 3 70 0\n"
                             "cpu0 60 5 20 400 20 1 1 2 70 0\n"
                             "cpu2 40 5 30 400 20 0 1 1 0 0\n"
                             "intr 12345 0 0\nctxt 99\ncpu9 1 1 1 1 1 1 1 1\n";
    procfs_cpu_times all, cores[4];
    TT_EQ_INT(procfs_parse_stat(st, LEN(st), &all, cores, 4), 0);
    TT_ASSERT(all.ok);
    TT_EQ_INT(all.total, 100 + 10 + 50 + 800 + 40 + 1 + 2 + 3);
    TT_EQ_INT(all.iowait, 40);
    TT_EQ_INT(all.busy, all.total - 800 - 40);
    TT_ASSERT(cores[0].ok && !cores[1].ok && cores[2].ok && !cores[3].ok);
    TT_EQ_INT(cores[2].busy, 40 + 5 + 30 + 1 + 1);
    /* an old kernel's four columns still parse */
    static const char old[] = "cpu 1 2 3 4\n";
    TT_EQ_INT(procfs_parse_stat(old, LEN(old), &all, NULL, 0), 0);
    TT_EQ_INT(all.busy, 6);
    TT_EQ_INT(procfs_parse_stat("intr 1\n", 7, &all, NULL, 0), TPF_EFORMAT);
}

TT_TEST(meminfo_parser)
{
    static const char mi[] = "MemTotal:       16318708 kB\nMemFree:         1000000 kB\n"
                             "MemAvailable:   12000000 kB\nBuffers:  1 kB\n"
                             "SwapTotal:       2097148 kB\nSwapFree:        2000000 kB\n";
    procfs_meminfo m;
    TT_EQ_INT(procfs_parse_meminfo(mi, LEN(mi), &m), 0);
    TT_ASSERT(m.total_ok && m.available_ok && m.swap_ok);
    TT_EQ_INT(m.total, 16318708ull * 1024);
    TT_EQ_INT(m.available, 12000000ull * 1024);
    TT_EQ_INT(m.swap_total - m.swap_free, (2097148ull - 2000000ull) * 1024);
    /* a kernel before 3.14 has no MemAvailable: known total, unknown available */
    static const char old[] = "MemTotal: 100 kB\nMemFree: 50 kB\n";
    TT_EQ_INT(procfs_parse_meminfo(old, LEN(old), &m), 0);
    TT_ASSERT(m.total_ok && !m.available_ok && !m.swap_ok);
}

TT_TEST(psi_parser)
{
    static const char io[] = "some avg10=1.50 avg60=0.20 avg300=0.05 total=1904716\n"
                             "full avg10=0.00 avg60=0.00 avg300=0.00 total=37\n";
    procfs_psi p;
    TT_EQ_INT(procfs_parse_psi(io, LEN(io), &p), 0);
    TT_ASSERT(p.some_ok && p.full_ok);
    TT_EQ_INT(p.some_us, 1904716);
    TT_EQ_INT(p.full_us, 37);
    static const char cpu_old[] = "some avg10=0.00 avg60=0.00 avg300=0.00 total=5\n";
    TT_EQ_INT(procfs_parse_psi(cpu_old, LEN(cpu_old), &p), 0);
    TT_ASSERT(p.some_ok && !p.full_ok);
    TT_EQ_INT(procfs_parse_psi("some avg10=0.00\n", 16, &p), TPF_EFORMAT);
}

TT_TEST(diskstats_and_netdev_lines)
{
    static const char d[] = " 254       0 vda 6714 4218 992522 5377 1049 7389 284384 667 0 1808 "
                            "6103 159 0 8632 58 24 0";
    unsigned ma, mi;
    char name[32];
    uint64_t rs, ws;
    TT_EQ_INT(procfs_parse_diskstats_line(d, LEN(d), &ma, &mi, name, &rs, &ws), 0);
    TT_EQ_INT(ma, 254);
    TT_EQ_INT(mi, 0);
    TT_EQ_STR(name, "vda");
    TT_EQ_INT(rs, 992522);
    TT_EQ_INT(ws, 284384);
    TT_EQ_INT(procfs_parse_diskstats_line("8 0 sda 1 2", 11, &ma, &mi, name, &rs, &ws),
              TPF_EFORMAT);

    static const char hdr1[] =
        "Inter-|   Receive                                                |  Transmit";
    static const char hdr2[] =
        " face |bytes    packets errs drop fifo frame compressed multicast|bytes";
    static const char eth[] = "  eth0: 37188299     915    0    0    0     0          0         0  "
                              "  56537     660    0    0    0     0       0          0";
    uint64_t rx, tx;
    TT_EQ_INT(procfs_parse_netdev_line(hdr1, LEN(hdr1), name, &rx, &tx), TPF_EFORMAT);
    TT_EQ_INT(procfs_parse_netdev_line(hdr2, LEN(hdr2), name, &rx, &tx), TPF_EFORMAT);
    TT_EQ_INT(procfs_parse_netdev_line(eth, LEN(eth), name, &rx, &tx), 0);
    TT_EQ_STR(name, "eth0");
    TT_EQ_INT(rx, 37188299);
    TT_EQ_INT(tx, 56537);
    /* big counters run the columns together after the colon */
    static const char tight[] = "wlan0:123456789012 5 0 0 0 0 0 0 777 1 0 0 0 0 0 0";
    TT_EQ_INT(procfs_parse_netdev_line(tight, LEN(tight), name, &rx, &tx), 0);
    TT_EQ_STR(name, "wlan0");
    TT_EQ_INT(rx, 123456789012ull);
    TT_EQ_INT(tx, 777);
}

/* ------------------------------------------------------- fake /proc tree */

static char fake_root[64];

static void put(const char *rel, const char *text)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", fake_root, rel);
    /* mkdir -p of the parents */
    for (char *p = path + strlen(fake_root) + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        mkdir(path, 0755);
        *p = '/';
    }
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return;
    }
    fputs(text, f);
    fclose(f);
}

static void rm_rf(const char *rel)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s/%s'", fake_root, rel);
    if (system(cmd) != 0) fprintf(stderr, "rm failed: %s\n", cmd);
}

/* A fake process leaves: its files and folder go. */
static void rm_pid(int pid)
{
    char path[128];
    const char *leaf[] = {"stat", "io", ""};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof(path), "%s/proc/%d/%s", fake_root, pid, leaf[i]);
        if (leaf[i][0])
            unlink(path);
        else
            rmdir(path);
    }
}

static void make_root(void)
{
    /* tmpfs when there is one: the cap test makes thousands of files */
    snprintf(fake_root, sizeof(fake_root), "%s/tpf-procfs-XXXXXX",
             access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    if (!mkdtemp(fake_root)) perror("mkdtemp");
    put("proc/placeholder", "");
}

struct sys_counters {
    uint64_t busy0, idle0, iow0, busy1, idle1, iow1;
    uint64_t psi_cpu, psi_mem_some, psi_mem_full, psi_io_some, psi_io_full;
    uint64_t vda_rd, vda_wr, vda1_rd, vda1_wr, nvme_rd, nvme_wr, nvmep_rd, loop_rd, dm_wr;
    uint64_t eth_rx, eth_tx, lo_rx, wl_rx, wl_tx;
};

static void write_system(const struct sys_counters *c, int with_psi)
{
    char b[2048];
    snprintf(b, sizeof(b),
             "cpu  %llu 0 0 %llu %llu 0 0 0 0 0\ncpu0 %llu 0 0 %llu %llu 0 0 0 0 0\n"
             "cpu1 %llu 0 0 %llu %llu 0 0 0 0 0\nintr 1\n",
             (unsigned long long)(c->busy0 + c->busy1), (unsigned long long)(c->idle0 + c->idle1),
             (unsigned long long)(c->iow0 + c->iow1), (unsigned long long)c->busy0,
             (unsigned long long)c->idle0, (unsigned long long)c->iow0,
             (unsigned long long)c->busy1, (unsigned long long)c->idle1,
             (unsigned long long)c->iow1);
    put("proc/stat", b);
    put("proc/meminfo", "MemTotal: 1000 kB\nMemFree: 100 kB\nMemAvailable: 600 kB\n"
                        "SwapTotal: 500 kB\nSwapFree: 300 kB\n");
    if (with_psi) {
        snprintf(b, sizeof(b),
                 "some avg10=0 avg60=0 avg300=0 total=%llu\n"
                 "full avg10=0 avg60=0 avg300=0 total=0\n",
                 (unsigned long long)c->psi_cpu);
        put("proc/pressure/cpu", b);
        snprintf(b, sizeof(b),
                 "some avg10=0 avg60=0 avg300=0 total=%llu\n"
                 "full avg10=0 avg60=0 avg300=0 total=%llu\n",
                 (unsigned long long)c->psi_mem_some, (unsigned long long)c->psi_mem_full);
        put("proc/pressure/memory", b);
        snprintf(b, sizeof(b),
                 "some avg10=0 avg60=0 avg300=0 total=%llu\n"
                 "full avg10=0 avg60=0 avg300=0 total=%llu\n",
                 (unsigned long long)c->psi_io_some, (unsigned long long)c->psi_io_full);
        put("proc/pressure/io", b);
    }
    snprintf(b, sizeof(b),
             "   7       0 loop0 1 0 %llu 0 0 0 0 0 0 0 0\n"
             " 254       0 vda 1 0 %llu 0 1 0 %llu 0 0 0 0\n"
             " 254       1 vda1 1 0 %llu 0 1 0 %llu 0 0 0 0\n"
             " 259       0 nvme0n1 1 0 %llu 0 1 0 %llu 0 0 0 0\n"
             " 259       1 nvme0n1p1 1 0 %llu 0 1 0 0 0 0 0 0\n"
             " 253       0 dm-0 1 0 0 0 1 0 %llu 0 0 0 0\n",
             (unsigned long long)c->loop_rd, (unsigned long long)c->vda_rd,
             (unsigned long long)c->vda_wr, (unsigned long long)c->vda1_rd,
             (unsigned long long)c->vda1_wr, (unsigned long long)c->nvme_rd,
             (unsigned long long)c->nvme_wr, (unsigned long long)c->nvmep_rd,
             (unsigned long long)c->dm_wr);
    put("proc/diskstats", b);
    snprintf(b, sizeof(b),
             "Inter-|   Receive |  Transmit\n face |bytes packets|bytes\n"
             "    lo: %llu 1 0 0 0 0 0 0 %llu 1 0 0 0 0 0 0\n"
             "  eth0: %llu 1 0 0 0 0 0 0 %llu 1 0 0 0 0 0 0\n"
             " wlan0: %llu 1 0 0 0 0 0 0 %llu 1 0 0 0 0 0 0\n",
             (unsigned long long)c->lo_rx, (unsigned long long)c->lo_rx,
             (unsigned long long)c->eth_rx, (unsigned long long)c->eth_tx,
             (unsigned long long)c->wl_rx, (unsigned long long)c->wl_tx);
    put("proc/net/dev", b);
}

static void frame_at(coll_frame *f, double t_s)
{
    memset(f, 0, sizeof(*f));
    f->mono_ns = (uint64_t)(t_s * 1e9);
}

TT_TEST(system_from_fake_proc)
{
    make_root();
    struct sys_counters a = {100,  900,  10,    200,   800, 0,   1000, 2000, 500,
                             3000, 100,  1000,  2000,  50,  60,  100,  200,  7,
                             1000, 5000, 10000, 20000, 999, 300, 400};
    write_system(&a, 1);
    src_ctx ctx = {0};
    ctx.root_pid = 999999; /* no such process: the tree is empty */
    void *st = NULL;
    TT_EQ_INT(procfs_init_at(&st, &ctx, fake_root), 0);
    static coll_frame f;
    frame_at(&f, 10.0);
    TT_EQ_INT(procfs_source.sample(st, &ctx, &f), 0);
    TT_EQ_INT(f.ncpu, 2);
    /* first sample: no deltas, so rates are unknown, not 0 */
    TT_ASSERT(!f.cpu_pct.ok && !f.cpu_iowait_pct.ok && !f.cpu_core_pct[0].ok);
    TT_ASSERT(!f.psi_cpu_some_pct.ok && !f.psi_io_full_pct.ok);
    TT_ASSERT(!f.disk_read_bps.ok && !f.net_rx_bps.ok && !f.tree_cpu_pct.ok);
    /* levels are known at once */
    TT_ASSERT(f.mem_total_bytes.ok && f.mem_used_bytes.ok && f.swap_used_bytes.ok);
    TT_NEAR(f.mem_total_bytes.v, 1000 * 1024.0, 0.5);
    TT_NEAR(f.mem_used_bytes.v, (1000 - 600) * 1024.0, 0.5);
    TT_NEAR(f.mem_available_bytes.v, 600 * 1024.0, 0.5);
    TT_NEAR(f.swap_used_bytes.v, (500 - 300) * 1024.0, 0.5);
    TT_ASSERT(f.tree_procs.ok);
    TT_EQ_INT(f.tree_procs.v, 0);

    struct sys_counters b = a;
    b.busy0 += 30;
    b.idle0 += 60;
    b.iow0 += 10; /* core 0: 30% busy of 100 */
    b.busy1 += 90;
    b.idle1 += 10; /* core 1: 90% busy */
    b.psi_cpu += 500000;
    b.psi_mem_some += 200000;
    b.psi_mem_full += 100000;
    b.psi_io_some += 1000000;
    b.psi_io_full += 3000000; /* > interval: clamps to 100 */
    b.vda_rd += 8;
    b.vda_wr += 16;
    b.vda1_rd += 8;
    b.vda1_wr += 16; /* partition: not again */
    b.nvme_rd += 4;
    b.nvme_wr += 2;
    b.nvmep_rd += 4;
    b.loop_rd += 1000;
    b.dm_wr += 1000;
    b.eth_rx += 4000;
    b.eth_tx += 2000;
    b.lo_rx += 1000000;
    b.wl_rx += 1000;
    b.wl_tx += 0;
    write_system(&b, 1);
    const double dt = 2.0;
    frame_at(&f, 10.0 + dt);
    TT_EQ_INT(procfs_source.sample(st, &ctx, &f), 0);
    double tot0 = 30 + 60 + 10, tot1 = 90 + 10;
    TT_ASSERT(f.cpu_pct.ok && f.cpu_iowait_pct.ok && f.cpu_core_pct[0].ok && f.cpu_core_pct[1].ok);
    TT_NEAR(f.cpu_core_pct[0].v, 30 / tot0 * 100, 1e-9);
    TT_NEAR(f.cpu_core_pct[1].v, 90 / tot1 * 100, 1e-9);
    TT_NEAR(f.cpu_pct.v, (30 + 90) / (tot0 + tot1) * 100, 1e-9);
    TT_NEAR(f.cpu_iowait_pct.v, 10 / (tot0 + tot1) * 100, 1e-9);
    TT_NEAR(f.psi_cpu_some_pct.v, 500000 / (dt * 1e6) * 100, 1e-9);
    TT_NEAR(f.psi_mem_some_pct.v, 200000 / (dt * 1e6) * 100, 1e-9);
    TT_NEAR(f.psi_mem_full_pct.v, 100000 / (dt * 1e6) * 100, 1e-9);
    TT_NEAR(f.psi_io_some_pct.v, 1000000 / (dt * 1e6) * 100, 1e-9);
    TT_NEAR(f.psi_io_full_pct.v, 100, 1e-9);
    /* whole disks vda and nvme0n1 only (no sysfs in the fake root: by name) */
    TT_NEAR(f.disk_read_bps.v, (8 + 4) * 512 / dt, 1e-9);
    TT_NEAR(f.disk_write_bps.v, (16 + 2) * 512 / dt, 1e-9);
    TT_NEAR(f.net_rx_bps.v, (4000 + 1000) / dt, 1e-9);
    TT_NEAR(f.net_tx_bps.v, 2000 / dt, 1e-9);
    /* no process of the tree lives in the fake root: its figures are unknown */
    TT_ASSERT(f.tree_procs.ok && f.tree_procs.v == 0);
    TT_ASSERT(!f.tree_cpu_pct.ok && !f.tree_rss_bytes.ok && !f.tree_read_bps.ok);
    procfs_source.close(st);
    rm_rf("");
}

TT_TEST(no_psi_means_unknown_psi)
{
    make_root();
    struct sys_counters a = {0};
    a.idle0 = a.idle1 = 100;
    write_system(&a, 0);
    src_ctx ctx = {0};
    ctx.root_pid = 999999;
    void *st = NULL;
    TT_EQ_INT(procfs_init_at(&st, &ctx, fake_root), 0);
    static coll_frame f;
    for (int i = 0; i < 3; i++) {
        a.idle0 += 100;
        a.idle1 += 100;
        write_system(&a, 0);
        frame_at(&f, 1.0 + i);
        TT_EQ_INT(procfs_source.sample(st, &ctx, &f), 0);
    }
    TT_ASSERT(!f.psi_cpu_some_pct.ok && !f.psi_mem_some_pct.ok && !f.psi_mem_full_pct.ok);
    TT_ASSERT(!f.psi_io_some_pct.ok && !f.psi_io_full_pct.ok);
    /* the rest still works, and idle is a known 0 */
    TT_ASSERT(f.cpu_pct.ok);
    TT_EQ_INT(f.cpu_pct.v, 0);
    procfs_source.close(st);
    rm_rf("");
}

TT_TEST(init_without_proc_stat_says_why)
{
    make_root();
    src_ctx ctx = {0};
    void *st = NULL;
    TT_ASSERT(procfs_init_at(&st, &ctx, fake_root) < 0);
    const char *why = procfs_source.last_error(NULL);
    TT_ASSERT(why && strstr(why, "proc/stat"));
    TT_ASSERT(st != NULL); /* the reason, for the collector */
    why = procfs_source.last_error(st);
    TT_ASSERT(why && strstr(why, "proc/stat"));
    static coll_frame f;
    TT_EQ_INT(procfs_source.sample(st, &ctx, &f), TPF_EINVAL);
    procfs_source.close(st);
    rm_rf("");
}

static void put_pid(int pid, const char *comm, char state, int ppid, unsigned long ticks,
                    unsigned long rss_pages, int threads, unsigned long wbytes)
{
    char rel[64], b[512];
    snprintf(rel, sizeof(rel), "proc/%d/stat", pid);
    snprintf(b, sizeof(b), "%d (%s) %c %d 1 1 0 -1 0 0 0 0 0 %lu 0 0 0 20 0 %d 0 5 1000 %lu 0 0\n",
             pid, comm, state, ppid, ticks, threads, rss_pages);
    put(rel, b);
    snprintf(rel, sizeof(rel), "proc/%d/io", pid);
    snprintf(b, sizeof(b), "rchar: 0\nwchar: 0\nread_bytes: 0\nwrite_bytes: %lu\n", wbytes);
    put(rel, b);
}

/* Just a stat file, written cheaply: the cap test makes thousands. */
static void put_bare_pid(int pid, int ppid)
{
    char path[128], b[160];
    snprintf(path, sizeof(path), "%s/proc/%d", fake_root, pid);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/proc/%d/stat", fake_root, pid);
    int n = snprintf(b, sizeof(b), "%d (k) S %d 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 1000 1 0 0\n",
                     pid, ppid);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, b, (size_t)n) != n) perror(path);
    if (fd >= 0) close(fd);
}

static const procfs_proc *find_proc(void *st, pid_t pid)
{
    const procfs_proc *p;
    int n = procfs_procs(st, &p);
    for (int i = 0; i < n; i++)
        if (p[i].pid == pid) return &p[i];
    return NULL;
}

TT_TEST(tree_membership_on_fake_proc)
{
    make_root();
    struct sys_counters a = {0};
    write_system(&a, 1);
    put_pid(100, "root", 'S', 50, 10, 100, 2, 0);
    put_pid(101, "work) er", 'R', 100, 20, 200, 1, 0);
    put_pid(102, "grandchild", 'S', 101, 30, 300, 1, 4096);
    put_pid(103, "zombie", 'Z', 100, 0, 0, 1, 0);
    put_pid(200, "other", 'S', 1, 1000, 1, 1, 0);
    put_pid(201, "otherkid", 'S', 200, 1000, 1, 1, 0);
    put_pid(50, "shell", 'S', 1, 1, 1, 1, 0);
    src_ctx ctx = {0};
    ctx.root_pid = 100;
    void *st = NULL;
    TT_EQ_INT(procfs_init_at(&st, &ctx, fake_root), 0);
    static coll_frame f;
    frame_at(&f, 1.0);
    TT_EQ_INT(procfs_source.sample(st, &ctx, &f), 0);
    TT_EQ_INT(f.ntree, 3);
    TT_EQ_INT(f.tree_procs.v, 3);
    TT_EQ_INT(f.tree_threads.v, 4);
    TT_NEAR(f.tree_rss_bytes.v, 600.0 * sysconf(_SC_PAGESIZE), 0.5);
    TT_ASSERT(find_proc(st, 100) && find_proc(st, 101) && find_proc(st, 102));
    TT_ASSERT(!find_proc(st, 103) && !find_proc(st, 200) && !find_proc(st, 201));
    TT_EQ_STR(find_proc(st, 101)->comm, "work) er");
    TT_EQ_INT(find_proc(st, 102)->ppid, 101);
    TT_ASSERT(!find_proc(st, 101)->cpu_pct.ok); /* first sight, born long ago */
    TT_ASSERT(find_proc(st, 102)->write_bytes.ok);
    TT_EQ_INT(find_proc(st, 102)->write_bytes.v, 4096);

    /* 101 exits, 102 is reparented to init, 102 forks 104; 100 used CPU */
    rm_pid(101);
    put_pid(100, "root", 'S', 50, 10 + 50, 100, 2, 0);
    put_pid(102, "grandchild", 'S', 1, 30, 300, 1, 4096 + 8192);
    put_pid(104, "new", 'R', 102, 0, 10, 1, 0);
    const double dt = 0.5;
    frame_at(&f, 1.0 + dt);
    TT_EQ_INT(procfs_source.sample(st, &ctx, &f), 0);
    TT_EQ_INT(f.ntree, 3);
    TT_ASSERT(find_proc(st, 100) && find_proc(st, 102) && find_proc(st, 104));
    TT_ASSERT(!find_proc(st, 101));
    long hz = sysconf(_SC_CLK_TCK);
    TT_ASSERT(f.main_cpu_pct.ok);
    TT_NEAR(f.main_cpu_pct.v, 50.0 / hz / dt * 100, 1e-9);
    TT_ASSERT(find_proc(st, 102)->cpu_pct.ok);
    TT_EQ_INT(find_proc(st, 102)->cpu_pct.v, 0);
    TT_ASSERT(f.tree_write_bps.ok);
    TT_NEAR(f.tree_write_bps.v, 8192 / dt, 1e-9);
    /* 101's counters left with it: no negative or stale delta in the totals */
    TT_ASSERT(f.tree_cpu_pct.ok);
    TT_NEAR(f.tree_cpu_pct.v, 50.0 / hz / dt * 100, 1e-9);
    procfs_source.close(st);
    rm_rf("");
}

TT_TEST(tree_cap_counts_the_rest_and_tables_grow)
{
    make_root();
    struct sys_counters a = {0};
    write_system(&a, 0);
    enum { KIDS_N = PROCFS_MAX_PROCS + 104, OUTSIDERS = 500 };
    put_pid(100, "root", 'S', 1, 0, 1, 1, 0);
    for (int i = 0; i < KIDS_N; i++)
        put_bare_pid(1000 + i, 100);
    for (int i = 0; i < OUTSIDERS; i++)
        put_bare_pid(20000 + i, 1);
    src_ctx ctx = {0};
    ctx.root_pid = 100;
    void *st = NULL;
    TT_EQ_INT(procfs_init_at(&st, &ctx, fake_root), 0);
    static coll_frame f;
    frame_at(&f, 1.0);
    TT_EQ_INT(procfs_source.sample(st, &ctx, &f), 0);
    TT_EQ_INT(f.ntree, PROCFS_MAX_PROCS);
    TT_EQ_INT(f.tree_procs.v, KIDS_N + 1);
    TT_EQ_INT(procfs_overflow(st), KIDS_N + 1 - PROCFS_MAX_PROCS);
    /* the same again: the counted rest is not double counted */
    frame_at(&f, 2.0);
    TT_EQ_INT(procfs_source.sample(st, &ctx, &f), 0);
    TT_EQ_INT(f.tree_procs.v, KIDS_N + 1);
    TT_EQ_INT(f.ntree, PROCFS_MAX_PROCS);
    /* most go away: the counts follow, the tables shrink without losing anyone */
    for (int i = 0; i < KIDS_N - 10; i++)
        rm_pid(1000 + i);
    for (int i = 0; i < OUTSIDERS; i++)
        rm_pid(20000 + i);
    frame_at(&f, 3.0);
    TT_EQ_INT(procfs_source.sample(st, &ctx, &f), 0);
    /* the 10 left were beyond the cap, so they are counted, not detailed */
    TT_EQ_INT(f.tree_procs.v, 11);
    TT_EQ_INT(f.ntree + procfs_overflow(st), 11);
    procfs_source.close(st);
    rm_rf("");
}

/* ------------------------------------------------------- real processes */

static void burn_forever(void)
{
    volatile unsigned long x = 0;
    for (;;)
        x++;
}

static double self_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

enum { KIDS = 4 };
#define HOG_BYTES (200u * 1024 * 1024)
#define WRITE_BYTES (8u * 1024 * 1024)

/* write_bytes counts what reaches a block device: tmpfs writes never do.
 * The writer uses the first writable folder on real storage, or none. */
static const char *disk_dir(void)
{
    static const char *const dirs[] = {"/var/tmp", "."};
    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
        struct statfs sf;
        if (access(dirs[i], W_OK) == 0 && statfs(dirs[i], &sf) == 0 && sf.f_type != TMPFS_MAGIC &&
            sf.f_type != RAMFS_MAGIC)
            return dirs[i];
    }
    return NULL;
}

struct tree {
    pid_t root, burner, sleeper, hog, writer; /* writer is the sleeper's child */
    int cmd_w;                                /* commands to root */
    int ready_r;                              /* one byte per ready process */
};

/* The tree is one process group led by the root: killing the group leaves
 * nothing behind, also when a failed assertion returns early (atexit). */
static pid_t tree_pgid;

static void kill_tree(void)
{
    if (tree_pgid > 0) kill(-tree_pgid, SIGKILL);
}

static void say(int fd, char c)
{
    while (write(fd, &c, 1) < 0 && errno == EINTR) {
    }
}

/* The root: forks the processes of the tree, then obeys commands: 'n' forks
 * a child that burns 100 ms of CPU then reports its pid and sleeps. */
static void root_main(int cmd_r, int ready_w, int pids_w)
{
    setpgid(0, 0);
    signal(SIGCHLD, SIG_IGN); /* children are reaped at once: no zombies */
    pid_t p[KIDS];
    if ((p[0] = fork()) == 0) {
        say(ready_w, 'b');
        burn_forever();
    }
    if ((p[1] = fork()) == 0) {
        if ((p[3] = fork()) == 0) {
            char path[256];
            const char *dir = disk_dir();
            snprintf(path, sizeof(path), "%s/tpf-procfs-w-%d", dir ? dir : "/tmp", (int)getpid());
            int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0600);
            static char blk[65536];
            memset(blk, 'x', sizeof(blk));
            for (unsigned done = 0; fd >= 0 && done < WRITE_BYTES; done += sizeof(blk))
                if (write(fd, blk, sizeof(blk)) < 0) break;
            if (fd >= 0) {
                fsync(fd);
                close(fd);
            }
            unlink(path);
            say(ready_w, 'w');
            for (;;)
                pause();
        }
        say(ready_w, 's');
        for (;;)
            pause();
    }
    if ((p[2] = fork()) == 0) {
        char *m = malloc(HOG_BYTES);
        if (m)
            for (size_t i = 0; i < HOG_BYTES; i += 4096)
                m[i] = (char)i;
        say(ready_w, 'h');
        for (;;)
            pause();
    }
    (void)p;
    char c;
    while (read(cmd_r, &c, 1) == 1) {
        if (c != 'n') continue;
        pid_t k = fork();
        if (k == 0) {
            double t0 = self_cpu_s();
            volatile unsigned long x = 0;
            while (self_cpu_s() - t0 < 0.1)
                x++;
            pid_t me = getpid();
            if (write(pids_w, &me, sizeof(me)) < 0) _exit(1);
            for (;;)
                pause();
        }
    }
    _exit(0);
}

static int start_tree(struct tree *t, int *pids_r)
{
    int cmd[2], ready[2], pids[2];
    if (pipe(cmd) || pipe(ready) || pipe(pids)) return -1;
    pid_t r = fork();
    if (r < 0) return -1;
    if (r == 0) {
        close(cmd[1]);
        close(ready[0]);
        close(pids[0]);
        root_main(cmd[0], ready[1], pids[1]);
    }
    close(cmd[0]);
    close(ready[1]);
    close(pids[1]);
    setpgid(r, r); /* also here: no race with the child's own call */
    tree_pgid = r;
    atexit(kill_tree);
    t->root = r;
    t->cmd_w = cmd[1];
    t->ready_r = ready[0];
    *pids_r = pids[0];
    /* wait for burner, sleeper, hog, writer */
    for (int got = 0; got < KIDS;) {
        char c;
        ssize_t n = read(t->ready_r, &c, 1);
        if (n <= 0) return -1;
        got++;
    }
    return 0;
}

static void stop_tree(struct tree *t)
{
    kill_tree();
    waitpid(t->root, NULL, 0);
    tree_pgid = 0;
}

/* low_fds: so few descriptors that the source cannot hold files open for
 * most processes and reads them by path (checking the start time). */
static void real_tree_case(int low_fds)
{
    alarm(120); /* a hang is a failure, not a stuck suite */
    struct tree t;
    int pids_r;
    TT_ASSERT(start_tree(&t, &pids_r) == 0);
    if (low_fds) {
        struct rlimit rl;
        TT_ASSERT(getrlimit(RLIMIT_NOFILE, &rl) == 0);
        rl.rlim_cur = 24; /* the source keeps a quarter: 3 processes' two files */
        TT_ASSERT(setrlimit(RLIMIT_NOFILE, &rl) == 0);
    }
    src_ctx ctx = {0};
    ctx.root_pid = t.root;
    ctx.interval_s = 1.0;
    void *st = NULL;
    TT_EQ_INT(procfs_source.init(&st, &ctx), 0);
    static coll_frame f;
    memset(&f, 0, sizeof(f));
    TT_EQ_INT(procfs_source.sample(st, &ctx, &f), 0);

    /* all five: root, 3 children, 1 grandchild */
    TT_EQ_INT(f.ntree, 5);
    TT_EQ_INT(f.tree_procs.v, 5);
    TT_ASSERT(!f.tree_cpu_pct.ok && !f.main_cpu_pct.ok && !f.cpu_pct.ok);
    const procfs_proc *p;
    int n = procfs_procs(st, &p);
    TT_EQ_INT(n, 5);
    pid_t root_kids[3];
    int nk = 0;
    pid_t grandkid = 0, grandparent = 0;
    for (int i = 0; i < n; i++) {
        TT_ASSERT(!p[i].cpu_pct.ok); /* first sample: unknown */
        TT_ASSERT(p[i].threads == 1);
        if (p[i].ppid == t.root && nk < 3) root_kids[nk++] = p[i].pid;
    }
    TT_EQ_INT(nk, 3);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 3; k++)
            if (p[i].ppid == root_kids[k]) {
                grandkid = p[i].pid;
                grandparent = root_kids[k];
            }
    TT_ASSERT(grandkid != 0);

    /* the hog holds >= 200 MB; the writer wrote >= 8 MB to storage */
    double max_rss = 0;
    pid_t hog = 0;
    for (int i = 0; i < n; i++)
        if (p[i].rss_bytes.ok && p[i].rss_bytes.v > max_rss) {
            max_rss = p[i].rss_bytes.v;
            hog = p[i].pid;
        }
    TT_ASSERT(max_rss >= HOG_BYTES);
    TT_ASSERT(f.tree_rss_bytes.v >= HOG_BYTES);
    const procfs_proc *w = find_proc(st, grandkid);
    TT_ASSERT(w && w->write_bytes.ok);
    if (disk_dir())
        TT_ASSERT(w->write_bytes.v >= WRITE_BYTES);
    else
        fprintf(stderr, "note: no writable folder on real storage: write bytes not checked\n");

    /* sample until the burner shows CPU (it may be starved on a busy box) */
    pid_t burner = 0;
    for (int k = 0; k < 3; k++)
        if (root_kids[k] != hog && root_kids[k] != grandparent) burner = root_kids[k];
    TT_ASSERT(burner != 0);
    double burn = 0, sleep_cpu = -1;
    for (int tries = 0; tries < 60 && burn <= 0; tries++) {
        usleep(250 * 1000);
        memset(&f, 0, sizeof(f));
        TT_EQ_INT(procfs_source.sample(st, &ctx, &f), 0);
        const procfs_proc *b = find_proc(st, burner), *s = find_proc(st, grandparent);
        TT_ASSERT(b && s && b->cpu_pct.ok && s->cpu_pct.ok);
        burn = b->cpu_pct.v;
        sleep_cpu = s->cpu_pct.v;
    }
    TT_ASSERT(burn > sleep_cpu);
    TT_ASSERT(f.tree_cpu_pct.ok && f.tree_cpu_pct.v >= burn);
    TT_ASSERT(f.main_cpu_pct.ok);
    TT_ASSERT(f.tree_threads.ok && f.tree_threads.v == 5);

    /* a newborn: its CPU is known on first sight (all of it is in this interval) */
    say(t.cmd_w, 'n');
    pid_t born = 0;
    TT_ASSERT(read(pids_r, &born, sizeof(born)) == (ssize_t)sizeof(born));
    memset(&f, 0, sizeof(f));
    TT_EQ_INT(procfs_source.sample(st, &ctx, &f), 0);
    const procfs_proc *nb = find_proc(st, born);
    TT_ASSERT(nb && nb->cpu_pct.ok && nb->cpu_pct.v > 0);
    TT_EQ_INT(f.ntree, 6);

    /* the burner dies (reaped at once by the root): it leaves the tree */
    kill(burner, SIGKILL);
    for (int tries = 0; tries < 400 && kill(burner, 0) == 0; tries++)
        usleep(10 * 1000);
    memset(&f, 0, sizeof(f));
    TT_EQ_INT(procfs_source.sample(st, &ctx, &f), 0);
    TT_ASSERT(!find_proc(st, burner));
    TT_EQ_INT(f.ntree, 5);
    for (int i = 0; i < procfs_procs(st, &p); i++)
        TT_ASSERT(!p[i].cpu_pct.ok || p[i].cpu_pct.v >= 0);

    procfs_source.close(st);
    stop_tree(&t);
    close(pids_r);
}

TT_TEST(real_tree_cpu_rss_io_exit_newborn)
{
    real_tree_case(0);
}

TT_TEST(real_tree_with_few_fds)
{
    real_tree_case(1);
}

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* DataLoader-like churn: waves of 4 workers that live ~100 ms each. */
static void churn_root(int done_w)
{
    setpgid(0, 0);
    for (int wave = 0; wave < 12; wave++) {
        pid_t w[4];
        for (int k = 0; k < 4; k++) {
            if ((w[k] = fork()) == 0) {
                double t0 = wall_s();
                volatile unsigned long x = 0;
                while (wall_s() - t0 < 0.1)
                    x++;
                _exit(0);
            }
        }
        for (int k = 0; k < 4; k++)
            waitpid(w[k], NULL, 0);
    }
    say(done_w, 'd');
    for (;;)
        pause();
}

TT_TEST(workers_come_and_go)
{
    alarm(120);
    int done[2];
    TT_ASSERT(pipe(done) == 0);
    pid_t root = fork();
    TT_ASSERT(root >= 0);
    if (root == 0) {
        close(done[0]);
        churn_root(done[1]);
    }
    close(done[1]);
    setpgid(root, root);
    tree_pgid = root;
    atexit(kill_tree);
    fcntl(done[0], F_SETFL, O_NONBLOCK);
    src_ctx ctx = {0};
    ctx.root_pid = root;
    void *st = NULL;
    TT_EQ_INT(procfs_source.init(&st, &ctx), 0);
    static coll_frame f;
    int max_tree = 0, samples = 0, worker_cpu_known = 0;
    char c;
    while (read(done[0], &c, 1) != 1) {
        usleep(5 * 1000);
        memset(&f, 0, sizeof(f));
        TT_EQ_INT(procfs_source.sample(st, &ctx, &f), 0);
        samples++;
        if (f.ntree > max_tree) max_tree = f.ntree;
        TT_ASSERT(f.tree_procs.ok && f.tree_procs.v == f.ntree);
        if (samples > 1) TT_ASSERT(f.tree_cpu_pct.ok && f.tree_cpu_pct.v >= 0);
        const procfs_proc *p;
        int n = procfs_procs(st, &p);
        TT_EQ_INT(n, f.ntree);
        for (int i = 0; i < n; i++) {
            TT_ASSERT(p[i].pid == root || p[i].ppid == root);
            TT_EQ_INT(f.tree_pids[i], p[i].pid);
            if (p[i].cpu_pct.ok) {
                TT_ASSERT(p[i].cpu_pct.v >= 0 && isfinite(p[i].cpu_pct.v));
                if (p[i].pid != root) worker_cpu_known++;
            }
            TT_ASSERT(p[i].rss_bytes.ok); /* 0 is real for one caught exiting */
        }
    }
    TT_ASSERT(max_tree >= 2);        /* workers were seen */
    TT_ASSERT(worker_cpu_known > 0); /* newborn or followed workers got a CPU figure */
    /* all workers are gone now: only the root is left */
    memset(&f, 0, sizeof(f));
    TT_EQ_INT(procfs_source.sample(st, &ctx, &f), 0);
    TT_EQ_INT(f.ntree, 1);
    TT_EQ_INT(f.tree_pids[0], root);
    procfs_source.close(st);
    kill_tree();
    waitpid(root, NULL, 0);
    tree_pgid = 0;
}

static void *burn_thread(void *arg)
{
    burn_forever();
    return arg;
}

/* Its main thread is gone ('Z' in /proc/PID/stat) but a worker runs on. */
TT_TEST(leader_exited_process_is_alive)
{
    alarm(120);
    pid_t k = fork();
    TT_ASSERT(k >= 0);
    if (k == 0) {
        pthread_t t;
        if (pthread_create(&t, NULL, burn_thread, NULL) != 0) _exit(1);
        pthread_exit(NULL);
    }
    src_ctx ctx = {0};
    ctx.root_pid = k;
    void *st = NULL;
    TT_EQ_INT(procfs_source.init(&st, &ctx), 0);
    static coll_frame f;
    double cpu = 0;
    int listed = 1;
    for (int tries = 0; tries < 60 && cpu <= 0 && listed; tries++) {
        usleep(100 * 1000);
        memset(&f, 0, sizeof(f));
        procfs_source.sample(st, &ctx, &f);
        const procfs_proc *p = find_proc(st, k);
        listed = p != NULL;
        if (p && p->cpu_pct.ok) cpu = p->cpu_pct.v;
    }
    procfs_source.close(st);
    kill(k, SIGKILL);
    waitpid(k, NULL, 0);
    TT_ASSERT(listed);
    TT_ASSERT(cpu > 0);
}

TT_TEST(embedded_root_is_self)
{
    src_ctx ctx = {0};
    ctx.root_pid = getpid();
    void *st = NULL;
    TT_EQ_INT(procfs_source.init(&st, &ctx), 0);
    static coll_frame f;
    for (int i = 0; i < 2; i++) {
        if (i) usleep(100 * 1000); /* /proc/stat moves in clock ticks */
        memset(&f, 0, sizeof(f));
        TT_EQ_INT(procfs_source.sample(st, &ctx, &f), 0);
    }
    TT_EQ_INT(f.ntree, 1);
    TT_EQ_INT(f.tree_pids[0], getpid());
    TT_ASSERT(f.main_cpu_pct.ok);
    TT_ASSERT(f.cpu_pct.ok);
    TT_ASSERT(f.mem_total_bytes.ok);
    TT_ASSERT(f.ncpu >= 1 && f.cpu_core_pct[0].ok);
    const procfs_proc *p;
    TT_EQ_INT(procfs_procs(st, &p), 1);
    TT_ASSERT(p[0].read_bytes.ok); /* our own io file is readable */
    procfs_source.close(st);
}

/* --dump ROOT_PID: two samples 0.3 s apart, then the second as JSON on one
 * line (tests/test_procfs.py compares it with psutil). Values print with %.17g
 * so nothing is lost; unknown prints as null. */
static void dump_fval(const char *k, fval v, int comma)
{
    if (v.ok)
        printf("\"%s\":%.17g%s", k, v.v, comma ? "," : "");
    else
        printf("\"%s\":null%s", k, comma ? "," : "");
}

static int dump(const char *arg)
{
    char *end;
    long pid = strtol(arg, &end, 10);
    if (*end || pid <= 0) {
        fprintf(stderr, "--dump: not a pid: %s\n", arg);
        return 2;
    }
    src_ctx ctx = {0};
    ctx.root_pid = (pid_t)pid;
    void *st = NULL;
    if (procfs_source.init(&st, &ctx) != 0) {
        fprintf(stderr, "--dump: %s\n", procfs_source.last_error(st));
        procfs_source.close(st);
        return 1;
    }
    static coll_frame f;
    procfs_source.sample(st, &ctx, &f);
    usleep(300 * 1000);
    memset(&f, 0, sizeof(f));
    procfs_source.sample(st, &ctx, &f);
    printf("{\"ncpu\":%d,", f.ncpu);
    dump_fval("mem_total_bytes", f.mem_total_bytes, 1);
    dump_fval("swap_used_bytes", f.swap_used_bytes, 1);
    dump_fval("cpu_pct", f.cpu_pct, 1);
    dump_fval("tree_procs", f.tree_procs, 1);
    dump_fval("tree_threads", f.tree_threads, 1);
    dump_fval("tree_rss_bytes", f.tree_rss_bytes, 1);
    printf("\"procs\":[");
    const procfs_proc *p;
    int n = procfs_procs(st, &p);
    for (int i = 0; i < n; i++) {
        /* comm is plain here (the test names its processes) */
        printf("%s{\"pid\":%d,\"ppid\":%d,\"comm\":\"%s\",\"threads\":%d,", i ? "," : "",
               (int)p[i].pid, (int)p[i].ppid, p[i].comm, p[i].threads);
        dump_fval("cpu_pct", p[i].cpu_pct, 1);
        dump_fval("rss_bytes", p[i].rss_bytes, 1);
        dump_fval("read_bytes", p[i].read_bytes, 1);
        dump_fval("write_bytes", p[i].write_bytes, 0);
        printf("}");
    }
    printf("]}\n");
    procfs_source.close(st);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--dump") == 0) return dump(argv[2]);
    return tt_main(argc, argv);
}
