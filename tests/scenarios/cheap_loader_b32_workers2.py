# expect: primary=input-bound
# must_not: host-code, unstable, undetermined
# says: num_workers=0; BatchSampler
# script: _cheap_loader.py
# env: BATCH=32, WORKERS=2
"""The same in-memory TensorDataset with 2 workers: each batch costs less to
make than to send, so the training process waits for the transfers. The
fix is no workers (then indexing once per batch), not more."""
