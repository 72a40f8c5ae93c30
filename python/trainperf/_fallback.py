"""Stand-ins for the C extension when it is not built for this interpreter.

load() returns (module-like object, reason): ctypes over libtrainperf.so when
the shared library can be found (same behaviour, slower per call), else a
no-op with the same names. Neither ever raises into the training script.
"""
import ctypes
import ctypes.util
import glob
import os
import threading

EBUSY = -7
ESTATE = -8
START_NO_PROCFS = 0x1
START_NO_GPU = 0x2


def _candidates():
    env = os.environ.get("TRAINPERF_LIB")
    if env:
        yield env
    pkg = os.path.dirname(os.path.abspath(__file__))
    # In-tree: python/trainperf -> repo/build*/libtrainperf.so.
    # Installed by `make install`: PREFIX/share/trainperf/trainperf -> PREFIX/lib.
    root = os.path.dirname(os.path.dirname(pkg))
    build = os.environ.get("TRAINPERF_BUILD")
    if build:
        yield os.path.join(root, build, "libtrainperf.so")
    for pattern in (os.path.join(root, "build", "libtrainperf.so"),
                    os.path.join(root, "build-*", "libtrainperf.so"),
                    os.path.join(os.path.dirname(root), "lib", "libtrainperf.so*")):
        for p in sorted(glob.glob(pattern)):
            yield p
    # Beside the `trainperf` command on PATH (make install PREFIX=...): PREFIX/lib*.
    import shutil
    exe = shutil.which("trainperf")
    if exe:
        prefix = os.path.dirname(os.path.dirname(os.path.realpath(exe)))
        for lib in ("lib", "lib64", os.path.join("lib", "x86_64-linux-gnu")):
            for p in sorted(glob.glob(os.path.join(prefix, lib, "libtrainperf.so*"))):
                yield p
    found = ctypes.util.find_library("trainperf")
    if found:
        yield found
    # The dynamic loader's own search (LD_LIBRARY_PATH, ld.so.cache, /usr/local/lib
    # before ldconfig ran is not in it: covered above).
    yield "libtrainperf.so.0"
    yield "libtrainperf.so"


class _Options(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("size", ctypes.c_uint32),
                ("run_dir", ctypes.c_char_p), ("interval_s", ctypes.c_double),
                ("flags", ctypes.c_uint32)]


class _Phase:
    __slots__ = ("id", "name", "_push", "_pop")

    def __init__(self, name, id_, push, pop):
        self.name, self.id, self._push, self._pop = name, id_, push, pop

    def __enter__(self):
        self._push(self.id)
        return self

    def __exit__(self, *exc):
        self._pop()
        return False


class _Step:
    __slots__ = ("samples", "tokens", "_core")

    def __init__(self, core, samples, tokens):
        self._core, self.samples, self.tokens = core, samples, tokens

    def __enter__(self):
        self._core.step_begin()
        return self

    def __exit__(self, *exc):
        self._core.step_end(self.samples, self.tokens)
        return False


