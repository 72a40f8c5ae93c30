# expect: primary=compute-bound
# must_not: unstable, gc-pauses, host-code, input-bound, memory-capacity, undetermined
"""Fine-tuning a small CNN with its BatchNorm statistics frozen the common
way: model.eval() for the whole model, gradients on, only the head trained
(the backbone's parameters frozen)."""
import torch
import torch.nn as nn

torch.set_num_threads(1)
torch.manual_seed(0)
ds = torch.utils.data.TensorDataset(torch.randn(1024, 3, 32, 32), torch.randint(0, 10, (1024,)))
dl = torch.utils.data.DataLoader(ds, batch_size=32, shuffle=True)
model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                      nn.Conv2d(16, 32, 3, padding=1, stride=2), nn.BatchNorm2d(32), nn.ReLU(),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
for p in model[:-1].parameters():
    p.requires_grad = False
criterion = nn.CrossEntropyLoss()
opt = torch.optim.SGD(model[-1].parameters(), lr=0.05, momentum=0.9)
model.eval()  # keep the pretrained BatchNorm statistics
for epoch in range(2):
    for x, y in dl:
        loss = criterion(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
