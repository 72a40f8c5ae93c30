/* A run that is going now (see run_live.h). */
#include "cli/run_live.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "record/rundir.h"
#include "util/jsonr.h"

int live_pid_alive(pid_t pid)
{
    return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
}

pid_t live_parse_pid(const char *s)
{
    char *end;
    if (!s || !*s) return 0;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v <= 0 || v > INT_MAX) return 0;
    return (pid_t)v;
}

int live_run_find(const char *dir, live_run *lr, char *err, size_t n)
{
    memset(lr, 0, sizeof(*lr));
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, n, "%s: no such run directory", dir);
        return -1;
    }
    if (rec_rundir_in_use(dir) != 1) {
        snprintf(err, n, "%s is not running: no `trainperf run` or trainperf.start() holds it "
                         "(a finished run: `trainperf report %s`)", dir, dir);
        return -1;
    }
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/heartbeat.json", dir);
    jr_doc d;
    char e[160];
    if (jr_load_file(&d, path, 1u << 20, e, sizeof(e)) == 0) {
        const char *state = jr_pstr(d.root, "state");
        double pid = jr_pnum(d.root, "pid"), sup = jr_pnum(d.root, "supervisor_pid");
        if (isfinite(sup) && sup > 0 && sup < INT_MAX && live_pid_alive((pid_t)sup))
            lr->supervisor = (pid_t)sup;
        if ((!state || strcmp(state, "finished") != 0) && isfinite(pid) && pid > 0 &&
            pid < INT_MAX && live_pid_alive((pid_t)pid))
            lr->root = (pid_t)pid;
        jr_free(&d);
    }
    snprintf(path, sizeof(path), "%s/live", dir);
    DIR *dd = opendir(path);
    struct dirent *de;
    while (dd && (de = readdir(dd)) != NULL && lr->nhooked < LR_MAX_HOOKED) {
        if (strncmp(de->d_name, "ctl-", 4) != 0) continue;
        pid_t pid = live_parse_pid(de->d_name + 4);
        if (pid && live_pid_alive(pid)) lr->hooked[lr->nhooked++] = pid;
    }
    if (dd) closedir(dd);
    return 0;
}

int live_pid_run_dir(pid_t pid, char *out, size_t n)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%ld/environ", (long)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    static const char key[] = "TRAINPERF_RUN_DIR=";
    size_t cap = 1u << 20, len = 0;
    char *env = malloc(cap + 1);
    ssize_t r;
    while (env && len < cap &&
           ((r = read(fd, env + len, cap - len)) > 0 || (r < 0 && errno == EINTR)))
        if (r > 0) len += (size_t)r;
    close(fd);
    if (!env) return -1;
    env[len] = 0;
    int rc = -1;
    for (size_t i = 0; i < len; i += strlen(env + i) + 1)
        if (strncmp(env + i, key, sizeof(key) - 1) == 0 && env[i + sizeof(key) - 1]) {
            snprintf(out, n, "%s", env + i + sizeof(key) - 1);
            rc = 0;
        }
    free(env);
    return rc;
}
