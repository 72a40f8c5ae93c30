/* _core.c — the CPython binding of libtrainperf (public API only).
 *
 * Hot calls (phase enter/exit, step, counter, mark) take METH_NOARGS/METH_O/
 * METH_FASTCALL and allocate nothing per call: a name is interned once and its
 * id cached in a dict keyed by the str; phase("x") returns one cached context
 * manager object per name; step() reuses a cached Step object whenever no one
 * else holds it. All of this relies on the GIL (single-phase init, static
 * state): the extension is not built for free-threaded Python. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <time.h>

#include "trainperf.h"
#include "_pystack.h"

/* Caps keep a misbehaving caller (a fresh name per call) from growing the
 * caches without bound; past the cap names still work, uncached. */
#define CORE_MAX_CACHED_NAMES 4096

static PyObject *name_ids;     /* str -> int id */
static PyObject *phase_cache;  /* str -> Phase */
static PyObject *step_cached;  /* one reusable Step object */
static int explicit_steps;     /* set by the first explicit step(): auto steps off */

/* ---- names ------------------------------------------------------------- */

/* The id of a name given as str (interned and cached) or int. 0 with an
 * exception set on a bad argument; 0 without an exception when the library's
 * table is full (the event is then not recorded). */
static tpf_name core_name_of(PyObject *obj)
{
    if (PyLong_CheckExact(obj)) {
        unsigned long v = PyLong_AsUnsignedLong(obj);
        if (v == (unsigned long)-1 && PyErr_Occurred()) return 0;
        if (v > UINT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "name id out of range");
            return 0;
        }
        return (tpf_name)v;
    }
    if (!PyUnicode_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "name must be str or int, not %.100s",
                     Py_TYPE(obj)->tp_name);
        return 0;
    }
    PyObject *cached = PyDict_GetItemWithError(name_ids, obj);
    if (cached) return (tpf_name)PyLong_AsUnsignedLong(cached);
    if (PyErr_Occurred()) return 0;
    Py_ssize_t len;
    const char *s = PyUnicode_AsUTF8AndSize(obj, &len);
    if (!s) return 0;
    if (len == 0 || (size_t)len != strlen(s)) {
        PyErr_SetString(PyExc_ValueError, "name must be a non-empty str without NUL");
        return 0;
    }
    tpf_name id = tpf_name_register(s);
    if (id != 0 && PyDict_GET_SIZE(name_ids) < CORE_MAX_CACHED_NAMES) {
        PyObject *v = PyLong_FromUnsignedLong(id);
        if (!v || PyDict_SetItem(name_ids, obj, v) < 0) {
            Py_XDECREF(v);
            return 0;
        }
        Py_DECREF(v);
    }
    return id;
}

static PyObject *core_name(PyObject *self, PyObject *arg)
{
    tpf_name id = core_name_of(arg);
    if (id == 0 && PyErr_Occurred()) return NULL;
    return PyLong_FromUnsignedLong(id);
}

/* ---- Phase: a context manager bound to one name ------------------------ */

typedef struct {
    PyObject_HEAD
    tpf_name id;
    PyObject *label;
} core_phase;

static void phase_dealloc(core_phase *p)
{
    Py_XDECREF(p->label);
    Py_TYPE(p)->tp_free((PyObject *)p);
}

static PyObject *phase_enter(core_phase *p, PyObject *unused)
{
    tpf_range_push(p->id);
    Py_INCREF(p);
    return (PyObject *)p;
}

static PyObject *phase_exit(core_phase *p, PyObject *const *args, Py_ssize_t nargs)
{
    tpf_range_pop();
    Py_RETURN_FALSE;
}

static PyObject *phase_repr(core_phase *p)
{
    return PyUnicode_FromFormat("<trainperf.phase %R id=%u>", p->label, (unsigned)p->id);
}

static PyMethodDef phase_methods[] = {
    {"__enter__", (PyCFunction)phase_enter, METH_NOARGS, "Push the range."},
    {"__exit__", (PyCFunction)(void (*)(void))phase_exit, METH_FASTCALL, "Pop the range."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef phase_members[] = {
    {"id", T_UINT, offsetof(core_phase, id), READONLY, "interned name id"},
    {"name", T_OBJECT, offsetof(core_phase, label), READONLY, "the name"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject phase_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "trainperf._core.Phase",
    .tp_basicsize = sizeof(core_phase),
    .tp_dealloc = (destructor)phase_dealloc,
    .tp_repr = (reprfunc)phase_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "with trainperf.phase(name): time a range (reusable, reentrant).",
    .tp_methods = phase_methods,
    .tp_members = phase_members,
};

/* ---- Timed: a callable that runs fn inside a range ---------------------- */

/* The auto hook's per-step wrappers (torch.autograd.backward) cost a Python
 * frame and a try/finally each; this does the same push / call / pop in C,
 * with vectorcall, so a wrapped call costs about what the call alone does. */
#if PY_VERSION_HEX >= 0x030C0000
#define CORE_HAVE_VECTORCALL Py_TPFLAGS_HAVE_VECTORCALL
#else
#define CORE_HAVE_VECTORCALL _Py_TPFLAGS_HAVE_VECTORCALL
#endif

typedef struct {
    PyObject_HEAD
    PyObject *fn;
    tpf_name id;
    vectorcallfunc vectorcall;
    PyObject *dict; /* __wrapped__, __doc__, ... as functools.wraps would set */
} core_timed;

static PyObject *timed_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                  PyObject *kwnames)
{
    core_timed *t = (core_timed *)self;
    tpf_range_push(t->id);
    PyObject *r = PyObject_Vectorcall(t->fn, args, nargsf, kwnames);
    tpf_range_pop();
    return r;
}

static void timed_dealloc(core_timed *t)
{
    PyObject_GC_UnTrack(t);
    Py_CLEAR(t->fn);
    Py_CLEAR(t->dict);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static int timed_traverse(core_timed *t, visitproc visit, void *arg)
{
    Py_VISIT(t->fn);
    Py_VISIT(t->dict);
    return 0;
}

static int timed_clear(core_timed *t)
{
    Py_CLEAR(t->fn);
    Py_CLEAR(t->dict);
    return 0;
}

static PyObject *timed_repr(core_timed *t)
{
    return PyUnicode_FromFormat("<trainperf timed %R id=%u>", t->fn, (unsigned)t->id);
}

static PyGetSetDef timed_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject timed_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "trainperf._core.Timed",
    .tp_basicsize = sizeof(core_timed),
    .tp_dealloc = (destructor)timed_dealloc,
    .tp_repr = (reprfunc)timed_repr,
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | CORE_HAVE_VECTORCALL,
    .tp_doc = "timed(fn, name): fn(*args, **kwargs) inside the range name (functions only: "
              "it does not bind as a method).",
    .tp_traverse = (traverseproc)timed_traverse,
    .tp_clear = (inquiry)timed_clear,
    .tp_getset = timed_getset,
    .tp_dictoffset = offsetof(core_timed, dict),
    .tp_vectorcall_offset = offsetof(core_timed, vectorcall),
};

/* timed(fn, name) -> a Timed calling fn inside range name; new reference. */
static PyObject *core_timed_new(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "timed(fn, name) takes 2 arguments");
        return NULL;
    }
    if (!PyCallable_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "timed(): fn must be callable");
        return NULL;
    }
    tpf_name id = core_name_of(args[1]);
    if (id == 0 && PyErr_Occurred()) return NULL;
    core_timed *t = PyObject_GC_New(core_timed, &timed_type);
    if (!t) return NULL;
    Py_INCREF(args[0]);
    t->fn = args[0];
    t->id = id;
    t->vectorcall = timed_vectorcall;
    t->dict = NULL;
    PyObject_GC_Track(t);
    return (PyObject *)t;
}

