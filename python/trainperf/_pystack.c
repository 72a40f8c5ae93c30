/* _pystack.c — the training thread's Python stack, read without the GIL.
 *
 * Why: a sampler written in Python needs the GIL, and the training thread
 * gives the GIL up only at calls that release it (torch ops, I/O, sleeps) or
 * after the switch interval. A sample taken when the sampler wins the GIL back
 * lands at the next such call, never in a short stretch of Python between two
 * torch calls (a simulator stepped in Python between tiny policy calls): that
 * time read as model compute. This thread reads the stack at the moment it
 * wakes, as an out-of-process profiler would, from inside the process.
 *
 * How: every read goes through process_vm_readv on our own pid, which fails
 * with EFAULT on memory that is gone instead of faulting, so a frame popped or
 * a code object freed while we read it costs a sample, never the run. The
 * layouts come from CPython's own headers (internal ones for the frame), so
 * only the versions whose frame we know are read natively: 3.11. Elsewhere
 * pystack_start says no and the Python sampler carries on as before. Code
 * objects are checked by type before use; their names and line tables are
 * copied once into a cache keyed by address and revalidated on every hit.
 *
 * The thread only reads memory and takes its own mutex; it never touches the
 * GIL, a Python object's refcount or the interpreter's state. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "_pystack.h"

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
#define PS_NATIVE 1
#define Py_BUILD_CORE 1
#include <internal/pycore_frame.h>
#else
#define PS_NATIVE 0
#endif

#define PS_DEPTH 96          /* frames kept per sample, innermost first */
#define PS_RING 512          /* samples held between two takes (~10 s at 47 Hz) */
#define PS_CODES 8192        /* distinct code objects resolved */
#define PS_FILE 192
#define PS_NAME 96
#define PS_LINETABLE (64 * 1024)
#define PS_TABLE_BYTES (16u << 20) /* all line tables copied, at most */

typedef struct ps_code {
    uintptr_t addr, name_p, file_p, table_p;
    int firstlineno;
    char file[PS_FILE], name[PS_NAME];
    unsigned char *table;
    size_t table_len;
} ps_code;

typedef struct ps_sample {
    double t;
    int depth;
    uint16_t code[PS_DEPTH]; /* index into codes + 1; 0: unresolved */
    int32_t line[PS_DEPTH];
} ps_sample;

static struct {
    pthread_t th;
    int running;
    atomic_int stop;
    pid_t pid;
    uintptr_t tstate;
    long period_ns;
    pthread_mutex_t mu;       /* the ring, ncodes and the counters */
    ps_sample *ring;
    unsigned head, count;     /* next slot to write; samples held */
    unsigned long taken, lost, failed, retried;
    double cpu_s;             /* the reader thread's own CPU time */
    ps_code *codes;           /* written by the thread only; read under mu */
    int ncodes;
    int nreported;            /* codes handed to Python (take: the GIL) */
    size_t table_bytes;       /* line tables copied so far */
    int slot[2 * PS_CODES];   /* open addressing: address -> index + 1 */
} ps = {.mu = PTHREAD_MUTEX_INITIALIZER};

#if PS_NATIVE

/* Copy n bytes at addr of this process into dst: 0, or -1 where the memory
 * is not mapped (or not all of it). */
static int ps_read(uintptr_t addr, void *dst, size_t n)
{
    if (addr < 4096) return -1;
    struct iovec l = {dst, n}, r = {(void *)addr, n};
    return process_vm_readv(ps.pid, &l, 1, &r, 1, 0) == (ssize_t)n ? 0 : -1;
}

/* A str object's text (ASCII, or Latin-1 with other characters as '?'). */
static int ps_read_str(uintptr_t p, char *out, size_t cap)
{
    PyASCIIObject a;
    if (ps_read(p, &a, sizeof(a)) < 0 || (uintptr_t)a.ob_base.ob_type != (uintptr_t)&PyUnicode_Type)
        return -1;
    if (!a.state.compact || a.state.kind != PyUnicode_1BYTE_KIND || a.length < 0) return -1;
    size_t n = (size_t)a.length < cap - 1 ? (size_t)a.length : cap - 1;
    uintptr_t data = p + (a.state.ascii ? sizeof(PyASCIIObject) : sizeof(PyCompactUnicodeObject));
    if (ps_read(data, out, n) < 0) return -1;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)out[i] >= 128 || out[i] == 0) out[i] = '?';
    out[n] = 0;
    return 0;
}

static unsigned ps_hash(uintptr_t a)
{
    uint64_t h = (uint64_t)a * 0x9E3779B97F4A7C15ull;
    return (unsigned)(h >> 40) % (2 * PS_CODES);
}

