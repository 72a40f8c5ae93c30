# expect: primary=compute-bound
# needs: transformers
# must_not: unstable, input-bound, host-code, gc-pauses, memory-capacity, undetermined
"""HF Trainer fine-tuning a tiny BERT classifier (built from a config) with
evaluation every 15 steps, a checkpoint every 30, logging every 5 steps and
a compute_metrics function."""
import os
import tempfile

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("WANDB_DISABLED", "true")
import numpy as np
import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments


class Pairs(torch.utils.data.Dataset):
    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randint(0, 1000, (n, 48), generator=g)
        self.y = torch.randint(0, 2, (n,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "attention_mask": torch.ones(48, dtype=torch.long),
                "labels": self.y[i]}


def metrics(p):
    return {"accuracy": float((np.argmax(p.predictions, -1) == p.label_ids).mean())}


if __name__ == "__main__":
    cfg = BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=128, max_position_embeddings=64, num_labels=2)
    args = TrainingArguments(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=16,
                             per_device_eval_batch_size=32, max_steps=60, eval_strategy="steps",
                             eval_steps=15, save_strategy="steps", save_steps=30, logging_steps=5,
                             report_to=[], use_cpu=True, disable_tqdm=True, learning_rate=5e-4)
    Trainer(model=BertForSequenceClassification(cfg), args=args, train_dataset=Pairs(960, 0),
            eval_dataset=Pairs(128, 1), compute_metrics=metrics).train()
