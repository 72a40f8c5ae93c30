"""Ranks and nodes in the reports, on a recorded two-node run
(tests/data/runs/two-nodes: two real `trainperf run`s of a torchrun job with
--nnodes 2 on this machine). No torch needed: these run in the sanitizer pass
too. The live runs themselves are in tests/test_dist.py."""
import json
import re
import shutil

from conftest import ROOT

JOB = ROOT / "tests" / "data" / "runs" / "two-nodes"


def rep(run_cli, *args):
    p = run_cli("report", *map(str, args), env={"NO_COLOR": "1"})
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_the_nodes_of_a_job_report_as_one(run_cli):
    for dirs in ([JOB], [JOB / "node0", JOB / "node1"]):
        r = json.loads(rep(run_cli, *dirs, "--format", "json"))
        assert [(x["rank"], x["steps"]) for x in r["ranks"]] == [(0, 12), (1, 12)]
        assert sorted(x["node"] for x in r["ranks"]) == [0, 1]
        assert r["steps"]["count"] == 12  # the job's steps, not 24
        assert r["straggler"]["rank"] == 1 and r["straggler"]["where"] == "step"
        assert r["straggler"]["collective"] == "all_reduce"
        n = r["nodes"]
        assert len(n) == 2 and n[1]["collectives_matched"] == 12
        assert n[1]["alignment_error_s"] < 0.05
        assert r["diagnosis"]["primary"]["id"] == "straggler"
    text = rep(run_cli, JOB)
    assert "RANKS  2 ranks on 2 nodes" in text and "NODES" in text
    md = rep(run_cli, JOB, "--format", "md")
    assert "## Ranks" in md and "### Nodes" in md
    html = rep(run_cli, JOB, "--format", "html")
    assert html.count("<rect") >= 2 and "heatmap of step time" in html
    # per-node resources and the collectives in html too
    assert "<h2>Nodes</h2>" in html and "<h2>Communication</h2>" in html
    assert "<th>all_reduce</th>" in html
    # one description of the nodes table: text and md have html's columns, in its order
    heads = re.findall(r"<th[^>]*>([^<]*)</th>", html.split("<h2>Nodes</h2>")[1].split("</tr>")[0])
    md_head = md.split("### Nodes")[1].strip().splitlines()[0]
    assert [h.strip() for h in md_head.strip("|").split("|")] == heads
    assert "steps/s" in heads and "wall clocks s" in heads and "| reference clock |" in md
    lines = text.split("NODES")[1].splitlines()
    assert lines[1].split() == " ".join(heads).split()
    assert "reference clock" in lines[2] and "straggler: rank 1" in lines[3]


def test_the_nodes_table_shows_each_nodes_figures(run_cli):
    """A node's step figures are its ranks' merged; steps/s from its steps.csv."""
    r = json.loads(rep(run_cli, JOB, "--format", "json"))
    text = rep(run_cli, JOB).split("NODES")[1].splitlines()
    for n in r["nodes"]:
        (k,) = [x for x in r["ranks"] if x["node"] == n["node"]]  # one rank a node here
        for key in ("step_time_ms_p50", "step_time_ms_p95", "data_wait_ms_mean",
                    "comm_wait_ms_mean"):
            assert n[key] == k[key], (key, n, k)
        rows = [l.split(",") for l in (JOB / ("node%d" % n["node"]) / "steps.csv").read_text()
                .splitlines()]
        iv = [int(v[rows[0].index("interval_ns")]) for v in rows[1:]]
        assert abs(n["steps_per_s"] / (len(iv) / (sum(iv) / 1e9)) - 1) < 1e-6
        # the text row shows the same figures, rounded as the ranks table does
        row = text[2 + n["node"]].split()
        assert row[0] == str(n["node"]) and row[2] == str(n["ranks"])
        assert row[3] == "%.1f" % n["steps_per_s"] and row[4] == "%.1f" % n["step_time_ms_p50"]
        assert row[7] == "%.1f" % n["comm_wait_ms_mean"]
    # the node that holds the straggler says so
    strag = [x["node"] for x in r["ranks"] if x["rank"] == r["straggler"]["rank"]][0]
    assert "straggler: rank %d" % r["straggler"]["rank"] in text[2 + strag]