/* The cached entry of the code object at addr whose header is co, (re)read
 * when the address now holds another code object; NULL when it cannot be read
 * or the cache is full. Called by the sampling thread only. */
static ps_code *ps_code_of(uintptr_t addr, const PyCodeObject *co)
{
    uintptr_t name_p = (uintptr_t)co->co_name, file_p = (uintptr_t)co->co_filename,
              table_p = (uintptr_t)co->co_linetable;
    unsigned h = ps_hash(addr);
    ps_code *e = NULL;
    for (unsigned i = 0; i < 2 * PS_CODES; i++, h = (h + 1) % (2 * PS_CODES)) {
        int s = ps.slot[h];
        if (s == 0) break;
        if (ps.codes[s - 1].addr == addr) {
            e = &ps.codes[s - 1];
            break;
        }
    }
    if (e && e->name_p == name_p && e->file_p == file_p && e->table_p == table_p &&
        e->firstlineno == co->co_firstlineno)
        return e;
    /* new, or the address was freed and reused: a new entry (ids stay unique) */
    if (ps.ncodes >= PS_CODES) return NULL;
    ps_code n = {.addr = addr, .name_p = name_p, .file_p = file_p, .table_p = table_p,
                 .firstlineno = co->co_firstlineno};
    if (ps_read_str(name_p, n.name, sizeof(n.name)) < 0 ||
        ps_read_str(file_p, n.file, sizeof(n.file)) < 0)
        return NULL;
    PyBytesObject b;
    if (ps_read(table_p, &b, offsetof(PyBytesObject, ob_sval)) < 0 ||
        (uintptr_t)b.ob_base.ob_base.ob_type != (uintptr_t)&PyBytes_Type || b.ob_base.ob_size < 0 ||
        b.ob_base.ob_size > PS_LINETABLE)
        return NULL;
    n.table_len = (size_t)b.ob_base.ob_size;
    /* past the cap the function is still named, its lines unknown (-1) */
    if (ps.table_bytes + n.table_len > PS_TABLE_BYTES) n.table_len = 0;
    n.table = malloc(n.table_len ? n.table_len : 1);
    if (!n.table) return NULL;
    if (ps_read(table_p + offsetof(PyBytesObject, ob_sval), n.table, n.table_len) < 0) {
        free(n.table);
        return NULL;
    }
    ps.table_bytes += n.table_len;
    pthread_mutex_lock(&ps.mu);
    ps.codes[ps.ncodes] = n;
    int id = ++ps.ncodes;
    pthread_mutex_unlock(&ps.mu);
    if (e) {
        /* the old entry keeps its id for samples already taken; the slot moves on */
        for (unsigned i = 0, k = ps_hash(addr); i < 2 * PS_CODES; i++, k = (k + 1) % (2 * PS_CODES))
            if (ps.slot[k] == (int)(e - ps.codes) + 1) {
                ps.slot[k] = id;
                return &ps.codes[id - 1];
            }
        return NULL;
    }
    ps.slot[h] = id;
    return &ps.codes[id - 1];
}

#endif /* PS_NATIVE */

/* Line of code unit lasti by the 3.11+ location table (Objects/locations.md):
 * entries of a header byte (bit 7 set; code in bits 3-6; length - 1 in bits
 * 0-2) and varint operands; the line moves by the entry's delta. -1 where the
 * instruction has no line. */
static int ps_varint(const unsigned char *t, size_t n, size_t *i, unsigned *out)
{
    unsigned v = 0, shift = 0;
    while (*i < n && shift < 32) {
        unsigned b = t[(*i)++];
        v |= (b & 63u) << shift;
        shift += 6;
        if (!(b & 64)) {
            *out = v;
            return 0;
        }
    }
    return -1;
}

int pystack_addr2line(const unsigned char *t, size_t n, int firstlineno, int lasti)
{
    if (lasti < 0) return firstlineno;
    int line = firstlineno, addr = 0;
    size_t i = 0;
    while (i < n) {
        unsigned h = t[i++];
        if (!(h & 128)) return -1; /* not at an entry's start: a damaged table */
        int code = (h >> 3) & 15, len = (h & 7) + 1, delta = 0;
        unsigned v;
        if (code == 14 || code == 13) {
            if (ps_varint(t, n, &i, &v) < 0) return -1;
            delta = (v & 1) ? -(int)(v >> 1) : (int)(v >> 1);
        } else if (code >= 10 && code <= 12) {
            delta = code - 10;
        }
        line += delta;
        if (lasti >= addr && lasti < addr + len) return code == 15 ? -1 : line;
        addr += len;
        while (i < n && !(t[i] & 128)) i++; /* the entry's other operands */
    }
    return -1;
}

