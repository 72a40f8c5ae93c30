# expect: primary=eval-grad
# must_not: unstable, input-bound, host-code, undetermined, gc-pauses
# says: torch.no_grad()
# script: eval_loop_plain.py
# env: EVAL_GRAD=1
"""eval_loop_plain without torch.no_grad() around its evaluation: model.eval()
alone leaves autograd on, every evaluation forward builds a graph (2.4x
slower evaluation forwards for an MLP on this CPU)."""
