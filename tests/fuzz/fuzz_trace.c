/* libFuzzer target for the trace reader and the analyses behind it.
 *
 *   make fuzz BUILD=build-fuzz      (needs clang: -fsanitize=fuzzer,address,undefined)
 *   build-fuzz/fuzz/fuzz_trace -max_total_time=60 CORPUS_DIR
 *
 * Every input goes through the tokenizer twice (with and without raw capture,
 * as analyze and merge use it); small inputs also through the whole analysis
 * from a memfd, so the spill, merge and sweeps see hostile events too. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "trace/trace.h"
#include "trace/trace_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int on_ev(void *ud, const trace_ev *ev)
{
    size_t *n = ud;
    /* Touch what the callback may read, so ASan checks it. */
    *n += ev->name_len + ev->cat_len + strlen(ev->arg_name);
    if (ev->raw) {
        volatile char c = ev->raw[ev->raw_len - 1];
        (void)c;
        if (ev->pid_len) *n += (size_t)ev->raw[ev->pid_off + ev->pid_len - 1];
        if (ev->ts_len) *n += (size_t)ev->raw[ev->ts_off + ev->ts_len - 1];
        if (ev->id_len) *n += (size_t)ev->raw[ev->id_off + ev->id_len - 1];
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    size_t n = 0;
    trace_meta m;
    trace_read_mem(data, size, on_ev, &n, 0, &m, err, sizeof(err));
    trace_read_mem(data, size, on_ev, &n, 1, &m, err, sizeof(err));
    if (size > 65536) return 0;
    int fd = memfd_create("fuzz-trace", 0);
    if (fd < 0) return 0;
    if (write(fd, data, size) == (ssize_t)size) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        const char *paths[] = {path, path};
        for (int compat = 0; compat < 2; compat++) {
            trace_opts o;
            memset(&o, 0, sizeof(o));
            o.compat_hta = compat;
            trace_result *r = NULL;
            if (trace_analyze(paths, 2, &o, &r, err, sizeof(err)) == 0) {
                buf b;
                buf_init(&b, 0);
                trace_result_json(r, &b);
                trace_result_text(r, &b, 1);
                buf_free(&b);
                trace_result_free(r);
            }
        }
    }
    close(fd);
    return 0;
}
