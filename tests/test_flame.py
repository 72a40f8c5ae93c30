"""Flame graphs of the sampled stacks (issue 30 item 4): RUN/stacks.speedscope.json
(speedscope's file format) and the interactive flame graph in report.html, checked
against the folded stacks they come from and rendered in headless Chromium."""
import base64
import collections
import hashlib
import json
import re
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

INPUT_BOUND = ROOT / "tests" / "data" / "gpu-runs" / "input_bound"

# The rules of speedscope's file-format schema
# (https://www.speedscope.app/file-format-schema.json), written out for a sampled file.
UNITS = ["none", "nanoseconds", "microseconds", "milliseconds", "seconds", "bytes"]
SCHEMA = {
    "type": "object",
    "required": ["$schema", "shared", "profiles"],
    "properties": {
        "$schema": {"enum": ["https://www.speedscope.app/file-format-schema.json"]},
        "name": {"type": "string"},
        "exporter": {"type": "string"},
        "activeProfileIndex": {"type": "number"},
        "shared": {
            "type": "object", "required": ["frames"],
            "properties": {"frames": {"type": "array", "items": {
                "type": "object", "required": ["name"],
                "properties": {"name": {"type": "string"}, "file": {"type": "string"},
                               "line": {"type": "number"}, "col": {"type": "number"}}}}}},
        "profiles": {"type": "array", "items": {
            "type": "object",
            "required": ["type", "name", "unit", "startValue", "endValue", "samples", "weights"],
            "properties": {
                "type": {"enum": ["sampled"]}, "name": {"type": "string"},
                "unit": {"enum": UNITS},
                "startValue": {"type": "number"}, "endValue": {"type": "number"},
                "samples": {"type": "array", "items": {"type": "array",
                                                       "items": {"type": "number"}}},
                "weights": {"type": "array", "items": {"type": "number"}}}}},
    },
}

TRAIN = """
import os, subprocess, sys
if os.environ.get("RANK") is None:
    # two ranks, as a launcher starts them: each its own Python with RANK set
    kids = [subprocess.Popen([sys.executable, __file__],
                             env={**os.environ, "RANK": str(r), "LOCAL_RANK": str(r),
                                  "WORLD_SIZE": "2"}) for r in range(2)]
    sys.exit(max(k.wait() for k in kids))
import time
import torch

class Slow(torch.utils.data.Dataset):
    def __len__(self):
        return 256

    def __getitem__(self, i):
        t = time.perf_counter() + 0.002  # decode one sample
        while time.perf_counter() < t:
            pass
        return torch.randn(64), i % 10

torch.set_num_threads(1)
dl = torch.utils.data.DataLoader(Slow(), batch_size=8)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(2):
    for x, y in dl:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def chromium():
    for n in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(n):
            return shutil.which(n)
    return None


def folded(run):
    """{pid: Counter(stack line -> samples)} of RUN/pyprof/stacks-*.folded."""
    out = {}
    for f in (run / "pyprof").glob("stacks-*.folded"):
        c = collections.Counter()
        for line in f.read_text().splitlines():
            stack, _, n = line.rpartition(" ")
            c[stack] += int(n)
        out[int(f.name[7:-7])] = c
    return out


def label(fr):
    """A speedscope frame back as the folded file writes it."""
    if "file" not in fr:
        return "[data]" if fr["name"] == "[data wait]" else fr["name"]
    return f"{fr['name']} ({fr['file']}:{fr['line']})"


def check_speedscope(doc, run):
    """The schema's rules, then the file against the folded stacks it was made from."""
    import jsonschema
    jsonschema.validate(doc, SCHEMA)
    frames = doc["shared"]["frames"]
    stacks = folded(run)
    assert len(doc["profiles"]) == len(stacks)
    for p in doc["profiles"]:
        assert p["unit"] == "none" and p["startValue"] == 0
        assert len(p["samples"]) == len(p["weights"]) > 0
        assert all(w > 0 for w in p["weights"])
        assert sum(p["weights"]) == p["endValue"]
        for s in p["samples"]:
            assert s and all(isinstance(i, int) and 0 <= i < len(frames) for i in s)
            # the root frame is the training thread's phase
            assert re.fullmatch(r"\[[a-z ]+\]", frames[s[0]]["name"]) and "file" not in frames[s[0]]
        pid = int(re.search(r"pid (\d+)", p["name"]).group(1))
        got = collections.Counter()
        for s, w in zip(p["samples"], p["weights"]):
            got[";".join(label(frames[i]) for i in s)] += w
        assert got == stacks[pid], p["name"]
    return doc


