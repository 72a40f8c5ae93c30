"""Jobs as large as users run (issue 37): one report over 1,024 ranks on 128
nodes, generated (tests/jobgen.py) from one real 2-rank gloo DDP run recorded
here by `trainperf run` under torchrun. The generated data lives in tmp only.
Speed and memory at 8, 32 and 128 nodes: bench/bench_jobscale.py."""
import gzip
import json
import re
import subprocess

import pytest

import jobgen
from conftest import BUILD, ROOT
from test_dist import torchrun, trainperf_run

pytestmark = [pytest.mark.torch, pytest.mark.once]

NODES, RPN = 128, 8
JITTER = 5.0  # ms of noise a step in every rank's compute: no two ranks alike
TRACES = ROOT / "tests" / "data" / "traces"
SLOW_RANK, SLOW_NODE, SLOW_LINK = 613, 37, 91


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """One real DDP run of 2 ranks: the rows every generated rank is made of."""
    out = tmp_path_factory.mktemp("jobscale") / "base"
    trainperf_run(out, torchrun(2, "--steps", 20))
    return out


def report(*args):
    p = subprocess.run([str(BUILD / "trainperf"), "report", *map(str, args)],
                       capture_output=True, text=True, timeout=600, env={"NO_COLOR": "1"})
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


@pytest.fixture(scope="module")
def slow_rank_job(base, tmp_path_factory):
    out = tmp_path_factory.mktemp("job_rank")
    # each node's wall clock 0.25 s further off than the one before: the
    # collectives must put them back
    jobgen.generate(base, out, NODES, RPN, slow_rank=SLOW_RANK, slow_ms=60, clock_skew_s=0.25,
                    jitter_ms=JITTER)
    return out


@pytest.fixture(scope="module")
def slow_node_job(base, tmp_path_factory):
    out = tmp_path_factory.mktemp("job_node")
    jobgen.generate(base, out, NODES, RPN, slow_node=SLOW_NODE, slow_node_ms=60, jitter_ms=JITTER)
    return out


@pytest.fixture(scope="module")
def slow_link_job(base, tmp_path_factory):
    out = tmp_path_factory.mktemp("job_link")
    jobgen.generate(base, out, NODES, RPN, slow_link=SLOW_LINK, slow_link_ms=40, jitter_ms=JITTER)
    return out


