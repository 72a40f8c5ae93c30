"""Runs every C unit test (build/tests/test_*) case by case, each in its own
process with a timeout, so a crash or hang fails one case only."""
import subprocess

import pytest

from conftest import BUILD, ROOT


def _cases():
    out = []
    for src in sorted((ROOT / "tests" / "unit").glob("test_*.c")):
        exe = BUILD / "tests" / src.stem
        if not exe.exists():
            out.append(pytest.param(str(exe), None, id=f"{src.stem}:not-built"))
            continue
        names = subprocess.run([str(exe), "--list"], capture_output=True, text=True,
                               timeout=30).stdout.split()
        out += [pytest.param(str(exe), n, id=f"{src.stem}:{n}") for n in names]
    return out


@pytest.mark.parametrize("exe,case", _cases())
def test_c_unit(exe, case):
    if case is None:
        pytest.fail(f"{exe} was not built: run `make`")
    p = subprocess.run([exe, case], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"{case} failed:\n{p.stdout}\n{p.stderr}"
