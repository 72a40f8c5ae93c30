/* buf and the JSON writer. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "trainperf.h"
#include "tt.h"
#include "util/buf.h"
#include "util/jsonr.h"
#include "util/jsonw.h"
#include "util/pstat.h"
#include "util/table.h"

TT_TEST(buf_cap_is_an_error_not_growth)
{
    buf b;
    buf_init(&b, 8);
    TT_EQ_INT(buf_puts(&b, "1234"), 0);
    TT_EQ_INT(buf_puts(&b, "56789"), TPF_ETOOBIG);
    TT_EQ_INT(b.len, 4);
    TT_EQ_INT(buf_puts(&b, "x"), TPF_ETOOBIG); /* sticky */
    buf_free(&b);
}

TT_TEST(buf_printf_long)
{
    buf b;
    buf_init(&b, 0);
    char big[1000];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = 0;
    TT_EQ_INT(buf_printf(&b, "<%s>%d", big, 7), 0);
    TT_EQ_INT(b.len, 1002);
    TT_ASSERT(b.data[0] == '<' && b.data[1000] == '>' && b.data[1001] == '7');
    buf_free(&b);
}

TT_TEST(json_writer_nesting_and_escapes)
{
    buf b;
    buf_init(&b, 0);
    jw w;
    jw_init(&w, &b, 0);
    jw_obj_begin(&w);
    jw_kstr(&w, "a", "q\"\\\n<script>");
    jw_key(&w, "l");
    jw_arr_begin(&w);
    jw_int(&w, -3);
    jw_num(&w, 0.5);
    jw_num(&w, 1.0 / 0.0);
    jw_bool(&w, 1);
    jw_arr_end(&w);
    jw_key(&w, "e");
    jw_obj_begin(&w);
    jw_obj_end(&w);
    jw_obj_end(&w);
    TT_EQ_INT(jw_error(&w), 0);
    TT_EQ_STR(b.data, "{\"a\":\"q\\\"\\\\\\n\\u003cscript\\u003e\",\"l\":[-3,0.5,null,true],\"e\":{}}");
    buf_free(&b);
}

typedef struct fields_t {
    int i;
    int64_t big;
    uint64_t u;
    double d, nan;
    char name[8], empty[8];
    const char *p, *none;
} fields_t;

TT_TEST(json_fields_table_writes_each_type)
{
    static const jw_field f[] = {
        JW_FIELD(INT, "i", fields_t, i),       JW_FIELD(I64, "big", fields_t, big),
        JW_FIELD(U64, "u", fields_t, u),       JW_FIELD(DBL, "d", fields_t, d),
        JW_FIELD(DBL, "nan", fields_t, nan),   JW_FIELD(STR, "name", fields_t, name),
        JW_FIELD(STR, "empty", fields_t, empty), JW_FIELD(STRZ, "emptyz", fields_t, empty),
        JW_FIELD(PSTR, "p", fields_t, p),      JW_FIELD(PSTR, "none", fields_t, none),
    };
    fields_t v = {-7, -9007199254740993LL, 18446744073709551615ULL, 0.25, NAN, "x\"y", "", "q", NULL};
    buf b;
    buf_init(&b, 0);
    jw w;
    jw_doc_begin(&w, &b, "format", 3);
    w.pretty = 0; /* compact from here on: the assertion reads easier */
    jw_key(&w, "v");
    jw_fields_obj(&w, &v, f, JW_NFIELDS(f));
    jw_obj_end(&w);
    TT_EQ_INT(jw_error(&w), 0);
    TT_ASSERT(strstr(b.data, "\"format\": 3") != NULL);
    TT_ASSERT(strstr(b.data, "{\"i\":-7,\"big\":-9007199254740993,\"u\":18446744073709551615,"
                             "\"d\":0.25,\"nan\":null,\"name\":\"x\\\"y\",\"empty\":\"\","
                             "\"emptyz\":null,\"p\":\"q\",\"none\":null}") != NULL);
    buf_free(&b);
}

/* One table both ways: what jw_fields wrote, jr_fields reads back; a member
 * the object lacks keeps the caller's default (numbers) or reads "" (strings),
 * a number out of the member's range reads 0, a string is cut to its array. */
