/* Run directory creation (see rundir.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "record/rundir.h"
#include "trainperf.h"
#include "util/afile.h"
#include "util/err.h"

static int mkdir_p(const char *dir)
{
    char p[PATH_MAX];
    size_t n = strlen(dir);
    if (n == 0) return TPF_EINVAL;
    if (n >= sizeof(p)) return TPF_ETOOBIG;
    memcpy(p, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != 0) continue;
        char keep = p[i];
        p[i] = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) return err_from_errno(errno);
        p[i] = keep;
    }
    struct stat st;
    if (stat(dir, &st) != 0) return err_from_errno(errno);
    if (!S_ISDIR(st.st_mode)) return TPF_EEXIST;
    return 0;
}

int rec_rundir_mkdirs(const char *dir)
{
    return mkdir_p(dir);
}

int rec_rundir_prepare(const char *dir)
{
    if (!dir || !*dir) return TPF_EINVAL;
    if (strlen(dir) >= PATH_MAX - 64) return TPF_ETOOBIG;
    int rc = mkdir_p(dir);
    if (rc) return rc;
    /* access() answers for the real uid; a probe file answers for real.
     * Made with O_EXCL relative to the directory: never through a link. */
    int dfd = afile_dir_open(dir);
    if (dfd < 0) return dfd;
    int fd = afile_create_at(dfd, ".trainperf-write-test", O_WRONLY);
    if (fd < 0) {
        close(dfd);
        return fd;
    }
    close(fd);
    unlinkat(dfd, ".trainperf-write-test", 0);
    close(dfd);
    char live[PATH_MAX];
    snprintf(live, sizeof(live), "%s/live", dir);
    if (mkdir(live, 0755) != 0 && errno != EEXIST) return err_from_errno(errno);
    /* Segments left by an earlier run in this directory would be drained
     * into this one: nothing writes here yet, so they go. */
    DIR *d = opendir(live);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
            if (strncmp(de->d_name, "seg-", 4) != 0 && strncmp(de->d_name, "noroom-", 7) != 0)
                continue;
            char p[PATH_MAX + 300];
            if (snprintf(p, sizeof(p), "%s/%s", live, de->d_name) < (int)sizeof(p)) unlink(p);
        }
        closedir(d);
    }
    return 0;
}

int rec_rundir_create(const char *base, const char *label, char *out, size_t n)
{
    if (!base || !*base || !out || n == 0) return TPF_EINVAL;
    int rc = mkdir_p(base);
    if (rc) return rc;
    char lab[48];
    size_t k = 0;
    for (const char *p = label ? label : ""; *p && k < sizeof(lab) - 1; p++) {
        char ch = *p;
        int keep = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                   (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-';
        lab[k++] = keep ? ch : '_';
    }
    lab[k] = 0;
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char stamp[32];
    strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &tm);
    char name[96];
    for (int i = 1; i < 1000; i++) {
        if (i == 1)
            snprintf(name, sizeof(name), "%s%s%s", stamp, k ? "-" : "", lab);
        else
            snprintf(name, sizeof(name), "%s%s%s-%d", stamp, k ? "-" : "", lab, i);
        int w = snprintf(out, n, "%s/%s", base, name);
        if (w < 0 || (size_t)w >= n) return TPF_ETOOBIG;
        /* mkdir is the atomic claim: two runs started in one second differ. */
        if (mkdir(out, 0755) == 0) break;
        if (errno != EEXIST) return err_from_errno(errno);
        if (i == 999) return TPF_EEXIST;
    }
    rc = rec_rundir_prepare(out);
    if (rc) return rc;
    /* latest -> name, replaced atomically (symlink to a temp name, rename). */
    char tmp[PATH_MAX], latest[PATH_MAX];
    snprintf(tmp, sizeof(tmp), "%s/.latest-%d", base, (int)getpid());
    snprintf(latest, sizeof(latest), "%s/latest", base);
    unlink(tmp);
    if (symlink(name, tmp) == 0 && rename(tmp, latest) != 0) unlink(tmp);
    return 0;
}
