"""The scenario suite: real training scripts under `trainperf run`, each with
the verdict it must get (docs/diagnosis.md, "Scenario suite").

Each script's header says what it expects:

    # expect: primary=<finding id>          the primary verdict
    # expect: primary=<id>|<id>             either is right (a run on the line between two)
    # must: id, id                          findings that must appear (any rank)
    # must_not: id, id                      findings that must not appear
    # background: cpu_burn=N | mem_grow=MiB_per_s   load started outside the run
    # launch: torchrun=N                    run under torchrun (gloo) instead of python
    # needs: lightning, transformers        modules the script imports
    # says: text; text                      words the primary finding must contain
                                            (title, summary, evidence or fixes; the
                                            finding compared: contention set aside)
    # steps: N                              steps.csv must hold exactly N steps
    # script: other.py                      run that scenario's script instead (a
                                            variant: other load, other settings)
    # env: NAME=value, ...                  environment of the script
    # python: ARGS                          the interpreter's arguments before the
                                            script (-m cProfile -o /dev/null, -m pdb ...)
    # exit: N                               the exit status the run must end with
                                            (default 0: a script that fails on purpose)
    # alerts_not: rule, rule                alerts that must not fire (alerts.jsonl)
    # note: text; text                      words the diagnosis' notes must contain

CPU contention from other processes is a true finding on a shared machine
(these runs share 2 cores with other work), so outside the contention
scenario it is set aside before the comparison: the primary compared is the
first finding that is not cpu-contention, and the report notes it.

Run one alone:  python3 tests/scenarios/harness.py stall_get_batch
or through pytest: pytest tests/test_scenarios.py -k stall_get_batch
"""
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
ENV_FINDINGS = {"cpu-contention"}


def scenarios():
    return sorted(p.stem for p in HERE.glob("*.py") if p.stem not in ("harness", "__init__")
                  and not p.stem.startswith("_"))


def spec(name):
    text = (HERE / (name + ".py")).read_text()
    s = {"primary": None, "must": [], "must_not": [], "background": {}, "launch": {},
         "needs": [], "says": [], "steps": None, "script": None, "env": {}, "python": [],
         "exit": 0, "alerts_not": [], "note": []}
    for line in text.splitlines():
        m = re.match(r"#\s*(expect|must_not|must|background|launch|needs|says|steps|script|env|python|exit|"
                     r"alerts_not|note):"
                     r"\s*(.*)", line)
        if not m:
            continue
        k, v = m.group(1), m.group(2).strip()
        if k in ("steps", "exit"):
            s[k] = int(v)
        elif k == "expect":
            s["primary"] = v.split("=", 1)[1].strip()
        elif k in ("must", "must_not", "needs", "alerts_not"):
            s[k] = [x.strip() for x in v.split(",") if x.strip()]
        elif k == "script":
            s[k] = v
        elif k == "python":
            s[k] = shlex.split(v)
        elif k == "env":
            s[k] = dict(x.strip().split("=", 1) for x in v.split(",") if "=" in x)
        elif k in ("says", "note"):
            s[k] = [x.strip() for x in v.split(";") if x.strip()]
        else:
            for part in v.split(","):
                a, b = part.split("=")
                s[k][a.strip()] = float(b)
    return s


_BURN = "import os\nwhile True: pass\n"
_GROW = """import sys, time
rate = float(sys.argv[1]) * 1048576
keep = []
t0 = time.monotonic()
while True:
    want = rate * (time.monotonic() - t0)
    while sum(len(b) for b in keep) < want and len(keep) < 4096:
        keep.append(bytearray(b"x" * int(rate / 20)))
    time.sleep(0.05)
"""


def _background(bg):
    procs = []
    for _ in range(int(bg.get("cpu_burn", 0))):
        procs.append(subprocess.Popen([sys.executable, "-c", _BURN]))
    if bg.get("mem_grow"):
        procs.append(subprocess.Popen([sys.executable, "-c", _GROW, str(bg["mem_grow"])]))
    if procs:
        time.sleep(1.0)  # the load is there before the run starts
    return procs


