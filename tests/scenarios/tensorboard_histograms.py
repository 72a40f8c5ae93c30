# expect: primary=step-spikes
# needs: tensorboard
# must_not: unstable, gc-pauses, input-bound, memory-capacity, undetermined
# script: tensorboard_logging.py
# env: HIST_EVERY=10
"""tensorboard_logging.py with weight histograms every 10 steps: each such
step takes several times a training step (the histograms are computed on
the training thread), a third of the run or more. The verdict names the
period: "A slow step every 10 steps", not unstable step time."""
