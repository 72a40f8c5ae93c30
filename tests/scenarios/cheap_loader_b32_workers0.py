# expect: primary=input-bound
# must_not: host-code, unstable, undetermined
# says: BatchSampler; Not more DataLoader workers
# script: _cheap_loader.py
# env: BATCH=32, WORKERS=0
"""An in-memory TensorDataset, batch 32, no workers, a small model: making a
batch (32 __getitem__ calls and a stack) is a third of the step, but costs
less than a worker takes to hand a batch over, so more workers would make
it slower (issue 41: num_workers=1 made such a step 4.5x slower). The fix
is indexing once per batch."""
