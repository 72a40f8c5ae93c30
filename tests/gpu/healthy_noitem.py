"""GPU-bound with no synchronisation in the loop: healthy_item.py without its
loss.item(); the host runs ahead until the launch queue is full, then each
host step lasts one GPU step. Truth: GPU busy >= 85%."""
import os
import runpy

os.environ["SCEN_NO_ITEM"] = "1"
runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "healthy_item.py"),
               run_name="__main__")