def test_flops_files_of_each_node_give_mfu_per_rank_and_for_the_job(run_cli, tmp_path):
    job = tmp_path / "job"
    shutil.copytree(JOB, job)
    # rank 0 declared on node 0 with a peak; rank 1 counted on node 1 without one
    for node, rank, body in (
            (0, 0, {"step": None, "rank": 0, "method": "declared", "total_flops": 4e9,
                    "peak_flops_per_s": 1e12, "peak_source": "declared"}),
            (1, 1, {"step": 3, "rank": 1, "method": "FlopCounterMode", "total_flops": 3e9,
                    "peak_flops_per_s": None, "peak_source": "CUDA is not available"})):
        d = job / ("node%d" % node) / "flops"
        d.mkdir()
        (d / ("flops-rank%d-step3.json" % rank)).write_text(json.dumps(body))
    (job / "node1" / "flops" / "flops-rank1-step9.json").write_text('{"rank": 1, "total_fl')
    r = json.loads(rep(run_cli, job, "--format", "json"))
    by = {x["rank"]: x for x in r["ranks"]}
    rate = {}
    for x in by.values():
        rows = [l.split(",") for l in (job / ("node%d" % x["node"]) / "steps.csv").read_text()
                .splitlines()]
        h = rows[0]
        # warm steps; a counted step (rank 1's step 3) is left out: counting slows it
        iv = [int(v[h.index("interval_ns")]) for v in rows[1:]
              if v[h.index("rank")] == str(x["rank"]) and v[h.index("step")] != "0"
              and not (x["rank"] == 1 and v[h.index("step")] == "3")]
        rate[x["rank"]] = len(iv) / (sum(iv) / 1e9)
    assert by[0]["flops_per_step"] == 4e9 and by[0]["flops_source"] == "declared"
    assert abs(by[0]["flops_per_s"] / (4e9 * rate[0]) - 1) < 1e-6
    assert abs(by[0]["mfu"] - by[0]["flops_per_s"] / 1e12) < 1e-9
    # the damaged file is skipped; no peak: FLOP/s without MFU
    assert by[1]["flops_per_step"] == 3e9 and by[1]["mfu"] is None
    assert abs(by[1]["flops_per_s"] / (3e9 * rate[1]) - 1) < 1e-6
    assert by[1]["peak_source"] == "CUDA is not available"
    j = r["job"]
    assert j["flops_ranks"] == 2 and j["mfu_ranks"] == 1
    assert abs(j["flops_per_s"] / (by[0]["flops_per_s"] + by[1]["flops_per_s"]) - 1) < 1e-6
    assert abs(j["mfu"] - by[0]["mfu"]) < 1e-9  # over the ranks with a peak
    text = rep(run_cli, job)
    assert "MFU %.1f%% of the ranks with a peak (peak: declared)" % (100 * j["mfu"]) in text
    row1 = [l for l in text.splitlines() if l.split()[:2] == ["1", "1"]][0]
    assert row1.rstrip().endswith("—")
    # every column lines up: the dash is one column wide
    head = [l for l in text.splitlines() if "TFLOP/s" in l][0]
    assert len(row1.rstrip()) == len(head.rstrip())  # characters: "—" is 3 bytes, 1 column
    # compare shows each rank's MFU (rank 0 in node0's run, with a peak)
    p = run_cli("compare", job / "node0", job / "node1", "--format", "json")
    assert p.returncode == 0, p.stderr
    c = json.loads(p.stdout)["ranks"]
    assert abs(c[0]["a"]["mfu"] - by[0]["mfu"]) < 1e-9 and c[1]["b"]["mfu"] is None


