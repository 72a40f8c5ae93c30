/* Finding trace files: a directory as torch's tensorboard_trace_handler
 * leaves it (one file per rank and step), or a run directory. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "trace/trace.h"
#include "trainperf.h"
#include "util/err.h"

#define MAX_DIR_TRACES 65536

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void trace_paths_free(char **paths, int n)
{
    if (!paths) return;
    for (int i = 0; i < n; i++) free(paths[i]);
    free(paths);
}

int trace_list_dir(const char *dir, char ***out, int *nout)
{
    *out = NULL;
    *nout = 0;
    DIR *d = opendir(dir);
    if (!d) return err_from_errno(errno) ? err_from_errno(errno) : TPF_EIO;
    char **v = NULL;
    int n = 0, cap = 0, rc = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *nm = e->d_name;
        if (nm[0] == '.' || !(ends_with(nm, ".json") || ends_with(nm, ".json.gz"))) continue;
        if (n == MAX_DIR_TRACES) {
            rc = TPF_ETOOBIG;
            break;
        }
        if (n == cap) {
            int nc = cap ? cap * 2 : 16;
            char **nv = realloc(v, (size_t)nc * sizeof(*nv));
            if (!nv) {
                rc = TPF_ENOMEM;
                break;
            }
            v = nv;
            cap = nc;
        }
        size_t dl = strlen(dir), fl = strlen(nm);
        char *p = malloc(dl + fl + 2);
        if (!p) {
            rc = TPF_ENOMEM;
            break;
        }
        memcpy(p, dir, dl);
        p[dl] = '/';
        memcpy(p + dl + 1, nm, fl + 1);
        v[n++] = p;
    }
    closedir(d);
    if (rc) {
        trace_paths_free(v, n);
        return rc;
    }
    if (n) qsort(v, (size_t)n, sizeof(*v), name_cmp);
    *out = v;
    *nout = n;
    return 0;
}

int trace_expand_args(const char *const *args, int n, char ***out, int *nout, char *err, size_t errlen)
{
    *out = NULL;
    *nout = 0;
    char **v = NULL;
    int nv = 0, cap = 0, rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        struct stat st;
        char **sub = NULL;
        int ns = 0;
        if (stat(args[i], &st) == 0 && S_ISDIR(st.st_mode)) {
            rc = trace_list_dir(args[i], &sub, &ns);
            if (rc) {
                snprintf(err, errlen, "cannot list %s: %s", args[i], tpf_strerror(rc));
                break;
            }
            if (!ns) {
                snprintf(err, errlen, "no .json or .json.gz files in %s", args[i]);
                rc = TPF_ENOENT;
                break;
            }
        } else {
            /* Files (or what fails to open) go through as given: the reader
             * reports what is wrong with them. */
            sub = malloc(sizeof(*sub));
            if (sub && (sub[0] = malloc(strlen(args[i]) + 1)) != NULL) {
                memcpy(sub[0], args[i], strlen(args[i]) + 1);
                ns = 1;
            } else {
                free(sub);
                sub = NULL;
                rc = TPF_ENOMEM;
                snprintf(err, errlen, "out of memory");
                break;
            }
        }
        if (nv + ns > MAX_DIR_TRACES) {
            trace_paths_free(sub, ns);
            snprintf(err, errlen, "more than %d trace files", MAX_DIR_TRACES);
            rc = TPF_ETOOBIG;
            break;
        }
        if (nv + ns > cap) {
            int nc = cap ? cap : 16;
            while (nc < nv + ns) nc *= 2;
            char **nn = realloc(v, (size_t)nc * sizeof(*nn));
            if (!nn) {
                trace_paths_free(sub, ns);
                snprintf(err, errlen, "out of memory");
                rc = TPF_ENOMEM;
                break;
            }
            v = nn;
            cap = nc;
        }
        for (int k = 0; k < ns; k++) v[nv++] = sub[k];
        free(sub);
    }
    if (rc) {
        trace_paths_free(v, nv);
        return rc;
    }
    *out = v;
    *nout = nv;
    return 0;
}
