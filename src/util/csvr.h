/* A streaming CSV reader (RFC 4180: quoted cells, doubled quotes, newlines in
 * quotes) for the run directory's CSV files. One record at a time, so a
 * month-long metrics.csv does not grow memory; records and column counts are
 * capped. The first record is the header; columns are found by name. */
#ifndef TPF_UTIL_CSVR_H
#define TPF_UTIL_CSVR_H

#include <stddef.h>
#include <stdio.h>

#define CSVR_MAX_COLS 4096
#define CSVR_MAX_RECORD ((size_t)1 << 20)

typedef struct csvr {
    FILE *f;
    char *rec; /* current record, cells NUL-separated */
    size_t rec_cap;
    char **cell; /* CSVR_MAX_COLS pointers into rec */
    int ncell;   /* cells in the current record */
    char *hdr;   /* header record copy */
    char **hcell;
    int ncol;  /* header columns */
    long line; /* 1-based line of the current record's start */
    long rows; /* data records read so far */
} csvr;

/* Open path and read its header. TPF_ENOENT (absent, or not a byte in it:
 * what a full disk leaves), TPF_EIO, TPF_EFORMAT (no header) with a reason
 * in err. Close with csvr_close. */
int csvr_open(csvr *r, const char *path, char *err, size_t errlen);
void csvr_close(csvr *r);
/* Read the next data record: 1, 0 at end, or a negative TPF_E* code
 * (TPF_ETOOBIG for a record over CSVR_MAX_RECORD). */
int csvr_next(csvr *r);
/* Column index of name in the header, or -1. */
int csvr_col(const csvr *r, const char *name);
/* Cell text of column c in the current record ("" for missing cells). */
const char *csvr_str(const csvr *r, int c);
/* 1 and *v when the cell holds a number; 0 when empty, missing or not a
 * number (unknown is never 0). */
int csvr_num(const csvr *r, int c, double *v);

#endif
