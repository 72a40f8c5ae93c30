# expect: primary=compute-bound
# script: spawn_workers_epochs.py
# env: PERSISTENT=1
# must_not: unstable, input-bound, host-code, undetermined
"""spawn_workers_epochs.py with persistent_workers=True: the workers start
once, in the first step (warm-up), and serve every epoch. Healthy."""
