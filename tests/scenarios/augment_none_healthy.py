# expect: primary=compute-bound
# must_not: input-cost, input-bound, unstable, undetermined
# script: augment_under_threshold.py
# env: AUG=0
"""augment_under_threshold.py without its augmentation: __getitem__ only
indexes two tensors, so the data wait is a few percent of the step and
nothing is said of it beside the compute-bound verdict."""
