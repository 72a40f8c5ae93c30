# expect: primary=compute-bound
# must_not: input-bound, host-code, unstable, undetermined
# script: _cheap_loader.py
# env: BATCH=128, WORKERS=0, WIDTH=4096, STEPS=400
"""The healthy twin: the same in-memory loader at batch 128 beside a model
with real work per sample; making the batch is a small share of the step."""
