# expect: primary=input-bound
# background: cpu_burn=4
# must: input-bound, cpu-contention
# must_not: host-code, unstable, memory-capacity, undetermined
# script: input_bound_workers2.py
"""Slow samples (waiting on storage/network) with two DataLoader workers, on
a machine where four other processes keep every core busy: the workers
sleep on the store, not in the run queue, so the data wait stays the
loader's own finding beside the contention (workers2_contended is the
opposite case)."""
