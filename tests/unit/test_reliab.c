/* Issue 11: option validation and the afile helper (util/afile.h). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "probe/probe.h"
#include "trainperf.h"
#include "tt.h"
#include "record/segdir.h"
#include "util/afile.h"

static void tmpdir(char *d, size_t cap)
{
    snprintf(d, cap, "/tmp/tpf-reliab-XXXXXX");
    if (!mkdtemp(d)) abort();
}

static void rmrf(const char *d)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d);
    if (system(cmd) != 0) return;
}

TT_TEST(start_rejects_bad_options)
{
    char d[64];
    tmpdir(d, sizeof(d));
    unsetenv("TRAINPERF_RUN_DIR");
    tpf_options o = TPF_OPTIONS_INIT;
    o.run_dir = d;
    double bad[] = {1e300, 1e-9, -1, NAN, INFINITY, 3601, 0.009};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        o.interval_s = bad[i];
        TT_EQ_INT(tpf_start(&o), TPF_EINVAL);
    }
    o.interval_s = 0.5;
    o.version = 99;
    TT_EQ_INT(tpf_start(&o), TPF_EVERSION);
    o.version = 0;
    TT_EQ_INT(tpf_start(&o), TPF_EINVAL);
    o.version = TPF_OPTIONS_VERSION;
    o.size = 4;
    TT_EQ_INT(tpf_start(&o), TPF_EINVAL);
    o.size = 4096; /* bigger than any struct of this version */
    TT_EQ_INT(tpf_start(&o), TPF_EINVAL);
    o.size = sizeof(o);
    o.flags = 0x80u;
    TT_EQ_INT(tpf_start(&o), TPF_EINVAL);
    TT_EQ_INT(tpf_attached(), 0); /* nothing started */
    o.flags = TPF_START_NO_GPU | TPF_START_NO_PROCFS;
    TT_EQ_INT(tpf_start(&o), 0);
    TT_EQ_INT(tpf_stop(), 0);
    rmrf(d);
}

TT_TEST(lock_released_at_stop_despite_forked_workers)
{
    char d[64];
    tmpdir(d, sizeof(d));
    unsetenv("TRAINPERF_RUN_DIR");
    tpf_options o = TPF_OPTIONS_INIT;
    o.run_dir = d;
    o.flags = TPF_START_NO_GPU | TPF_START_NO_PROCFS;
    TT_EQ_INT(tpf_start(&o), 0);
    pid_t kid = fork(); /* a DataLoader worker: inherits the lock's fd */
    if (kid == 0) {
        sleep(3);
        _exit(0);
    }
    TT_EQ_INT(tpf_stop(), 0);
    /* The same directory again, worker still alive: the lock went at stop. */
    TT_EQ_INT(tpf_start(&o), 0);
    TT_EQ_INT(tpf_stop(), 0);
    kill(kid, SIGKILL);
    waitpid(kid, NULL, 0);
    rmrf(d);
}

