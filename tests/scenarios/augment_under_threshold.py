# expect: primary=compute-bound
# must: input-cost
# must_not: unstable, undetermined
# says: compute
"""Per-sample augmentation in __getitem__ (noise, a random crop and flip in
torch) with num_workers=0 under a model that does most of the work: the
data wait is 10-20% of the step, under the input-bound threshold. The
verdict stays compute-bound, and the wait is an "also found" that names the
__getitem__ line and the fix that fits it (issue 39 item 2)."""
import os

import torch

torch.manual_seed(0)
AUG = int(os.environ.get("AUG", "1"))  # augmentation passes per sample: sets the data share


class Augmented(torch.utils.data.Dataset):
    def __init__(self):
        self.x = torch.randn(2048, 3, 40, 40)
        self.y = torch.randint(0, 10, (2048,))

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        img = self.x[i]
        for _ in range(AUG):
            r, c = torch.randint(0, 9, (2,)).tolist()
            img = torch.nn.functional.pad(img[:, r:r + 32, c:c + 32], (4, 4, 4, 4))
            img = img.flip(2) if torch.rand(()) < 0.5 else img
            img = img + 0.01 * torch.randn_like(img)
        return img[:, 4:36, 4:36], self.y[i]


dl = torch.utils.data.DataLoader(Augmented(), batch_size=32, shuffle=True, num_workers=0)
model = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(),
                            torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.ReLU(),
                            torch.nn.AdaptiveAvgPool2d(4), torch.nn.Flatten(),
                            torch.nn.Linear(512, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(2):
    for x, y in dl:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