/* phase(name) -> the cached Phase for name. */
static PyObject *core_phase_get(PyObject *self, PyObject *arg)
{
    PyObject *p = PyDict_GetItemWithError(phase_cache, arg);
    if (p) {
        Py_INCREF(p);
        return p;
    }
    if (PyErr_Occurred()) return NULL;
    if (!PyUnicode_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "phase name must be str, not %.100s",
                     Py_TYPE(arg)->tp_name);
        return NULL;
    }
    tpf_name id = core_name_of(arg);
    if (id == 0 && PyErr_Occurred()) return NULL;
    core_phase *np = PyObject_New(core_phase, &phase_type);
    if (!np) return NULL;
    np->id = id;
    Py_INCREF(arg);
    np->label = arg;
    if (PyDict_GET_SIZE(phase_cache) < CORE_MAX_CACHED_NAMES &&
        PyDict_SetItem(phase_cache, arg, (PyObject *)np) < 0) {
        Py_DECREF(np);
        return NULL;
    }
    return (PyObject *)np;
}

/* ---- Step listener (set_step_listener) ---------------------------------
 * A callable run after each step ends, on the thread that ended it: how a
 * request made while the run goes (`trainperf profile`, trainperf._ondemand)
 * reaches the training thread at a step boundary. Unset (the common case) a
 * step pays one pointer test. A listener that returns a false value or
 * raises is dropped; a Ctrl-C that landed in it is raised again. */
static PyObject *step_listener;

static void step_listener_fire_(void)
{
    PyObject *fn = step_listener;
    Py_INCREF(fn);
    PyObject *r = PyObject_CallNoArgs(fn);
    int keep = r ? PyObject_IsTrue(r) : 0;
    Py_XDECREF(r);
    if (keep <= 0 && step_listener == fn) Py_CLEAR(step_listener);
    Py_DECREF(fn);
    if (PyErr_Occurred()) {
        int interrupted = PyErr_ExceptionMatches(PyExc_KeyboardInterrupt);
        PyErr_Clear();
        if (interrupted) PyErr_SetInterrupt();
    }
}

/* Steps this thread ended: the steps.csv index of the step it is in. */
static _Thread_local unsigned long long tls_steps_ended;

#define STEP_ENDED()                                                                               \
    do {                                                                                           \
        tls_steps_ended++;                                                                         \
        if (step_listener) step_listener_fire_();                                                  \
    } while (0)

static PyObject *core_steps_ended(PyObject *self, PyObject *unused)
{
    return PyLong_FromUnsignedLongLong(tls_steps_ended);
}

static PyObject *core_set_step_listener(PyObject *self, PyObject *fn)
{
    if (fn != Py_None && !PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "set_step_listener(fn): a callable or None");
        return NULL;
    }
    Py_XDECREF(step_listener);
    step_listener = NULL;
    if (fn != Py_None) {
        Py_INCREF(fn);
        step_listener = fn;
    }
    Py_RETURN_NONE;
}

/* ---- Step: `with step(samples=, tokens=)` ------------------------------ */

typedef struct {
    PyObject_HEAD
    unsigned long long samples, tokens;
} core_step;

static PyObject *step_enter(core_step *s, PyObject *unused)
{
    explicit_steps = 1;
    tpf_step_begin();
    Py_INCREF(s);
    return (PyObject *)s;
}

/* The step ends whatever way the body left: the time was spent either way. */
static PyObject *step_exit(core_step *s, PyObject *const *args, Py_ssize_t nargs)
{
    tpf_step_end(s->samples, s->tokens);
    STEP_ENDED();
    Py_RETURN_FALSE;
}

