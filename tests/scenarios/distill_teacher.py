# expect: primary=compute-bound
# must_not: unstable, gc-pauses, host-code, input-bound, memory-capacity, undetermined
"""Knowledge distillation: every training step runs a frozen teacher under
torch.no_grad (teacher.eval()) before the student's forward and backward.
The teacher's forward is training work, not an evaluation."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
ds = torch.utils.data.TensorDataset(torch.randn(4096, 256), torch.randint(0, 10, (4096,)))
dl = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True)
teacher = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                        nn.Linear(1024, 10)).eval()
student = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
opt = torch.optim.AdamW(student.parameters(), lr=1e-3)
T = 2.0
for epoch in range(2):
    for x, y in dl:
        with torch.no_grad():
            t_logits = teacher(x)
        s_logits = student(x)
        loss = 0.5 * F.cross_entropy(s_logits, y) + 0.5 * T * T * F.kl_div(
            F.log_softmax(s_logits / T, -1), F.softmax(t_logits / T, -1), reduction="batchmean")
        opt.zero_grad()
        loss.backward()
        opt.step()
