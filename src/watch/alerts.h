/* Alert rules evaluated by the collector at every sample.
 *
 * A rule is `METRIC OP VALUE [for DURATION]`, e.g. `gpu.util < 50 for 30s`.
 * It fires once when the condition has held for DURATION, and clears with
 * hysteresis. Default rules cover the common problems (docs/diagnosis.md). */
#ifndef TPF_WATCH_ALERTS_H
#define TPF_WATCH_ALERTS_H

#include <stddef.h>

#include "core/frame.h"
#include "core/sink.h"

typedef struct alert_set alert_set;

/* alert_event (what a rule hands on to the sinks) lives in core/sink.h. */

/* A set with the default rules (defaults = 1) or empty. *out freed by alerts_free. */
int alerts_create(alert_set **out, int defaults);
void alerts_free(alert_set *s);

/* Add (or override by name: "NAME: RULE") one rule. On a malformed rule returns
 * TPF_EFORMAT and writes "position N: what is wrong" into err. */
int alerts_add(alert_set *s, const char *rule, char *err, size_t errlen);
/* One rule per line, '#' comments. Errors name the line and position. */
int alerts_load_file(alert_set *s, const char *path, char *err, size_t errlen);

/* Evaluate every rule against frame f; write at most max events (fired or
 * cleared) into out and return their number. Never allocates after create. */
int alerts_eval(alert_set *s, const coll_frame *f, alert_event *out, int max);

/* The rules as text, one per call (i = 0..n-1), for run.json; NULL past the end. */
const char *alerts_rule_text(const alert_set *s, int i);

#endif
