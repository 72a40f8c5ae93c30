# expect: primary=compute-bound|host-code
# must_not: tiny-ops, unstable, undetermined
# script: per_sample_loss.py
# env: LOSS=vector
"""per_sample_loss with the loss on whole tensors: 25 autograd ops a step.
(A model this small is mostly Python and dispatch either way: host-code is
as true as compute-bound.)"""