def test_a_clock_seconds_off_is_aligned_on_the_collectives(run_cli, tmp_path):
    job = tmp_path / "job"
    shutil.copytree(JOB, job)
    base = json.loads(rep(run_cli, job, "--format", "json"))["nodes"][1]
    rj = json.loads((job / "node1" / "run.json").read_text())
    rj["start_unix_s"] -= 7.25
    (job / "node1" / "run.json").write_text(json.dumps(rj))
    n = json.loads(rep(run_cli, job, "--format", "json"))["nodes"][1]
    assert abs(n["wall_clock_offset_s"] - (base["wall_clock_offset_s"] - 7.25)) < 1e-6
    assert abs(n["clock_offset_s"] - base["clock_offset_s"]) < 1e-3
    out = tmp_path / "job.json"
    p = run_cli("merge", job / "node0", job / "node1", "-o", out)
    assert p.returncode == 0, p.stderr
    ends = {}
    for e in json.loads(out.read_text())["traceEvents"]:
        if e.get("cat") == "step":
            ends.setdefault(e["pid"] // 1000, {})[e["name"]] = e["ts"] + e["dur"]
    a, b = ends.values()
    d = sorted(abs(a[k] - b[k]) for k in a if k in b and k != "step 0")
    assert len(d) == 11 and d[len(d) // 2] < 20000  # us: together, not 7 s apart


def test_without_comm_logs_a_node_falls_back_to_wall_clocks(run_cli, tmp_path):
    job = tmp_path / "job"
    shutil.copytree(JOB, job)
    shutil.rmtree(job / "node1" / "comm")
    (job / "node0" / "comm" / "ops-rank0.csv").write_text("garbage\x00,\"unterminated\n1,2\n")
    r = json.loads(rep(run_cli, job, "--format", "json"))
    n = r["nodes"][1]
    assert n["alignment_error_s"] is None and n["clock_offset_s"] == n["wall_clock_offset_s"]
    assert len(r["ranks"]) == 2
    row = rep(run_cli, job).split("NODES")[1].splitlines()[3]
    assert row.split()[0] == "1" and "wall clocks (no collectives to align on)" in row


def test_compare_shows_ranks_side_by_side(run_cli):
    p = run_cli("compare", JOB / "node0", JOB / "node1", "--format", "json")
    assert p.returncode == 0, p.stderr
    c = json.loads(p.stdout)
    assert [x["rank"] for x in c["ranks"]] == [0, 1]
    # rank 0 lives in node0's run only
    assert c["ranks"][0]["a"]["steps"] == 12 and c["ranks"][0]["b"]["steps"] is None
    # a rank a run lacks has no figure at all: MFU unknown too, never stack garbage
    assert all(v is None for v in c["ranks"][0]["b"].values()), c["ranks"][0]["b"]
    for fmt, head in (("text", "Ranks (A → B, per step)"), ("md", "## Ranks (A → B"),
                      ("html", "<h2>Ranks (A → B")):
        p = run_cli("compare", JOB / "node0", JOB / "node1", "--format", fmt)
        assert p.returncode == 0 and head in p.stdout, (fmt, p.stdout[-2000:])


def test_bad_job_directories_are_refused_clearly(run_cli, tmp_path):
    p = run_cli("report", JOB / "node0", tmp_path / "nope")
    assert p.returncode == 2 and "nope" in p.stderr and "\n" not in p.stderr.strip()
    # no cap on nodes (tests/test_jobscale.py reports 128), but a node given twice
    # would count its ranks twice: refused in one line
    p = run_cli("report", JOB / "node0", JOB / "node1", JOB / "node0")
    assert p.returncode == 2 and "given twice" in p.stderr and "\n" not in p.stderr.strip()


def _copy_run(src, dst, **run_json):
    shutil.copytree(src, dst)
    p = dst / "run.json"
    d = json.loads(p.read_text())
    d.update(run_json)
    p.write_text(json.dumps(d))
    return dst


def test_unrelated_runs_are_not_reported_as_one_job(run_cli, tmp_path):
    runs = ROOT / "tests" / "data" / "runs"
    a = _copy_run(runs / "input-bound", tmp_path / "a")
    start = json.loads((a / "run.json").read_text())["start_unix_s"]
    # b started 18 minutes after a (2 minutes long) ended: a 16-minute gap
    b = _copy_run(runs / "compute-bound", tmp_path / "b", start_unix_s=start + 18 * 60,
                  end_unix_s=start + 20 * 60, command=["python", "other.py"])
    for dirs in ([a, b], [b, a]):
        p = run_cli("report", *dirs)
        assert p.returncode == 2 and p.stdout == "", p.stdout[-500:]
        line = p.stderr.strip()
        assert "\n" not in line and "are not one job" in line and "--job" in line, line
        assert f"{b} started 16 min after {a} ended" in line, line
    # the parent of both is refused alike; --job reports them as one when asked
    assert run_cli("report", tmp_path).returncode == 2
    p = run_cli("report", a, b, "--job", "--format", "json")
    assert p.returncode == 0, p.stderr
    assert len(json.loads(p.stdout)["nodes"]) == 2
    # overlapping times with no rendezvous named: one job
    c = _copy_run(runs / "compute-bound", tmp_path / "c", start_unix_s=start + 30)
    p = run_cli("report", a, c, "--format", "json")
    assert p.returncode == 0, p.stderr
    assert len(json.loads(p.stdout)["nodes"]) == 2


def test_runs_of_different_rendezvous_are_not_one_job(run_cli, tmp_path):
    cmd = json.loads((JOB / "node1" / "run.json").read_text())["command"]
    assert cmd[cmd.index("--rdzv-id") + 1] == "fx"
    other = [("--rdzv_id=other" if a == "fx" else a) for a in cmd if a != "--rdzv-id"]
    n1 = _copy_run(JOB / "node1", tmp_path / "node1", command=other)
    p = run_cli("report", JOB / "node0", n1)
    assert p.returncode == 2
    assert "different rendezvous (rdzv-id=fx rdzv-endpoint=127.0.0.1:29733; " \
           "rdzv-id=other rdzv-endpoint=127.0.0.1:29733)" in p.stderr, p.stderr
    # the same rendezvous spelled the other way (--k=v, underscores) is the same job,
    # whatever the times
    same = [("--rdzv_id=fx" if a == "fx" else a) for a in cmd if a != "--rdzv-id"]
    start = json.loads((JOB / "node0" / "run.json").read_text())["start_unix_s"]
    n1b = _copy_run(JOB / "node1", tmp_path / "n1b", command=same, start_unix_s=start + 3600)
    p = run_cli("report", JOB / "node0", n1b, "--format", "json")
    assert p.returncode == 0, p.stderr
    assert len(json.loads(p.stdout)["nodes"]) == 2


def test_two_runs_one_after_the_other_on_one_host_are_not_a_job(run_cli, build, tmp_path):
    """Two real runs of different commands on this host, the second started after the first
    ended: one host has one clock, so the slack allowed for other nodes' clocks does not make
    them two nodes of a job; the line says so and points to `trainperf compare`."""
    trainer = str(build / "examples" / "trainer")
    a, b = tmp_path / "a", tmp_path / "b"
    for d, steps in ((a, 20), (b, 30)):
        p = run_cli("run", "--quiet", "--out", d, "--", trainer, "--steps", steps, "--quiet")
        assert p.returncode == 0, p.stderr
    ja, jb = (json.loads((d / "run.json").read_text()) for d in (a, b))
    assert jb["start_unix_s"] >= ja["start_unix_s"] + ja["duration_s"]
    for dirs in ([a, b], [b, a]):
        p = run_cli("report", *dirs)
        assert p.returncode == 2 and p.stdout == "", p.stdout[-500:]
        line = p.stderr.strip()
        assert "\n" not in line and "are not one job" in line, line
        assert f"both ran on host {ja['host']}, one after the other ({b} started" in line, line
        assert "trainperf compare" in line and "--job" in line, line
    assert run_cli("compare", a, b).returncode == 0
    p = run_cli("report", a, b, "--job", "--format", "json")
    assert p.returncode == 0, p.stderr
    assert len(json.loads(p.stdout)["nodes"]) == 2