#if PS_NATIVE

/* One reading of the stack into s: 0, or -1 where it changed under us. */
static int ps_read_stack(ps_sample *s)
{
    s->depth = 0;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    s->t = ts.tv_sec + ts.tv_nsec / 1e9;
    uintptr_t cf = 0, fp = 0;
    if (ps_read(ps.tstate + offsetof(PyThreadState, cframe), &cf, sizeof(cf)) < 0 ||
        ps_read(cf + offsetof(_PyCFrame, current_frame), &fp, sizeof(fp)) < 0)
        return -1;
    for (int hops = 0; fp && s->depth < PS_DEPTH && hops < 4 * PS_DEPTH; hops++) {
        _PyInterpreterFrame f;
        PyCodeObject co;
        if (ps_read(fp, &f, offsetof(_PyInterpreterFrame, localsplus)) < 0) return -1;
        uintptr_t ca = (uintptr_t)f.f_code;
        if (ps_read(ca, &co, offsetof(PyCodeObject, co_code_adaptive)) < 0 ||
            (uintptr_t)co.ob_base.ob_base.ob_type != (uintptr_t)&PyCode_Type)
            return -1;
        uintptr_t first = ca + offsetof(PyCodeObject, co_code_adaptive);
        intptr_t lasti = ((intptr_t)(uintptr_t)f.prev_instr - (intptr_t)first) /
                         (intptr_t)sizeof(_Py_CODEUNIT);
        /* a frame still being set up is not on the Python-visible stack */
        int incomplete = f.owner != FRAME_OWNED_BY_GENERATOR && lasti < co._co_firsttraceable;
        if (!incomplete) {
            ps_code *e = ps_code_of(ca, &co);
            int line = -1;
            if (e && lasti < Py_SIZE(&co))
                line = pystack_addr2line(e->table, e->table_len, e->firstlineno, (int)lasti);
            s->code[s->depth] = e ? (uint16_t)(e - ps.codes + 1) : 0;
            s->line[s->depth] = line;
            s->depth++;
        }
        fp = (uintptr_t)f.previous;
    }
    return 0;
}

static double ps_cpu_now(void)
{
    struct timespec c;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c);
    return c.tv_sec + c.tv_nsec / 1e9;
}

static void ps_sample_once(void)
{
    static ps_sample s;
    double c0 = ps_cpu_now();
    /* a read that raced with a call or return is taken again at once */
    int tries = 0, ok = 1;
    while (ps_read_stack(&s) < 0)
        if (++tries == 3) {
            ok = 0;
            break;
        }
    double dc = ps_cpu_now() - c0;
    pthread_mutex_lock(&ps.mu);
    ps.cpu_s += dc;
    ps.retried += tries > 0;
    if (!ok) {
        ps.failed++;
    } else {
        ps.ring[ps.head] = s;
        ps.head = (ps.head + 1) % PS_RING;
        if (ps.count < PS_RING)
            ps.count++;
        else
            ps.lost++;
        ps.taken++;
    }
    pthread_mutex_unlock(&ps.mu);
}

static void *ps_loop(void *arg)
{
    (void)arg;
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    while (!atomic_load(&ps.stop)) {
        next.tv_nsec += ps.period_ns;
        while (next.tv_nsec >= 1000000000L) next.tv_nsec -= 1000000000L, next.tv_sec++;
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR) {
        }
        if (atomic_load(&ps.stop)) break;
        ps_sample_once();
        /* behind by more than a period (a stopped process): start afresh */
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((now.tv_sec - next.tv_sec) * 1000000000L + (now.tv_nsec - next.tv_nsec) > ps.period_ns)
            next = now;
    }
    return NULL;
}

#endif /* PS_NATIVE */

PyObject *pystack_start(PyObject *self, PyObject *arg)
{
    (void)self;
    double hz = PyFloat_AsDouble(arg);
    if (hz == -1.0 && PyErr_Occurred()) return NULL;
#if PS_NATIVE
    if (ps.running || !(hz > 0 && hz <= 1000)) Py_RETURN_FALSE;
    ps.pid = getpid();
    /* the calling thread (the training thread) is the one read */
    ps.tstate = (uintptr_t)PyThreadState_Get();
    uintptr_t probe = 0;
    if (ps_read(ps.tstate + offsetof(PyThreadState, cframe), &probe, sizeof(probe)) < 0)
        Py_RETURN_FALSE; /* process_vm_readv refused (a seccomp policy) */
    if (!ps.ring) ps.ring = calloc(PS_RING, sizeof(*ps.ring));
    if (!ps.codes) ps.codes = calloc(PS_CODES, sizeof(*ps.codes));
    if (!ps.ring || !ps.codes) Py_RETURN_FALSE;
    ps.period_ns = (long)(1e9 / hz);
    atomic_store(&ps.stop, 0);
    /* signals stay with the process's own threads */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&ps.th, NULL, ps_loop, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) Py_RETURN_FALSE;
    ps.running = 1;
    Py_RETURN_TRUE;
