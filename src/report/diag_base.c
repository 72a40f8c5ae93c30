/* A finding and its writers (diag_base.h). */
#include "report/diag_base.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>

void diag_fmt(char *o, size_t n, const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    vsnprintf(o, n, f, ap);
    va_end(ap);
}

void diag_ev(dfinding *d, const char *name, double v, const char *f, ...)
{
    if (d->nev >= DIAG_MAX_EVIDENCE) return;
    devidence *e = &d->ev[d->nev++];
    diag_fmt(e->name, sizeof(e->name), "%s", name);
    e->value = v;
    va_list ap;
    va_start(ap, f);
    vsnprintf(e->text, sizeof(e->text), f, ap);
    va_end(ap);
}

void diag_head(dfinding *d, const char *id, const char *title, double score, const char *f, ...)
{
    d->score = score;
    diag_fmt(d->id, sizeof(d->id), "%s", id);
    va_list ap;
    va_start(ap, f);
    vsnprintf(d->summary, sizeof(d->summary), f, ap);
    va_end(ap);
    diag_fmt(d->title, sizeof(d->title), "%s", title);
}

void diag_rec(dfinding *d, const char *f, ...)
{
    if (d->nrec >= DIAG_MAX_RECS) return;
    va_list ap;
    va_start(ap, f);
    vsnprintf(d->rec[d->nrec++], sizeof(d->rec[0]), f, ap);
    va_end(ap);
}

int diag_int(double v, double lo, double hi, int dflt)
{
    return v >= lo && v <= hi && v >= INT_MIN && v <= INT_MAX ? (int)v : dflt;
}
