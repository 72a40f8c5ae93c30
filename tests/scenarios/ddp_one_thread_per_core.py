# expect: primary=communication|compute-bound
# launch: torchrun=2
# env: OMP_NUM_THREADS=1
# must_not: oversubscription, input-bound, host-code, undetermined, memory-capacity
# script: ddp_shared_cores.py
"""ddp_shared_cores.py with one thread per rank (torchrun's default): the two
ranks fit the two cores, so nothing is said of oversubscription."""