TT_TEST(json_fields_table_reads_back_what_it_wrote)
{
    static const jw_field f[] = {
        JW_FIELD(INT, "i", fields_t, i),   JW_FIELD(I64, "big", fields_t, big),
        JW_FIELD(U64, "u", fields_t, u),   JW_FIELD(DBL, "d", fields_t, d),
        JW_FIELD(DBL, "nan", fields_t, nan), JW_FIELD(STR, "name", fields_t, name),
        JW_FIELD(STRZ, "empty", fields_t, empty),
    };
    fields_t v = {-7, -123456789012LL, 42, 0.25, NAN, "x\"y", "", NULL, NULL};
    buf b;
    buf_init(&b, 0);
    jw w;
    jw_init(&w, &b, 0);
    jw_fields_obj(&w, &v, f, JW_NFIELDS(f));
    TT_EQ_INT(jw_error(&w), 0);
    jr_doc d;
    char err[128];
    TT_EQ_INT(jr_parse(&d, b.data, b.len, 0, err, sizeof(err)), 0);
    fields_t r;
    memset(&r, 0x5a, sizeof(r));
    jr_fields(d.root, &r, f, JW_NFIELDS(f));
    TT_EQ_INT(r.i, -7);
    TT_ASSERT(r.big == -123456789012LL && r.u == 42 && r.d == 0.25 && isnan(r.nan));
    TT_EQ_STR(r.name, "x\"y");
    TT_EQ_STR(r.empty, "");
    jr_free(&d);

    const char *bad = "{\"i\":1e300,\"u\":-1,\"name\":\"longer than eight\",\"d\":\"text\"}";
    TT_EQ_INT(jr_parse(&d, bad, strlen(bad), 0, err, sizeof(err)), 0);
    fields_t z = {.i = 5, .big = 6, .u = 7, .d = 1};
    jr_fields(d.root, &z, f, JW_NFIELDS(f));
    TT_EQ_INT(z.i, 0);                  /* out of range */
    TT_ASSERT(z.u == 0 && z.big == 6);  /* negative for unsigned; missing keeps the default */
    TT_ASSERT(isnan(z.d) && isnan(z.nan)); /* not a number; missing */
    TT_EQ_STR(z.name, "longer ");       /* cut to char[8] */
    TT_EQ_STR(z.empty, "");
    jr_free(&d);
    buf_free(&b);
}

/* An array of objects through one table: each element zeroed, then read;
 * at most max; BOOL from true/false only; not an array reads none. */
TT_TEST(json_array_of_objects_reads_into_structs)
{
    typedef struct {
        int on;
        double x;
        char s[4];
    } el_t;
    static const jw_field f[] = {
        JW_FIELD(BOOL, "on", el_t, on),
        JW_FIELD(DBL, "x", el_t, x),
        JW_FIELD(STR, "s", el_t, s),
    };
    const char *text = "[{\"on\":true,\"x\":1.5,\"s\":\"abcdef\"},{\"on\":1,\"x\":\"no\"},"
                       "{\"on\":false},{\"x\":9}]";
    jr_doc d;
    char err[128];
    TT_EQ_INT(jr_parse(&d, text, strlen(text), 0, err, sizeof(err)), 0);
    el_t e[3];
    memset(e, 0x5a, sizeof(e));
    TT_EQ_INT(jr_array(d.root, e, sizeof(e[0]), 3, f, JW_NFIELDS(f)), 3);
    TT_ASSERT(e[0].on == 1 && e[0].x == 1.5);
    TT_EQ_STR(e[0].s, "abc");
    TT_ASSERT(e[1].on == 0 && isnan(e[1].x)); /* 1 is not a bool: zeroed default */
    TT_EQ_STR(e[1].s, "");
    TT_ASSERT(e[2].on == 0);
    const jr_node *obj = jr_at(d.root, 0);
    TT_EQ_INT(jr_array(obj, e, sizeof(e[0]), 3, f, JW_NFIELDS(f)), 0);
    TT_EQ_INT(jr_array(NULL, e, sizeof(e[0]), 3, f, JW_NFIELDS(f)), 0);
    jr_free(&d);
}

TT_TEST(json_copy_keeps_integers_and_caps_depth)
{
    /* 2^52 + 1 stays exact (%.10g would round it); 20 levels: the deepest
     * written as null */
    const char *text = "{\"n\":4503599627370497,\"f\":0.5,\"s\":\"a\",\"t\":true,\"z\":null,"
                       "\"deep\":[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]}";
    jr_doc d;
    char err[128];
    TT_EQ_INT(jr_parse(&d, text, strlen(text), 1000, err, sizeof(err)), 0);
    buf b;
    buf_init(&b, 0);
    jw w;
    jw_init(&w, &b, 0);
    jr_write(&w, d.root);
    TT_EQ_INT(jw_error(&w), 0);
    TT_ASSERT(strstr(b.data, "{\"n\":4503599627370497,\"f\":0.5,\"s\":\"a\",\"t\":true,\"z\":null,") == b.data);
    TT_ASSERT(strstr(b.data, "null]]]") != NULL && strstr(b.data, "[1]") == NULL);
    jr_free(&d);
    buf_free(&b);
}