class CtypesCore:
    """The _core interface over libtrainperf.so."""

    IMPL = "ctypes"
    EBUSY, ESTATE = EBUSY, ESTATE
    START_NO_PROCFS, START_NO_GPU = START_NO_PROCFS, START_NO_GPU

    def __init__(self, lib):
        self._lib = lib
        u64, u32 = ctypes.c_uint64, ctypes.c_uint32
        lib.tpf_name_register.argtypes, lib.tpf_name_register.restype = [ctypes.c_char_p], u32
        lib.tpf_step_end.argtypes = [u64, u64]
        lib.tpf_range_push.argtypes = [u32]
        lib.tpf_counter.argtypes = [u32, ctypes.c_double]
        lib.tpf_mark.argtypes = [u32]
        lib.tpf_dropped.restype = u64
        lib.tpf_version.restype = ctypes.c_char_p
        lib.tpf_run_dir.restype = ctypes.c_char_p
        lib.tpf_errname.restype = lib.tpf_strerror.restype = ctypes.c_char_p
        lib.tpf_errname.argtypes = lib.tpf_strerror.argtypes = [ctypes.c_int]
        lib.tpf_start.argtypes = [ctypes.POINTER(_Options)]
        self._names = {}
        self._phases = {}
        self._lock = threading.Lock()
        self._explicit = False
        self.range_push_id = lib.tpf_range_push
        self.range_pop = lib.tpf_range_pop

    def name(self, n):
        if isinstance(n, int):
            return n
        i = self._names.get(n)
        if i is None:
            if not isinstance(n, str) or not n or "\0" in n:
                raise ValueError("name must be a non-empty str without NUL")
            i = self._lib.tpf_name_register(n.encode())
            if i and len(self._names) < 4096:
                self._names[n] = i
        return i

    def phase(self, n):
        p = self._phases.get(n)
        if p is None:
            p = _Phase(n, self.name(n), self._lib.tpf_range_push, self._lib.tpf_range_pop)
            self._phases[n] = p
        return p

    def step(self, samples=0, tokens=0):
        return _Step(self, samples or 0, tokens or 0)

    def step_begin(self):
        self._explicit = True
        self._lib.tpf_step_begin()

    def step_end(self, samples=0, tokens=0):
        self._lib.tpf_step_end(samples or 0, tokens or 0)

    def auto_step_begin(self):
        if self._explicit:
            return False
        self._lib.tpf_step_begin()
        return True

    def auto_step_end(self, samples=0, tokens=0):
        if self._explicit:
            return False
        self._lib.tpf_step_end(samples or 0, tokens or 0)
        return True

    def explicit_steps(self):
        return self._explicit

    def disable_auto_steps(self):
        self._explicit = True

    def range_push(self, n):
        self._lib.tpf_range_push(self.name(n))

    def counter(self, n, value):
        self._lib.tpf_counter(self.name(n), float(value))

    def mark(self, n):
        self._lib.tpf_mark(self.name(n))

    def loop_end(self, why):
        self._lib.tpf_loop_end(int(why))

    def attached(self):
        return bool(self._lib.tpf_attached())

    def set_rank(self, rank, local_rank=-1, world_size=-1):
        if int(rank) < 0:
            raise ValueError("rank must be >= 0")
        f = getattr(self._lib, "tpf_set_rank", None)
        if f is not None and f(int(rank), int(local_rank), int(world_size)) < 0:
            raise ValueError("rank must be >= 0 and below world_size; local_rank and world_size "
                             ">= -1 (-1: unknown), world_size not 0")

    def dropped(self):
        return self._lib.tpf_dropped()

    def version(self):
        return self._lib.tpf_version().decode()

    def run_dir(self):
        d = self._lib.tpf_run_dir()
        return os.fsdecode(d) if d else None

    def strerror(self, rc):
        return (self._lib.tpf_errname(rc).decode(), self._lib.tpf_strerror(rc).decode())

    def start(self, run_dir=None, interval_s=0.0, flags=0):
        opt = _Options(1, ctypes.sizeof(_Options),
                       os.fsencode(run_dir) if run_dir else None, interval_s, flags)
        return self._lib.tpf_start(ctypes.byref(opt))

    def stop(self):
        return self._lib.tpf_stop()


class _NoopCtx:
    __slots__ = ("samples", "tokens", "name", "id")

    def __init__(self):
        self.samples = self.tokens = 0
        self.name, self.id = None, 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class NoopCore:
    """Same names, records nothing."""

    IMPL = "noop"
    EBUSY, ESTATE = EBUSY, ESTATE
    START_NO_PROCFS, START_NO_GPU = START_NO_PROCFS, START_NO_GPU
    _ctx = _NoopCtx()

    def __init__(self):
        self._explicit = False

    def phase(self, n):
        return self._ctx

    def step(self, samples=0, tokens=0):
        self._explicit = True
        return _NoopCtx()

    def step_begin(self):
        self._explicit = True

    def step_end(self, samples=0, tokens=0):
        pass

    def auto_step_begin(self):
        return False

    def auto_step_end(self, samples=0, tokens=0):
        return False

    def explicit_steps(self):
        return self._explicit

    def disable_auto_steps(self):
        self._explicit = True

    def name(self, n):
        return 0

    def range_push(self, n):
        pass

    def range_pop(self):
        pass

    def counter(self, n, value):
        pass

    def mark(self, n):
        pass

    def loop_end(self, why):
        pass

    def attached(self):
        return False

    def set_rank(self, rank, local_rank=-1, world_size=-1):
        pass

    def dropped(self):
        return 0

    def version(self):
        from ._version import version
        return version()

    def run_dir(self):
        return None

    def strerror(self, rc):
        return ("UNSUPPORTED", "trainperf extension not available")

    def start(self, run_dir=None, interval_s=0.0, flags=0):
        return -12

    def stop(self):
        return ESTATE


def _sanitized(path):
    """True for a library built with ASan: loading one into a process without
    the ASan runtime aborts that process, so such a library is skipped."""
    try:
        with open(path, "rb") as f:
            return b"libasan.so" in f.read()
    except OSError:
        return False


def load(noop=False):
    """(core, reason): the ctypes core if a library loads, else the no-op."""
    if noop:
        return NoopCore(), "no-op requested"
    tried = []
    asan_here = "libasan" in os.environ.get("LD_PRELOAD", "")
    for path in _candidates():
        if not os.path.isabs(path) and os.sep in path:
            path = os.path.abspath(path)
        if os.path.exists(path) and not asan_here and _sanitized(path):
            tried.append(path + ": built with ASan")
            continue
        try:
            lib = ctypes.CDLL(path)
            if not hasattr(lib, "tpf_step_begin"):
                continue
            return CtypesCore(lib), "using ctypes over " + path
        except (OSError, AttributeError) as exc:  # not loadable, or a partial library
            tried.append(str(exc))
    return NoopCore(), "libtrainperf.so not found" + (": " + tried[-1] if tried else "")
