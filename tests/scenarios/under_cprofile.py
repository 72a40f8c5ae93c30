# expect: primary=python-tracer
# script: plain_loop_long.py
# python: -m cProfile -o /dev/null
# says: cProfile
"""A healthy loop run as `python -m cProfile -o out.prof train.py`: the
profiler sees every Python call, and every figure includes its cost."""