static PyMethodDef step_methods[] = {
    {"__enter__", (PyCFunction)step_enter, METH_NOARGS, "Begin the step."},
    {"__exit__", (PyCFunction)(void (*)(void))step_exit, METH_FASTCALL, "End the step."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef step_members[] = {
    {"samples", T_ULONGLONG, offsetof(core_step, samples), 0, "samples in this step"},
    {"tokens", T_ULONGLONG, offsetof(core_step, tokens), 0, "tokens in this step"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject step_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "trainperf._core.Step",
    .tp_basicsize = sizeof(core_step),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "with trainperf.step(samples=, tokens=): one training step. "
              "samples/tokens may be set inside the block.",
    .tp_methods = step_methods,
    .tp_members = step_members,
};

/* Non-negative integer from a fast-call argument; -1 with an exception. */
static int core_u64_arg(PyObject *o, unsigned long long *out, const char *what)
{
    if (o == NULL || o == Py_None) {
        *out = 0;
        return 0;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Format(PyExc_ValueError, "%s must be a non-negative int", what);
        return -1;
    }
    *out = v;
    return 0;
}

/* Parse (samples=0, tokens=0) from a vectorcall argument list. */
static int core_samples_tokens(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                               unsigned long long *samples, unsigned long long *tokens)
{
    PyObject *s = NULL, *t = NULL;
    if (nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "expected at most 2 arguments (samples, tokens)");
        return -1;
    }
    if (nargs > 0) s = args[0];
    if (nargs > 1) t = args[1];
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *k = PyTuple_GET_ITEM(kwnames, i);
        if (PyUnicode_CompareWithASCIIString(k, "samples") == 0 && !s) {
            s = args[nargs + i];
        } else if (PyUnicode_CompareWithASCIIString(k, "tokens") == 0 && !t) {
            t = args[nargs + i];
        } else {
            PyErr_Format(PyExc_TypeError, "unexpected or repeated keyword argument %R", k);
            return -1;
        }
    }
    if (core_u64_arg(s, samples, "samples") < 0) return -1;
    return core_u64_arg(t, tokens, "tokens");
}

static PyObject *core_step_new(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames)
{
    unsigned long long samples, tokens;
    if (core_samples_tokens(args, nargs, kwnames, &samples, &tokens) < 0) return NULL;
    core_step *s;
    /* Refcount 1: only the cache holds it, so nobody can observe the reuse. */
    if (step_cached && Py_REFCNT(step_cached) == 1) {
        s = (core_step *)step_cached;
        Py_INCREF(s);
    } else {
        s = PyObject_New(core_step, &step_type);
        if (!s) return NULL;
        if (!step_cached) {
            Py_INCREF(s);
            step_cached = (PyObject *)s;
        }
    }
    s->samples = samples;
    s->tokens = tokens;
    return (PyObject *)s;
}

/* ---- the auto hook's step state and per-step hooks ---------------------- */

/* python/trainperf/_autohook.py's hot hooks (DataLoader __next__, the global
 * optimizer pre/post hooks) in C: no Python frame per call. The step state is
 * per thread (steps are per thread in the probe); auto_state exposes it to
 * the hook's Python code as attributes of one object. */
typedef struct {
    int open;                      /* this thread's automatic step is open */
    int in_data;                   /* inside DataLoader __next__ */
    unsigned long long samples;    /* counted since the last step end */
    unsigned long long tokens;
} core_auto_tls;

static _Thread_local core_auto_tls auto_tls;
static int auto_on;            /* the auto hook owns step boundaries */
static int auto_opt_phase = 1; /* the optimizer hooks push "optimizer" */
/* backward ends are step boundaries: no torch.optim optimizer has been made
 * or has stepped yet (a hand-written update loop); cleared for good by the
 * first of either */
static int auto_bwd_steps;
/* the optimizer whose steps are step boundaries, another one stepping, how
 * many times in a row it has (as _autohook.patch_torch's `primary`); a weak
 * reference to the first, when it takes one: once it is gone, the next
 * optimizer that steps is the primary (a script that makes a new optimizer
 * every step) */
static const void *auto_primary, *auto_other;
static PyObject *auto_primary_ref;
static int auto_other_n;
static PyObject *str_active;   /* "active" */
static PyObject *str_shape;    /* "shape" */
static PyObject *str_dtype, *str_is_floating_point, *str_is_signed;

typedef struct {
    PyObject_HEAD
} core_auto_state;

#define AUTO_FLAG(name, expr)                                                              \
    static PyObject *auto_get_##name(PyObject *s, void *c)                                 \
    {                                                                                      \
        return PyBool_FromLong(expr);                                                      \
    }                                                                                      \
    static int auto_set_##name(PyObject *s, PyObject *v, void *c)                          \
    {                                                                                      \
        int b = v ? PyObject_IsTrue(v) : -1;                                               \
        if (b < 0) {                                                                       \
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "cannot delete");     \
            return -1;                                                                     \
        }                                                                                  \
        expr = b;                                                                          \
        return 0;                                                                          \
    }
AUTO_FLAG(open, auto_tls.open)
AUTO_FLAG(auto, auto_on)
AUTO_FLAG(opt_phase, auto_opt_phase)
AUTO_FLAG(bwd_steps, auto_bwd_steps)

#define AUTO_COUNT(name, expr, type, conv)                                                 \
    static PyObject *auto_get_##name(PyObject *s, void *c)                                 \
    {                                                                                      \
        return PyLong_FromUnsignedLongLong((unsigned long long)(expr));                    \
    }                                                                                      \
    static int auto_set_##name(PyObject *s, PyObject *v, void *c)                          \
    {                                                                                      \
        if (!v) {                                                                          \
            PyErr_SetString(PyExc_TypeError, "cannot delete");                             \
            return -1;                                                                     \
        }                                                                                  \
        type x = conv(v);                                                                  \
        if (x == (type)-1 && PyErr_Occurred()) return -1;                                  \
        expr = x;                                                                          \
        return 0;                                                                          \
    }
AUTO_COUNT(in_data, auto_tls.in_data, long, PyLong_AsLong)
AUTO_COUNT(samples, auto_tls.samples, unsigned long long, PyLong_AsUnsignedLongLong)
AUTO_COUNT(tokens, auto_tls.tokens, unsigned long long, PyLong_AsUnsignedLongLong)

static PyGetSetDef auto_state_getset[] = {
    {"open", auto_get_open, auto_set_open, "this thread's automatic step is open", NULL},
    {"in_data", auto_get_in_data, auto_set_in_data, "this thread is inside DataLoader __next__", NULL},
    {"samples", auto_get_samples, auto_set_samples, "samples counted on this thread", NULL},
    {"tokens", auto_get_tokens, auto_set_tokens, "tokens counted on this thread", NULL},
    {"auto", auto_get_auto, auto_set_auto, "the auto hook owns step boundaries (all threads)", NULL},
    {"opt_phase", auto_get_opt_phase, auto_set_opt_phase,
     "the optimizer hooks push the optimizer range (all threads)", NULL},
    {"bwd_steps", auto_get_bwd_steps, auto_set_bwd_steps,
     "backward ends are step boundaries: no optimizer made or stepped yet (all threads)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject auto_state_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "trainperf._core.AutoState",
    .tp_basicsize = sizeof(core_auto_state),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The auto hook's step state: open, in_data, samples, tokens per thread; "
              "auto, opt_phase for the process.",
    .tp_getset = auto_state_getset,
};

/* One object of the hooks below: what each calls back into Python for (the
 * rare cases) and the original it wraps. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *dict;
    PyObject *orig;    /* data_next: the original __next__; backward: the inner backward */
    PyObject *ev;      /* _evalhooks.ev (its .active) */
    PyObject *begin;   /* _autohook._begin_if_closed */
    PyObject *other;   /* data_next: count(batch); opt_pre, backward: step_in_eval */
    PyObject *tensor;  /* data_next: torch.Tensor */
} core_hook;

static int hook_traverse(core_hook *h, visitproc visit, void *arg)
{
    Py_VISIT(h->dict);
    Py_VISIT(h->orig);
    Py_VISIT(h->ev);
    Py_VISIT(h->begin);
    Py_VISIT(h->other);
    Py_VISIT(h->tensor);
    return 0;
}

