"""Real GPU runs, captured by the GPU check (`make gpu-check`, tests/gpu/)
on a GPU machine and kept trimmed in tests/data/gpu-runs/<scenario>/: the
rules run on them on every machine. Each run carries check.json, what the
check saw when it was captured (the scenario's truth checks, the verdict);
the report on the kept files must still give the verdict the truth asked for,
so a rule changed here on the CPU cannot silently break on GPU data.

Until a GPU machine has run the check, the folder is empty and so is this
test's parameter list."""
import json
import pathlib

import pytest

from conftest import ROOT

RUNS = ROOT / "tests" / "data" / "gpu-runs"
DIRS = sorted(p for p in RUNS.glob("*") if (p / "check.json").is_file()) if RUNS.is_dir() else []


@pytest.mark.parametrize("run", DIRS, ids=[p.name for p in DIRS])
def test_gpu_run_keeps_its_verdict(run_cli, run):
    seen = json.loads((run / "check.json").read_text())
    rep = run_cli("report", "--format", "json", run)
    assert rep.returncode == 0, rep.stderr
    diag = json.loads(rep.stdout)["diagnosis"]
    ids = {diag["primary"]["id"]} | {f["id"] for f in diag.get("secondary") or []}
    # the verdict checks the scenario made (finding X, no finding X, primary)
    for c in seen["checks"]:
        label = c["check"]
        if label.startswith("finding "):
            assert label[len("finding "):] in ids, (label, ids)
        elif label.startswith("no finding "):
            assert label[len("no finding "):] not in ids, (label, ids)
    if any(c["check"] == "primary" and c["ok"] for c in seen["checks"]):
        assert diag["primary"]["id"] == seen["primary"]
