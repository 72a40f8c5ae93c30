/* Which GPUs a run uses: CUDA_VISIBLE_DEVICES and PID namespaces. */
#include "collect/gpusel.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "trainperf.h"
#include "util/err.h"

/* The UUID body without its "GPU-"/"MIG-" prefix. */
static const char *uuid_body(const char *s)
{
    if (strncasecmp(s, "GPU-", 4) == 0 || strncasecmp(s, "MIG-", 4) == 0) return s + 4;
    return s;
}

/* The single device whose UUID starts with prefix (len bytes), or -1 when
 * none or several do (CUDA refuses ambiguous prefixes too). */
static int match_uuid(const char *prefix, size_t len, const char *const *uuids, int ndev)
{
    int found = -1;
    if (len == 0) return -1;
    for (int i = 0; i < ndev; i++) {
        if (!uuids[i]) continue;
        const char *body = uuid_body(uuids[i]);
        if (strlen(body) >= len && strncasecmp(body, prefix, len) == 0) {
            if (found >= 0) return -1;
            found = i;
        }
    }
    return found;
}

/* Resolve one entry of CUDA_VISIBLE_DEVICES to an NVML index, or -1. */
static int resolve_entry(const char *e, size_t len, const char *const *uuids, int ndev,
                         const gpusel_mig *migs, int nmig)
{
    if (len > 0 && isdigit((unsigned char)e[0])) {
        long v = 0;
        for (size_t i = 0; i < len; i++) {
            if (!isdigit((unsigned char)e[i])) return -1;
            v = v * 10 + (e[i] - '0');
            if (v >= ndev) return -1;
        }
        return (int)v;
    }
    if (len > 4 && strncasecmp(e, "MIG-", 4) == 0) {
        const char *b = e + 4;
        size_t blen = len - 4;
        if (blen > 4 && strncasecmp(b, "GPU-", 4) == 0) {
            /* Older form MIG-GPU-<parent uuid>/<gi>/<ci>. */
            const char *slash = memchr(b, '/', blen);
            size_t ulen = slash ? (size_t)(slash - b) : blen;
            return match_uuid(b + 4, ulen - 4, uuids, ndev);
        }
        int found = -1;
        for (int i = 0; i < nmig; i++) {
            const char *body = uuid_body(migs[i].uuid ? migs[i].uuid : "");
            if (strlen(body) >= blen && strncasecmp(body, b, blen) == 0) {
                if (found >= 0 && migs[found].parent != migs[i].parent) return -1;
                found = i;
            }
        }
        return found >= 0 ? migs[found].parent : -1;
    }
    if (len > 4 && strncasecmp(e, "GPU-", 4) == 0) return match_uuid(e + 4, len - 4, uuids, ndev);
    return match_uuid(e, len, uuids, ndev);
}

int gpusel_visible(const char *cvd, const char *const *uuids, int ndev, const gpusel_mig *migs,
                   int nmig, int *out, int max)
{
    int n = 0;
    if (!cvd) {
        for (int i = 0; i < ndev && n < max; i++)
            out[n++] = i;
        return n;
    }
    const char *p = cvd;
    while (*p && n < max) {
        while (*p == ' ' || *p == '\t')
            p++;
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t'))
            len--;
        int idx = resolve_entry(p, len, uuids, ndev, migs, nmig);
        if (idx < 0) break; /* CUDA ignores this entry and every one after it */
        int dup = 0;
        for (int i = 0; i < n; i++)
            dup |= out[i] == idx;
        if (!dup) out[n++] = idx;
        if (!end) break;
        p = end + 1;
    }
    return n;
}

/* Read a small /proc file whole into b (terminated). Returns length or error. */
static ssize_t read_small(const char *path, char *b, size_t n)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return err_from_errno(errno);
    size_t len = 0;
    while (len + 1 < n) {
        ssize_t r = read(fd, b + len, n - 1 - len);
        if (r < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            close(fd);
            return err_from_errno(e);
        }
        if (r == 0) break;
        len += (size_t)r;
    }
    close(fd);
    b[len] = '\0';
    return (ssize_t)len;
}

int gpusel_nspids(pid_t pid, pid_t *out, int max)
{
    char path[64], b[4096];
    if (max < 1) return TPF_EINVAL;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    ssize_t r = read_small(path, b, sizeof(b));
    if (r < 0) return (int)r;
    const char *l = strstr(b, "\nNSpid:");
    if (!l) {
        /* Kernels before 4.1 have no NSpid: the pid is all we know. */
        out[0] = pid;
        return 1;
    }
    const char *s = l + 7;
    int n = 0;
    while (n < max) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno) break;
        out[n++] = (pid_t)v;
        s = end;
        if (*s == '\n' || *s == '\0') break;
    }
    if (n == 0) out[n++] = pid;
    return n;
}

int gpusel_environ(pid_t pid, const char *key, char *out, size_t n)
{
    char path[64];
    size_t klen = strlen(key);
    snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return err_from_errno(errno);
    /* Stream through it: an environment may exceed any fixed buffer. */
    char chunk[4096];
    char cur[1024]; /* the current entry's first bytes: enough for KEY= and value */
    size_t clen = 0, total = 0;
    int found = 0, rc = 0;
    for (;;) {
        ssize_t r = read(fd, chunk, sizeof(chunk));
        if (r < 0) {
            if (errno == EINTR) continue;
            rc = err_from_errno(errno);
            break;
        }
        if (r == 0) break;
        total += (size_t)r;
        for (ssize_t i = 0; i < r && !found; i++) {
            if (chunk[i] != '\0') {
                if (clen + 1 < sizeof(cur)) cur[clen++] = chunk[i];
                continue;
            }
            cur[clen] = '\0';
            if (clen > klen && memcmp(cur, key, klen) == 0 && cur[klen] == '=') {
                snprintf(out, n, "%s", cur + klen + 1);
                found = 1;
            }
            clen = 0;
        }
        if (found) break;
    }
    if (!found && rc == 0 && clen > klen && memcmp(cur, key, klen) == 0 && cur[klen] == '=') {
        cur[clen] = '\0';
        snprintf(out, n, "%s", cur + klen + 1);
        found = 1;
    }
    close(fd);
    if (rc) return rc;
    /* Empty: most likely a process still inside execve (the kernel sets the
     * environment up after a vfork parent resumes); ask again later. */
    if (total == 0) return TPF_ESTATE;
    return found;
}
