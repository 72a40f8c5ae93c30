"""Project-wide checks: the exported symbols, banned functions, the public
header on its own, and `make install` with pkg-config."""
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
    assert reqs == ["torch==2.13.0", "pytest", "psutil", "lightning", "transformers",
                    "accelerate", "tensorboard", "wandb", "mlflow", "py-spy"]


def test_install_deps_reads_metadata_without_importing(tmp_path):
    """Installed distributions whose modules would leave a mark on import: the
    check finds them all present and imports none of them."""
    venv, site = _venv(tmp_path)
    mark = tmp_path / "imported"
    dists = {"torch": "2.5.1", "pytest": "8.0", "psutil": "7.0", "lightning": "2.5",
             "transformers": "4.50", "accelerate": "1.0", "tensorboard": "2.19",
             "wandb": "0.19", "mlflow": "2.20"}
    for name, ver in dists.items():
        info = site / f"{name}-{ver}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {ver}\n")
        (site / f"{name}.py").write_text(f"open({str(mark)!r}, 'a').write('{name}\\n')\n")
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
