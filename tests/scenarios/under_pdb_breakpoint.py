# expect: primary=python-tracer
# script: plain_loop_long.py
# python: -m pdb -c "b 21" -c continue
# says: debugger; pdb
"""Training started from the debugger with a breakpoint set (on the loop's
line for a non-finite loss, never reached): pdb traces every line of every
frame while a breakpoint exists."""
