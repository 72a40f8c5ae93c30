/* The run-directory readers (JSON, CSV), the diagnosis on the fixture runs
 * in tests/data/runs/ and the end-of-run step (report_finish_run). */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "report/diag.h"
#include "report/rules.h"
#include "report/report.h"
#include "trainperf.h"
#include "tt.h"
#include "util/csvr.h"
#include "util/jsonr.h"

/* The fixtures sit at <repo>/tests/data/runs; this binary at
 * <repo>/<build>/tests/test_diag. */
static const char *fixture(const char *name)
{
    static char path[PATH_MAX + 64];
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0) return name;
    exe[n] = '\0';
    for (int up = 0; up < 3; up++) {
        char *sl = strrchr(exe, '/');
        if (sl) *sl = '\0';
    }
    snprintf(path, sizeof(path), "%s/tests/data/runs/%s", exe, name);
    return path;
}

static diag_run *load(const char *name)
{
    diag_run *r = NULL;
    char err[512];
    if (diag_load(fixture(name), &r, err, sizeof(err)) != 0) {
        fprintf(stderr, "load %s: %s\n", name, err);
        return NULL;
    }
    diag_compute(r);
    return r;
}

static int has_rec(const dfinding *d, const char *needle)
{
    for (int i = 0; i < d->nrec; i++)
        if (strstr(d->rec[i], needle)) return 1;
    return 0;
}

/* ---- JSON reader ------------------------------------------------------------ */

TT_TEST(jsonr_parses_nested_values_and_escapes)
{
    const char *t = "{\"a\": [1, -2.5e3, true, null], \"s\": \"x\\u00e9\\n\\ud83d\\ude00\", "
                    "\"o\": {\"k\": {\"deep\": 7}}}";
    jr_doc d;
    char err[128];
    TT_EQ_INT(jr_parse(&d, t, strlen(t), 0, err, sizeof(err)), 0);
    TT_EQ_INT(jr_get(d.root, "a")->count, 4);
    TT_NEAR(jr_num(jr_at(jr_get(d.root, "a"), 1)), -2500, 0);
    TT_ASSERT(isnan(jr_num(jr_at(jr_get(d.root, "a"), 3)))); /* null is unknown, not 0 */
    TT_EQ_STR(jr_pstr(d.root, "s"), "x\xc3\xa9\n\xf0\x9f\x98\x80");
    TT_NEAR(jr_pnum(d.root, "o.k.deep"), 7, 0);
    TT_ASSERT(jr_path(d.root, "o.k.nope") == NULL);
    /* the byte span of a value, for copying it unchanged */
    const jr_node *o = jr_get(d.root, "o");
    TT_ASSERT(strncmp(t + o->off, "{\"k\": {\"deep\": 7}}", o->end - o->off) == 0);
    jr_free(&d);
}

TT_TEST(jsonr_errors_name_the_position)
{
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"{\"a\": 1,}", "position 9: expected a string key"},
        {"[1 2]", "position 4: expected ',' or ']'"},
        {"{\"a\" 1}", "position 6: expected ':'"},
        {"\"abc", "position 5: unterminated string"},
        {"[1] x", "position 5: expected end of input"},
        {"-", "position 2: malformed number"},
        {"", "position 1: expected a value"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        jr_doc d;
        char err[128] = "";
        int rc = jr_parse(&d, bad[i].text, strlen(bad[i].text), 0, err, sizeof(err));
        if (rc != TPF_EFORMAT || !strstr(err, bad[i].want)) {
            fprintf(stderr, "'%s': rc %d '%s', want '%s'\n", bad[i].text, rc, err, bad[i].want);
            TT_ASSERT(0);
        }
    }
}

