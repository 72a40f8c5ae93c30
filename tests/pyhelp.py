"""Helpers shared by tests/test_py*.py: the in-tree package, run folders."""
import csv
import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PYDIR = ROOT / "python"
EXAMPLES = ROOT / "examples"
BUILD = ROOT / os.environ.get("TRAINPERF_BUILD", "build")

if str(PYDIR) not in sys.path:
    sys.path.insert(0, str(PYDIR))


def require_extension():
    if not list((PYDIR / "trainperf").glob("_core*.so")):
        pytest.fail("python/trainperf/_core*.so is missing: run `make python`")


def clean_env(**extra):
    """The environment for a child Python: no inherited run, the package on
    PYTHONPATH (tests import it in-tree)."""
    e = dict(os.environ)
    for k in ("TRAINPERF_RUN_DIR", "TRAINPERF_AUTO", "TRAINPERF_PY_IMPL", "TRAINPERF_LIB"):
        e.pop(k, None)
    e["PYTHONPATH"] = str(PYDIR)
    e["PYTHONDONTWRITEBYTECODE"] = "1"
    e.update({k: str(v) for k, v in extra.items()})
    return e


def run_py(args, timeout=240, **env):
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=clean_env(**env), cwd=str(ROOT))


def steps(run_dir):
    with open(os.path.join(run_dir, "steps.csv"), newline="") as f:
        return list(csv.DictReader(f))


def summary(run_dir):
    with open(os.path.join(run_dir, "summary.json")) as f:
        return json.load(f)


def col_sum(rows, col):
    return sum(int(r[col]) for r in rows if r[col] != "")
