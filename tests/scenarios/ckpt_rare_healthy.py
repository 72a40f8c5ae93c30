# expect: primary=compute-bound
# must_not: checkpoint-cost, storage-io, unstable, undetermined
# script: ckpt_conv_every8.py
# env: CKPT_EVERY=0
"""The healthy twin of ckpt_conv_every8: the same conv net saves its
state_dict once at the end, a negligible share of the run."""
