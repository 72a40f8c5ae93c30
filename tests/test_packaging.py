"""The Python package as Python people expect it: one version source, PEP 621
metadata, typing, and `pip install .` into a fresh virtual environment giving
the `trainperf` command, `python -m trainperf` and the zero-code hook."""
import os
import re
import subprocess
import sys

import pytest

from pyhelp import EXAMPLES, PYDIR, ROOT

try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None


def header_version():
    text = (ROOT / "include" / "trainperf.h").read_text()
    return ".".join(re.search(r"#define TPF_VERSION_%s\s+(\d+)" % k, text).group(1)
                    for k in ("MAJOR", "MINOR", "PATCH"))


def test_one_version_source():
    v = header_version()
    # no other file spells the version out
    for f in ("setup.py", "pyproject.toml", "Makefile", "python/trainperf/__init__.py",
              "python/trainperf/_fallback.py"):
        assert v not in (ROOT / f).read_text(), f
    out = subprocess.run([sys.executable, "-c", "import trainperf; print(trainperf.__version__)"],
                         capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(PYDIR)),
                         check=True).stdout.strip()
    assert out == v
    mk = subprocess.run(["make", "-s", "-p", "-n", "-f", "Makefile"], capture_output=True,
                        text=True, cwd=str(ROOT)).stdout
    assert "VERSION := %s" % v in mk


@pytest.mark.skipif(tomllib is None, reason="tomllib needs Python 3.11")
def test_pep621_metadata():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["name"] == "trainperf" and meta["dynamic"] == ["version"]
    assert meta["requires-python"] and meta["description"]


def test_public_modules_have_all_and_types():
    pkg = PYDIR / "trainperf"
    assert (pkg / "py.typed").exists() and (pkg / "_core.pyi").exists()
    code = ("import trainperf, trainperf.torch_helpers as th, trainperf.integrations as i, inspect\n"
            "for m in (trainperf, th, i):\n"
            "    assert m.__all__ and all(hasattr(m, n) or m is i for n in m.__all__), m\n"
            "print(inspect.signature(trainperf._core.step_end))\n"
            "print(inspect.signature(trainperf.start).return_annotation)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(PYDIR)))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["(samples=0, tokens=0)", "typing.Optional[str]"]


@pytest.mark.torch
@pytest.mark.once
def test_pip_install_into_a_fresh_venv_gives_the_command_and_the_hook(tmp_path):
    pytest.importorskip("torch")
    venv = tmp_path / "venv"
    # system site-packages only for torch (never pip-installed here); --without-pip and
    # --no-build-isolation keep the build offline with the system's setuptools and pip.
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
                    str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TRAINPERF_") and k != "PYTHONPATH"}
    env["PATH"] = "%s:/usr/bin:/bin" % (venv / "bin")
    res = subprocess.run([str(py), "-m", "pip", "install", "--no-build-isolation", "--no-deps",
                          "-v", str(ROOT)], capture_output=True, text=True, timeout=900,
                         env=dict(env, TRAINPERF_JOBS="2"), cwd=str(tmp_path))
    assert res.returncode == 0, res.stderr[-3000:]
    # the library compiled once for both the extension and the command, 2 files at a time
    log = res.stdout + res.stderr
    assert log.count("trainperf: compiling the library (") == 1, log[-3000:]
    assert " 2 at a time)" in log
    assert len(re.findall(r"\s-c\s+src/util/buf\.c\s", log)) == 1, log[-3000:]
    exe = venv / "bin" / "trainperf"
    assert exe.exists()
    # the CUPTI injection library beside it, exporting only its entry point
    inj = venv / "bin" / "libtrainperf-cupti.so"
    assert inj.exists()
    syms = subprocess.run(["nm", "-D", "--defined-only", str(inj)], capture_output=True,
                          text=True).stdout.split()
    assert "InitializeInjection" in syms and not [s for s in syms if s.startswith("tpf_")]
    # the wheel carries the built extension, not its C sources
    pkg = next(venv.glob("lib/python*/site-packages/trainperf"))
    assert list(pkg.glob("_core*.so")) and not list(pkg.glob("*.[ch]"))
    v = header_version()
    assert subprocess.run([str(exe), "--version"], capture_output=True, text=True,
                          env=env).stdout.strip() == "trainperf " + v
    assert subprocess.run([str(py), "-m", "trainperf", "--version"], capture_output=True,
                          text=True, env=env, cwd=str(tmp_path)).stdout.strip() == "trainperf " + v
    info = subprocess.run([str(py), "-c", "import trainperf; print(trainperf.__file__, "
                           "trainperf.IMPL, trainperf.__version__)"], capture_output=True,
                          text=True, env=env, cwd=str(tmp_path)).stdout.split()
    assert info[0].startswith(str(venv)) and info[1:] == ["c", v]
    # the zero-code hook, from the installed package, through the installed command
    script = tmp_path / "train.py"
    script.write_text((EXAMPLES / "train_mlp.py").read_text())
    run = tmp_path / "run"
    res = subprocess.run([str(exe), "run", "--quiet", "--out", str(run), "--", "python",
                          str(script), "--steps", "5"], capture_output=True, text=True,
                         timeout=300, env=env, cwd=str(tmp_path))
    assert res.returncode == 0, res.stderr
    rows = (run / "steps.csv").read_text().splitlines()
    assert len(rows) == 1 + 5  # header + one row per optimizer step
    # another interpreter of the same Python, without trainperf on its path (the
    # venv's trainperf watching `/usr/bin/python3 train.py`): the hook loads the
    # package from its own folder, so the steps are recorded
    base = os.path.realpath(sys.executable)
    assert subprocess.run([base, "-c", "import trainperf"], env=env, capture_output=True,
                          cwd=str(tmp_path)).returncode != 0
    run2 = tmp_path / "run2"
    res = subprocess.run([str(exe), "run", "--quiet", "--out", str(run2), "--", base,
                          str(script), "--steps", "5"], capture_output=True, text=True,
                         timeout=300, env=env, cwd=str(tmp_path))
    assert res.returncode == 0 and "disabled" not in res.stderr, res.stderr
    assert len((run2 / "steps.csv").read_text().splitlines()) == 1 + 5
    # an interpreter the extension was not built for: one line naming it and the fix
    pkg = next(venv.glob("lib/python*/site-packages/trainperf"))
    so = next(pkg.glob("_core*.so"))
    so.rename(pkg / "_core.cpython-39-x86_64-linux-gnu.so")
    run3 = tmp_path / "run3"
    res = subprocess.run([str(exe), "run", "--quiet", "--out", str(run3), "--", base,
                          str(script), "--steps", "5"], capture_output=True, text=True,
                         timeout=300, env=env, cwd=str(tmp_path))
    assert res.returncode == 0, res.stderr
    line = [l for l in res.stderr.splitlines() if "no steps are recorded" in l]
    assert len(line) == 1, res.stderr
    assert ("no steps are recorded: %s (Python %d.%d) cannot load trainperf, installed in %s "
            "for cpython-39" % (base, sys.version_info[0], sys.version_info[1], pkg)) in line[0]
    assert "run the command with %s" % (venv / "bin" / pkg.parent.parent.name) in line[0], line[0]
    assert "%s -m pip install" % base in line[0]