def inline_scripts(html):
    return re.findall(r"<script>(.*?)</script>", html, re.S)


def flame_data(html):
    m = re.search(r'<script type="application/json" id="tpf-flame-data">(.*?)</script>', html,
                  re.S)
    return json.loads(m.group(1))


def check_csp(html):
    """The report's one inline script is what its Content-Security-Policy allows."""
    scripts = inline_scripts(html)
    assert len(scripts) == 1
    want = "sha256-" + base64.b64encode(hashlib.sha256(scripts[0].encode()).digest()).decode()
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', html).group(1)
    assert f"script-src '{want}'" in csp, f"set FLAME_JS_SHA256 in src/report/flame.h to {want}"
    assert "connect-src" not in csp and "default-src 'none'" in csp  # no network


def browser(exe, tmp_path, *args):
    base = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            f"--user-data-dir={tmp_path / 'chrome'}", "--enable-logging=stderr", "--v=0"]
    p = subprocess.run(base + list(args), capture_output=True, text=True, timeout=180)
    console = [l for l in p.stderr.splitlines() if "CONSOLE" in l or "Uncaught" in l
               or "Content Security Policy" in l]
    assert console == [], console
    return p


def flame_pixels(png):
    """Pixels in the flame graph's colours (saturated, mid lightness) in a screenshot."""
    import numpy as np
    from PIL import Image
    hsv = np.asarray(Image.open(png).convert("HSV"))
    return int(((hsv[..., 1] > 90) & (hsv[..., 2] > 120) & (hsv[..., 2] < 250)).sum())


