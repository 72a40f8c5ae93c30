/* `trainperf run` as a small supervisor: hang watch (no step past a bound
 * learned from the run's own steps, or given), stacks of the whole tree when
 * it fires, --on-hang dump|kill|restart, --restart N with backoff and a
 * no-progress cap, a heartbeat file, and the attempts and checkpoint-cost
 * figures (failures.json). docs/failures.md says what a user sees;
 * docs/run-format.md the files.
 *
 * cmd_run.c parses its options through sup_parse_opt, spawns each attempt and
 * calls sup_tick from its wait loop; everything else lives here. */
#ifndef TPF_CLI_SUPERVISE_H
#define TPF_CLI_SUPERVISE_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

enum sup_on_hang { SUP_HANG_DUMP = 0, SUP_HANG_KILL = 1, SUP_HANG_RESTART = 2 };

/* --restart-on: which ends of an attempt start another one. */
#define SUP_ON_NONZERO 1u /* a non-zero exit code */
#define SUP_ON_SIGNAL 2u  /* killed by a signal (not one the user sent to trainperf) */
#define SUP_ON_HANG 4u    /* ended by the hang watch (--on-hang restart) */
#define SUP_MAX_CODES 16
#define SUP_STARTUP_AUTO_S 1800.0 /* startup bound with the learned hang bound: 30 min */
#define SUP_STARTUP_MIN_S 300.0   /* ... and at least this with a given one: 5 min */

typedef struct sup_opts {
    double hang_timeout_s;  /* > 0 given; 0 learned (auto); < 0 off */
    double hang_floor_s;    /* the learned bound's floor */
    double startup_s;       /* bound before an attempt's first step (and until the learned
                               bound is armed): > 0 given; 0 auto (the given hang bound, or
                               SUP_STARTUP_AUTO_S with the learned one); < 0 off */
    int on_hang;            /* enum sup_on_hang */
    int restarts;           /* --restart N; -1 not given */
    unsigned restart_on;    /* SUP_ON_* */
    int codes[SUP_MAX_CODES]; /* exit codes that restart (with SUP_ON_NONZERO off) */
    int ncodes;
    double backoff_s;       /* first wait before a restart, doubled each time */
    double backoff_max_s;
    int no_progress;        /* stop after this many attempts in a row made no step; 0: never */
    double mtbf_s;          /* --mtbf; 0: from the run's own restart history */
    double kill_grace_s;    /* SIGTERM -> SIGKILL */
    double settle_s;        /* steps.csv is current this long after an exit (interval + margin) */
} sup_opts;

void sup_opts_default(sup_opts *o);
/* 1 when opt is one of ours and takes a value. */
int sup_opt_takes_value(const char *opt);
/* Apply one option (val NULL for flags). 1 consumed, 0 not ours, -1 after
 * printing the error (exit 2). */
int sup_parse_opt(sup_opts *o, const char *opt, const char *val);
/* Cross-option checks after parsing; -1 after printing the error. */
int sup_opts_check(sup_opts *o);
/* The options' lines for `trainperf run --help`. */
void sup_usage(FILE *f);

/* "90", "90s", "5m", "1.5h", "2d" -> seconds; -1 when malformed. */
double sup_parse_duration(const char *s);

typedef struct sup sup;

/* run_dir exists; start_mono_ns is the run's t = 0. *out freed by sup_free. */
int sup_create(sup **out, const sup_opts *o, const char *run_dir, uint64_t start_mono_ns,
               double start_unix_s);
void sup_free(sup *s);

/* A new attempt's process (its own process group) has started. */
void sup_attempt_start(sup *s, pid_t child);
/* From the wait loop (every ~50 ms): read new steps, rewrite the heartbeat,
 * watch for a hang and act on it. color: stderr takes ANSI colour. */
void sup_tick(sup *s, int color);
/* The attempt ended with wait status `status`; user_signal: the user sent
 * trainperf a signal (never restarted). Returns 1 when another attempt must
 * start: the backoff has then been waited (cut short when *stop becomes
 * non-zero, and 0 returned). */
int sup_attempt_end(sup *s, int status, int user_signal, volatile sig_atomic_t *stop);
/* The attempt's root has ended (sup_attempt_end called, no restart) and
 * processes it started still run: the hang watch goes on over them (ticks
 * continue), and --on-hang kill ends them all. */
void sup_tail_start(sup *s);
/* 1 when the processes left could not be ended within the bound (the grace
 * period, then SIGKILL and SUP_KILL_WAIT_S): stop waiting for them. */
int sup_tail_done(sup *s);
/* The user sent trainperf `sig`: pass it to every process of the run (their
 * group, and those that left it); SIGKILL follows after the grace period
 * (from sup_tick), at once on a second signal. */
void sup_user_signal(sup *s, int sig);
/* SIGTERM to every process of the run still there, SIGKILL after the grace
 * period; returns once they are gone, or after a bound (says so on stderr). */
void sup_end_leftovers(sup *s);
/* After the collector has finished (steps.csv complete): final heartbeat,
 * attempts.json and failures.json. */
void sup_finish(sup *s);
/* Attempts started so far. */
int sup_attempts(const sup *s);

/* Reap the run's zombies that came to trainperf (as subreaper: setsid
 * children, orphans), never root, whose status the caller takes (0: none). */
void sup_reap_others(pid_t root);

#endif
