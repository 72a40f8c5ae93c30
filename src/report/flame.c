/* Flame graphs of the run's sampled stacks (flame.h). */
#include "report/flame.h"

#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "report/diag_base.h"
#include "report/load_pyprof.h"
#include "trainperf.h"
#include "util/afile.h"
#include "util/jsonr.h"
#include "util/jsonw.h"
#include "util/table.h"

#define FLAME_MAX_FILES 256          /* stacks-*.folded read per run directory */
#define FLAME_MAX_LINE (256 * 1024)  /* a longer line is skipped */
#define FLAME_MAX_DEPTH 2048         /* frames of one stack */
#define FLAME_MAX_FRAMES (1 << 20)   /* distinct frames over all processes */
#define FLAME_MAX_STACKS (1 << 21)
#define FLAME_MAX_IDX ((size_t)1 << 26) /* frame indices over all stacks */
#define FLAME_HTML_NODES 200000      /* call-tree nodes embedded in the report, all processes */
#define FLAME_HTML_PROC_MIN 2000     /* ... of which each process may keep at least this many */
#define FLAME_HTML_PROCS 64          /* processes in the report's picker */
#define FLAME_OUT_MAX ((size_t)512 << 20)

/* ---- loading ------------------------------------------------------------------ */

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return 0;
    size_t n = *cap ? *cap : 64;
    while (n < need)
        n *= 2;
    void *q = realloc(*p, n * elem);
    if (!q) return TPF_ENOMEM;
    *p = q;
    *cap = n;
    return 0;
}

static int rehash(flame_set *fs, size_t cap)
{
    size_t *t = calloc(cap, sizeof(*t));
    if (!t) return TPF_ENOMEM;
    for (size_t i = 0; i < fs->nframes; i++) {
        size_t h = (size_t)hash_str(fs->label[i]) & (cap - 1);
        while (t[h])
            h = (h + 1) & (cap - 1);
        t[h] = i + 1;
    }
    free(fs->htab);
    fs->htab = t;
    fs->hcap = cap;
    return 0;
}

/* The index of the frame labelled s (added when new), or -1: out of memory
 * or over FLAME_MAX_FRAMES. */
static int intern(flame_set *fs, const char *s)
{
    if (fs->nframes * 2 >= fs->hcap && rehash(fs, fs->hcap ? fs->hcap * 2 : 1024)) return -1;
    size_t h = (size_t)hash_str(s) & (fs->hcap - 1);
    while (fs->htab[h]) {
        if (strcmp(fs->label[fs->htab[h] - 1], s) == 0) return (int)(fs->htab[h] - 1);
        h = (h + 1) & (fs->hcap - 1);
    }
    if (fs->nframes >= FLAME_MAX_FRAMES) return -1;
    if (grow((void **)&fs->label, &fs->cap_frames, fs->nframes + 1, sizeof(char *))) return -1;
    char *c = strdup(s);
    if (!c) return -1;
    fs->label[fs->nframes] = c;
    fs->htab[h] = ++fs->nframes;
    return (int)(fs->nframes - 1);
}

/* One line "[phase];frame;... count" into fs as a stack of the last process.
 * 0 taken, 1 skipped (damaged, over a cap), or TPF_ENOMEM. */
static int add_line(flame_set *fs, char *line)
{
    size_t len = strlen(line);
    while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
        line[--len] = 0;
    char *sp = strrchr(line, ' ');
    if (!sp || sp == line) return 1;
    char *end;
    double n = strtod(sp + 1, &end);
    if (end == sp + 1 || *end || !(n > 0) || !isfinite(n)) return 1;
    *sp = 0;
    if (fs->nstk >= FLAME_MAX_STACKS || fs->nfidx + FLAME_MAX_DEPTH > FLAME_MAX_IDX) return 1;
    if (grow((void **)&fs->fidx, &fs->cap_fidx, fs->nfidx + FLAME_MAX_DEPTH, sizeof(int)) ||
        grow((void **)&fs->stk, &fs->cap_stk, fs->nstk + 1, sizeof(flame_stack)))
        return TPF_ENOMEM;
    size_t off = fs->nfidx;
    int depth = 0;
    for (char *f = line; f && depth < FLAME_MAX_DEPTH;) {
        char *semi = strchr(f, ';');
        if (semi) *semi = 0;
        if (*f) {
            int k = intern(fs, f);
            if (k < 0) return fs->nframes >= FLAME_MAX_FRAMES ? 1 : TPF_ENOMEM;
            fs->fidx[off + (size_t)depth++] = k;
        }
        f = semi ? semi + 1 : NULL;
    }
    if (depth == 0) return 1;
    fs->nfidx += (size_t)depth;
    fs->stk[fs->nstk++] = (flame_stack){off, depth, n};
    fs->proc[fs->nproc - 1].n++;
    fs->proc[fs->nproc - 1].samples += n;
    return 0;
}

