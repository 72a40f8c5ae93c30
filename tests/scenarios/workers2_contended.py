# expect: primary=cpu-contention
# background: cpu_burn=4
# must: cpu-contention
# must_not: input-bound, unstable, host-code, undetermined, memory-capacity, gc-pauses
# script: healthy_workers2.py
"""healthy_workers2 (two DataLoader workers, cheap batches) on a machine
where four other processes keep every core busy: the workers wait in the run
queue for a CPU, so the main process waits for batches. That data wait is
the contention's, not slow storage or heavy batches: no separate input-bound
finding (the workers' run-queue share is the contention's evidence)."""
