"""matmul_fp32.py under bf16 autocast."""
import os
import runpy

os.environ["SCEN_BF16"] = "1"
runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "matmul_fp32.py"),
               run_name="__main__")
