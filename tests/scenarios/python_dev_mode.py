# expect: primary=compute-bound
# script: plain_loop_long.py
# python: -X dev
# must: debug-settings
# must_not: python-tracer, host-code
"""A healthy loop run with `python -X dev` (Python's development mode: debug
hooks on the allocators, more warnings): ~1.1x slower, a minor finding
after the verdict."""
