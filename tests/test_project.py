"""Project-wide checks: the exported symbols, banned functions, the public
header on its own, `make install` with pkg-config, and the layers of the
Python package."""
import glob
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import BUILD, ROOT, SANITIZE

BANNED = re.compile(r"(?<![\w.>])(sprintf|strcpy|strtok|atoi|gets)\s*\(")


def test_shared_library_exports_only_tpf_names(build):
    so = build / "libtrainperf.so"
    out = subprocess.run(["nm", "-D", "--defined-only", str(so)], capture_output=True,
                         text=True, check=True).stdout
    names = [l.split()[-1] for l in out.splitlines() if l.strip()]
    public = [n for n in names if n.startswith("tpf_")]
    other = [n for n in names if not n.startswith("tpf_") and n not in ("_init", "_fini")]
    assert "tpf_step_begin" in public and "tpf_strerror" in public
    assert other == [], f"non-API symbols exported: {other}"


def test_no_banned_functions_in_sources():
    hits = []
    for d in ("src", "include", "examples", "python", "bench", "tests/fakes"):
        for p in (ROOT / d).rglob("*.[ch]"):
            for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
                code = line.split("//")[0]
                if BANNED.search(code) and not code.lstrip().startswith(("*", "/*")):
                    hits.append(f"{p.relative_to(ROOT)}:{i}: {line.strip()}")
    assert hits == [], "banned functions (use snprintf, memcpy, strtok_r, strtol):\n" + "\n".join(hits)


@pytest.mark.parametrize("std,extra", [("c99", []), ("c11", ["-DTPF_DISABLE"])])
def test_public_header_stands_alone(tmp_path, std, extra):
    src = tmp_path / "use.c"
    src.write_text('#include <trainperf.h>\n'
                   'int main(void) { TPF_RANGE_PUSH("x"); TPF_RANGE_POP();'
                   ' TPF_COUNTER("c", 1.0); TPF_MARK("m"); TPF_STEP_BEGIN(); TPF_STEP_END(1, 2);'
                   ' tpf_options o = TPF_OPTIONS_INIT; (void)o; return 0; }\n')
    subprocess.run(["cc", f"-std={std}", "-Wall", "-Wextra", "-Werror", "-pedantic",
                    "-I", str(ROOT / "include"), *extra, "-c", str(src), "-o",
                    str(tmp_path / "use.o")], check=True)


@pytest.mark.skipif(shutil.which("pkg-config") is None, reason="pkg-config not installed")
def test_make_install_and_pkg_config(tmp_path, build):
    prefix = tmp_path / "prefix"
    subprocess.run(["make", "-s", f"BUILD={build.name}", "install", f"PREFIX={prefix}"],
                   cwd=ROOT, check=True, capture_output=True, timeout=600)
    for rel in ("bin/trainperf", "lib/libtrainperf.a", "lib/libtrainperf.so",
                "include/trainperf.h", "lib/pkgconfig/trainperf.pc"):
        assert (prefix / rel).exists(), rel
    env = dict(os.environ, PKG_CONFIG_PATH=str(prefix / "lib/pkgconfig"))
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "trainperf"], env=env,
                           capture_output=True, text=True, check=True).stdout.split()
    src = tmp_path / "app.c"
    src.write_text('#include <trainperf.h>\n#include <stdio.h>\n'
                   'int main(void) { tpf_step_begin(); tpf_step_end(1, 0);'
                   ' printf("%s %d\\n", tpf_version(), tpf_attached()); return 0; }\n')
    exe = tmp_path / "app"
    # A library built with ASan loads only into a program built with it.
    san = ["-fsanitize=address,undefined"] if SANITIZE else []
    subprocess.run(["cc", *san, str(src), "-o", str(exe), *flags], check=True)
    out = subprocess.run([str(exe)], env=dict(env, LD_LIBRARY_PATH=str(prefix / "lib")),
                         capture_output=True, text=True, check=True).stdout
    assert out.split() == ["0.1.0", "0"]


def test_make_demo_builds_only_what_it_runs_in_parallel(tmp_path):
    """`make -n demo` into an empty build folder: the CLI, the library and the
    bundled trainer are compiled, no unit test, fake or bench, with a job count."""
    out = subprocess.run(["make", "-n", "demo", f"BUILD={tmp_path / 'b'}", "DEMO_JOBS=3"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "-j3" in text
    compiled = re.findall(r"-c (\S+\.c) -o", text)
    assert "src/cli/main.c" in compiled and any(c.startswith("src/core/") for c in compiled)
    assert "examples/trainer.c" in text and "/examples/trainer" in text
    for other in ("tests/unit/", "tests/fakes/", "bench/", "examples/explicit_api"):
        assert other not in text, other


def _venv(tmp_path):
    """A Python with none of the test dependencies (no pip either: nothing is installed)."""
    v = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(v)], check=True, timeout=120)
    site = next(v.glob("lib/python*/site-packages"))
    return v, site