def check_in_browser(exe, html_path, tmp_path, procs):
    uri = html_path.as_uri()
    dom = browser(exe, tmp_path, "--dump-dom", uri).stdout
    svg = re.search(r'<svg id="tpf-flame"[^>]*>(.*?)</svg>', dom, re.S)
    assert svg, "the script drew no flame graph"
    drawn = int(re.search(r'data-nodes="(\d+)"', svg.group(0)).group(1))
    assert drawn > 5 and svg.group(1).count("<rect") == drawn
    # the phases are the top row: every rect at y=0 is one
    top = re.findall(r'<title>([^<]*?) — \d+ samples[^<]*</title><rect x="[^"]*" y="0"',
                     svg.group(1))
    assert top and all(re.fullmatch(r"\[[a-z ]+\]", t) for t in top), top
    # a link to a zoomed view (what a click does): the second process, a frame at depth 1
    nodes = procs[-1]["nodes"]
    k = next(i for i in range(len(nodes) // 3) if nodes[3 * i + 1] == 1)
    zoom = browser(exe, tmp_path, "--dump-dom", f"{uri}#flame={len(procs) - 1},{k}").stdout
    zsvg = re.search(r'<svg id="tpf-flame"[^>]*>', zoom).group(0)
    assert f'data-zoom="{k}"' in zsvg and "zoomed on" in zoom
    zdrawn = int(re.search(r'data-nodes="(\d+)"', zsvg).group(1))
    sub = [i for i in range(len(nodes) // 3) if nodes[3 * i + 1] >= 1]
    assert 0 < zdrawn <= len(nodes) // 3
    # the zoomed frame spans the graph's whole width, as its phase above it does
    row0 = re.findall(r'y="0" width="([\d.]+)"', zoom)
    row1 = re.findall(r'y="17" width="([\d.]+)"', zoom)
    assert len(row0) == len(row1) == 1 and row0 == row1 and float(row0[0]) > 300 and sub
    # rendered: the flame graph's colours are on screen, and not in the same page
    # without its script
    html = html_path.read_text()
    bare = tmp_path / "bare.html"
    bare.write_text(html.replace(f"<script>{inline_scripts(html)[0]}</script>", ""))
    shots = {}
    for name, page in (("flame", html_path), ("bare", bare)):
        png = tmp_path / f"{name}.png"
        browser(exe, tmp_path, f"--screenshot={png}", "--window-size=1200,9000", page.as_uri())
        shots[name] = flame_pixels(png)
    assert shots["flame"] > shots["bare"] + 20000, shots


@pytest.mark.torch
@pytest.mark.slow
@pytest.mark.once
def test_flame_graphs_of_a_real_torch_run(cli, run_cli, tmp_path):
    from pyhelp import clean_env
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    run = tmp_path / "run"
    p = subprocess.run([cli, "run", "--quiet", "--out", str(run), "--", sys.executable,
                        str(script)], capture_output=True, text=True, timeout=300,
                       env=clean_env())
    assert p.returncode == 0, p.stderr[-2000:]
    stacks = folded(run)
    assert len(stacks) == 2, "a stacks file per rank"
    # written at the end of the run, and again by `trainperf report`
    first = json.loads((run / "stacks.speedscope.json").read_text())
    (run / "stacks.speedscope.json").unlink()
    r = run_cli("report", run, "--format", "html", "--out", tmp_path / "r.html")
    assert r.returncode == 0, r.stderr
    doc = check_speedscope(json.loads((run / "stacks.speedscope.json").read_text()), run)
    assert doc == first
    assert [p["name"].split(" (")[0] for p in doc["profiles"]] == ["rank 0", "rank 1"]
    assert doc["exporter"].startswith("trainperf ")
    # the data loader's wait is the heaviest phase of this input-bound script
    frames = doc["shared"]["frames"]
    for p in doc["profiles"]:
        by_phase = collections.Counter()
        for s, w in zip(p["samples"], p["weights"]):
            by_phase[frames[s[0]]["name"]] += w
        assert by_phase.most_common(1)[0][0] == "[data wait]", by_phase
        assert len(by_phase) >= 2, by_phase  # and the model's phases beside it

    for html_path in (run / "report.html", tmp_path / "r.html"):
        html = html_path.read_text()
        check_csp(html)
        d = flame_data(html)
        assert [p["name"] for p in d["procs"]] == [p["name"] for p in doc["profiles"]]
        for fp, sp in zip(d["procs"], doc["profiles"]):
            n = fp["nodes"]
            assert fp["samples"] == sp["endValue"]
            assert sum(n[i + 2] for i in range(0, len(n), 3) if n[i + 1] == 0) == fp["samples"]
            assert all(0 <= n[i] < len(d["names"]) for i in range(0, len(n), 3))
    exe = chromium()
    if not exe:
        pytest.skip("chromium not installed (apt-get install chromium)")
    check_in_browser(exe, run / "report.html", tmp_path, flame_data(html)["procs"])


HOSTILE = "run (</script><script>alert(1)</script>.py:3)"


def hostile_run(tmp_path):
    """input_bound with a second process of rank 1 whose stacks file is hostile and damaged."""
    run = tmp_path / "run"
    shutil.copytree(INPUT_BOUND, run)
    (run / "stacks.speedscope.json").unlink(missing_ok=True)
    lines = [
        f"[forward];{HOSTILE};evil\"name\\ (x.py:1) 5",
        "garbage-without-a-count",
        "[data];a (b.py:1) -3",
        "[data];a (b.py:1) nan",
        "[optimizer];" + ";".join(f"f{i} (deep.py:{i})" for i in range(3000)) + " 2",
        "[other];" + "x" * 400_000 + " 9",
        "[other];f (g.py:2) 7",
        "",
    ]
    (run / "pyprof" / "stacks-4242.folded").write_text("\n".join(lines))
    (run / "pyprof" / "events-4242.json").write_text('{"pid": 4242, "rank": "1"}')
    (run / "pyprof" / "stacks-77.folded").write_text("")  # empty: no profile
    return run


def test_speedscope_skips_damage_and_keeps_hostile_names(run_cli, tmp_path):
    run = hostile_run(tmp_path)
    r = run_cli("report", run, "--format", "html", "--out", tmp_path / "r.html")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    doc = json.loads((run / "stacks.speedscope.json").read_text())
    import jsonschema
    jsonschema.validate(doc, SCHEMA)
    # reported again: the same file, left as it was
    before = (run / "stacks.speedscope.json").stat()
    assert run_cli("report", run, "--format", "json").returncode == 0
    after = (run / "stacks.speedscope.json").stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    # ranked processes first; the empty file is no profile
    own = sorted(int(f.stem.split("-")[1]) for f in (INPUT_BOUND / "pyprof").glob("stacks-*.folded"))
    assert own, "the kept GPU run has no stacks"
    assert [p["name"] for p in doc["profiles"]] == ["rank 1 (pid 4242)"] + ["pid %d" % x for x in own]
    frames = doc["shared"]["frames"]
    p = doc["profiles"][0]
    got = {";".join(label(frames[i]) for i in s): w for s, w in zip(p["samples"], p["weights"])}
    # damaged lines (no count, negative, NaN, too long) are left out; a deep stack is kept
    # to 2,048 frames
    assert got[f"[forward];{HOSTILE};evil\"name\\ (x.py:1)"] == 5
    assert got["[other];f (g.py:2)"] == 7
    deep = [s for s in p["samples"] if frames[s[0]]["name"] == "[optimizer]"]
    assert len(deep) == 1 and len(deep[0]) == 2048
    assert len(got) == 3 and p["endValue"] == 14
    hostile = next(f for f in frames if f["name"] == "run")
    assert hostile["file"] == "</script><script>alert(1)</script>.py" and hostile["line"] == 3
    html = (tmp_path / "r.html").read_text()
    check_csp(html)
    assert "</script><script>alert" not in html  # written \u003c in the JSON, &lt; in HTML
    assert flame_data(html)["procs"][0]["name"] == "rank 1 (pid 4242)"
    exe = chromium()
    if exe:
        dom = browser(exe, tmp_path, "--dump-dom", (tmp_path / "r.html").as_uri()).stdout
        assert dom.count("<script") == 2  # the data block and the flame graph's own
        assert 'data-nodes="' in dom


def test_report_goes_on_when_the_speedscope_file_cannot_be_written(run_cli, tmp_path):
    run = hostile_run(tmp_path)
    (run / "stacks.speedscope.json").mkdir()  # in the way of the atomic rename
    r = run_cli("report", run)
    assert r.returncode == 0 and "input" in r.stdout
    warn = [l for l in r.stderr.splitlines() if l]
    assert len(warn) == 1 and "stacks.speedscope.json" in warn[0], r.stderr


def test_no_stacks_no_file_and_no_script(run_cli, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(ROOT / "tests" / "data" / "runs" / "input-bound", run)
    r = run_cli("report", run, "--format", "html")
    assert r.returncode == 0
    assert not (run / "stacks.speedscope.json").exists()
    assert "<script" not in r.stdout and "tpf-flame" not in r.stdout


def test_report_flame_graph_keeps_to_its_caps(run_cli, tmp_path):
    """Past 64 processes the picker shows the first 64 and says so; a process with more
    call-tree nodes than its share keeps its heaviest, still a tree; the speedscope file
    has everything."""
    run = tmp_path / "run"
    shutil.copytree(INPUT_BOUND, run)
    (run / "stacks.speedscope.json").unlink(missing_ok=True)
    pp = run / "pyprof"
    for f in pp.glob("stacks-*.folded"):
        f.unlink()
    big = [f"[forward];m{i} (a.py:{i});n{i} (b.py:1);o{i} (c.py:2);p{i} (d.py:3) {1 + i % 7}"
           for i in range(1500)]
    (pp / "stacks-100.folded").write_text("\n".join(big) + "\n")
    (pp / "events-100.json").write_text('{"rank": "0"}')
    for k in range(1, 70):
        (pp / f"stacks-{100 + k}.folded").write_text(f"[data];w (x.py:{k}) {k}\n")
        (pp / f"events-{100 + k}.json").write_text(f'{{"rank": "{k}"}}')
    r = run_cli("report", run, "--format", "html")
    assert r.returncode == 0, r.stderr
    doc = json.loads((run / "stacks.speedscope.json").read_text())
    assert len(doc["profiles"]) == 70 and len(doc["profiles"][0]["samples"]) == 1500
    html = r.stdout
    assert "the first 64 of 70 processes" in html and "leaves out its lightest frames" in html
    assert html.count('<option value="') == 64
    d = flame_data(html)
    assert len(d["procs"]) == 64
    n = d["procs"][0]["nodes"]
    assert 0 < len(n) // 3 <= 200000 // 64
    # preorder: each node one deeper than some node before it, at most; every depth-0
    # node is a phase
    depth = [n[i + 1] for i in range(0, len(n), 3)]
    assert depth[0] == 0 and all(b <= a + 1 for a, b in zip(depth, depth[1:]))
    assert all(d["names"][n[i]] == "[forward]" for i in range(0, len(n), 3) if n[i + 1] == 0)
    # kept are the heaviest: no kept node is lighter than a left-out one of the same depth
    kept = {d["names"][n[i]] for i in range(0, len(n), 3) if n[i + 1] == 1}
    weights = {f"m{i} (a.py:{i})": 1 + i % 7 for i in range(1500)}
    lost = set(weights) - kept
    assert lost and min(weights[k] for k in kept) >= max(weights[k] for k in lost)