/* The rank events-<pid>.json gives the process, -1 when none. */
static int proc_rank(const char *pyprof, int pid)
{
    char path[PATH_MAX + 64], err[160];
    snprintf(path, sizeof(path), "%s/events-%d.json", pyprof, pid);
    jr_doc d;
    if (jr_load_file(&d, path, 16u << 20, err, sizeof(err)) != 0) return -1;
    int rank = d.root->type == JR_OBJ ? dc_events_rank(d.root) : -1;
    jr_free(&d);
    return rank;
}

static int load_file(flame_set *fs, const char *path, char *line)
{
    FILE *f = afile_fopen_read(path);
    if (!f) {
        fs->skipped++;
        return 0;
    }
    int rc = 0;
    while (rc == 0 && fgets(line, FLAME_MAX_LINE, f)) {
        if (!strchr(line, '\n') && !feof(f)) {
            /* too long: skip to the end of this line */
            int c;
            while ((c = fgetc(f)) != EOF && c != '\n') {
            }
            fs->skipped++;
            continue;
        }
        int k = add_line(fs, line);
        if (k > 0) fs->skipped++;
        if (k < 0) rc = k;
    }
    fclose(f);
    return rc;
}

static int cmp_proc(const void *a, const void *b)
{
    const flame_proc *x = a, *y = b;
    if ((x->rank < 0) != (y->rank < 0)) return x->rank < 0 ? 1 : -1;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    if (x->node != y->node) return x->node < y->node ? -1 : 1;
    return (x->pid > y->pid) - (x->pid < y->pid);
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The pids of dir's stacks-<pid>.folded files, sorted; their count. */
static int list_pids(const char *pyprof, int *pids)
{
    DIR *d = opendir(pyprof);
    if (!d) return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < FLAME_MAX_FILES) {
        const char *s = de->d_name;
        size_t len = strlen(s);
        if (strncmp(s, "stacks-", 7) != 0 || len < 15 || strcmp(s + len - 7, ".folded") != 0)
            continue;
        char *end;
        long pid = strtol(s + 7, &end, 10);
        if (end != s + len - 7 || pid <= 0 || pid > INT_MAX) continue;
        pids[n++] = (int)pid;
    }
    closedir(d);
    qsort(pids, (size_t)n, sizeof(int), cmp_int);
    return n;
}

int flame_load(flame_set *fs, const char *const *dirs, int ndirs)
{
    memset(fs, 0, sizeof(*fs));
    char *line = malloc(FLAME_MAX_LINE);
    int *pids = malloc(FLAME_MAX_FILES * sizeof(int));
    int rc = line && pids ? 0 : TPF_ENOMEM;
    for (int k = 0; rc == 0 && k < ndirs; k++) {
        char pyprof[PATH_MAX], path[PATH_MAX + 64];
        if (snprintf(pyprof, sizeof(pyprof), "%s/pyprof", dirs[k]) >= (int)sizeof(pyprof)) continue;
        int np = list_pids(pyprof, pids);
        for (int i = 0; rc == 0 && i < np; i++) {
            size_t cap = (size_t)fs->cap_proc;
            if (grow((void **)&fs->proc, &cap, (size_t)fs->nproc + 1, sizeof(flame_proc))) {
                rc = TPF_ENOMEM;
                break;
            }
            fs->cap_proc = (int)cap;
            fs->proc[fs->nproc++] =
                (flame_proc){pids[i], proc_rank(pyprof, pids[i]), k, fs->nstk, 0, 0};
            snprintf(path, sizeof(path), "%s/stacks-%d.folded", pyprof, pids[i]);
            rc = load_file(fs, path, line);
            if (fs->proc[fs->nproc - 1].n == 0) fs->nproc--; /* empty: not a profile */
        }
    }
    free(line);
    free(pids);
    if (fs->nproc > 1) qsort(fs->proc, (size_t)fs->nproc, sizeof(flame_proc), cmp_proc);
    return rc;
}