def _install_deps(venv, *args):
    env = dict(os.environ, PYTHON=str(venv / "bin" / "python"),
               PATH=f"{venv / 'bin'}:/usr/bin:/bin")
    return subprocess.run([str(ROOT / "scripts" / "install-deps.sh"), *args], env=env,
                          capture_output=True, text=True, timeout=120)


def test_install_deps_check_names_what_is_missing(tmp_path):
    venv, _ = _venv(tmp_path)
    p = _install_deps(venv, "--check")
    assert p.returncode == 1, p.stdout + p.stderr
    line = [l for l in p.stdout.splitlines() if "would run" in l]
    assert len(line) == 1, p.stdout
    reqs = line[0].split("pip install ", 1)[1].split()
    # torch first and pinned, then every other package, in one pip call
    assert reqs == ["torch==2.13.0", "pytest", "pytest-xdist", "psutil", "lightning", "transformers",
                    "accelerate", "tensorboard", "wandb", "mlflow", "jsonschema", "py-spy"]


def test_install_deps_reads_metadata_without_importing(tmp_path):
    """Installed distributions whose modules would leave a mark on import: the
    check finds them all present and imports none of them."""
    venv, site = _venv(tmp_path)
    mark = tmp_path / "imported"
    dists = {"torch": "2.5.1", "pytest": "8.0", "pytest-xdist": "3.8", "psutil": "7.0", "lightning": "2.5",
             "transformers": "4.50", "accelerate": "1.0", "tensorboard": "2.19",
             "wandb": "0.19", "mlflow": "2.20", "jsonschema": "4.26"}
    for name, ver in dists.items():
        info = site / f"{name.replace('-', '_')}-{ver}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {ver}\n")
        (site / f"{name.replace('-', '_')}.py").write_text(f"open({str(mark)!r}, 'a').write('{name}\\n')\n")
    spy = venv / "bin" / "py-spy"
    spy.write_text("#!/bin/sh\nexit 0\n")
    spy.chmod(0o755)
    p = _install_deps(venv, "--check")
    assert "Python packages: all present (torch 2.5.1)" in p.stdout, p.stdout + p.stderr
    assert "pip install" not in p.stdout
    assert not mark.exists(), mark.read_text()
    # one missing: the pip call keeps the torch that is there
    shutil.rmtree(site / "mlflow-2.20.dist-info")
    p = _install_deps(venv, "--check")
    assert p.returncode == 1
    assert "pip install torch==2.5.1 mlflow" in p.stdout, p.stdout


