"""bench_prom_flood — a scrape of /metrics while the endpoint is flooded.

`trainperf run --prometheus 127.0.0.1:0` watches the bundled trainer (paced
with --data-delay-ms so its step rate is steady). Phases, in one run:

  quiet  scrapes of an endpoint nobody else uses (the baseline)
  flood  the same scrapes with 1,000 idle connections (connected, silent) and
         100 slow-loris ones (half a request head, then one byte a second)
         held open the whole time; new idle connections keep arriving

Figures: each phase's scrape latency (median, max: connect to last byte) and
the trainer's step rate read from steps_total (the trainee must not notice the
flood). Target (issue 27): every flood scrape under 100 ms; the flood's median
is also shown as a ratio to the quiet one's.

    bench_prom_flood.py [--scrapes N] [--idle N] [--loris N]
"""
import argparse
import os
import re
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, os.environ.get("TRAINPERF_BUILD", "build"))
CLI = os.path.join(BUILD, "trainperf")
TRAINER = os.path.join(BUILD, "examples", "trainer")
TARGET_S = 0.100


def scrape(url):
    t0 = time.monotonic()
    with urllib.request.urlopen(url, timeout=30) as r:
        page = r.read().decode()
    return time.monotonic() - t0, page


def steps_total(page):
    m = re.search(r"^trainperf_steps_total\{[^}]*\} (\S+)", page, re.M)
    return float(m.group(1)) if m else None


def phase(url, n):
    lat, first, last = [], None, None
    t0 = time.monotonic()
    for _ in range(n):
        dt, page = scrape(url)
        lat.append(dt)
        s = steps_total(page)
        first = s if first is None else first
        last = s
        time.sleep(0.1)
    rate = (last - first) / (time.monotonic() - t0) if first is not None else float("nan")
    return lat, rate


def connect(host, port):
    s = socket.socket()
    s.setblocking(False)
    s.connect_ex((host, port))
    return s


def flood(host, port, idle, loris, stop):
    socks = [connect(host, port) for _ in range(idle + loris)]
    time.sleep(0.3)
    for s in socks[idle:]:
        try:
            s.send(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        except OSError:
            pass
    while not stop.is_set():
        # slow loris: one byte a second each; idle ones keep coming
        for s in socks[idle:]:
            try:
                s.send(b"a")
            except OSError:
                pass
        for i in range(0, idle, 10):
            socks[i].close()
            socks[i] = connect(host, port)
        stop.wait(1.0)
    for s in socks:
        s.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scrapes", type=int, default=40)
    ap.add_argument("--idle", type=int, default=1000)
    ap.add_argument("--loris", type=int, default=100)
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = a.idle + a.loris + 200
    if hard < need:
        print("bench_prom_flood: needs %d open files (limit %d)" % (need, hard))
        return 1
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, need), hard))
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "run")
        env = dict(os.environ)
        env.pop("TRAINPERF_RUN_DIR", None)
        p = subprocess.Popen([CLI, "run", "--quiet", "--interval", "0.2", "--no-tensorboard",
                              "--prometheus", "127.0.0.1:0", "--out", out, "--", TRAINER,
                              "--steps", "100000000", "--data-delay-ms", "2", "--quiet"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        try:
            urlf = os.path.join(out, "prometheus.url")
            for _ in range(300):
                if os.path.exists(urlf) and open(urlf).read().strip():
                    break
                time.sleep(0.1)
            url = open(urlf).read().strip()
            for _ in range(300):
                try:
                    if steps_total(scrape(url)[1]):
                        break
                except OSError:
                    pass
                time.sleep(0.1)
            host, port = url.split("//")[1].split("/")[0].split(":")
            quiet, quiet_rate = phase(url, a.scrapes)
            stop = threading.Event()
            th = threading.Thread(target=flood, args=(host, int(port), a.idle, a.loris, stop))
            th.start()
            time.sleep(2.0)  # the flood in place
            try:
                loud, loud_rate = phase(url, a.scrapes)
            finally:
                stop.set()
                th.join()
        finally:
            p.terminate()
            p.wait(60)
    qm, lm = statistics.median(quiet), statistics.median(loud)
    print("bench_prom_flood: %d scrapes each; quiet median %.2f ms max %.2f ms; "
          "flood (%d idle + %d slow-loris) median %.2f ms max %.2f ms (median ratio %.2f); "
          "trainer %.0f vs %.0f steps/s (ratio %.3f)"
          % (a.scrapes, qm * 1e3, max(quiet) * 1e3, a.idle, a.loris, lm * 1e3, max(loud) * 1e3,
             lm / qm, loud_rate, quiet_rate, loud_rate / quiet_rate))
    ok = max(loud) < TARGET_S
    print("bench_prom_flood: target every flood scrape < %.0f ms: %s"
          % (TARGET_S * 1e3, "met" if ok else "MISSED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