TT_TEST(afile_never_writes_through_links)
{
    char d[64], victim[128], lnk[128];
    tmpdir(d, sizeof(d));
    snprintf(victim, sizeof(victim), "%s/victim", d);
    int fd = open(victim, O_WRONLY | O_CREAT, 0644);
    TT_ASSERT(fd >= 0 && write(fd, "keep", 4) == 4);
    close(fd);
    int dfd = afile_dir_open(d);
    TT_ASSERT(dfd >= 0);
    /* A symlink and a hard link at the names written. */
    snprintf(lnk, sizeof(lnk), "%s/a.json", d);
    TT_ASSERT(symlink(victim, lnk) == 0);
    snprintf(lnk, sizeof(lnk), "%s/b.csv", d);
    TT_ASSERT(link(victim, lnk) == 0);
    TT_EQ_INT(afile_write_at(dfd, "a.json", "{}", 2), 0);
    fd = afile_create_at(dfd, "b.csv", O_WRONLY);
    TT_ASSERT(fd >= 0);
    TT_ASSERT(write(fd, "x,y\n", 4) == 4);
    close(fd);
    struct stat st;
    TT_ASSERT(stat(victim, &st) == 0 && st.st_size == 4 && st.st_nlink == 1);
    TT_ASSERT(lstat(lnk, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 4);
    /* append refuses a symlink and a file with other links */
    snprintf(lnk, sizeof(lnk), "%s/c.csv", d);
    TT_ASSERT(symlink(victim, lnk) == 0);
    TT_ASSERT(afile_append_at(dfd, "c.csv") < 0);
    TT_ASSERT(afile_create_at(dfd, "../x", O_WRONLY) == TPF_EINVAL);
    /* no temporary is left behind */
    afile_tmp t;
    TT_EQ_INT(afile_tmp_open(&t, dfd, "d.json", 0), 0);
    afile_tmp_abort(&t);
    char tmp[400];
    snprintf(tmp, sizeof(tmp), "%s/%s", d, t.tmp);
    TT_ASSERT(access(tmp, F_OK) != 0);
    close(dfd);
    rmrf(d);
}

TT_TEST(afile_write_reports_a_missing_dir)
{
    TT_EQ_INT(afile_write("/nonexistent-dir-tpf/x.json", "{}", 2), TPF_ENOENT);
    TT_ASSERT(afile_write("", "", 0) < 0);
}

/* The segment directory (record/segdir.h): private, found back from its run,
 * never anything planted. */
TT_TEST(segdir_is_private_and_knows_its_run)
{
    char base[64], run[64], other[64], p[PATH_MAX + 64];
    tmpdir(base, sizeof(base));
    tmpdir(run, sizeof(run));
    tmpdir(other, sizeof(other));
    chmod(base, 01777);
    setenv("TRAINPERF_SHM_DIR", base, 1);
    rec_segdir sd;
    char why[256];
    TT_EQ_INT(rec_segdir_make(&sd, run, 1024, why, sizeof(why)), 0);
    TT_ASSERT(strncmp(sd.path, base, strlen(base)) == 0);
    struct stat st;
    TT_EQ_INT(lstat(sd.path, &st), 0);
    TT_ASSERT(S_ISDIR(st.st_mode) && (st.st_mode & 07777) == 0700);
    TT_EQ_INT(rec_segdir_of_run(sd.path, run), 1);
    TT_EQ_INT(rec_segdir_of_run(sd.path, other), 0);
    /* Not ours to use: a link to it, another name, a directory open to others. */
    snprintf(p, sizeof(p), "%s/trainperf-link", base);
    TT_EQ_INT(symlink(sd.path, p), 0);
    TT_ASSERT(rec_segdir_open(p) < 0);
    TT_EQ_INT(rec_segdir_of_run(p, run), 0);
    TT_ASSERT(rec_segdir_open(other) < 0);
    snprintf(p, sizeof(p), "%s/trainperf-open", base);
    TT_EQ_INT(mkdir(p, 0700), 0);
    chmod(p, 0755);
    TT_ASSERT(rec_segdir_open(p) < 0);
    int fd = rec_segdir_open(sd.path);
    TT_ASSERT(fd >= 0);
    TT_EQ_INT(rec_segdir_busy(fd), 0);
    close(fd);
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s", sd.path);
    rec_segdir_remove(&sd);
    TT_ASSERT(access(path, F_OK) != 0);
    TT_EQ_INT(sd.fd, -1);
    /* No base: an error and a reason, nothing made. */
    setenv("TRAINPERF_SHM_DIR", "/nonexistent-tpf-shm", 1);
    TT_ASSERT(rec_segdir_make(&sd, run, 1024, why, sizeof(why)) < 0);
    TT_ASSERT(strstr(why, "/nonexistent-tpf-shm") != NULL);
    TT_EQ_INT(sd.fd, -1);
    unsetenv("TRAINPERF_SHM_DIR");
    rmrf(base);
    rmrf(run);
    rmrf(other);
}

TT_TEST(embedded_segments_are_off_the_run_dir_and_removed_at_stop)
{
    char base[64], d[64];
    tmpdir(base, sizeof(base));
    tmpdir(d, sizeof(d));
    chmod(base, 01777);
    setenv("TRAINPERF_SHM_DIR", base, 1);
    unsetenv("TRAINPERF_RUN_DIR");
    tpf_options o = TPF_OPTIONS_INIT;
    o.run_dir = d;
    o.flags = TPF_START_NO_GPU | TPF_START_NO_PROCFS;
    TT_EQ_INT(tpf_start(&o), 0);
    tpf_step_begin();
    tpf_step_end(1, 0);
    char seg[PATH_MAX];
    TT_ASSERT(probe_segment_path(seg, sizeof(seg)) != NULL);
    TT_ASSERT(strncmp(seg, base, strlen(base)) == 0);
    struct stat ss, ds;
    TT_EQ_INT(stat(seg, &ss), 0);
    TT_EQ_INT(stat(d, &ds), 0);
    TT_EQ_INT((int)(ss.st_mode & 0777), 0600);
    TT_EQ_INT(tpf_stop(), 0);
    TT_ASSERT(access(seg, F_OK) != 0);
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A '%s')\"", base);
    TT_EQ_INT(system(cmd), 0); /* nothing left in the base */
    snprintf(cmd, sizeof(cmd), "grep -q '\"segments_dir\": \"%s/trainperf-' '%s/run.json'", base, d);
    TT_EQ_INT(system(cmd), 0);
    unsetenv("TRAINPERF_SHM_DIR");
    rmrf(base);
    rmrf(d);
}

int main(int argc, char **argv) { return tt_main(argc, argv); }
