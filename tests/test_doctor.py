"""`trainperf doctor`: what it reports is checked against this machine, read
independently here, and against the fake NVML's scenario."""
import json
import os
import sys

import pytest

from conftest import BUILD

FAKE = BUILD / "fakes" / "libnvidia-ml.so.1"


def _doctor(run_cli, *args, env=None, timeout=120, python=False):
    # Importing torch takes seconds: only the tests about Python pay for it.
    e = {"TRAINPERF_PYTHON": sys.executable if python else "/bin/false"}
    e.update(env or {})
    return run_cli("doctor", *args, env=e, timeout=timeout)


def _json(run_cli, env=None, *args, python=False):
    p = _doctor(run_cli, "--json", *args, env=env, python=python)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)["checks"]


def test_without_nvml_says_what_is_missing_and_how_to_fix(run_cli, tmp_path):
    env = {"TRAINPERF_NVML_LIB": str(tmp_path / "none" / "libnvidia-ml.so.1"), "NO_COLOR": "1"}
    p = _doctor(run_cli, env=env)
    assert p.returncode == 0  # informational
    line = next(l for l in p.stdout.splitlines() if l.startswith("NVML"))
    assert "missing" in line and "GPU metrics off" in line
    assert "\033[" not in p.stdout  # NO_COLOR and not a TTY
    c = _json(run_cli, env)["nvml"]
    assert c["status"] == "missing"
    assert c["devices"] == [] and c["driver_version"] is None
    assert "NVIDIA driver" in c["fix"]


def test_with_fake_nvml_lists_driver_and_devices(run_cli, tmp_path):
    if not FAKE.exists():
        pytest.fail(f"{FAKE} is missing: run `make`")
    scn = tmp_path / "s.txt"
    scn.write_text("gpus 2\ndriver 550.54.15\nnvml 12.550.54.15\ncuda 12040\n"
                   "dev 0 name NVIDIA H100 80GB HBM3\ndev 0 mem_total 85520809984\n"
                   "dev 0 mem_used 1\ndev 1 name NVIDIA A10\n"
                   "dev 1 uuid GPU-abcdef00-0000-0000-0000-000000000001\n")
    env = {"TRAINPERF_NVML_LIB": str(FAKE), "TRAINPERF_FAKE_NVML": str(scn), "NO_COLOR": "1",
           "CUDA_VISIBLE_DEVICES": "0,1"}
    c = _json(run_cli, env)["nvml"]
    assert c["status"] == "ok"
    assert c["driver_version"] == "550.54.15"
    assert c["nvml_version"] == "12.550.54.15"
    assert c["cuda_driver_version"] == 12040
    assert [d["name"] for d in c["devices"]] == ["NVIDIA H100 80GB HBM3", "NVIDIA A10"]
    assert c["devices"][0]["mem_total_bytes"] == 85520809984
    assert c["devices"][1]["mem_total_bytes"] is None  # not in the scenario: unknown
    assert c["devices"][1]["uuid"] == "GPU-abcdef00-0000-0000-0000-000000000001"
    assert c["visible"] == [0, 1]
    text = _doctor(run_cli, env=env).stdout
    assert "driver 550.54.15" in text and "CUDA 12.4" in text
    assert "GPU 1: NVIDIA A10, GPU-abcdef00-0000-0000-0000-000000000001" in text
    # CUDA_VISIBLE_DEVICES of the shell: which GPUs a run started here would use.
    c = _json(run_cli, dict(env, CUDA_VISIBLE_DEVICES="GPU-abcdef"))["nvml"]
    assert c["visible"] == [1] and "selects GPU 1" in c["detail"]
    c = _json(run_cli, dict(env, CUDA_VISIBLE_DEVICES="-1"))["nvml"]
    assert c["visible"] == [] and c["status"] == "limited"


def test_psi_cgroup_perf_match_this_machine(run_cli, tmp_path):
    env = {"TRAINPERF_NVML_LIB": str(tmp_path / "none.so")}
    checks = _json(run_cli, env)
    for res in ("cpu", "memory", "io"):
        path = f"/proc/pressure/{res}"
        readable = os.path.exists(path) and os.access(path, os.R_OK)
        assert checks["psi"][res] == readable
    v2 = os.path.exists("/sys/fs/cgroup/cgroup.controllers")
    cg = checks["cgroup"]
    assert (cg["version"] == 2) == v2
    if v2:
        rel = next(l.split(":", 2)[2] for l in open("/proc/self/cgroup").read().splitlines()
                   if l.startswith("0::"))
        own = f"/sys/fs/cgroup{rel.rstrip('/')}/memory.max"
        if os.path.exists(own) and open(own).read().strip() != "max":
            assert cg["memory_max_bytes"] <= int(open(own).read())
    with open("/proc/sys/kernel/perf_event_paranoid") as f:
        assert checks["perf"]["perf_event_paranoid"] == int(f.read())
    assert checks["perf"]["status"] in ("ok", "limited", "missing")