void flame_free(flame_set *fs)
{
    for (size_t i = 0; i < fs->nframes; i++)
        free(fs->label[i]);
    free(fs->label);
    free(fs->htab);
    free(fs->fidx);
    free(fs->stk);
    free(fs->proc);
    memset(fs, 0, sizeof(*fs));
}

/* ---- frames as people read them ---------------------------------------------- */

/* A label "func (file.py:12)" split into its name (copied into name), file
 * and line; a phase "[data]" reads "[data wait]", without file. */
typedef struct frame_parts {
    char name[512];
    char file[512];
    int line; /* 0: none */
} frame_parts;

static void frame_split(const char *label, frame_parts *p)
{
    p->file[0] = 0;
    p->line = 0;
    if (strcmp(label, "[data]") == 0) {
        diag_fmt(p->name, sizeof(p->name), "[data wait]");
        return;
    }
    /* the function's name has no " (" (a code object's co_name); the file's
     * base name may hold anything, so the line is after the last ':' */
    size_t len = strlen(label);
    const char *open = strstr(label, " (");
    const char *colon = strrchr(label, ':');
    if (len > 4 && label[len - 1] == ')' && open && open > label && colon && colon > open + 1) {
        char *end;
        long ln = strtol(colon + 1, &end, 10);
        if (end == label + len - 1 && end > colon + 1 && ln >= 0 && ln <= INT_MAX) {
            diag_fmt(p->name, sizeof(p->name), "%.*s", (int)(open - label), label);
            diag_fmt(p->file, sizeof(p->file), "%.*s", (int)(colon - open - 2), open + 2);
            p->line = (int)ln;
            return;
        }
    }
    diag_fmt(p->name, sizeof(p->name), "%s", label);
}

static void proc_name(const flame_set *fs, const flame_proc *p, char *out, size_t n)
{
    int multi = 0;
    for (int i = 0; i < fs->nproc; i++)
        multi |= fs->proc[i].node != 0;
    char node[32] = "";
    if (multi) snprintf(node, sizeof(node), ", node %d", p->node);
    if (p->rank >= 0)
        snprintf(out, n, "rank %d (pid %d%s)", p->rank, p->pid, node);
    else
        snprintf(out, n, "pid %d%s", p->pid, node);
}

/* ---- speedscope ---------------------------------------------------------------- */

int flame_speedscope(const flame_set *fs, const char *title, buf *out)
{
    jw w;
    jw_init(&w, out, 0);
    jw_obj_begin(&w);
    jw_kstr(&w, "$schema", "https://www.speedscope.app/file-format-schema.json");
    char s[160];
    snprintf(s, sizeof(s), "trainperf %s", tpf_version());
    jw_kstr(&w, "exporter", s);
    jw_kstr(&w, "name", title);
    jw_knum(&w, "activeProfileIndex", 0);
    jw_key(&w, "shared");
    jw_obj_begin(&w);
    jw_key(&w, "frames");
    jw_arr_begin(&w);
    frame_parts *fp = malloc(sizeof(*fp));
    if (!fp) return TPF_ENOMEM;
    for (size_t i = 0; i < fs->nframes; i++) {
        frame_split(fs->label[i], fp);
        jw_obj_begin(&w);
        jw_kstr(&w, "name", fp->name);
        if (fp->file[0]) jw_kstr(&w, "file", fp->file);
        if (fp->file[0]) jw_kint(&w, "line", fp->line);
        jw_obj_end(&w);
    }
    free(fp);
    jw_arr_end(&w);
    jw_obj_end(&w);
    jw_key(&w, "profiles");
    jw_arr_begin(&w);
    for (int i = 0; i < fs->nproc && !out->err; i++) {
        const flame_proc *p = &fs->proc[i];
        jw_obj_begin(&w);
        jw_kstr(&w, "type", "sampled");
        proc_name(fs, p, s, sizeof(s));
        jw_kstr(&w, "name", s);
        jw_kstr(&w, "unit", "none");
        jw_knum(&w, "startValue", 0);
        jw_knum(&w, "endValue", p->samples);
        jw_key(&w, "samples");
        jw_arr_begin(&w);
        for (size_t k = p->first; k < p->first + p->n; k++) {
            jw_arr_begin(&w);
            for (int d = 0; d < fs->stk[k].depth; d++)
                jw_int(&w, fs->fidx[fs->stk[k].off + (size_t)d]);
            jw_arr_end(&w);
        }
        jw_arr_end(&w);
        jw_key(&w, "weights");
        jw_arr_begin(&w);
        for (size_t k = p->first; k < p->first + p->n; k++)
            jw_num(&w, fs->stk[k].count);
        jw_arr_end(&w);
        jw_obj_end(&w);
    }
    jw_arr_end(&w);
    jw_obj_end(&w);
    buf_putc(out, '\n');
    return out->err;
}

