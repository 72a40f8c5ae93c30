/* The collector's side of the shared segments, and the probe's attach calls.
 *
 * A probe (any process using libtrainperf) writes events into its own segment
 * file SEG_DIR/seg-<pid>.tpf (or RUN_DIR/live/seg-<pid>.tpf); the collector maps each segment read-only
 * (or read-write for the consumer indices) and drains it. Events published
 * before the producer died (even by SIGKILL) are still drained. */
#ifndef TPF_PROBE_READER_H
#define TPF_PROBE_READER_H

#include <stdint.h>
#include <sys/types.h>

#include "trainperf.h"

enum seg_ev_kind {
    SEG_EV_STEP_BEGIN = 1,
    SEG_EV_STEP_END = 2,  /* samples, tokens */
    SEG_EV_PUSH = 3,      /* name */
    SEG_EV_POP = 4,
    SEG_EV_COUNTER = 5,   /* name, value */
    SEG_EV_MARK = 6,      /* name */
    /* GPU activity (gpu/cupti_inject.c), written by a thread that is not the
     * one that launched it: ts = start, a = end (both in the segment's
     * clock), b and name as below. Not in time order within a ring. */
    SEG_EV_GPU_KERNEL = 7, /* name: kernel name id (0: unknown); b: GPU_KB() */
    SEG_EV_GPU_COPY = 8,   /* name: GPU_CN(); b: bytes */
    SEG_EV_GPU_MEMSET = 9, /* name: device; b: bytes */
    SEG_EV_GPU_SYNC = 10,  /* host waited for the GPU: name: sync type; b: stream */
    /* a step's GPU time from CUDA events at its boundaries (no CUPTI):
     * ts, a: the host's times of the step's begin and end hooks; b: the
     * GPU's time between the two events (ns); name: 0 */
    SEG_EV_GPU_STEP = 11,
    SEG_EV_LAST = 11,
};

/* SEG_EV_GPU_KERNEL's b: stream (32 bits), device (16 bits) and, bit 48, a
 * collective's kernel (NCCL: communication, not compute). */
#define GPU_KB(device, stream) (((uint64_t)(uint16_t)(device) << 32) | (uint32_t)(stream))
#define GPU_KB_COMM (1ull << 48)
#define GPU_KB_DEVICE(b) ((int)(((b) >> 32) & 0xffffu))
#define GPU_KB_STREAM(b) ((uint32_t)(b))
/* SEG_EV_GPU_COPY's name: copy kind (CUPTI's: 1 HtoD, 2 DtoH, 8 DtoD, 10
 * PtoP...), source and destination memory kinds (1 pageable, 2 pinned,
 * 3 device...) and device, a byte each. */
#define GPU_CN(copy, src, dst, device)                                                             \
    ((uint32_t)(uint8_t)(copy) | (uint32_t)(uint8_t)(src) << 8 | (uint32_t)(uint8_t)(dst) << 16 |  \
     (uint32_t)(uint8_t)(device) << 24)
#define GPU_CN_COPY(n) ((int)((n) & 0xffu))
#define GPU_CN_SRC(n) ((int)(((n) >> 8) & 0xffu))
#define GPU_CN_DST(n) ((int)(((n) >> 16) & 0xffu))
#define GPU_CN_DEVICE(n) ((int)(((n) >> 24) & 0xffu))
enum { GPU_COPY_HTOD = 1, GPU_COPY_DTOH = 2, GPU_COPY_DTOD = 8, GPU_COPY_PTOP = 10 };
enum { GPU_MEM_PAGEABLE = 1, GPU_MEM_PINNED = 2, GPU_MEM_DEVICE = 3 };

/* A mark with this reserved name (below TPF_NAME_FIRST_USER) says the
 * thread's process set its rank here (tpf_set_rank): the events after it
 * carry the rank now in the segment header. */
#define SEG_NAME_RANK_SET 8
/* Marks with these reserved names say the process's training loop ended
 * (tpf_loop_end): it left the loop, or it is shutting down. */