def test_a_job_of_1024_ranks_on_128_nodes_reports_whole(slow_rank_job):
    r = json.loads(report(slow_rank_job, "--format", "json"))
    assert len(r["ranks"]) == NODES * RPN and r["job"]["ranks"] == NODES * RPN
    assert len(r["nodes"]) == NODES and r["job"]["nodes"] == NODES
    assert [x["rank"] for x in r["ranks"]] == list(range(NODES * RPN))
    assert all(x["node"] == x["rank"] // RPN for x in r["ranks"])
    assert r["steps"]["count"] == 20  # the job's optimizer steps, not a sum over 1,024 ranks
    # the injected straggler, found among 1,024 ranks and named with its node
    assert r["straggler"]["rank"] == SLOW_RANK and r["straggler"]["where"] == "step"
    assert r["diagnosis"]["primary"]["id"] == "straggler"
    assert "rank %d" % SLOW_RANK in r["diagnosis"]["primary"]["summary"]
    # clocks 0.25 s x node apart by the wall clock, aligned on the collectives
    last = r["nodes"][-1]
    assert abs(last["wall_clock_offset_s"] - 0.25 * (NODES - 1)) < 1e-6
    assert abs(last["clock_offset_s"]) < last["alignment_error_s"] + 0.01
    assert r["slow_node"] is None


def test_a_slow_node_is_named_as_a_node(slow_node_job):
    r = json.loads(report(slow_node_job, "--format", "json"))
    assert len(r["ranks"]) == NODES * RPN
    s = r["slow_node"]
    assert s["node"] == SLOW_NODE and s["host"] == "node%03d" % SLOW_NODE and s["ranks"] == RPN
    assert 50 < s["gap_ms"] < 70 and s["where"] == "step"
    # eight ranks waiting as little as each other: no one rank is the straggler
    assert r["straggler"] is None and r["slow_link"] is None
    p = r["diagnosis"]["primary"]
    assert p["id"] == "straggler" and p["title"] == "Slow node"
    assert "node %d (node%03d)" % (SLOW_NODE, SLOW_NODE) in p["summary"]
    text = report(slow_node_job)
    assert "slow node: node %d (node%03d)" % (SLOW_NODE, SLOW_NODE) in text


def test_a_slow_link_is_named_as_a_link(slow_link_job):
    r = json.loads(report(slow_link_job, "--format", "json"))
    s = r["slow_link"]
    assert s["node"] == SLOW_LINK and s["host"] == "node%03d" % SLOW_LINK and s["ratio"] > 1.5
    # every rank waits for the slow link alike: neither a straggler nor a slow node
    assert r["straggler"] is None and r["slow_node"] is None
    comm = [f for f in [r["diagnosis"]["primary"]] + r["diagnosis"]["secondary"]
            if f["id"] == "communication"]
    assert comm and any("slow link: node %d" % SLOW_LINK in e["text"]
                        for e in comm[0]["evidence"]), comm
    assert "slow link: node %d (node%03d)" % (SLOW_LINK, SLOW_LINK) in report(slow_link_job)


def test_noise_alone_names_no_straggler_node_or_link(base, tmp_path):
    jobgen.generate(base, tmp_path, 32, RPN, jitter_ms=JITTER)
    r = json.loads(report(tmp_path, "--format", "json"))
    assert len(r["ranks"]) == 32 * RPN
    assert r["straggler"] is None and r["slow_node"] is None and r["slow_link"] is None


def test_1024_ranks_read_as_a_distribution_and_the_worst(slow_rank_job):
    text = report(slow_rank_job)
    ranks = text.split("RANKS")[1].split("\n\n")[0]
    # not 1,024 rows: p50/p90/max over the ranks, then the worst ranks with their node
    assert len(ranks.splitlines()) < 40, ranks
    lines = ranks.splitlines()
    assert any(l.split()[:1] == ["p50"] for l in lines) and any(l.split()[:1] == ["max"] for l in lines)
    worst = [l for l in lines if l.split()[:2] == [str(SLOW_RANK), str(SLOW_RANK // RPN)]]
    assert worst and "straggler" in worst[0], ranks
    assert "--all-ranks" in ranks
    nodes = text.split("NODES")[1]
    assert len(nodes.splitlines()) < 40
    # every rank on request
    full = report(slow_rank_job, "--all-ranks").split("RANKS")[1].split("\n\n")[0]
    assert len(full.splitlines()) > NODES * RPN
    md = report(slow_rank_job, "--format", "md")
    assert "## Ranks" in md and md.count("\n|") < 200
    html = report(slow_rank_job, "--format", "html")
    # the heatmap: one row per node (its ranks' mean), the slow one stands out
    assert "heatmap of step time" in html and html.count("<rect") < 128 * 260


def test_the_same_node_twice_is_refused_in_one_line(slow_rank_job):
    d = slow_rank_job / "node000"
    p = subprocess.run([str(BUILD / "trainperf"), "report", str(d), str(slow_rank_job / "node001"),
                        str(d)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "given twice" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def _rank_traces(dst, n, extra_pids=0):
    """n copies of a real Kineto trace (HTA's test data), each told its rank."""
    src = json.load(gzip.open(TRACES / "trace_filter_sampled_rank-0.json.gz"))
    # its process names and first 300 events: 256 of them stay cheap to merge
    evs = src["traceEvents"]
    src["traceEvents"] = [e for e in evs if e.get("ph") == "M"] + \
        [e for e in evs if e.get("ph") != "M"][:300]
    paths = []
    for k in range(n):
        src["distributedInfo"]["rank"] = k
        src["distributedInfo"]["world_size"] = n
        if extra_pids and k == 0:
            ev = dict(next(e for e in src["traceEvents"] if e.get("ph") == "X"))
            src = dict(src, traceEvents=src["traceEvents"] + [
                dict(ev, pid=900000 + p) for p in range(extra_pids)])
        p = dst / ("rank-%d.json" % k)
        p.write_text(json.dumps(src))
        paths.append(p)
    return paths


def test_merge_of_256_rank_traces(tmp_path):
    """Streaming: every rank on its own process tracks, on one timeline."""
    paths = _rank_traces(tmp_path, 256)
    out = tmp_path / "merged.json"
    p = subprocess.run([str(BUILD / "trainperf"), "merge", *map(str, paths), "-o", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert "merged 256 traces" in p.stderr and "share" not in p.stderr
    names = {e["args"]["name"].split(":")[0] for e in json.load(open(out))["traceEvents"]
             if e.get("name") == "process_name"}
    assert names == {"rank %d" % k for k in range(256)}


def test_merge_says_what_it_could_not_keep_apart(tmp_path):
    # a trace of more than 64 processes: the ones past the 64th share a track, said in one line
    paths = _rank_traces(tmp_path, 2, extra_pids=70)
    p = subprocess.run([str(BUILD / "trainperf"), "merge", *map(str, paths), "-o",
                        str(tmp_path / "m.json")], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    warn = [l for l in p.stderr.splitlines() if "more than 64 processes" in l]
    assert len(warn) == 1 and "rank-0.json" in warn[0] and "share its track" in warn[0], p.stderr


def test_top_over_many_ranks_shows_the_slowest_and_says_so(base, tmp_path):
    # one node of 100 ranks (a run directory of many ranks): 64 rows, the rest said
    d, = jobgen.generate(base, tmp_path, 1, 100)
    p = subprocess.run([str(BUILD / "trainperf"), "top", d, "--once"], capture_output=True,
                       text=True, timeout=120, env={"NO_COLOR": "1"})
    assert p.returncode == 0, p.stderr
    rows = [l for l in p.stdout.splitlines() if re.match(r"\s*rank \d+ ", l)]
    assert len(rows) == 64
    assert "(100 ranks: the 64 slowest by p50 shown, 36 not;" in p.stdout
    nums = [int(l.split()[1]) for l in rows]
    assert nums == sorted(nums)


def test_limits_that_remain_are_said_with_the_number_dropped(base, tmp_path):
    d0, d1 = jobgen.generate(base, tmp_path, 2, 8)
    # 70 kinds of collective (past the 64 the table holds) on one rank
    with open(d1 + "/comm/ops-rank8.csv") as f:
        head, row = f.readline(), f.readline().split(",")
    with open(d1 + "/comm/ops-rank8.csv", "a") as f:
        for k in range(70):
            f.write(",".join(row[:3] + ["custom_op_%d" % k] + row[4:]))
    # 250 alert events (past the 200 listed)
    with open(d0 + "/alerts.jsonl", "w") as f:
        for k in range(250):
            f.write(json.dumps({"t": k, "rule": "r%d" % k, "expr": "x > 1", "state": "fired",
                                "severity": "warning", "value": 2, "message": "m"}) + "\n")
    text = report(tmp_path)
    assert "RANKS  16 ranks on 2 nodes" in text
    kinds = {"all_reduce"} | {"custom_op_%d" % k for k in range(70)}
    # 64 kinds listed; the other 7 kinds' rows (one each) counted, not silently gone
    assert "(7 collectives of kinds past the first 64 not in this table)" in text
    assert sum(1 for k in kinds if "  %s " % k in text.split("COMMUNICATION")[1]) == 64
    assert "(50 more alert events not listed: at most 200 are)" in text
    assert "(250 fired)" in text


def test_a_jobs_gpus_are_all_kept_and_the_sections_list_16(base, tmp_path):
    dirs = jobgen.generate(base, tmp_path, 3, 8)
    for n, d in enumerate(dirs):  # 8 GPUs a node, as run.json lists a GPU node's
        rj = json.load(open(d + "/run.json"))
        rj["gpus"] = [{"index": g, "name": "GPU-%d-%d" % (n, g), "mem_total_bytes": 8 << 30}
                      for g in range(8)]
        json.dump(rj, open(d + "/run.json", "w"))
    r = json.loads(report(tmp_path, "--format", "json"))
    assert sorted(g["name"] for g in r["gpus"]) == sorted(
        "GPU-%d-%d" % (n, g) for n in range(3) for g in range(8))
    gpu = report(tmp_path).split("\nGPU\n")[1].split("\n\n")[0]
    assert len(re.findall(r"^  GPU \d+ GPU-\d-\d \(node \d\)$", gpu, re.M)) == 16
    assert "(8 more GPUs not listed: --all-ranks lists them" in gpu
    every = report(tmp_path, "--all-ranks").split("\nGPU\n")[1].split("\n\n")[0]
    assert "GPU 7 GPU-2-7 (node 2)" in every and "more GPUs" not in every


def test_every_nodes_alerts_are_in_the_jobs_report(base, tmp_path):
    dirs = jobgen.generate(base, tmp_path, 3, 8, clock_skew_s=2.0)
    with open(dirs[2] + "/alerts.jsonl", "w") as f:
        f.write(json.dumps({"t": 9.0, "rule": "data_wait", "expr": "x > 1", "state": "fired",
                            "severity": "warning", "value": 2, "message": "loader slow"}) + "\n")
    r = json.loads(report(tmp_path, "--format", "json"))
    (a,) = r["alerts"]
    assert a["rule"] == "data_wait" and a["message"] == "node 2 (node002): loader slow"
    # on node 0's clock: the collectives took node 2's 4 s of wall-clock skew back out
    assert abs(a["t"] - (9.0 + r["nodes"][2]["clock_offset_s"])) < 1e-6
    assert abs(r["nodes"][2]["clock_offset_s"]) < 0.1
    text = report(tmp_path).split("\nALERTS")[1]
    assert "(1 fired)" in text and "node 2 (node002): loader slow" in text


def test_compare_of_many_ranks_shows_those_that_changed_most(base, tmp_path):
    (a,) = jobgen.generate(base, tmp_path / "a", 1, 100, jitter_ms=JITTER)
    (b,) = jobgen.generate(base, tmp_path / "b", 1, 100, jitter_ms=JITTER, slow_rank=42,
                           slow_ms=60)
    p = subprocess.run([str(BUILD / "trainperf"), "compare", a, b], capture_output=True,
                       text=True, timeout=120, env={"NO_COLOR": "1"})
    assert p.returncode == 0, p.stderr
    table = p.stdout.split("Ranks (A → B, per step)")[1].split("  A: ")[0]
    rows = [l.split()[0] for l in table.splitlines() if re.match(r"\s+\d+\s", l)]
    # the one rank whose compute changed (not only its wait) is among them
    assert len(rows) == 16 and "42" in rows and rows == sorted(rows, key=int)
    assert "(100 ranks: the 16 whose figures changed most shown; --format json has every rank)" \
        in table
    assert "for rank 42" in p.stdout
    j = json.loads(subprocess.run([str(BUILD / "trainperf"), "compare", a, b, "--format", "json"],
                                  capture_output=True, text=True, timeout=120).stdout)
    assert len(j["ranks"]) == 100 and j["straggler_b"] == 42 and j["straggler_a"] is None
