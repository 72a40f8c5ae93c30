"""The first fix a scenario's report gives, applied to its script by the
`tune` machinery and measured against the script as it was (issue 41): a fix
must not make the step slower. The two are compared in interleaved rounds of
the same tune session (its verdict and its speed-up interval), never against
a wall-clock figure.

One harness run and one tune session per scenario, module-scoped."""
import json
import os
import subprocess
import sys

import pytest

from pyhelp import PYDIR, ROOT, require_extension

pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.once]

sys.path.insert(0, str(ROOT / "tests" / "scenarios"))
import harness  # noqa: E402

# the first words of a fix -> the tune knob that applies it (--only) and the
# trial's label
FIXES = {"Index the dataset once per batch": ("batched_index", "batched_index=True"),
         "num_workers=0": ("num_workers", "num_workers=0")}
SCENARIOS = ("cheap_loader_b32_workers0", "cheap_loader_b32_workers2")


def _first_fix(name, cli, tmp):
    r = harness.run(name, cli=cli, out=tmp)
    assert r["ok"], (name, r["why"])
    # the finding the harness compared (CPU contention from other work set
    # aside, as the suite does)
    d = r["diagnosis"]
    p = next(f for f in [d["primary"]] + d.get("secondary", []) if f["id"] == r["got"])
    return (p.get("recommendations") or p.get("fixes"))[0]


def _tune(name, knob, cli, tmp):
    s = harness.spec(name)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TRAINPERF_") and k != "PYTHONPATH"}
    env.update(s["env"], TRAINPERF_PYTHON_DIR=str(PYDIR), PYTHONDONTWRITEBYTECODE="1",
               STEPS="100000")
    script = str(harness.HERE / s["script"])
    res = subprocess.run([cli, "tune", "--json", "--steps", "60", "--warmup", "15",
                          "--repeats", "3", "--no-batch-finder", "--only", knob, "--out",
                          str(tmp / ("tune-" + name)), "--", sys.executable, script],
                         capture_output=True, text=True, timeout=600, env=env, cwd=str(tmp))
    assert res.returncode == 0, res.stderr[-3000:]
    (tmp / ("tune-%s.json" % name)).write_text(res.stdout)  # kept to read after a failure
    return json.loads(res.stdout)


@pytest.fixture(scope="module")
def applied(cli, tmp_path_factory):
    require_extension()
    tmp = tmp_path_factory.mktemp("fixes")
    out = {}
    for name in SCENARIOS:
        fix = _first_fix(name, cli, tmp)
        knob, label = next(v for k, v in FIXES.items() if fix.startswith(k))
        out[name] = (fix, label, _tune(name, knob, cli, tmp))
    return out


@pytest.mark.parametrize("name", SCENARIOS)
def test_first_fix_is_not_more_workers(applied, name):
    fix = applied[name][0]
    assert "num_workers=1" not in fix and "Raise" not in fix, fix


@pytest.mark.parametrize("name", SCENARIOS)
def test_first_fix_applied_is_not_slower(applied, name):
    fix, label, r = applied[name]
    assert r["baseline"]["status"] == "ok", r["baseline"]
    trial = next(t for t in r["trials"] if t["label"] == label)
    assert trial["status"] == "ok", trial
    # the interval of baseline/trial over interleaved rounds: not below 1
    assert trial["verdict"] != "slower", (fix, trial)
    assert trial["speedup"] >= 1.0, (fix, trial)
    assert trial["loss_check"] in ("ok", None), trial
