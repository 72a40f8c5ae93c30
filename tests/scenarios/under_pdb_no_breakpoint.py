# expect: primary=compute-bound
# script: plain_loop_long.py
# python: -m pdb -c continue
# must_not: python-tracer
"""Run from pdb with no breakpoint: after `continue` pdb removes its trace
function, and the run is as fast as without it."""
