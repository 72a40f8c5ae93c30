# expect: primary=compute-bound
# must_not: input-bound, unstable, host-code, undetermined, memory-capacity, gc-pauses
"""A tiny CNN on 28x28 images, with an accuracy pass under torch.no_grad()
(no model.eval(): the grad-off forward marks it) after every epoch."""
import torch
from torch import nn

torch.manual_seed(0)
train = torch.utils.data.DataLoader(
    torch.utils.data.TensorDataset(torch.randn(1024, 1, 28, 28), torch.randint(0, 10, (1024,))),
    batch_size=64, shuffle=True)
val = torch.utils.data.DataLoader(
    torch.utils.data.TensorDataset(torch.randn(512, 1, 28, 28), torch.randint(0, 10, (512,))),
    batch_size=128)
model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Flatten(), nn.Linear(32 * 7 * 7, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for epoch in range(3):
    for x, y in train:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    correct = 0
    with torch.no_grad():
        for vx, vy in val:
            correct += (model(vx).argmax(1) == vy).sum().item()
    print("epoch", epoch, "accuracy", correct / len(val.dataset))