def test_python_and_torch_versions(run_cli, tmp_path):
    env = {"TRAINPERF_NVML_LIB": str(tmp_path / "none.so")}
    checks = _json(run_cli, env, python=True)
    assert checks["python"]["version"] == sys.version.split()[0]
    assert checks["python"]["executable"] == sys.executable
    try:
        import torch  # noqa: F401
    except ImportError:
        assert checks["torch"]["status"] == "missing" and checks["torch"]["version"] is None
    else:
        assert checks["torch"]["version"] == torch.__version__
        assert checks["torch"]["cuda"] == (torch.version.cuda or None)


def test_hanging_python_is_cut_off(run_cli, tmp_path):
    slow = tmp_path / "python3"
    slow.write_text("#!/bin/sh\nexec sleep 300\n")
    slow.chmod(0o755)
    p = _doctor(run_cli, "--json", "--timeout", "1",
                env={"TRAINPERF_PYTHON": str(slow), "TRAINPERF_NVML_LIB": str(tmp_path / "x")},
                timeout=60)
    assert p.returncode == 0
    c = json.loads(p.stdout)["checks"]
    # slow is not missing: no "install Python", the fix is more time
    assert c["python"]["status"] == "limited"
    assert "did not answer within 1 s" in c["python"]["detail"]
    assert "--timeout 180" in c["python"]["fix"] and "install" not in c["python"]["fix"]
    assert c["torch"]["status"] == "limited"
    assert "did not answer" in c["torch"]["detail"] and "pip install" not in c["torch"]["fix"]


def test_slow_torch_import_is_slow_not_missing(run_cli, tmp_path):
    """A real interpreter whose `import torch` outlasts the deadline: Python
    is found (its lines arrive as printed), torch is "slow", never "missing"."""
    pytest.importorskip("torch")
    slow = tmp_path / "python3"
    # the real interpreter, with torch's import held back 30 s by a real sleep
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import sys, time, importlib.abc\n"
        "class Slow(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'torch':\n"
        "            time.sleep(30)\n"
        "        return None\n"
        "sys.meta_path.insert(0, Slow())\n")
    slow.write_text("#!/bin/sh\nPYTHONPATH=%s exec %s \"$@\"\n" % (site, sys.executable))
    slow.chmod(0o755)
    p = _doctor(run_cli, "--json", "--timeout", "3",
                env={"TRAINPERF_PYTHON": str(slow), "TRAINPERF_NVML_LIB": str(tmp_path / "x")},
                timeout=60)
    c = json.loads(p.stdout)["checks"]
    assert c["python"]["status"] == "ok", c["python"]
    assert c["torch"]["status"] == "limited", c["torch"]
    assert "`import torch` did not finish within 3 s" in c["torch"]["detail"]


def test_nccl_and_cupti_found_on_library_path(run_cli, tmp_path):
    libdir = tmp_path / "lib"
    libdir.mkdir()
    (libdir / "libnccl.so.2").write_bytes(b"")
    env = {"LD_LIBRARY_PATH": str(libdir), "TRAINPERF_NVML_LIB": str(tmp_path / "x")}
    c = _json(run_cli, env)
    assert c["nccl"]["status"] == "ok"
    assert c["nccl"]["path"] == str(libdir / "libnccl.so.2")
    assert c["cupti"]["status"] in ("ok", "missing")
    if c["cupti"]["status"] == "missing":
        assert c["cupti"]["path"] is None and "CUPTI" in c["cupti"]["fix"]
    else:
        assert os.path.exists(c["cupti"]["path"])


def test_bad_option_is_a_usage_error(run_cli):
    p = run_cli("doctor", "--frobnicate")
    assert p.returncode == 2
    assert p.stdout == ""
    assert p.stderr.count("\n") == 1 and "--frobnicate" in p.stderr
    p = run_cli("doctor", "--timeout", "soon")
    assert p.returncode == 2


def test_hang_stack_tools_are_found_on_path(run_cli, tmp_path):
    # py-spy and gdb read the stacks of hung processes without the Python hook
    import shutil
    env = {"TRAINPERF_NVML_LIB": str(tmp_path / "none.so")}
    c = _json(run_cli, env)["hang_stacks"]
    have = [bool(shutil.which("py-spy")), bool(shutil.which("gdb"))]
    assert c["status"] == ("ok" if all(have) else "limited" if any(have) else "missing"), c
    assert ("py-spy found" in c["detail"]) == have[0] and ("gdb found" in c["detail"]) == have[1]
    # neither on PATH: both named, with how to install them
    c = _json(run_cli, dict(env, PATH=str(tmp_path)))["hang_stacks"]
    assert c["status"] == "missing"
    assert c["fix"] == "pip install py-spy; apt-get install gdb", c
