"""Figures and threshold alerts for the framework callbacks (Lightning, HF).

The callbacks own the step boundaries, so the step figures of a logging
interval (samples/s, step time, batch load time avg/p50/p95/p99) are computed
here from their timings; resources (CPU, iowait, memory, GPU) are the
collector's, read from the run directory's metrics.csv rows written since the
last interval (the collector is their one owner). Thresholds become alert
rules: evaluated on each interval's figures, written to RUN/alerts.jsonl
(appended whole lines, beside the collector's own) and handed back to the
callback to log and warn.
"""
import json
import math
import os
import time

import trainperf

__all__ = ["StepWindow", "MetricsTail", "Thresholds", "quantile"]

# Samples kept per interval: the window is cleared at every log, so this caps
# a very long interval (the quantiles then describe its last part).
_MAX_SAMPLES = 100000


def quantile(sorted_vals, q):
    """Linear-interpolated quantile of an already sorted list (None if empty)."""
    if not sorted_vals:
        return None
    pos = (len(sorted_vals) - 1) * q
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (pos - lo)


class StepWindow:
    """Step times, batch load times and samples of one logging interval."""

    def __init__(self):
        self.reset()

    def reset(self):
        self.step_s = []
        self.load_s = []
        self.samples = 0
        self.tokens = 0
        self.t0 = time.perf_counter()

    def add_step(self, seconds, samples=0, tokens=0):
        if len(self.step_s) < _MAX_SAMPLES:
            self.step_s.append(seconds)
        self.samples += samples
        self.tokens += tokens

    def add_load(self, seconds):
        if len(self.load_s) < _MAX_SAMPLES:
            self.load_s.append(seconds)

    def figures(self, prefix="trainperf/"):
        """{name: value} of the interval (names without units are rates)."""
        out = {}
        wall = time.perf_counter() - self.t0
        n = len(self.step_s)
        if n and wall > 0:
            out["steps_per_s"] = n / wall
            if self.samples:
                out["samples_per_s"] = self.samples / wall
            if self.tokens:
                out["tokens_per_s"] = self.tokens / wall
            st = sorted(self.step_s)
            out["step_time_ms"] = 1e3 * sum(st) / n
            out["step_time_p50_ms"] = 1e3 * quantile(st, 0.5)
            out["step_time_p95_ms"] = 1e3 * quantile(st, 0.95)
        if self.load_s:
            ld = sorted(self.load_s)
            out["batch_load_ms_avg"] = 1e3 * sum(ld) / len(ld)
            out["batch_load_ms_p50"] = 1e3 * quantile(ld, 0.5)
            out["batch_load_ms_p95"] = 1e3 * quantile(ld, 0.95)
            out["batch_load_ms_p99"] = 1e3 * quantile(ld, 0.99)
            tot = sum(self.step_s)
            if tot > 0:
                out["data_wait_share"] = min(1.0, sum(ld) / tot)
        return {prefix + k: v for k, v in out.items()}


def _num(s):
    if s is None or s == "":
        return None
    try:
        v = float(s)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


class MetricsTail:
    """The rows the collector appended to RUN/metrics.csv since the last read
    (read by offset: the file is never read twice)."""

    def __init__(self, run_dir):
        self.path = os.path.join(run_dir, "metrics.csv") if run_dir else None
        self.header = None
        self.off = 0
        self.last_t = None

    def read(self, max_bytes=1 << 20):
        if not self.path:
            return []
        try:
            with open(self.path, "rb") as f:
                f.seek(self.off)
                data = f.read(max_bytes)
        except OSError:
            return []
        end = data.rfind(b"\n")
        if end < 0:
            return []
        self.off += end + 1
        rows = []
        for line in data[:end].decode("utf-8", "replace").split("\n"):
            cells = line.split(",")
            if self.header is None:
                self.header = cells
                continue
            if len(cells) != len(self.header):
                continue
            rows.append(dict(zip(self.header, cells)))
        if rows:
            self.last_t = _num(rows[-1].get("t"))
        return rows

    @staticmethod
    def figures(rows, prefix="trainperf/"):
        """Means over rows of the resources people ask for, when known."""
        if not rows:
            return {}
        acc = {}

        def add(key, v):
            if v is not None:
                acc.setdefault(key, []).append(v)

        for r in rows:
            add("cpu_pct", _num(r.get("cpu_pct")))
            io = _num(r.get("cpu_iowait_pct"))
            add("io_wait", io / 100.0 if io is not None else None)
            used, total = _num(r.get("mem_used_bytes")), _num(r.get("mem_total_bytes"))
            if used is not None and total:
                add("host_memory_used", used / total)
            add("process_cpu_pct", _num(r.get("tree_cpu_pct")))
            add("process_rss_bytes", _num(r.get("tree_rss_bytes")))
            g = 0
            while ("gpu%d_util_pct" % g) in r:
                u = _num(r.get("gpu%d_util_pct" % g))
                add("gpu%d_util" % g, u / 100.0 if u is not None else None)
                mu, mt = _num(r.get("gpu%d_mem_used_bytes" % g)), \
                    _num(r.get("gpu%d_mem_total_bytes" % g))
                if mu is not None and mt:
                    add("gpu%d_memory_used" % g, mu / mt)
                g += 1
        return {prefix + k: sum(v) / len(v) for k, v in acc.items()}