TT_TEST(jsonr_limits_depth_and_nodes)
{
    char deep[400];
    memset(deep, '[', sizeof(deep) - 1);
    deep[sizeof(deep) - 1] = '\0';
    jr_doc d;
    char err[128];
    TT_EQ_INT(jr_parse(&d, deep, strlen(deep), 0, err, sizeof(err)), TPF_EFORMAT);
    TT_ASSERT(strstr(err, "nested too deeply") != NULL);
    const char *many = "[1,2,3,4,5,6,7,8,9,10]";
    TT_EQ_INT(jr_parse(&d, many, strlen(many), 5, err, sizeof(err)), TPF_ETOOBIG);
}

/* Seeded mutations of a real summary.json: every outcome is a value (0 or
 * TPF_EFORMAT/TPF_ETOOBIG), never a crash; run under ASan in CI. */
TT_TEST(jsonr_survives_mutated_input)
{
    jr_doc base;
    char err[256];
    char path[PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/summary.json", fixture("input-bound"));
    TT_EQ_INT(jr_load_file(&base, path, 0, err, sizeof(err)), 0);
    size_t n = base.text_len;
    char *m = malloc(n);
    TT_ASSERT(m);
    unsigned long long x = 88172645463325252ULL;
    int ok = 0, bad = 0;
    for (int it = 0; it < 3000; it++) {
        memcpy(m, base.text, n);
        int edits = 1 + it % 4;
        for (int e = 0; e < edits; e++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            size_t at = (size_t)(x % n);
            static const char pool[] = "{}[]\",:0-e.\"\\un\x01\xff ";
            m[at] = pool[(x >> 32) % (sizeof(pool) - 1)];
        }
        size_t len = it % 7 == 0 ? (size_t)(x % n) : n; /* truncations too */
        jr_doc d;
        int rc = jr_parse(&d, m, len, 0, err, sizeof(err));
        if (rc == 0) {
            ok++;
            jr_free(&d);
        } else {
            TT_ASSERT(rc == TPF_EFORMAT || rc == TPF_ETOOBIG);
            TT_ASSERT(strncmp(err, "position ", 9) == 0);
            bad++;
        }
    }
    TT_ASSERT(bad > 0);
    free(m);
    jr_free(&base);
}

/* ---- CSV reader ---------------------------------------------------------------- */

TT_TEST(csvr_quotes_empty_cells_and_unknown)
{
    char path[] = "/tmp/tpf-csvr-XXXXXX";
    int fd = mkstemp(path);
    TT_ASSERT(fd >= 0);
    const char *text = "t,name,v\r\n1.5,\"a, \"\"quoted\"\"\nname\",\n2,plain,0\n\n3,x,abc\n";
    TT_ASSERT(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
    csvr c;
    char err[256];
    TT_EQ_INT(csvr_open(&c, path, err, sizeof(err)), 0);
    int ct = csvr_col(&c, "t"), cn = csvr_col(&c, "name"), cv = csvr_col(&c, "v");
    TT_EQ_INT(ct, 0);
    TT_EQ_INT(cv, 2);
    TT_EQ_INT(csvr_col(&c, "missing"), -1);
    double v = -1;
    TT_EQ_INT(csvr_next(&c), 1);
    TT_EQ_STR(csvr_str(&c, cn), "a, \"quoted\"\nname");
    TT_EQ_INT(csvr_num(&c, cv, &v), 0); /* empty: unknown */
    TT_EQ_INT(csvr_next(&c), 1);
    TT_EQ_INT(csvr_num(&c, cv, &v), 1); /* 0 is a value */
    TT_NEAR(v, 0, 0);
    TT_EQ_INT(csvr_next(&c), 1);        /* the blank line is skipped */
    TT_EQ_INT(csvr_num(&c, cv, &v), 0); /* not a number */
    TT_EQ_INT(csvr_next(&c), 0);
    csvr_close(&c);
    unlink(path);
}

/* ---- diagnosis on the fixtures ------------------------------------------------------ */

TT_TEST(input_bound_run)
{
    diag_run *r = load("input-bound");
    TT_ASSERT(r);
    const dfinding *p = &r->diag.primary;
    TT_EQ_STR(p->id, "input-bound");
    /* the share is derived from steps.csv: sum data_ns / sum interval_ns */
    TT_NEAR(p->score, r->sum_phase_ns[PH_DATA] / r->sum_interval_ns, 1e-9);
    TT_ASSERT(p->score > 0.5);
    TT_ASSERT(has_rec(p, "num_workers"));
    TT_ASSERT(has_rec(p, "pin_memory"));
    TT_ASSERT(has_rec(p, "persistent_workers"));
    TT_ASSERT(has_rec(p, "no worker processes"));
    TT_EQ_INT(r->diag.insufficient, 0);
    diag_free(r);
}

TT_TEST(compute_bound_run_is_healthy)
{
    diag_run *r = load("compute-bound");
    TT_ASSERT(r);
    TT_EQ_STR(r->diag.primary.id, "compute-bound");
    TT_ASSERT(strstr(r->diag.primary.title, "GPU") != NULL);
    TT_EQ_INT(r->diag.nsec, 0);
    TT_EQ_INT(r->nworkers, 8);
    diag_free(r);
}

/* A Python run the zero-code hook watched, whose steps are mostly outside
 * known phases with no cause found: the verdict never advises running under
 * `trainperf run` (it did), it says what would tell (issue 29). */
TT_TEST(undetermined_never_asks_for_what_the_run_did)
{
    diag_run *r = load("cpu-only");
    TT_ASSERT(r);
    r->python = 1;
    for (int p = 0; p < PH_COUNT; p++) r->warm_phase_ns[p] = r->sum_phase_ns[p] = 0;
    r->warm_phase_ns[PH_OTHER] = 0.8 * r->warm_interval_ns;
    r->sum_phase_ns[PH_OTHER] = 0.8 * r->sum_interval_ns;
    r->warm_phase_ns[PH_FORWARD] = 0.2 * r->warm_interval_ns;
    r->sum_phase_ns[PH_FORWARD] = 0.2 * r->sum_interval_ns;
    diag_compute(r);
    TT_EQ_STR(r->diag.primary.id, "undetermined");
    TT_ASSERT(has_rec(&r->diag.primary, "run under `trainperf run`")); /* not watched: it may */
    r->cause.have_pyprof = 1;
    r->cause.samples = 240;
    diag_compute(r);
    TT_EQ_STR(r->diag.primary.id, "undetermined");
    TT_ASSERT(!has_rec(&r->diag.primary, "run under `trainperf run`"));
    TT_ASSERT(has_rec(&r->diag.primary, "trainperf profile RUN --steps"));
    diag_free(r);
}

TT_TEST(cpu_only_run_claims_nothing_about_gpus)
{
    diag_run *r = load("cpu-only");
    TT_ASSERT(r);
    const dfinding *p = &r->diag.primary;
    TT_EQ_STR(p->id, "compute-bound");
    TT_ASSERT(strstr(p->title, "CPU") != NULL);
    for (int i = 0; i < p->nev; i++)
        TT_ASSERT(strstr(p->ev[i].text, "GPU") == NULL);
    int noted = 0;
    for (int i = 0; i < r->diag.nnotes; i++)
        noted |= strstr(r->diag.notes[i], "GPU metrics were not available") != NULL;
    TT_ASSERT(noted);
    /* the fixture runs ./trainer, a C program: generic advice, no PyTorch */
    TT_ASSERT(has_rec(p, "OMP_NUM_THREADS"));
    TT_ASSERT(!has_rec(p, "torch"));
    dfig f;
    diag_figures(r, &f);
    TT_ASSERT(isnan(f.gpu_util_mean)); /* unknown, not 0 */
    diag_free(r);
}

TT_TEST(memory_growth_run)
{
    diag_run *r = load("memory-growth");
    TT_ASSERT(r);
    TT_EQ_STR(r->diag.primary.id, "memory-capacity");
    TT_ASSERT(strstr(r->diag.primary.summary, "grew from") != NULL);
    diag_free(r);
}

TT_TEST(hang_run)
{
    diag_run *r = load("hang");
    TT_ASSERT(r);
    TT_EQ_STR(r->diag.primary.id, "unstable");
    TT_ASSERT(strstr(r->diag.primary.summary, "possible hang") != NULL);
    TT_EQ_INT(r->exit_signal, 15);
    diag_free(r);
}

TT_TEST(crashed_run_has_too_little_data)
{
    diag_run *r = load("crashed");
    TT_ASSERT(r);
    TT_EQ_INT(r->diag.insufficient, 1);
    TT_EQ_STR(r->diag.primary.id, "insufficient-data");
    TT_ASSERT(strstr(r->diag.insufficient_why, "only 3 steps") != NULL);
    TT_EQ_INT(r->exit_code, 1);
    diag_free(r);
}

TT_TEST(straggler_run)
{
    diag_run *r = load("straggler");
    TT_ASSERT(r);
    TT_EQ_STR(r->diag.primary.id, "straggler");
    TT_ASSERT(strstr(r->diag.primary.summary, "Rank 3") != NULL);
    int thr = 0;
    for (int i = 0; i < r->diag.nsec; i++)
        thr |= strcmp(r->diag.sec[i].id, "throttling") == 0;
    TT_ASSERT(thr);
    diag_free(r);
}

TT_TEST(damaged_and_missing_runs)
{
    diag_run *r = NULL;
    char err[512];
    TT_EQ_INT(diag_load(fixture("damaged"), &r, err, sizeof(err)), TPF_EFORMAT);
    TT_ASSERT(strstr(err, "run.json") && strstr(err, "position"));
    TT_ASSERT(r == NULL);
    TT_EQ_INT(diag_load(fixture("no-such-run"), &r, err, sizeof(err)), TPF_ENOENT);
    TT_ASSERT(strstr(err, "no such run directory") != NULL);
    TT_EQ_INT(diag_load("/", &r, err, sizeof(err)), TPF_ENOENT);
    TT_ASSERT(strstr(err, "not a trainperf run directory") != NULL);
}

/* ---- report_finish_run ------------------------------------------------------------ */

static int copy_file(const char *from, const char *to)
{
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    if (!a || !b) {
        if (a) fclose(a);
        if (b) fclose(b);
        return -1;
    }
    char blk[8192];
    size_t n;
    while ((n = fread(blk, 1, sizeof(blk), a)) > 0)
        fwrite(blk, 1, n, b);
    fclose(a);
    return fclose(b);
}

TT_TEST(finish_run_adds_diagnosis_and_keeps_summary)
{
    char dir[] = "/tmp/tpf-finish-XXXXXX";
    TT_ASSERT(mkdtemp(dir) != NULL);
    const char *files[] = {"run.json",    "summary.json", "steps.csv",
                           "metrics.csv", "procs.csv",    "alerts.jsonl"};
    char from[PATH_MAX + 128], to[PATH_MAX + 128];
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(from, sizeof(from), "%s/%s", fixture("input-bound"), files[i]);
        snprintf(to, sizeof(to), "%s/%s", dir, files[i]);
        TT_EQ_INT(copy_file(from, to), 0);
    }
    buf term;
    buf_init(&term, 0);
    char err[512] = "";
    TT_EQ_INT(report_finish_run(dir, 0, &term, err, sizeof(err)), 0);
    TT_ASSERT(strstr(term.data, "DIAGNOSIS") && strstr(term.data, "Input-bound"));
    /* twice: the diagnosis is replaced, not duplicated */
    buf_reset(&term);
    TT_EQ_INT(report_finish_run(dir, 0, &term, err, sizeof(err)), 0);
    buf_free(&term);

    jr_doc orig, now;
    snprintf(from, sizeof(from), "%s/summary.json", fixture("input-bound"));
    snprintf(to, sizeof(to), "%s/summary.json", dir);
    TT_EQ_INT(jr_load_file(&orig, from, 0, err, sizeof(err)), 0);
    TT_EQ_INT(jr_load_file(&now, to, 0, err, sizeof(err)), 0);
    TT_EQ_INT(now.root->count, orig.root->count + 1);
    for (const jr_node *c = orig.root->child; c; c = c->next) {
        const jr_node *m = jr_get(now.root, c->key);
        TT_ASSERT(m != NULL);
        /* byte for byte */
        TT_ASSERT(m->end - m->off == c->end - c->off);
        TT_ASSERT(memcmp(now.text + m->off, orig.text + c->off, c->end - c->off) == 0);
    }
    TT_EQ_STR(jr_pstr(now.root, "diagnosis.primary.id"), "input-bound");
    int ndiag = 0;
    for (const jr_node *c = now.root->child; c; c = c->next)
        ndiag += strcmp(c->key, "diagnosis") == 0;
    TT_EQ_INT(ndiag, 1);
    jr_free(&orig);
    jr_free(&now);

    struct stat st;
    snprintf(to, sizeof(to), "%s/report.md", dir);
    TT_ASSERT(stat(to, &st) == 0 && st.st_size > 500);
    snprintf(to, sizeof(to), "%s/report.html", dir);
    TT_ASSERT(stat(to, &st) == 0 && st.st_size > 5000);
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(to, sizeof(to), "%s/%s", dir, files[i]);
        unlink(to);
    }
    snprintf(to, sizeof(to), "%s/report.md", dir);
    unlink(to);
    snprintf(to, sizeof(to), "%s/report.html", dir);
    unlink(to);
    rmdir(dir);
}