static int hook_clear(core_hook *h)
{
    Py_CLEAR(h->dict);
    Py_CLEAR(h->orig);
    Py_CLEAR(h->ev);
    Py_CLEAR(h->begin);
    Py_CLEAR(h->other);
    Py_CLEAR(h->tensor);
    return 0;
}

static void hook_dealloc(core_hook *h)
{
    PyObject_GC_UnTrack(h);
    hook_clear(h);
    Py_TYPE(h)->tp_free((PyObject *)h);
}

/* Begin the automatic step when none is open: the Python side does the
 * rest (the first step starts the sampler, profiling hooks). */
static int auto_begin_if_closed(core_hook *h)
{
    if (auto_tls.open || !auto_on || explicit_steps) return 0;
    PyObject *r = PyObject_CallNoArgs(h->begin);
    if (!r) return -1;
    Py_DECREF(r);
    return 0;
}

/* 1 when ev.active is true, 0 when not, -1 on error */
static int auto_eval_active(core_hook *h)
{
    PyObject *a = PyObject_GetAttr(h->ev, str_active);
    if (!a) return -1;
    int b = PyObject_IsTrue(a);
    Py_DECREF(a);
    return b;
}

/* A batch's first tensor of 2+ dims: samples, and tokens when it holds
 * token ids (signed integers: not floats, image bytes or masks), as
 * _autohook._batch_size counts them. 1 when counted. */
static int auto_count_nd(PyObject *t, PyObject *shape)
{
    PyObject *dt = PyObject_GetAttr(t, str_dtype);
    if (!dt) {
        PyErr_Clear();
        return 0;
    }
    PyObject *fl = PyObject_GetAttr(dt, str_is_floating_point);
    PyObject *sg = fl ? PyObject_GetAttr(dt, str_is_signed) : NULL;
    Py_DECREF(dt);
    if (!fl || !sg) {
        Py_XDECREF(fl);
        PyErr_Clear();
        return 0;
    }
    int ids = sg == Py_True && fl == Py_False;
    Py_DECREF(fl);
    Py_DECREF(sg);
    unsigned long long n = 1, first = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(shape); i++) {
        unsigned long long d = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(shape, i));
        if (d == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
        if (i == 0) first = d;
        n *= d;
    }
    auto_tls.samples += first;
    if (ids) auto_tls.tokens += n;
    return 1;
}

/* Samples of a (tensor, ...) batch without a call into Python: 1 when
 * counted, 0 when the batch is not that shape. */
static int auto_count_fast(core_hook *h, PyObject *batch)
{
    PyObject *first;
    if (PyTuple_CheckExact(batch) && PyTuple_GET_SIZE(batch) > 0)
        first = PyTuple_GET_ITEM(batch, 0);
    else if (PyList_CheckExact(batch) && PyList_GET_SIZE(batch) > 0)
        first = PyList_GET_ITEM(batch, 0);
    else
        return 0;
    if (!PyObject_TypeCheck(first, (PyTypeObject *)h->tensor)) return 0;
    PyObject *shape = PyObject_GetAttr(first, str_shape);
    if (!shape) {
        PyErr_Clear();
        return 0;
    }
    int done = 0;
    /* [batch, length, ...] of token ids: _autohook.py counts its tokens */
    if (PyTuple_Check(shape) && PyTuple_GET_SIZE(shape) == 1) {
        unsigned long long n = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(shape, 0));
        if (n == (unsigned long long)-1 && PyErr_Occurred())
            PyErr_Clear();
        else {
            auto_tls.samples += n;
            done = 1;
        }
    } else if (PyTuple_Check(shape) && PyTuple_GET_SIZE(shape) > 1) {
        done = auto_count_nd(first, shape);
    }
    Py_DECREF(shape);
    return done;
}

/* DataLoader iterators' __next__: the "data" phase around the original, then
 * the batch's samples (an evaluation's batches are neither). */
static PyObject *data_next_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                      PyObject *kwnames)
{
    core_hook *h = (core_hook *)self;
    if (auto_begin_if_closed(h) < 0) return NULL;
    int active = auto_eval_active(h);
    if (active < 0) return NULL;
    if (active) return PyObject_Vectorcall(h->orig, args, nargsf, kwnames);
    auto_tls.in_data++;
    tpf_range_push(TPF_PHASE_DATA);
    PyObject *batch = PyObject_Vectorcall(h->orig, args, nargsf, kwnames);
    tpf_range_pop();
    auto_tls.in_data--;
    /* the training data ran out: the loop ended (the next batch or step
     * says it runs again) */
    if (!batch && PyErr_ExceptionMatches(PyExc_StopIteration)) tpf_loop_end(TPF_LOOP_DONE);
    if (!batch || auto_count_fast(h, batch)) return batch;
    PyObject *r = PyObject_CallOneArg(h->other, batch);
    if (r)
        Py_DECREF(r);
    else
        PyErr_Clear(); /* a batch not counted, never a failed step */
    return batch;
}

/* As a method of the iterator class: bound like a function. */
static PyObject *hook_descr_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None) {
        Py_INCREF(self);
        return self;
    }
    return PyMethod_New(self, obj);
}

/* Global optimizer step pre-hook (opt, args, kwargs). */
static PyObject *opt_pre_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                    PyObject *kwnames)
{
    core_hook *h = (core_hook *)self;
    int active = auto_eval_active(h);
    if (active < 0) return NULL;
    if (active) {
        PyObject *r = PyObject_CallNoArgs(h->other);
        if (!r) return NULL;
        Py_DECREF(r);
    }
    if (auto_begin_if_closed(h) < 0) return NULL;
    if (auto_opt_phase) tpf_range_push(TPF_PHASE_OPTIMIZER);
    Py_RETURN_NONE;
}

/* Whether the primary optimizer no longer exists (known only when it took
 * a weak reference). */
static int primary_gone(void)
{
    if (auto_primary_ref == NULL) return 0;
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *o = NULL;
    if (PyWeakref_GetRef(auto_primary_ref, &o) < 0) {
        PyErr_Clear();
        return 0;
    }
    Py_XDECREF(o);
    return o == NULL;
#else
    return PyWeakref_GetObject(auto_primary_ref) == Py_None;
#endif
}

static void set_primary(PyObject *opt)
{
    auto_primary = opt;
    Py_CLEAR(auto_primary_ref);
    auto_primary_ref = PyWeakref_NewRef(opt, NULL);
    if (auto_primary_ref == NULL) PyErr_Clear(); /* no weak references: compared by address */
}