/* 1 when RUN/FLAME_FILE holds exactly b */
static int same_file(const char *run_dir, const buf *b)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/%s", run_dir, FLAME_FILE);
    FILE *f = afile_fopen_read(path);
    if (!f) return 0;
    char chunk[65536];
    size_t at = 0, n;
    int same = 1;
    while (same && (n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        same = at + n <= b->len && memcmp(chunk, b->data + at, n) == 0;
        at += n;
    }
    same = same && !ferror(f) && at == b->len;
    fclose(f);
    return same;
}

int flame_write_speedscope(const char *run_dir, char *err, size_t errlen)
{
    flame_set fs;
    int rc = flame_load(&fs, &run_dir, 1);
    if (rc == 0 && fs.nproc == 0) rc = 1;
    buf b;
    buf_init(&b, FLAME_OUT_MAX);
    if (rc == 0) {
        const char *base = strrchr(run_dir, '/');
        char title[300];
        snprintf(title, sizeof(title), "%s: sampled Python stacks", base && base[1] ? base + 1 : run_dir);
        rc = flame_speedscope(&fs, title, &b);
    }
    if (rc == 0 && same_file(run_dir, &b)) {
        /* already there as it would be written: left alone (a run copied
         * read-only, or reported twice, keeps its file and its time) */
    } else if (rc == 0) {
        int dfd = afile_dir_open(run_dir);
        rc = dfd < 0 ? dfd : afile_write_at(dfd, FLAME_FILE, b.data ? b.data : "", b.len);
        if (dfd >= 0) close(dfd);
    }
    if (rc < 0 && err && errlen)
        snprintf(err, errlen, "%s/%s: %s", run_dir, FLAME_FILE, tpf_strerror(rc));
    buf_free(&b);
    flame_free(&fs);
    return rc;
}

/* ---- the report's flame graph ------------------------------------------------- */

/* A process's call tree: children as a linked list, the root's (phases) at
 * index 0's children; value = samples through the node. */
typedef struct tnode {
    int frame, depth;
    double value;
    int child, next; /* first child, next sibling; -1 none */
} tnode;

typedef struct tree {
    tnode *n;
    size_t len, cap;
} tree;

static int tree_child(tree *t, int parent, int frame)
{
    for (int c = t->n[parent].child; c >= 0; c = t->n[c].next)
        if (t->n[c].frame == frame) return c;
    if (grow((void **)&t->n, &t->cap, t->len + 1, sizeof(tnode))) return -1;
    int c = (int)t->len++;
    t->n[c] = (tnode){frame, t->n[parent].depth + 1, 0, -1, t->n[parent].child};
    t->n[parent].child = c;
    return c;
}

static int tree_build(const flame_set *fs, const flame_proc *p, tree *t)
{
    t->len = 0;
    if (grow((void **)&t->n, &t->cap, 1, sizeof(tnode))) return TPF_ENOMEM;
    t->n[t->len++] = (tnode){-1, -1, 0, -1, -1};
    for (size_t k = p->first; k < p->first + p->n; k++) {
        const flame_stack *s = &fs->stk[k];
        int at = 0;
        t->n[0].value += s->count;
        for (int d = 0; d < s->depth; d++) {
            at = tree_child(t, at, fs->fidx[s->off + (size_t)d]);
            if (at < 0) return TPF_ENOMEM;
            t->n[at].value += s->count;
        }
    }
    return 0;
}