/* The collector was killed before writing summary.json: the report step
 * writes a minimal one rather than nothing. */
TT_TEST(finish_run_without_summary_writes_one)
{
    char dir[] = "/tmp/tpf-nosum-XXXXXX";
    TT_ASSERT(mkdtemp(dir) != NULL);
    const char *files[] = {"run.json", "steps.csv", "metrics.csv"};
    char from[PATH_MAX + 128], to[PATH_MAX + 128];
    for (size_t i = 0; i < 3; i++) {
        snprintf(from, sizeof(from), "%s/%s", fixture("cpu-only"), files[i]);
        snprintf(to, sizeof(to), "%s/%s", dir, files[i]);
        TT_EQ_INT(copy_file(from, to), 0);
    }
    char err[512] = "";
    TT_EQ_INT(report_finish_run(dir, 0, NULL, err, sizeof(err)), 0);
    jr_doc d;
    snprintf(to, sizeof(to), "%s/summary.json", dir);
    TT_EQ_INT(jr_load_file(&d, to, 0, err, sizeof(err)), 0);
    TT_NEAR(jr_pnum(d.root, "format_version"), 1, 0);
    TT_EQ_STR(jr_pstr(d.root, "diagnosis.primary.id"), "compute-bound");
    TT_ASSERT(jr_pnum(d.root, "steps.count") > 100);
    jr_free(&d);
    const char *all[] = {"run.json",     "steps.csv", "metrics.csv",
                         "summary.json", "report.md", "report.html"};
    for (size_t i = 0; i < 6; i++) {
        snprintf(to, sizeof(to), "%s/%s", dir, all[i]);
        unlink(to);
    }
    TT_EQ_INT(rmdir(dir), 0);
}