# threshold name -> (figure it reads, "<" or ">", what the rule says)
THRESHOLDS = {
    "gpu_util_threshold": ("gpu*_util", "<", "GPU utilisation below %.0f%%"),
    "memory_threshold": ("*memory_used", ">", "memory used above %.0f%%"),
    "io_wait_threshold": ("io_wait", ">", "CPU iowait above %.0f%%"),
    "data_wait_threshold": ("data_wait_share", ">", "waiting for data above %.0f%% of step time"),
}


def _match(pattern, name):
    if "*" not in pattern:
        return name == pattern
    a, b = pattern.split("*", 1)
    return name.startswith(a) and name.endswith(b) and len(name) >= len(a) + len(b)


class Thresholds:
    """Alert rules from thresholds (fractions 0..1): each fires when an
    interval's figure crosses it and clears when it comes back. fire() events
    are also appended to RUN/alerts.jsonl, so `trainperf report` counts them."""

    def __init__(self, run_dir=None, **limits):
        self.limits = {}
        for k, v in limits.items():
            if v is None:
                continue
            if k not in THRESHOLDS:
                raise TypeError("unknown threshold %r (known: %s)" % (k, ", ".join(THRESHOLDS)))
            v = float(v)
            if not 0.0 <= v <= 1.0:
                raise ValueError("%s=%r: expected a fraction between 0 and 1" % (k, v))
            self.limits[k] = v
        self.run_dir = run_dir
        self.active = set()   # (threshold, figure) currently fired
        self.events = []      # every event, for callers and tests

    def rules(self):
        """The rules as text, e.g. 'memory_threshold: *memory_used > 0.9'."""
        return ["%s: %s %s %g" % (k, THRESHOLDS[k][0], THRESHOLDS[k][1], v)
                for k, v in sorted(self.limits.items())]

    def check(self, figures, t=None, prefix="trainperf/"):
        """Evaluate on one interval's figures; returns the new events."""
        new = []
        for k, lim in self.limits.items():
            pat, op, text = THRESHOLDS[k]
            for name, v in figures.items():
                short = name[len(prefix):] if name.startswith(prefix) else name
                if v is None or not _match(pat, short):
                    continue
                bad = v < lim if op == "<" else v > lim
                key = (k, short)
                if bad and key not in self.active:
                    self.active.add(key)
                    new.append(self._event(k, short, v, lim, text, True, t))
                elif not bad and key in self.active:
                    self.active.discard(key)
                    new.append(self._event(k, short, v, lim, text, False, t))
        return new

    def _event(self, k, fig, v, lim, text, fired, t):
        op = THRESHOLDS[k][1]
        msg = "%s: %s %.3g %s %.3g (%s)" % (k, fig, v, op, lim, text % (100 * lim))
        ev = {"t": t if t is not None else 0.0, "rule": k, "expr": "%s %s %g" % (fig, op, lim),
              "state": "fired" if fired else "cleared", "severity": "warning",
              "value": v, "message": msg if fired else "cleared: " + msg,
              "source": "callback"}
        self.events.append(ev)
        if fired:
            try:
                trainperf.mark("alert")
            except Exception:
                pass
        d = self.run_dir or trainperf.run_dir()
        if d:
            try:
                # one write of a whole line with O_APPEND, as the collector writes its own
                fd = os.open(os.path.join(d, "alerts.jsonl"), os.O_WRONLY | os.O_APPEND)
                try:
                    os.write(fd, (json.dumps(ev) + "\n").encode())
                finally:
                    os.close(fd)
            except OSError:
                pass
        return ev