def run(name, cli=None, out=None, timeout=300):
    """Run one scenario; return a dict with the expectation, what it got and
    whether it passed."""
    s = spec(name)
    cli = cli or str(ROOT / os.environ.get("TRAINPERF_BUILD", "build") / "trainperf")
    out = pathlib.Path(out or tempfile.mkdtemp(prefix="scn-")) / name
    if out.exists():
        shutil.rmtree(out)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TRAINPERF_") and k != "PYTHONPATH"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(s["env"])
    script = str(HERE / (s["script"] or name + ".py"))
    if s["launch"].get("torchrun"):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc-per-node", str(int(s["launch"]["torchrun"])), script]
    else:
        cmd = [sys.executable, *s["python"], script]
    bg = _background(s["background"])
    try:
      try:
        res = subprocess.run([cli, "run", "--quiet", "--out", str(out), "--interval", "0.5", "--",
                              *cmd], capture_output=True, text=True, timeout=timeout, env=env,
                             cwd=str(HERE), stdin=subprocess.DEVNULL)
      except subprocess.TimeoutExpired:
        return {"name": name, "expected": s["primary"], "rc": None, "out": str(out),
                "got": "(timed out)", "ids": [], "ok": False,
                "why": ["timed out after %d s" % timeout]}
    finally:
        for p in bg:
            p.kill()
            p.wait()
    r = {"name": name, "expected": s["primary"], "rc": res.returncode, "out": str(out),
         "stderr": res.stderr[-2000:]}
    try:
        d = json.loads((out / "summary.json").read_text())["diagnosis"]
    except Exception as exc:
        r.update(got="(no diagnosis: %s)" % exc, ids=[], ok=False, why=["no diagnosis"])
        return r
    ids = [d["primary"]["id"]] + [f["id"] for f in d.get("secondary", [])]
    accepted = s["primary"].split("|")
    contention = not set(accepted) & ENV_FINDINGS
    compared = [i for i in ids if not (contention and i in ENV_FINDINGS)]
    got = compared[0] if compared else ids[0]
    why = []
    if res.returncode != s["exit"]:
        why.append("the script exited with %d: %s" % (res.returncode, res.stderr[-300:]))
    if got not in accepted:
        why.append("primary %s, expected %s" % (got, s["primary"]))
    if s["steps"] is not None:
        try:
            with open(out / "steps.csv") as f:
                nsteps = sum(1 for _ in f) - 1
        except OSError:
            nsteps = 0
        if nsteps != s["steps"]:
            why.append("%d steps recorded, expected %d" % (nsteps, s["steps"]))
    for m in s["must"]:
        if m not in ids:
            why.append("missing finding %s" % m)
    for m in s["must_not"]:
        if m in compared:
            why.append("unwanted finding %s" % m)
    # the words are the compared finding's (contention set aside, as above)
    p = next((f for f in [d["primary"]] + d.get("secondary", []) if f["id"] == got), d["primary"])
    text = " ".join([p.get("title", ""), p.get("summary", "")] +
                    [e.get("text", "") for e in p.get("evidence", [])] +
                    [str(x) for x in p.get("recommendations", p.get("fixes", []))])
    for w in s["says"]:
        if w not in text:
            why.append("the primary finding does not say %r" % w)
    notes = " ".join(d.get("notes", []))
    for w in s["note"]:
        if w not in notes:
            why.append("no note says %r" % w)
    fired = set()
    try:
        with open(out / "alerts.jsonl") as f:
            for line in f:
                a = json.loads(line)
                if a.get("state") == "fired":
                    fired.add(a.get("rule"))
    except (OSError, ValueError):
        pass
    for a in s["alerts_not"]:
        if a in fired:
            why.append("alert %s fired" % a)
    r.update(got=got, ids=ids, ok=not why, why=why, diagnosis=d)
    return r


def confusion(results):
    """The confusion table (expected x got) as text."""
    labels = sorted({r["expected"] for r in results} | {r["got"] for r in results})
    w = max(len(x) for x in labels + ["expected \\ got"]) + 1
    head = "expected \\ got".ljust(w) + " ".join(x[:12].rjust(12) for x in labels)
    lines = [head]
    for e in labels:
        row = [sum(1 for r in results if r["expected"] == e and r["got"] == g) for g in labels]
        if not any(row):
            continue
        lines.append(e.ljust(w) + " ".join(str(n or ".").rjust(12) for n in row))
    ok = sum(r["ok"] for r in results)
    lines.append("%d of %d scenarios pass (primary, must and must-not findings)" %
                 (ok, len(results)))
    return "\n".join(lines)


def main(argv):
    names = argv or scenarios()
    results = []
    for n in names:
        t0 = time.monotonic()
        r = run(n)
        results.append(r)
        print("%-28s %-5s got %-18s (%s) %.0fs %s" % (n, "ok" if r["ok"] else "FAIL", r["got"],
                                                     ",".join(r["ids"]), time.monotonic() - t0,
                                                     "; ".join(r["why"])), flush=True)
    print()
    print(confusion(results))
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