/* Global optimizer step post-hook (opt, args, kwargs): each step of the
 * primary optimizer ends this thread's step and begins the next. */
static PyObject *opt_post_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                     PyObject *kwnames)
{
    if (auto_opt_phase) tpf_range_pop();
    auto_bwd_steps = 0; /* an optimizer steps: its steps are the boundaries now */
    if (PyVectorcall_NARGS(nargsf) < 1) Py_RETURN_NONE;
    const void *oid = args[0];
    if (auto_primary != NULL && auto_primary != oid && primary_gone()) auto_primary = NULL;
    if (auto_primary == NULL) {
        set_primary(args[0]);
    } else if (auto_primary != oid) {
        /* a GAN's second optimizer alternates with the primary (no step);
         * a later training stage's replaces it once it steps twice in a row */
        if (auto_other == oid) {
            auto_other_n++;
        } else {
            auto_other = oid;
            auto_other_n = 1;
        }
        if (auto_other_n < 2) Py_RETURN_NONE;
        set_primary(args[0]);
    }
    auto_other = NULL;
    auto_other_n = 0;
    if (auto_tls.open) {
        if (explicit_steps) {
            auto_tls.open = 0;
        } else {
            tpf_step_end(auto_tls.samples, auto_tls.tokens);
            auto_tls.samples = auto_tls.tokens = 0;
            tpf_step_begin();
            STEP_ENDED();
        }
    }
    Py_RETURN_NONE;
}

/* The graph probe (set_graph_probe): every period seconds one backward's
 * tensors go to probe(tensors) before it runs (it counts the graph's
 * nodes); what it returns, when callable, gets the backward's ns after.
 * The first probe is the sixth backward; the next ones come sooner, the
 * gap doubling from period/16 up to period (a short run still gets a few
 * to take a median of: one probe of a cold step misread a run). Between
 * probes a backward costs one clock read. */
static PyObject *graph_probe;
static double graph_period = 10.0, graph_gap = 10.0, graph_next;
static int graph_skip; /* backwards left before the first probe (warm-up) */

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Clear an error of the probe's own; a Ctrl-C that landed in it is raised
 * again at the script's next bytecode, not lost. */
static void probe_clear(void)
{
    int interrupted = PyErr_ExceptionMatches(PyExc_KeyboardInterrupt);
    PyErr_Clear();
    if (interrupted) PyErr_SetInterrupt();
}

static PyObject *graph_probe_begin(PyObject *tensors, double *t0)
{
    if (!graph_probe) return NULL;
    if (graph_skip > 0) {
        graph_skip--;
        return NULL;
    }
    double now = mono_s();
    if (now < graph_next) return NULL;
    graph_next = now + graph_gap;
    graph_gap = 2 * graph_gap < graph_period ? 2 * graph_gap : graph_period;
    PyObject *done = PyObject_CallOneArg(graph_probe, tensors ? tensors : Py_None);
    if (!done || !PyCallable_Check(done)) {
        Py_XDECREF(done);
        probe_clear();
        return NULL;
    }
    *t0 = mono_s();
    return done;
}

static void graph_probe_end(PyObject *done, double t0, int ok)
{
    if (!done) return;
    if (ok) { /* the backward returned: no exception is pending */
        PyObject *ns = PyLong_FromDouble((mono_s() - t0) * 1e9);
        PyObject *x = ns ? PyObject_CallOneArg(done, ns) : NULL;
        Py_XDECREF(ns);
        Py_XDECREF(x);
        probe_clear();
    }
    Py_DECREF(done);
}

/* torch.autograd.backward inside the "backward" phase. The first step may
 * begin here (a model of bare tensors has no module forward to begin it);
 * while auto_bwd_steps holds, the end of each backward ends this thread's
 * step and begins the next. A failure of trainperf's own calls is cleared:
 * the backward's result always goes back to the caller. */
static PyObject *bwd_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                PyObject *kwnames)
{
    core_hook *h = (core_hook *)self;
    if (!auto_tls.open && auto_begin_if_closed(h) < 0) PyErr_Clear();
    tpf_range_push(TPF_PHASE_BACKWARD);
    double t0 = 0;
    PyObject *done = graph_probe_begin(PyVectorcall_NARGS(nargsf) > 0 ? args[0] : NULL, &t0);
    PyObject *r = PyObject_Vectorcall(h->orig, args, nargsf, kwnames);
    graph_probe_end(done, t0, r != NULL);
    tpf_range_pop();
    if (!r || !auto_bwd_steps || !auto_tls.open) return r;
    if (explicit_steps) {
        auto_tls.open = 0;
        return r;
    }
    /* as at an optimizer step: an eval phase still open is a frozen helper's */
    int active = auto_eval_active(h);
    if (active > 0) {
        PyObject *e = PyObject_CallNoArgs(h->other);
        Py_XDECREF(e);
    }
    if (PyErr_Occurred()) PyErr_Clear();
    tpf_step_end(auto_tls.samples, auto_tls.tokens);
    auto_tls.samples = auto_tls.tokens = 0;
    tpf_step_begin();
    STEP_ENDED();
    return r;
}

static PyObject *hook_repr(core_hook *h)
{
    return PyUnicode_FromFormat("<trainperf %s>", Py_TYPE(h)->tp_name);
}

static PyGetSetDef hook_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

#define HOOK_TYPE(cname, pyname, flags, descr, doc)                                        \
    static PyTypeObject cname = {                                                          \
        PyVarObject_HEAD_INIT(NULL, 0)                                                     \
        .tp_name = "trainperf._core." pyname,                                              \
        .tp_basicsize = sizeof(core_hook),                                                 \
        .tp_dealloc = (destructor)hook_dealloc,                                            \
        .tp_repr = (reprfunc)hook_repr,                                                    \
        .tp_call = PyVectorcall_Call,                                                      \
        .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | CORE_HAVE_VECTORCALL | flags, \
        .tp_doc = doc,                                                                     \
        .tp_traverse = (traverseproc)hook_traverse,                                        \
        .tp_clear = (inquiry)hook_clear,                                                   \
        .tp_getset = hook_getset,                                                          \
        .tp_descr_get = descr,                                                             \
        .tp_dictoffset = offsetof(core_hook, dict),                                        \
        .tp_vectorcall_offset = offsetof(core_hook, vectorcall),                           \
    }
