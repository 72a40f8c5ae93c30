"""trainperf.benchmark(): measure a model on a loader from Python.

The in-code companion of `trainperf tune`: the same figures (throughput,
step-time quantiles, memory) for code that wants them as a dict, e.g. to
compare two settings inside a notebook. torch is imported on call.
"""
import math
import os
import time


def _quantile(sorted_vals, q):
    if not sorted_vals:
        return None
    k = (len(sorted_vals) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (k - lo)


def _rss_bytes():
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _peak_rss_bytes():
    try:
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    except (ImportError, OSError):
        return None


def _samples(batch, torch):
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    if isinstance(batch, dict):
        for v in batch.values():
            n = _samples(v, torch)
            if n:
                return n
        return 0
    if isinstance(batch, (list, tuple)) and batch:
        return _samples(batch[0], torch)
    return 0


def _to(batch, device, torch):
    if device is None:
        return batch
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: _to(v, device, torch) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to(v, device, torch) for v in batch)
    return batch


def benchmark(model, dataloader, steps=50, warmup=5, optimizer=None, loss_fn=None,
              device=None):
    """Time `steps` steps of model on batches of dataloader after `warmup`.

    Without optimizer and loss_fn the model runs forward only, under
    torch.no_grad() (inference throughput). With an optimizer, each step is
    forward, loss (loss_fn(output, batch), else output's mean when output is a
    tensor, else output["loss"] / output.loss), backward and optimizer step.
    The loader is restarted when it runs out. CUDA work is synchronised at
    each step boundary so the times are real.

    Returns a dict: steps, warmup, steps_per_s, samples_per_s (None when the
    batch size cannot be told), step_time_ms {mean, p50, p90, p95, p99, min,
    max}, data_wait_ms {mean, p50}, data_wait_share, rss_bytes, peak_rss_bytes
    (the process's high-water mark), cuda_max_allocated_bytes (None off CUDA),
    mode ("train" or "forward").
    Raises ValueError for steps < 1 or warmup < 0, and whatever the model
    raises.
    """
    import torch
    if int(steps) < 1 or int(warmup) < 0:
        raise ValueError("benchmark needs steps >= 1 and warmup >= 0")
    steps, warmup = int(steps), int(warmup)
    train = optimizer is not None
    cuda = device is not None and str(device).startswith("cuda") and torch.cuda.is_available()
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    def loss_of(out, batch):
        if loss_fn is not None:
            return loss_fn(out, batch)
        if isinstance(out, torch.Tensor):
            return out.float().mean()
        if isinstance(out, dict) and "loss" in out:
            return out["loss"]
        if hasattr(out, "loss"):
            return out.loss
        raise ValueError("benchmark: pass loss_fn (the model's output has no loss)")

    def call(batch):
        if isinstance(batch, dict):
            return model(**batch)
        if isinstance(batch, (list, tuple)):
            return model(batch[0])
        return model(batch)

    it = iter(dataloader)

    def next_batch():
        nonlocal it
        try:
            return next(it)
        except StopIteration:
            it = iter(dataloader)
            return next(it)

    was_training = model.training
    model.train(train)
    times, waits, samples = [], [], 0
    try:
        for i in range(warmup + steps):
            t0 = time.perf_counter()
            batch = _to(next_batch(), device, torch)
            t1 = time.perf_counter()
            if train:
                optimizer.zero_grad(set_to_none=True)
                loss = loss_of(call(batch), batch)
                loss.backward()
                optimizer.step()
            else:
                with torch.no_grad():
                    call(batch)
            sync()
            t2 = time.perf_counter()
            if i >= warmup:
                times.append(t2 - t0)
                waits.append(t1 - t0)
                samples += _samples(batch, torch)
    finally:
        model.train(was_training)
    total = sum(times)
    st = sorted(times)
    ms = [t * 1e3 for t in st]
    return {
        "mode": "train" if train else "forward",
        "steps": steps,
        "warmup": warmup,
        "steps_per_s": steps / total if total > 0 else None,
        "samples_per_s": (samples / total) if total > 0 and samples else None,
        "step_time_ms": {"mean": sum(ms) / len(ms), "p50": _quantile(ms, 0.5),
                         "p90": _quantile(ms, 0.9), "p95": _quantile(ms, 0.95),
                         "p99": _quantile(ms, 0.99), "min": ms[0], "max": ms[-1]},
        "data_wait_ms": {"mean": 1e3 * sum(waits) / len(waits),
                         "p50": _quantile(sorted(w * 1e3 for w in waits), 0.5)},
        "data_wait_share": (sum(waits) / total) if total > 0 else None,
        "rss_bytes": _rss_bytes(),
        "peak_rss_bytes": _peak_rss_bytes(),
        "cuda_max_allocated_bytes": torch.cuda.max_memory_allocated(device) if cuda else None,
    }