/* ---- the rule table ------------------------------------------------------ */

static int fold_any(const dfold_at *x, dfinding *from, dfinding *into)
{
    return DF_DROP;
}

static int check_none(const diag_run *r, const dctx *c, dfinding *d)
{
    return 0;
}

TT_TEST(fold_graph_cycle_is_found)
{
    static const dfold a_into_b[] = {{1, NULL, {{"b"}, NULL}, fold_any}, {0}};
    static const dfold b_into_c[] = {{2, NULL, {{"x", "c"}, NULL}, fold_any}, {0}};
    static const dfold c_into_a[] = {{3, NULL, {{"a"}, NULL}, fold_any}, {0}};
    drule t[] = {
        {"a", "", 0, 0, check_none, a_into_b},
        {"b", "", 0, 0, check_none, b_into_c},
        {"c", "", 0, 0, check_none, NULL},
    };
    char why[200];
    TT_EQ_INT(diag_folds_acyclic(t, 3, why, sizeof(why)), 1);
    TT_EQ_STR(why, "");
    /* c folds into a: a -> b -> c -> a */
    t[2].folds = c_into_a;
    TT_EQ_INT(diag_folds_acyclic(t, 3, why, sizeof(why)), 0);
    TT_EQ_STR(why, "a -> b -> c -> a");
    /* an id a check may also name counts: b's finding named "c" folds into a */
    t[2].folds = NULL;
    t[1].also = "c";
    static const dfold c2_into_b[] = {{3, NULL, {{"b"}, NULL}, fold_any}, {0}};
    t[0].folds = c2_into_b;
    t[1].folds = c_into_a;
    TT_EQ_INT(diag_folds_acyclic(t, 2, why, sizeof(why)), 0);
    TT_ASSERT(strstr(why, "a -> b -> a") != NULL);
}