HOOK_TYPE(data_next_type, "DataNext", Py_TPFLAGS_METHOD_DESCRIPTOR, hook_descr_get,
          "DataLoader iterators' __next__ timed as the data phase (auto_hooks()).");
HOOK_TYPE(opt_pre_type, "OptPre", 0, NULL, "The auto hook's optimizer step pre-hook.");
HOOK_TYPE(opt_post_type, "OptPost", 0, NULL, "The auto hook's optimizer step post-hook.");
HOOK_TYPE(bwd_type, "Backward", 0, NULL,
          "torch.autograd.backward timed as the backward phase; a step boundary while no "
          "optimizer was made or stepped.");

static PyObject *hook_new(PyTypeObject *type, vectorcallfunc call, PyObject *orig, PyObject *ev,
                          PyObject *begin, PyObject *other, PyObject *tensor)
{
    core_hook *h = PyObject_GC_New(core_hook, type);
    if (!h) return NULL;
    h->vectorcall = call;
    h->dict = NULL;
    h->orig = orig;
    h->ev = ev;
    h->begin = begin;
    h->other = other;
    h->tensor = tensor;
    Py_XINCREF(orig);
    Py_XINCREF(ev);
    Py_XINCREF(begin);
    Py_XINCREF(other);
    Py_XINCREF(tensor);
    PyObject_GC_Track(h);
    return (PyObject *)h;
}

/* data_next(orig, ev, begin, count, tensor_type) -> DataNext;
 * opt_hooks(ev, begin, step_in_eval) -> (pre, post). */
static PyObject *core_data_next(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5 || !PyCallable_Check(args[0]) || !PyCallable_Check(args[2]) ||
        !PyCallable_Check(args[3]) || !PyType_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError,
                        "data_next(orig, ev, begin, count, tensor_type): callables and a type");
        return NULL;
    }
    return hook_new(&data_next_type, data_next_vectorcall, args[0], args[1], args[2], args[3],
                    args[4]);
}

static PyObject *core_opt_hooks(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyCallable_Check(args[1]) || !PyCallable_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "opt_hooks(ev, begin, step_in_eval): callables");
        return NULL;
    }
    PyObject *pre = hook_new(&opt_pre_type, opt_pre_vectorcall, NULL, args[0], args[1], args[2],
                             NULL);
    if (!pre) return NULL;
    PyObject *post = hook_new(&opt_post_type, opt_post_vectorcall, NULL, NULL, NULL, NULL, NULL);
    if (!post) {
        Py_DECREF(pre);
        return NULL;
    }
    PyObject *t = PyTuple_Pack(2, pre, post);
    Py_DECREF(pre);
    Py_DECREF(post);
    return t;
}

/* set_graph_probe(probe, period_s): see graph_probe; None turns it off. */
static PyObject *core_set_graph_probe(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    double period = nargs == 2 ? PyFloat_AsDouble(args[1]) : -1;
    if (nargs != 2 || (args[0] != Py_None && !PyCallable_Check(args[0])) || !(period > 0)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "set_graph_probe(probe, period_s): a callable or "
                                             "None, and seconds > 0");
        return NULL;
    }
    Py_XDECREF(graph_probe);
    graph_probe = NULL;
    if (args[0] != Py_None) {
        Py_INCREF(args[0]);
        graph_probe = args[0];
    }
    graph_period = period;
    graph_gap = period / 16;
    graph_next = 0;
    graph_skip = 5; /* the first steps warm up; a short run still gets one probe */
    Py_RETURN_NONE;
}

/* backward_hook(inner, ev, begin, step_in_eval) -> Backward. */
static PyObject *core_backward_hook(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyCallable_Check(args[0]) || !PyCallable_Check(args[2]) ||
        !PyCallable_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError,
                        "backward_hook(inner, ev, begin, step_in_eval): callables");
        return NULL;
    }
    return hook_new(&bwd_type, bwd_vectorcall, args[0], args[1], args[2], args[3], NULL);
}

/* ---- plain probe calls ------------------------------------------------- */

static PyObject *core_step_begin(PyObject *self, PyObject *unused)
{
    explicit_steps = 1;
    tpf_step_begin();
    Py_RETURN_NONE;
}

static PyObject *core_step_end(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames)
{
    unsigned long long samples, tokens;
    if (core_samples_tokens(args, nargs, kwnames, &samples, &tokens) < 0) return NULL;
    tpf_step_end(samples, tokens);
    STEP_ENDED();
    Py_RETURN_NONE;
}

/* The auto-instrumentation's step calls: no-ops once the script has used the
 * explicit API, so no step is counted twice. Return True when recorded. */
static PyObject *core_auto_step_begin(PyObject *self, PyObject *unused)
{
    if (explicit_steps) Py_RETURN_FALSE;
    tpf_step_begin();
    Py_RETURN_TRUE;
}

static PyObject *core_auto_step_end(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    unsigned long long samples = 0, tokens = 0;
    if (explicit_steps) Py_RETURN_FALSE;
    if (core_samples_tokens(args, nargs, NULL, &samples, &tokens) < 0) return NULL;
    tpf_step_end(samples, tokens);
    STEP_ENDED();
    Py_RETURN_TRUE;
}

static PyObject *core_explicit_steps(PyObject *self, PyObject *unused)
{
    return PyBool_FromLong(explicit_steps);
}

/* Callbacks call this before their first step: the auto hook steps down. */
static PyObject *core_disable_auto_steps(PyObject *self, PyObject *unused)
{
    explicit_steps = 1;
    Py_RETURN_NONE;
}

static PyObject *core_range_push(PyObject *self, PyObject *arg)
{
    tpf_name id = core_name_of(arg);
    if (id == 0 && PyErr_Occurred()) return NULL;
    tpf_range_push(id);
    Py_RETURN_NONE;
}

static PyObject *core_range_pop(PyObject *self, PyObject *unused)
{
    tpf_range_pop();
    Py_RETURN_NONE;
}

static PyObject *core_counter(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "counter(name, value) takes 2 arguments");
        return NULL;
    }
    tpf_name id = core_name_of(args[0]);
    if (id == 0 && PyErr_Occurred()) return NULL;
    double v = PyFloat_AsDouble(args[1]);
    if (v == -1.0 && PyErr_Occurred()) return NULL;
    tpf_counter(id, v);
    Py_RETURN_NONE;
}

static PyObject *core_mark(PyObject *self, PyObject *arg)
{
    tpf_name id = core_name_of(arg);
    if (id == 0 && PyErr_Occurred()) return NULL;
    tpf_mark(id);
    Py_RETURN_NONE;
}

