# expect: primary=eval-often
# must: eval-often
# script: eval_often_contended.py
"""eval_often_contended without the load beside it: an evaluation every 5
steps over a validation set of 30 training batches, about half the loop."""