TT_TEST(rule_table_folds_have_no_cycle)
{
    char why[200];
    TT_EQ_INT(diag_folds_acyclic(diag_rules, diag_nrules, why, sizeof(why)), 1);
    TT_EQ_STR(why, "");
}

/* 1 when id is a rule's id, one its check may also name, or a verdict */
static int table_has(const char *id)
{
    for (int k = 0; k < diag_nrules; k++) {
        if (strcmp(diag_rules[k].id, id) == 0) return 1;
        size_t n = strlen(id);
        for (const char *p = diag_rules[k].also; (p = strstr(p, id)); p += n)
            if ((p == diag_rules[k].also || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0'))
                return 1;
    }
    for (int i = 0; diag_verdicts[i]; i++)
        if (strcmp(diag_verdicts[i], id) == 0) return 1;
    return 0;
}

/* docs/diagnosis.md's rule table ("### Rules", first column `id`) names
 * every rule of diag_rules[] and the verdicts, and nothing else */
TT_TEST(docs_rule_table_matches_the_table)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/../../../docs/diagnosis.md", fixture(""));
    FILE *f = fopen(path, "r");
    TT_ASSERT(f != NULL);
    char line[4096], docs[64][40];
    int nd = 0, in = 0, diag = 0;
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "## ", 3) == 0) diag = strcmp(line, "## Diagnosis\n") == 0;
        if (strncmp(line, "### ", 4) == 0) in = diag && strcmp(line, "### Rules\n") == 0;
        char id[40];
        if (in && sscanf(line, "| `%39[^`]`", id) == 1 && nd < 64) {
            int seen = 0;
            for (int i = 0; i < nd; i++)
                seen |= strcmp(docs[i], id) == 0;
            if (!seen) snprintf(docs[nd++], sizeof(docs[0]), "%s", id);
        }
    }
    fclose(f);
    TT_ASSERT(nd > 0);
    for (int i = 0; i < nd; i++)
        if (!table_has(docs[i])) TT_FAIL_("docs/diagnosis.md names %s, diag_rules[] does not", docs[i]);
    for (int k = 0; k < diag_nrules; k++) {
        char ids[200];
        snprintf(ids, sizeof(ids), "%s %s", diag_rules[k].id, diag_rules[k].also);
        for (char *save = NULL, *w = strtok_r(ids, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
            int found = 0;
            for (int i = 0; i < nd; i++)
                found |= strcmp(docs[i], w) == 0;
            if (!found) TT_FAIL_("diag_rules[] names %s, docs/diagnosis.md's rule table does not", w);
        }
    }
    for (int i = 0; diag_verdicts[i]; i++) {
        int found = 0;
        for (int j = 0; j < nd; j++)
            found |= strcmp(docs[j], diag_verdicts[i]) == 0;
        if (!found) TT_FAIL_("verdict %s is not in docs/diagnosis.md's rule table", diag_verdicts[i]);
    }
}

int main(int argc, char **argv)
{
    return tt_main(argc, argv);
}