TT_TEST(table_escapes_per_format)
{
    buf b;
    buf_init(&b, 0);
    tbl_esc(&b, TBL_TEXT, "a|<b>*'\"");
    buf_putc(&b, '\n');
    tbl_esc(&b, TBL_MD, "a|<b>*_\n");
    buf_putc(&b, '\n');
    tbl_esc(&b, TBL_HTML, "a|<b>&'\"");
    TT_EQ_STR(b.data, "a|<b>*'\"\na\\|&lt;b&gt;\\*\\_ \na|&lt;b&gt;&amp;&#39;&quot;");
    buf_free(&b);
}

TT_TEST(json_escape_invalid_utf8)
{
    buf b;
    buf_init(&b, 0);
    json_escape(&b, "a\xff\xc3\xa9", 4);
    TT_EQ_STR(b.data, "\"a\\ufffd\xc3\xa9\"");
    buf_free(&b);
}

TT_TEST(strerror_table)
{
    TT_EQ_STR(tpf_strerror(TPF_EINVAL), "invalid argument");
    TT_EQ_STR(tpf_errname(TPF_ETOOBIG), "TOOBIG");
    TT_EQ_STR(tpf_strerror(-9999), "unknown error");
    TT_EQ_STR(tpf_strerror(0), "success");
}

/* The trace analyser's layout: a small heading, heads aligned as the cells,
 * a gap before a trailing name; md escapes what would break the table or
 * turn into HTML, and aligns number columns right. */
TT_TEST(table_sub_layout_text_and_md)
{
    static const tbl_col cols[] = {{"count", 6, TBL_RIGHT}, {"kind", 5, 0}, {"name", 0, TBL_GAP}};
    const char *row[] = {"12", "op", "f<int>|g"};
    buf b;
    buf_init(&b, 0);
    tbl t;
    tbl_begin_sub(&t, &b, TBL_TEXT, 0, "Top", cols, 3);
    tbl_row(&t, row, TBL_PLAIN);
    tbl_end(&t);
    TT_EQ_STR(b.data, "\nTop\n   count kind   name\n      12 op     f<int>|g\n");
    b.len = 0;
    b.data[0] = 0;
    tbl_begin_sub(&t, &b, TBL_MD, 0, "Top", cols, 3);
    tbl_row(&t, row, TBL_PLAIN);
    tbl_end(&t);
    TT_EQ_STR(b.data, "\n### Top\n\n| count | kind | name |\n| ---: | --- | --- |\n"
                      "| 12 | op | f&lt;int&gt;\\|g |\n");
    buf_free(&b);
}

/* Text pads by characters, not bytes: "—" (three bytes of UTF-8) takes one
 * column, so a row of dashes lines up under a row of numbers. */
TT_TEST(table_text_pads_utf8_by_characters)
{
    static const tbl_col cols[] = {{"rank", 4, TBL_RIGHT}, {"MFU", 6, TBL_RIGHT},
                                   {"op", 8, 0}, {"end", 3, TBL_RIGHT}};
    const char *r1[] = {"0", "11.9%", "a → b", "x"}, *r2[] = {"1", "—", "ab", "y"};
    buf b;
    buf_init(&b, 0);
    tbl t;
    tbl_begin_sub(&t, &b, TBL_TEXT, 0, NULL, cols, 4);
    tbl_row(&t, r1, TBL_PLAIN);
    tbl_row(&t, r2, TBL_PLAIN);
    tbl_end(&t);
    TT_EQ_STR(b.data, "  rank    MFU op       end\n"
                      "     0  11.9% a → b      x\n"
                      "     1      — ab         y\n");
    buf_free(&b);
}

/* /proc/PID/stat from the state on: this process runs and its parent is
 * getppid(); a pid that no process has gives NULL. */
TT_TEST(pstat_fields_after_the_command_name)
{
    char text[512];
    const char *f = pstat_fields(getpid(), text, sizeof(text));
    TT_ASSERT(f != NULL);
    char st;
    long pp;
    TT_ASSERT(sscanf(f, " %c %ld", &st, &pp) == 2);
    TT_ASSERT(st == 'R');
    TT_ASSERT(pp == (long)getppid());
    TT_ASSERT(pstat_fields((pid_t)0x7ffffff0, text, sizeof(text)) == NULL);
    TT_ASSERT(pstat_fields(getpid(), text, 1) == NULL);
}

int main(int argc, char **argv) { return tt_main(argc, argv); }
