"""The CUDA allocator reader of the zero-code hook (python/trainperf/_cuda.py)
with the CUDA runtime stood in for (no GPU here): what it reads, that it
never starts CUDA itself, the bounded series, and the OOM observer writing
the allocator's snapshot."""
import os
import pickle
import sys
import types

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))


class FakeCuda:
    """torch.cuda as a process with CUDA up sees it: only what _cuda reads."""

    def __init__(self, initialized=True):
        self.initialized = initialized
        self.allocated = 100 << 20
        self.calls = 0
        self.observer = None

    def is_initialized(self):
        return self.initialized

    def current_device(self):
        return 0

    def get_device_properties(self, dev):
        return types.SimpleNamespace(name="Fake H200", total_memory=140 << 30)

    def memory_stats(self, dev):
        self.calls += 1
        self.allocated += 10 << 20
        return {"allocated_bytes.all.current": self.allocated,
                "reserved_bytes.all.current": self.allocated + (50 << 20),
                "allocated_bytes.all.peak": self.allocated,
                "reserved_bytes.all.peak": self.allocated + (50 << 20),
                "active_bytes.all.current": self.allocated,
                "inactive_split_bytes.all.current": 1 << 20,
                "num_alloc_retries": 2, "num_ooms": 0}


@pytest.fixture
def cuda(monkeypatch):
    fake = FakeCuda()
    torch = types.SimpleNamespace(cuda=fake)
    torch.cuda.memory = types.SimpleNamespace(_snapshot=lambda: {"segments": [{"size": 1}]})
    torch._C = types.SimpleNamespace(
        _cuda_attach_out_of_memory_observer=lambda f: setattr(fake, "observer", f))
    monkeypatch.setitem(sys.modules, "torch", torch)
    import importlib

    import trainperf._cuda as m
    importlib.reload(m)  # fresh state
    return fake, m


def test_reads_the_allocator_and_bounds_the_series(cuda):
    fake, m = cuda
    for _ in range(m.MAX_POINTS * 3):
        m.tick()
    s = m.snapshot()
    assert s["name"] == "Fake H200" and s["total_bytes"] == 140 << 30
    assert s["alloc_retries"] == 2 and s["ooms"] == 0
    assert len(s["series"]) < m.MAX_POINTS
    # halving keeps the first reading and time order; readings thin out
    assert s["series"][0][1] == (100 + 10) << 20
    ts = [r[0] for r in s["series"]]
    assert ts == sorted(ts)
    assert fake.calls < m.MAX_POINTS * 3
    assert s["peak_allocated_bytes"] == fake.allocated


def test_never_starts_cuda(monkeypatch):
    fake = FakeCuda(initialized=False)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=fake))
    import importlib

    import trainperf._cuda as m
    importlib.reload(m)
    m.tick()
    assert fake.calls == 0 and m.snapshot() is None


def test_oom_writes_the_snapshot(cuda, tmp_path, monkeypatch):
    fake, m = cuda
    monkeypatch.setenv("TRAINPERF_RUN_DIR", str(tmp_path))
    m.tick()
    assert fake.observer is not None
    for _ in range(m.MAX_OOM_SNAPSHOTS + 2):
        fake.observer(0, 1 << 40, 5 << 30, 1 << 30)
    s = m.snapshot()
    assert s["oom_events"] == m.MAX_OOM_SNAPSHOTS + 2
    assert s["oom_snapshots"] == m.MAX_OOM_SNAPSHOTS
    files = sorted(os.listdir(tmp_path / "memory"))
    assert len(files) == m.MAX_OOM_SNAPSHOTS
    with open(tmp_path / "memory" / files[0], "rb") as f:
        snap = pickle.load(f)
    assert snap["trainperf_oom"]["alloc_bytes"] == 1 << 40 and snap["segments"]