static int cmp_desc(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

/* The value a node needs to be embedded: keeps at most cap nodes (a child
 * never weighs more than its parent, so what is kept stays a tree). */
static double tree_cut(const tree *t, size_t cap)
{
    if (t->len - 1 <= cap) return 0;
    double *v = malloc((t->len - 1) * sizeof(double));
    if (!v) return INFINITY;
    for (size_t i = 1; i < t->len; i++)
        v[i - 1] = t->n[i].value;
    qsort(v, t->len - 1, sizeof(double), cmp_desc);
    double cut = v[cap];
    free(v);
    return cut;
}

typedef struct emit_ctx {
    const tree *t;
    double cut;
    int *fmap; /* frame -> index in the embedded names, -1 not yet */
    int nnames;
    int *order; /* scratch: node indices */
    jw *w;
    int truncated;
} emit_ctx;

/* heaviest first (qsort_r: the tree is the argument, no global) */
static int cmp_children(const void *a, const void *b, void *arg)
{
    const tree *t = arg;
    double x = t->n[*(const int *)a].value, y = t->n[*(const int *)b].value;
    return (x < y) - (x > y);
}

/* st[from..to) sorted lightest first, so the heaviest pops first */
static void push_order(const tree *t, int *st, size_t from, size_t to)
{
    qsort_r(st + from, to - from, sizeof(int), cmp_children, (void *)t);
    for (size_t a = from, b = to ? to - 1 : 0; a < b; a++, b--) {
        int x = st[a];
        st[a] = st[b];
        st[b] = x;
    }
}

/* Preorder, heaviest child first: [name, depth, value] per node. Iterative
 * (stacks may be 2,048 deep): order[] holds the nodes still to write. */
static void emit_tree(emit_ctx *e)
{
    const tree *t = e->t;
    int *st = e->order;
    size_t top = 0;
    for (int c = t->n[0].child; c >= 0; c = t->n[c].next)
        st[top++] = c;
    push_order(t, st, 0, top);
    while (top > 0) {
        int i = st[--top];
        const tnode *n = &t->n[i];
        if (n->value <= e->cut) {
            e->truncated = 1;
            continue;
        }
        if (e->fmap[n->frame] < 0) e->fmap[n->frame] = e->nnames++;
        jw_int(e->w, e->fmap[n->frame]);
        jw_int(e->w, n->depth);
        jw_num(e->w, n->value);
        size_t from = top;
        for (int c = n->child; c >= 0; c = t->n[c].next)
            st[top++] = c;
        push_order(t, st, from, top);
    }
}

/* The script that draws the flame graph; its hash is FLAME_JS_SHA256. */
static const char flame_js[] =
    "(function(){"
    "var D=JSON.parse(document.getElementById('tpf-flame-data').textContent);"
    "var NS='http://www.w3.org/2000/svg',svg=document.getElementById('tpf-flame'),"
    "sel=document.getElementById('tpf-flame-proc'),info=document.getElementById('tpf-flame-info'),"
    "RH=17,P=null,X=[],R=[],Z=-1;"
    "var HUE={'[data wait]':30,'[forward]':210,'[backward]':265,'[optimizer]':130,"
    "'[compute]':185,'[comm]':350,'[compile]':55,'[checkpoint]':90,'[eval]':160,'[gc]':0};"
    "function hash(s){var h=0;for(var i=0;i<s.length;i++)h=(h*31+s.charCodeAt(i))|0;return h;}"
    "function color(i){var ph=D.names[P.nodes[3*R[i]]],h=HUE[ph],l=50+Math.abs(hash(D.names[P.nodes[3*i]]))%20;"
    "return h===undefined?'hsl(0,0%,'+(l+5)+'%)':'hsl('+h+',65%,'+l+'%)';}"
    "function layout(){var n=P.nodes,k=n.length/3,next=[0],root=[];X=new Array(k);R=new Array(k);"
    "for(var i=0;i<k;i++){var d=n[3*i+1];X[i]=next[d]||0;next[d]=X[i]+n[3*i+2];next[d+1]=X[i];"
    "root[d]=i;R[i]=root[0];}}"
    "function pct(v){return (100*v/P.samples).toFixed(1)+'%';}"
    "function draw(){while(svg.firstChild)svg.removeChild(svg.firstChild);"
    "var n=P.nodes,k=n.length/3,W=svg.clientWidth||1000,x0=0,w0=P.samples,dmax=0,drawn=0;"
    "if(Z>=0){x0=X[Z];w0=n[3*Z+2];}var s=W/w0;"
    "for(var i=0;i<k;i++){var a=Math.max(X[i],x0),b=Math.min(X[i]+n[3*i+2],x0+w0),pw=(b-a)*s;"
    "if(pw<0.3)continue;var d=n[3*i+1];if(d>dmax)dmax=d;"
    "var g=document.createElementNS(NS,'g'),r=document.createElementNS(NS,'rect'),"
    "t=document.createElementNS(NS,'title'),nm=D.names[n[3*i]];"
    "g.setAttribute('data-i',i);"
    "r.setAttribute('x',((a-x0)*s).toFixed(1));r.setAttribute('y',d*RH);"
    "r.setAttribute('width',Math.max(pw-0.5,0.3).toFixed(1));r.setAttribute('height',RH-1);"
    "r.setAttribute('fill',color(i));"
    "t.textContent=nm+' \\u2014 '+n[3*i+2]+' samples ('+pct(n[3*i+2])+')';g.appendChild(t);g.appendChild(r);"
    "if(pw>28){var tx=document.createElementNS(NS,'text'),c=Math.floor((pw-6)/6.6);"
    "tx.setAttribute('x',((a-x0)*s+3).toFixed(1));tx.setAttribute('y',d*RH+12);"
    "tx.textContent=nm.length>c?nm.slice(0,Math.max(c-1,1))+'\\u2026':nm;g.appendChild(tx);}"
    "svg.appendChild(g);drawn++;}"
    "svg.style.height=((dmax+1)*RH)+'px';svg.setAttribute('data-nodes',drawn);svg.setAttribute('data-zoom',Z);"
    "info.textContent=Z>=0?'zoomed on '+D.names[n[3*Z]]+': '+n[3*Z+2]+' samples ('+pct(n[3*Z+2])+'); "
    "click the top frame or Reset to zoom out':P.samples+' samples; click a frame to zoom in';}"
    "function keep(){try{history.replaceState(null,'','#flame='+sel.value+','+Z);}catch(e){}}"
    "function pick(){P=D.procs[sel.value|0];Z=-1;layout();draw();}"
    "svg.addEventListener('click',function(ev){var g=ev.target.closest('g');if(!g)return;"
    "var i=+g.getAttribute('data-i');Z=(i===Z)?-1:i;draw();keep();});"
    "document.getElementById('tpf-flame-reset').addEventListener('click',function(){Z=-1;draw();keep();});"
    "sel.addEventListener('change',function(){pick();keep();});"
    "window.addEventListener('resize',function(){if(P)draw();});"
    /* a link to a view: #flame=PROC,NODE (NODE -1: not zoomed) */
    "var m=/^#flame=(\\d+),(-?\\d+)$/.exec(location.hash);"
    "if(m&&+m[1]<D.procs.length)sel.value=m[1];pick();"
    "if(m&&+m[2]>=0&&+m[2]<P.nodes.length/3){Z=+m[2];draw();}})();";

void flame_html(const flame_set *fs, buf *out)
{
    if (!fs || fs->nproc == 0) return;
    int np = fs->nproc < FLAME_HTML_PROCS ? fs->nproc : FLAME_HTML_PROCS;
    size_t cap = FLAME_HTML_NODES / (size_t)np;
    if (cap < FLAME_HTML_PROC_MIN) cap = FLAME_HTML_PROC_MIN;
    buf j;
    buf_init(&j, FLAME_OUT_MAX);
    jw w;
    jw_init(&w, &j, 0);
    tree t = {NULL, 0, 0};
    emit_ctx e = {0};
    e.fmap = malloc((fs->nframes ? fs->nframes : 1) * sizeof(int));
    int *names = malloc((fs->nframes ? fs->nframes : 1) * sizeof(int));
    int truncated = 0, rc = e.fmap && names ? 0 : TPF_ENOMEM;
    for (size_t i = 0; rc == 0 && i < fs->nframes; i++)
        e.fmap[i] = -1;
    char s[160];
    jw_obj_begin(&w);
    jw_key(&w, "procs");
    jw_arr_begin(&w);
    for (int i = 0; rc == 0 && i < np; i++) {
        const flame_proc *p = &fs->proc[i];
        rc = tree_build(fs, p, &t);
        if (rc) break;
        free(e.order);
        e.order = malloc(t.len * sizeof(int));
        if (!e.order) {
            rc = TPF_ENOMEM;
            break;
        }
        e.t = &t;
        e.cut = tree_cut(&t, cap);
        e.w = &w;
        jw_obj_begin(&w);
        proc_name(fs, p, s, sizeof(s));
        jw_kstr(&w, "name", s);
        jw_knum(&w, "samples", p->samples);
        jw_key(&w, "nodes");
        jw_arr_begin(&w);
        emit_tree(&e);
        jw_arr_end(&w);
        jw_obj_end(&w);
        truncated |= e.truncated;
        e.truncated = 0;
    }
    jw_arr_end(&w);
    /* the names of the frames written, in the order first written */
    jw_key(&w, "names");
    jw_arr_begin(&w);
    frame_parts *fp = malloc(sizeof(*fp));
    if (rc == 0 && fp) {
        for (size_t i = 0; i < fs->nframes; i++)
            if (e.fmap[i] >= 0) names[e.fmap[i]] = (int)i;
        for (int k = 0; k < e.nnames; k++) {
            frame_split(fs->label[names[k]], fp);
            char full[1100];
            if (fp->file[0])
                snprintf(full, sizeof(full), "%s (%s:%d)", fp->name, fp->file, fp->line);
            else
                snprintf(full, sizeof(full), "%s", fp->name);
            jw_str(&w, full);
        }
    }
    free(fp);
    jw_arr_end(&w);
    jw_obj_end(&w);
    free(t.n);
    free(e.order);
    free(e.fmap);
    free(names);
    if (rc || j.err) {
        buf_free(&j);
        return; /* the tables above still show the heaviest stacks */
    }
    buf_puts(out, "<h3>Flame graph</h3>\n<p>Each process's sampled stacks, the training "
                  "thread's phase at the top, callees below; a frame's width is its share of "
                  "the samples. Click a frame to zoom in, click it again or Reset to zoom out. "
                  "The same stacks open in speedscope.app and Perfetto: <code>" FLAME_FILE
                  "</code> in the run directory");
    if (truncated) buf_puts(out, " (the graph leaves out its lightest frames; that file has all)");
    if (fs->nproc > np)
        buf_printf(out, " (the graph shows the first %d of %d processes; that file has all)", np,
                   fs->nproc);
    buf_puts(out, ".</p>\n<div class=\"flame\"><label>process <select id=\"tpf-flame-proc\">");
    for (int i = 0; i < np; i++) {
        proc_name(fs, &fs->proc[i], s, sizeof(s));
        buf_printf(out, "<option value=\"%d\">", i);
        tbl_esc(out, TBL_HTML, s);
        buf_printf(out, " — %.0f samples</option>", fs->proc[i].samples);
    }
    buf_puts(out, "</select></label> <button type=\"button\" id=\"tpf-flame-reset\">Reset "
                  "zoom</button> <span id=\"tpf-flame-info\" class=\"muted\"></span>\n"
                  "<svg id=\"tpf-flame\" xmlns=\"http://www.w3.org/2000/svg\" width=\"100%\" "
                  "height=\"0\" role=\"img\" aria-label=\"flame graph of the sampled stacks\">"
                  "</svg></div>\n<script type=\"application/json\" id=\"tpf-flame-data\">");
    /* the JSON writer writes '<' as \u003c: nothing in it ends the block */
    buf_append(out, j.data, j.len);
    buf_puts(out, "</script>\n<script>");
    buf_puts(out, flame_js);
    buf_puts(out, "</script>\n<noscript><p class=\"muted\">The flame graph needs JavaScript; the "
                  "tables above show the heaviest stacks.</p></noscript>\n");
    buf_free(&j);
}
