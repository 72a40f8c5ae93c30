# expect: primary=host-code
# must_not: compute-bound, undetermined
# says: Printing tensors in the training loop; print_tensor_each_step.py:23
"""A debugging print left in: the loss and a slice of the logits printed as
tensors every step. torch formats a tensor element by element in Python
(torch/_tensor_str.py), 70% of this run's time; it had read "Compute-bound,
tensor ops outside the model 74%"."""
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10))
opt = torch.optim.SGD(model.parameters(), lr=1e-2)
for step in range(300):
    x = torch.randn(256, 128)
    y = torch.randint(0, 10, (256,))
    out = model(x)
    loss = nn.functional.cross_entropy(out, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    # the loss as a tensor and 64 rows of logits, every step
    print("step", step, "loss", loss, "logits", out[:64])
