"""Shared by the GPU check's scenarios (tests/gpu/, scripts/gpu-check.sh).

Each scenario is an ordinary training script with a known truth; it runs
under `trainperf run` as a user's would. GPU_STEPS / GPU_SECONDS bound it (a
scenario stops at whichever comes first) so the whole check fits a short
loan of a GPU machine. SCEN_TIMES=path: the script writes its own step times
there (host-timed, for the overhead comparison)."""
import json
import os
import time

import torch

# GPU_CHECK_DEVICE=cpu: a dry run of the check's plumbing on a machine with no GPU
DEV = torch.device(os.environ.get("GPU_CHECK_DEVICE", "cuda"))
MAX_STEPS = int(os.environ.get("GPU_STEPS", "400"))
MAX_S = float(os.environ.get("GPU_SECONDS", "6"))


class Clock:
    """Yields step numbers until MAX_STEPS or MAX_S; keeps step times."""

    def __init__(self, max_steps=None, max_s=None):
        self.max_steps = max_steps or MAX_STEPS
        self.max_s = max_s or MAX_S
        self.times = []

    def __iter__(self):
        t0 = time.perf_counter()
        last = t0
        for i in range(self.max_steps):
            yield i
            now = time.perf_counter()
            self.times.append(now - last)
            last = now
            if now - t0 > self.max_s:
                break
        if DEV.type == "cuda":
            torch.cuda.synchronize()
        out = os.environ.get("SCEN_TIMES")
        if out:
            with open(out, "w") as f:
                json.dump(self.times, f)


def mlp(width, depth, dtype=torch.float32):
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers).to(DEV, dtype)
