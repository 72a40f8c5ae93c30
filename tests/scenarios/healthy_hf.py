# expect: primary=compute-bound
# needs: transformers
# must_not: unstable, input-bound, host-code, gc-pauses, memory-capacity, undetermined
"""HF Trainer on a tiny GPT-2 built from a config (no download), with an
evaluation pass during training."""
import os
import tempfile

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("WANDB_DISABLED", "true")
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randint(0, 512, (n, 32), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.x[i]}


if __name__ == "__main__":
    cfg = GPT2Config(vocab_size=512, n_positions=32, n_embd=64, n_layer=2, n_head=4)
    model = GPT2LMHeadModel(cfg)
    args = TrainingArguments(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=16,
                             per_device_eval_batch_size=16, max_steps=40, eval_strategy="steps",
                             eval_steps=20, logging_steps=10, save_strategy="no", report_to=[],
                             use_cpu=True, disable_tqdm=True)
    Trainer(model=model, args=args, train_dataset=Tokens(640), eval_dataset=Tokens(64)).train()
