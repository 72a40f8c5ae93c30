/* buf and the JSON writer. */
#include <string.h>

#include "trainperf.h"
#include "tt.h"
#include "util/buf.h"
#include "util/jsonw.h"
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

int main(int argc, char **argv) { return tt_main(argc, argv); }