#else
    Py_RETURN_FALSE;
#endif
}

PyObject *pystack_stop(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    if (ps.running && getpid() == ps.pid) {
        atomic_store(&ps.stop, 1);
        Py_BEGIN_ALLOW_THREADS
        pthread_join(ps.th, NULL);
        Py_END_ALLOW_THREADS
    }
    ps.running = 0;
    Py_RETURN_NONE;
}

/* ([(t, frames), ...], {id: (file, name, firstlineno)} of the ids not returned
 * before, (taken, lost, failed, reader CPU s)); frames: bytes of native int32
 * pairs (code id, line; id 0 unresolved, line -1 unknown), innermost first. */
PyObject *pystack_take(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    PyObject *list = PyList_New(0), *codes = PyDict_New();
    if (!list || !codes) goto fail;
    /* nothing in a forked child: the reader did not follow it, and its
     * mutex may have been held at the fork */
    if (!ps.ring || getpid() != ps.pid)
        return Py_BuildValue("(NN(kkkd))", list, codes, 0ul, 0ul, 0ul, 0.0);
    ps_sample s;
    for (;;) {
        pthread_mutex_lock(&ps.mu);
        int have = ps.count > 0;
        if (have) {
            s = ps.ring[(ps.head + PS_RING - ps.count) % PS_RING];
            ps.count--;
        }
        pthread_mutex_unlock(&ps.mu);
        if (!have) break;
        /* the frames as one bytes object of native int32 pairs (code id,
         * line), innermost first: one allocation, and its hash is cached
         * (the sampler keys its caches by it) */
        int32_t packed[2 * PS_DEPTH];
        for (int i = 0; i < s.depth; i++) packed[2 * i] = s.code[i], packed[2 * i + 1] = s.line[i];
        PyObject *fr = PyBytes_FromStringAndSize((const char *)packed,
                                                 (Py_ssize_t)(2 * s.depth * sizeof(int32_t)));
        if (!fr) goto fail;
        PyObject *e = Py_BuildValue("(dN)", s.t, fr);
        if (!e || PyList_Append(list, e) < 0) {
            Py_XDECREF(e);
            goto fail;
        }
        Py_DECREF(e);
    }
    pthread_mutex_lock(&ps.mu);
    int n = ps.ncodes;
    unsigned long taken = ps.taken, lost = ps.lost, failed = ps.failed;
    double cpu = ps.cpu_s;
    pthread_mutex_unlock(&ps.mu);
    /* entries are appended and never change: the new ones are those past
     * the last take's */
    for (int i = ps.nreported; i < n && ps.codes; i++) {
        ps_code *c = &ps.codes[i];
        PyObject *k = PyLong_FromLong(i + 1);
        PyObject *v = Py_BuildValue("(ssi)", c->file, c->name, c->firstlineno);
        if (!k || !v || PyDict_SetItem(codes, k, v) < 0) {
            Py_XDECREF(k);
            Py_XDECREF(v);
            goto fail;
        }
        Py_DECREF(k);
        Py_DECREF(v);
        ps.nreported = i + 1;
    }
    return Py_BuildValue("(NN(kkkd))", list, codes, taken, lost, failed, cpu);
fail:
    Py_XDECREF(list);
    Py_XDECREF(codes);
    return NULL;
}

/* For the tests: the line of code unit lasti of a live code object, by this
 * file's reading of its location table (-2 where there is no such reader). */
PyObject *pystack_line(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *code;
    int lasti;
    if (!PyArg_ParseTuple(args, "O!i", &PyCode_Type, &code, &lasti)) return NULL;
#if PY_VERSION_HEX >= 0x030B0000
    PyObject *t = PyObject_GetAttrString(code, "co_linetable");
    if (!t) return NULL;
    if (!PyBytes_Check(t)) {
        Py_DECREF(t);
        return PyLong_FromLong(-2);
    }
    int line = pystack_addr2line((const unsigned char *)PyBytes_AS_STRING(t),
                                 (size_t)PyBytes_GET_SIZE(t),
                                 ((PyCodeObject *)code)->co_firstlineno, lasti);
    Py_DECREF(t);
    return PyLong_FromLong(line);
#else
    (void)lasti;
    return PyLong_FromLong(-2);
#endif
}
