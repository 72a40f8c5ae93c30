# expect: primary=compute-bound
# must_not: unused-gradients, unstable, host-code, undetermined
# script: linear_probe_unfrozen.py
# env: FREEZE=1
"""linear_probe_unfrozen with the backbone frozen (requires_grad_(False)):
backward stops at the head; healthy."""