static PyObject *core_loop_end(PyObject *self, PyObject *arg)
{
    long why = PyLong_AsLong(arg);
    if (why == -1 && PyErr_Occurred()) return NULL;
    tpf_loop_end((int)why);
    Py_RETURN_NONE;
}

static PyObject *core_attached(PyObject *self, PyObject *unused)
{
    return PyBool_FromLong(tpf_attached());
}

static PyObject *core_set_rank(PyObject *self, PyObject *args)
{
    int rank, local_rank = -1, world_size = -1;
    if (!PyArg_ParseTuple(args, "i|ii:set_rank", &rank, &local_rank, &world_size)) return NULL;
    if (tpf_set_rank(rank, local_rank, world_size) < 0) {
        PyErr_SetString(PyExc_ValueError, "rank must be >= 0 and below world_size; local_rank and world_size >= -1 (-1: unknown), world_size not 0");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *core_dropped(PyObject *self, PyObject *unused)
{
    return PyLong_FromUnsignedLongLong(tpf_dropped());
}

static PyObject *core_version(PyObject *self, PyObject *unused)
{
    return PyUnicode_FromString(tpf_version());
}

static PyObject *core_run_dir(PyObject *self, PyObject *unused)
{
    const char *d = tpf_run_dir();
    if (!d) Py_RETURN_NONE;
    return PyUnicode_DecodeFSDefault(d);
}

static PyObject *core_strerror(PyObject *self, PyObject *arg)
{
    long e = PyLong_AsLong(arg);
    if (e == -1 && PyErr_Occurred()) return NULL;
    return Py_BuildValue("(ss)", tpf_errname((int)e), tpf_strerror((int)e));
}

/* start(run_dir=None, interval_s=0.0, flags=0) -> 0 or a negative TPF_E* code.
 * The collector thread runs without the GIL held by us; tpf_start itself is
 * short, tpf_stop joins the thread so it drops the GIL. */
static PyObject *core_start(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"run_dir", "interval_s", "flags", NULL};
    PyObject *dir = Py_None, *dir_bytes = NULL;
    double interval = 0.0;
    unsigned int flags = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OdI:start", kwlist, &dir, &interval, &flags))
        return NULL;
    tpf_options opt = TPF_OPTIONS_INIT;
    if (dir != Py_None) {
        if (!PyUnicode_FSConverter(dir, &dir_bytes)) return NULL;
        opt.run_dir = PyBytes_AS_STRING(dir_bytes);
    }
    opt.interval_s = interval;
    opt.flags = flags;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = tpf_start(&opt);
    Py_END_ALLOW_THREADS
    Py_XDECREF(dir_bytes);
    return PyLong_FromLong(rc);
}

static PyObject *core_stop(PyObject *self, PyObject *unused)
{
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = tpf_stop();
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(rc);
}

/* The trace and profile functions (sys.settrace / sys.setprofile, or their
 * C forms) of the thread with this ident: (trace, profile), each its object
 * (the function, a debugger's method, a profiler), True for one set from C
 * without an object, or None; None for a thread not found. Read under the
 * GIL, as sys._current_frames walks the threads. */
static PyObject *tracing_obj(Py_tracefunc f, PyObject *o)
{
    if (!f) Py_RETURN_NONE;
    if (!o) Py_RETURN_TRUE;
    Py_INCREF(o);
    return o;
}

static PyObject *core_thread_tracing(PyObject *self, PyObject *arg)
{
    (void)self;
    unsigned long id = PyLong_AsUnsignedLong(arg);
    if (id == (unsigned long)-1 && PyErr_Occurred()) return NULL;
    PyInterpreterState *in = PyInterpreterState_Get();
    for (PyThreadState *t = PyInterpreterState_ThreadHead(in); t; t = PyThreadState_Next(t)) {
        if (t->thread_id != id) continue;
        PyObject *tr = tracing_obj(t->c_tracefunc, t->c_traceobj);
        PyObject *pr = tracing_obj(t->c_profilefunc, t->c_profileobj);
        PyObject *r = PyTuple_Pack(2, tr, pr);
        Py_DECREF(tr);
        Py_DECREF(pr);
        return r;
    }
    Py_RETURN_NONE;
}

static PyMethodDef core_methods[] = {
    {"phase", core_phase_get, METH_O, "phase($module, name, /)\n--\n\nA reusable context manager timing a range (name: str or interned id)."},
    {"step", (PyCFunction)(void (*)(void))core_step_new, METH_FASTCALL | METH_KEYWORDS,
     "step($module, /, samples=0, tokens=0)\n--\n\nA context manager for one training step."},
    {"step_begin", core_step_begin, METH_NOARGS, "step_begin($module, /)\n--\n\nBegin a step on this thread."},
    {"step_end", (PyCFunction)(void (*)(void))core_step_end, METH_FASTCALL | METH_KEYWORDS,
     "step_end($module, /, samples=0, tokens=0)\n--\n\nEnd the step on this thread."},
    {"auto_step_begin", core_auto_step_begin, METH_NOARGS,
     "auto_step_begin($module, /)\n--\n\nBegin a step unless the explicit API was used; True when begun."},
    {"auto_step_end", (PyCFunction)(void (*)(void))core_auto_step_end, METH_FASTCALL,
     "auto_step_end($module, samples, tokens, /)\n--\n\nEnd a step unless the explicit API was used."},
    {"explicit_steps", core_explicit_steps, METH_NOARGS,
     "explicit_steps($module, /)\n--\n\nTrue once the script has used step()/step_begin() itself."},
    {"disable_auto_steps", core_disable_auto_steps, METH_NOARGS,
     "disable_auto_steps($module, /)\n--\n\nTurn the auto-instrumentation's step boundaries off."},
    {"range_push", core_range_push, METH_O, "range_push($module, name, /)\n--\n\nPush a range (name: str or interned id)."},
    {"range_pop", core_range_pop, METH_NOARGS, "range_pop($module, /)\n--\n\nPop the innermost range."},
    {"timed", (PyCFunction)(void (*)(void))core_timed_new, METH_FASTCALL,
     "timed($module, fn, name, /)\n--\n\nA callable running fn inside range name (push, call, pop in C)."},
    {"data_next", (PyCFunction)(void (*)(void))core_data_next, METH_FASTCALL,
     "data_next($module, orig, ev, begin, count, tensor_type, /)\n--\n\nThe auto hook's DataLoader __next__ (a method)."},
    {"opt_hooks", (PyCFunction)(void (*)(void))core_opt_hooks, METH_FASTCALL,
     "opt_hooks($module, ev, begin, step_in_eval, /)\n--\n\nThe auto hook's global optimizer step (pre, post) hooks."},
    {"set_graph_probe", (PyCFunction)(void (*)(void))core_set_graph_probe, METH_FASTCALL,
     "set_graph_probe($module, probe, period_s, /)\n--\n\nEvery period_s, probe(tensors) before "
     "one backward of the auto hook; a callable it returns gets that backward's ns."},
    {"steps_ended", core_steps_ended, METH_NOARGS,
     "steps_ended($module, /)\n--\n\nSteps this thread has ended (the index of the one it is in)."},
    {"set_step_listener", core_set_step_listener, METH_O,
     "set_step_listener($module, fn, /)\n--\n\nfn() after each step ends, on the thread that "
     "ended it, until it returns a false value or raises; None removes it."},
    {"thread_tracing", core_thread_tracing, METH_O,
     "thread_tracing($module, ident, /)\n--\n\n(trace, profile) of that thread: each the object "
     "sys.settrace/sys.setprofile (or C) gave, True without one, or None; None for no such "
     "thread."},
    {"backward_hook", (PyCFunction)(void (*)(void))core_backward_hook, METH_FASTCALL,
     "backward_hook($module, inner, ev, begin, step_in_eval, /)\n--\n\nThe auto hook's torch.autograd.backward "
     "(backward phase; a step boundary while no optimizer was made or stepped)."},
    {"counter", (PyCFunction)(void (*)(void))core_counter, METH_FASTCALL,
     "counter($module, name, value, /)\n--\n\nRecord a sampled value."},
    {"mark", core_mark, METH_O, "mark($module, name, /)\n--\n\nRecord an instant event."},
    {"loop_end", core_loop_end, METH_O,
     "loop_end($module, why, /)\n--\n\nThe training loop ended (1: it left the loop, 2: the "
     "process is shutting down)."},
    {"name", core_name, METH_O, "name($module, name, /)\n--\n\nThe interned id of name (0 when the table is full)."},
    {"attached", core_attached, METH_NOARGS, "attached($module, /)\n--\n\nTrue when events go to a collector."},
    {"set_rank", core_set_rank, METH_VARARGS,
     "set_rank($module, rank, local_rank=-1, world_size=-1, /)\n--\n\nThis process's rank, when "
     "the launcher passes it in code, not the environment (steps from now on carry it)."},
    {"dropped", core_dropped, METH_NOARGS, "dropped($module, /)\n--\n\nEvents dropped by this process."},
    {"version", core_version, METH_NOARGS, "version($module, /)\n--\n\nThe C library version."},
    {"run_dir", core_run_dir, METH_NOARGS, "run_dir($module, /)\n--\n\nThe run directory, or None when not attached."},
    {"strerror", core_strerror, METH_O, "strerror($module, code, /)\n--\n\n(name, message) of a negative error code."},
    {"start", (PyCFunction)(void (*)(void))core_start, METH_VARARGS | METH_KEYWORDS,
     "start($module, /, run_dir=None, interval_s=0.0, flags=0)\n--\n\nStart an embedded collector: 0 or a negative error code."},
    {"stop", core_stop, METH_NOARGS, "stop($module, /)\n--\n\nStop the embedded collector: 0 or a negative error code."},
    {"pystack_start", pystack_start, METH_O,
     "pystack_start($module, hz, /)\n--\n\nRead the calling thread's Python stack hz times a second "
     "from a native thread (no GIL); False where this Python's frames cannot be read."},
    {"pystack_take", pystack_take, METH_NOARGS,
     "pystack_take($module, /)\n--\n\n(samples, new code ids, (taken, lost, failed, reader CPU s)) since the last take."},
    {"pystack_stop", pystack_stop, METH_NOARGS, "pystack_stop($module, /)\n--\n\nStop the native reader."},
    {"_pystack_line", pystack_line, METH_VARARGS,
     "_pystack_line($module, code, lasti, /)\n--\n\nThe native reader's line of code unit lasti (tests)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "trainperf._core",
    .m_doc = "C binding of libtrainperf; use the trainperf package instead.",
    .m_size = -1,
    .m_methods = core_methods,
};

PyMODINIT_FUNC PyInit__core(void);

PyMODINIT_FUNC PyInit__core(void)
{
    if (PyType_Ready(&phase_type) < 0 || PyType_Ready(&step_type) < 0 ||
        PyType_Ready(&timed_type) < 0 || PyType_Ready(&auto_state_type) < 0 ||
        PyType_Ready(&data_next_type) < 0 || PyType_Ready(&opt_pre_type) < 0 ||
        PyType_Ready(&opt_post_type) < 0 || PyType_Ready(&bwd_type) < 0)
        return NULL;
    str_active = PyUnicode_InternFromString("active");
    str_shape = PyUnicode_InternFromString("shape");
    str_dtype = PyUnicode_InternFromString("dtype");
    str_is_floating_point = PyUnicode_InternFromString("is_floating_point");
    str_is_signed = PyUnicode_InternFromString("is_signed");
    if (!str_active || !str_shape || !str_dtype || !str_is_floating_point || !str_is_signed)
        return NULL;
    PyObject *m = PyModule_Create(&core_module);
    if (!m) return NULL;
    name_ids = PyDict_New();
    phase_cache = PyDict_New();
    if (!name_ids || !phase_cache) goto fail;
    if (PyModule_AddIntConstant(m, "START_NO_PROCFS", TPF_START_NO_PROCFS) < 0 ||
        PyModule_AddIntConstant(m, "START_NO_GPU", TPF_START_NO_GPU) < 0 ||
        PyModule_AddIntConstant(m, "EBUSY", TPF_EBUSY) < 0 ||
        PyModule_AddIntConstant(m, "ESTATE", TPF_ESTATE) < 0 ||
        PyModule_AddStringConstant(m, "IMPL", "c") < 0)
        goto fail;
    Py_INCREF(&phase_type);
    if (PyModule_AddObject(m, "Phase", (PyObject *)&phase_type) < 0) {
        Py_DECREF(&phase_type);
        goto fail;
    }
    Py_INCREF(&step_type);
    if (PyModule_AddObject(m, "Step", (PyObject *)&step_type) < 0) {
        Py_DECREF(&step_type);
        goto fail;
    }
    PyObject *st = PyType_GenericAlloc(&auto_state_type, 0);
    if (!st || PyModule_AddObject(m, "auto_state", st) < 0) {
        Py_XDECREF(st);
        goto fail;
    }
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