def test_install_deps_unknown_option():
    p = subprocess.run([str(ROOT / "scripts" / "install-deps.sh"), "--all"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert p.stderr.strip() == "install-deps: unknown option '--all' (use --build, --check or nothing)"


def test_suite_reads_no_files_outside_the_repository():
    """The tests, fuzz seeds and benches name their data under the repository
    (tests/data), never beside it, so a clone runs the whole suite."""
    outside = re.compile(r"ROOT\.parent\b|parents\[\d+\]\s*/\s*[\"']shared|[\"']\.\./shared")
    hits = [f"{p.relative_to(ROOT)}: {l.strip()}"
            for d in ("tests", "bench") for p in (ROOT / d).rglob("*.py")
            for l in p.read_text().splitlines() if outside.search(l)]
    assert hits == []
    from conftest import TRACES
    assert TRACES.is_relative_to(ROOT)
    assert (TRACES / "LICENSE-HTA").is_file() and len(list(TRACES.glob("*.json.gz"))) >= 8


# --- the Python package's layers (docs/architecture.md, "The Python package") ---

PYPKG = ROOT / "python" / "trainperf"

# Each module of python/trainperf and its layer: a module imports only from
# lower layers (module-level and function-level imports alike), so the hooks
# of one layer know nothing of each other and nothing imports upwards. A new
# module takes one entry here.
PY_LAYERS = {
    # the state the hooks share and how events reach the probe; leaves
    "_state": 0, "_version": 0, "_cuda": 0, "_graph_breaks": 0, "_tune": 0, "_bench": 0,
    "__main__": 0,
    # the probe's ctypes fallback; the experiment-tracker sink
    "_fallback": 1, "_exporters": 1,
    # the public torch helpers (profiler windows, FLOPs, memory)
    "torch_helpers": 2,
    # the hooks, one module per torch surface, and the stack sampler beside them
    "_datahooks": 3, "_modelhooks": 3, "_gradhooks": 3, "_opthooks": 3, "_comm": 3,
    "_evalhooks": 3, "_failhooks": 3, "_workerhooks": 3, "_profile_hooks": 3,
    "_ondemand": 3, "_sampler": 3,
    # what acts on the hooks' records: tune trials, the embedded collector
    "_knobs": 4, "_embedded": 4,
    # the installers: the zero-code hook, the step decorators
    "_autohook": 5, "_monitor": 5,
    # the public API (the package itself)
    "": 6,
    # framework callbacks over the public API, and what they share
    "_figures": 7, "hf": 8, "lightning": 8,
    "integrations": 9,
}
PY_HOOKS = sorted(m for m, layer in PY_LAYERS.items() if layer == 3)


def _py_modules():
    """{short name: path} of the package's Python modules ("" is __init__)."""
    out = {}
    for p in PYPKG.glob("*.py"):
        out["" if p.stem == "__init__" else p.stem] = p
    return out


def _py_imports(name, path, names):
    """Short names of the package's modules `name` imports anywhere in its
    file (at module level or in a function; `__import__("trainperf.X")`
    too). A name the package itself provides (`from trainperf import
    _core`) is an import of the package ("")."""
    import ast
    tree = ast.parse(path.read_text(), str(path))
    out = set()

    def add(mod, attrs=()):
        parts = mod.split(".")
        if parts[0] != "trainperf":
            return
        sub = parts[1] if len(parts) > 1 else ""
        if sub:
            out.add(sub if sub in names else "")
            return
        for a in attrs or ("",):
            out.add(a if a in names else "")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                add(a.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = "trainperf" + ("." + node.module if node.module else "")
            else:
                base = node.module or ""
            add(base, [a.name for a in node.names])
        elif isinstance(node, ast.Call) and getattr(node.func, "id", getattr(
                node.func, "attr", None)) in ("__import__", "import_module") and node.args and \
                isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            add(node.args[0].value)
    out.discard(name)
    return out


def _py_graph():
    mods = _py_modules()
    return {m: _py_imports(m, p, mods) for m, p in mods.items()}


def _cycles(graph):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_reader_sees_every_kind_of_import(tmp_path):
    # the checks below are only as good as the reader: a cycle it misses
    # (a function-level or relative import) would pass them
    (tmp_path / "a.py").write_text("def f():\n    from . import b\n")
    (tmp_path / "b.py").write_text("import trainperf.c as c\n")
    (tmp_path / "c.py").write_text("def g():\n    from trainperf.a import f\n")
    (tmp_path / "d.py").write_text("from trainperf import _core\nV = __import__('trainperf.c')\n")
    names = {"a", "b", "c", "d"}
    graph = {n: _py_imports(n, tmp_path / (n + ".py"), names) for n in names}
    assert graph == {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"", "c"}}, graph
    assert _cycles(graph) == [["a", "b", "c"]]


def test_python_package_has_no_import_cycle():
    graph = _py_graph()
    assert "_autohook" in graph and "_state" in graph
    assert _cycles(graph) == [], "modules of python/trainperf that import each other"


def test_python_package_layers_hold():
    graph = _py_graph()
    assert sorted(graph) == sorted(PY_LAYERS), \
        "place each module of python/trainperf in PY_LAYERS (and docs/architecture.md)"
    assert graph["_state"] == set(), "the bottom module imports nothing of the package"
    upward = ["%s (layer %d) imports %s (layer %d)" % (m or "__init__", PY_LAYERS[m],
                                                      d or "trainperf", PY_LAYERS[d])
              for m, deps in sorted(graph.items()) for d in sorted(deps)
              if PY_LAYERS[d] >= PY_LAYERS[m]]
    assert upward == [], "imports that do not go down a layer:\n" + "\n".join(upward)
    # each hook reaches the probe through _state
    assert all("_state" in graph[h] for h in PY_HOOKS if h != "_workerhooks"), graph


def test_each_hook_imports_alone_and_installs_nothing():
    # importing a hook module loads no other hook and changes nothing in the
    # process (no torch, no import hook, no thread, no exit or GC callback):
    # the installer does that, explicitly
    check = """
import atexit, gc, sys, threading, importlib
before = (list(sys.meta_path), list(gc.callbacks), sys.excepthook, atexit._ncallbacks(),
          threading.active_count())
m = importlib.import_module("trainperf." + sys.argv[1])
after = (list(sys.meta_path), list(gc.callbacks), sys.excepthook, atexit._ncallbacks(),
         threading.active_count())
hooks = sys.argv[2].split(",")
others = sorted(h for h in hooks if h != sys.argv[1] and "trainperf." + h in sys.modules)
print("others", others, "torch", "torch" in sys.modules, "same", before == after)
"""
    from pyhelp import require_extension, run_py
    require_extension()
    for h in PY_HOOKS:
        res = run_py(["-c", check, h, ",".join(PY_HOOKS)], timeout=120)
        assert res.returncode == 0, res.stderr
        assert "others [] torch False same True" in res.stdout, (h, res.stdout)


# --- the report's files (issue 25): no two call or include each other in a loop ---

def _c_call_graph(objdir):
    """file -> files whose functions it calls, from the objects' symbols
    (nm: what each defines, what it needs)."""
    defs, needs = {}, {}
    for o in sorted(objdir.glob("*.o")):
        out = subprocess.run(["nm", str(o)], capture_output=True, text=True, check=True).stdout
        needs[o.stem] = set()
        for line in out.splitlines():
            f = line.split()
            if len(f) == 3 and f[1] in "TDRB":
                defs[f[2]] = o.stem
            elif len(f) == 2 and f[0] == "U":
                needs[o.stem].add(f[1])
    return {n: {defs[s] for s in syms if s in defs and defs[s] != n} for n, syms in needs.items()}


def _c_include_graph(d):
    """header -> the folder's headers it includes (the .c files' relations
    are their calls, above)."""
    return {p.stem: set(re.findall(r'#include "%s/(\w+)\.h"' % d.name, p.read_text())) - {p.stem}
            for p in sorted(d.glob("*.h"))}


def test_report_files_call_and_include_no_loop():
    objdir = BUILD / "obj" / "report"
    if not list(objdir.glob("*.o")):
        pytest.fail("%s has no objects: run `make`" % objdir)
    calls = _c_call_graph(objdir)
    # the reader: the diagnosis calls its rule files, a rule file does not call back
    assert "rules_input" in calls["diag"] and "diag" not in calls["rules_input"], calls["diag"]
    assert _cycles(calls) == [], "files of src/report whose functions call each other in a loop"
    assert _cycles(_c_include_graph(ROOT / "src" / "report")) == [], \
        "headers of src/report that include each other in a loop"


@pytest.mark.skipif(bool(glob.glob("/dev/nvidia[0-9]*")), reason="this machine has an NVIDIA GPU")
def test_no_two_files_of_src_call_each_other_in_a_loop():
    """Every file of src/, by its object's symbols (issue 40: record/recover.c and
    record/segdir.c, trace/trace_extra.c and trace/trace_out.c called each other):
    a lower file takes a visitor or a shared helper file, never a call back up."""
    objdir = BUILD / "obj"
    objs = sorted(objdir.glob("*/*.o"))
    if not objs:
        pytest.fail("%s has no objects: run `make`" % objdir)
    defs, needs = {}, {}
    for o in objs:
        key = "%s/%s" % (o.parent.name, o.stem)
        out = subprocess.run(["nm", str(o)], capture_output=True, text=True, check=True).stdout
        needs[key] = set()
        for line in out.splitlines():
            f = line.split()
            if len(f) == 3 and f[1] in "TDRB":
                defs[f[2]] = key
            elif len(f) == 2 and f[0] == "U":
                needs[key].add(f[1])
    calls = {n: {defs[s] for s in syms if s in defs and defs[s] != n} for n, syms in needs.items()}
    assert "record/segdir" in calls["record/recover"] and "trace/trace_tbl" in calls["trace/trace_out"]
    assert _cycles(calls) == [], "files of src that call each other in a loop"
    heads = {}
    for h in sorted((ROOT / "src").glob("*/*.h")):
        key = "%s/%s" % (h.parent.name, h.stem)
        heads[key] = set(re.findall(r'#include "(\w+/\w+)\.h"', h.read_text())) - {key}
    assert _cycles(heads) == [], "headers of src that include each other in a loop"


def test_gpu_check_without_a_gpu_says_so_and_skips(tmp_path):
    """`make gpu-check` on a machine without an NVIDIA GPU: one line that says so (with
    doctor's NVML line), exit 77 from the script, nothing built or run."""
    out = tmp_path / "out"
    p = subprocess.run(["bash", str(ROOT / "scripts" / "gpu-check.sh"), str(out)], capture_output=True,
                       text=True, timeout=120, env=dict(os.environ, BUILD=str(BUILD)))
    assert p.returncode == 77, p.stdout + p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "no NVIDIA GPU" in lines[0], p.stderr
    assert "trainperf doctor: NVML" in lines[0], p.stderr
    assert p.stdout == "" and not out.exists()


def test_diagnosis_doc_tables_stay_readable():
    """docs/diagnosis.md's tables are read on a screen: no row past 600 characters (a long
    list of scenarios is split over rows of the same verdict)."""
    long_rows = [(n, len(l)) for n, l in enumerate((ROOT / "docs" / "diagnosis.md").read_text()
                                                  .splitlines(), 1)
                 if l.startswith("|") and len(l) > 600]
    assert not long_rows, long_rows