#define SEG_NAME_LOOP_END 9
#define SEG_NAME_EXIT 10
/* Marks of the CUPTI library's (gpu/cupti_inject.c): the script's
 * torch.profiler took CUPTI over here, and gave it back here. The steps in
 * between have no GPU records of ours (collect/gpujoin.h). */
#define SEG_NAME_GPU_PAUSED 11
#define SEG_NAME_GPU_RESUMED 12
/* ... and the kernel-detail windows of `--gpu-trace windows`: CUPTI's kinds
 * enabled here, disabled here. A process with such marks has kernel records
 * only for the host time inside its windows (collect/gpujoin.h). */
#define SEG_NAME_GPU_DETAIL_ON 13
#define SEG_NAME_GPU_DETAIL_OFF 14

/* An event as the reader hands it out (converted from the 32-byte record). */
typedef struct seg_event {
    uint64_t ts_ns;       /* CLOCK_MONOTONIC nanoseconds */
    uint32_t kind;        /* SEG_EV_* */
    tpf_name name;
    pid_t tid;            /* Linux TID of the producing thread */
    uint64_t samples, tokens;
    double value;
    uint64_t end_ns, arg; /* SEG_EV_GPU_*: end (CLOCK_MONOTONIC ns) and b */
} seg_event;

/* Identity of the process that wrote a segment. -1 means "not set". */
typedef struct seg_proc_info {
    pid_t pid;
    pid_t ppid;
    int rank, local_rank, world_size;
    char hostname[64];
    uint64_t created_mono_ns;
} seg_proc_info;

typedef struct seg_reader seg_reader;

/* Map the segment file at path. *out is freed with seg_reader_close.
 * TPF_EFORMAT: not a segment (bad magic); TPF_EVERSION: another layout version;
 * TPF_ENOENT / TPF_EACCES / TPF_EIO from the file system. A segment whose
 * producer is still initialising may give TPF_EAGAIN-like TPF_ESTATE: retry. */
int seg_reader_open(seg_reader **out, const char *path);
void seg_reader_close(seg_reader *r);
const seg_proc_info *seg_reader_info(const seg_reader *r);
/* 1 when the producer has set its rank since the last call or the open
 * (tpf_set_rank): seg_reader_info has the new one. */
int seg_reader_rank_changed(seg_reader *r);

typedef void (*seg_event_cb)(void *ctx, const seg_event *ev);
/* Hand every event published since the last drain to cb, thread by thread, in
 * publication order within each thread. Returns the number of events (>= 0)
 * or an error. Not thread-safe for one reader; different readers are fine. */
long seg_reader_drain(seg_reader *r, seg_event_cb cb, void *ctx);
/* From now on a drain leaves what it read in the rings (the producer cannot
 * overwrite it) until seg_reader_release: a collector releases only what it
 * has put on disk, so one killed in between leaves every step it had not
 * written to the recovery (record/recover.c). The next drain goes on from
 * where the last one stopped. */
void seg_reader_hold(seg_reader *r);
void seg_reader_release(seg_reader *r);
/* The string of a name id ("data" for TPF_PHASE_DATA), or NULL when unknown.
 * Valid until seg_reader_close. */
const char *seg_reader_name(seg_reader *r, tpf_name id);
/* Events the producer dropped (full rings, no ring left). */
uint64_t seg_reader_dropped(const seg_reader *r);
/* 1 when a ring was refused for want of space (header.noroom). */
int seg_reader_noroom(const seg_reader *r);

/* ---- probe side (used by embedded mode and tests) ---- */

/* Attach this process's probe to run_dir. Its segment seg-<pid>.tpf is made
 * in seg_dir when one is given and usable (a private directory off the run
 * directory's file system: record/segdir.h), else in run_dir/live. Forked
 * children make theirs the same way. TPF_EBUSY when already attached. Not
 * for the hot path. */
int probe_attach_at(const char *run_dir, const char *seg_dir);
/* probe_attach_at(run_dir, NULL). */
int probe_attach(const char *run_dir);
/* Stop writing events (already published events stay in the segment). */
void probe_detach(void);

#endif
