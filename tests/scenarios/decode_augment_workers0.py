# expect: primary=input-bound
# must: input-bound
# must_not: host-code, unstable, memory-capacity, undetermined, compute-bound
"""An image Dataset that decodes a PNG with PIL and augments it (random
resized crop, flip, rotation, colour jitter in numpy) in __getitem__, loaded
with num_workers=0: decoding dominates the step of a small CNN."""
import io

import numpy as np
import torch
from PIL import Image

torch.set_num_threads(1)
rng = np.random.default_rng(0)
blobs = []
for _ in range(64):
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (256, 256, 3), dtype=np.uint8)).save(buf, format="PNG")
    blobs.append(buf.getvalue())


class Images(torch.utils.data.Dataset):
    def __len__(self):
        return 768

    def __getitem__(self, i):
        img = Image.open(io.BytesIO(blobs[i % len(blobs)])).convert("RGB")
        img = img.rotate(float(np.random.uniform(-15, 15)), resample=Image.BILINEAR)
        s = np.random.randint(160, 256)
        x0, y0 = np.random.randint(0, 256 - s + 1, 2)
        img = img.crop((x0, y0, x0 + s, y0 + s)).resize((64, 64), Image.BILINEAR)
        a = np.asarray(img, dtype=np.float32) / 255.0
        if np.random.rand() < 0.5:
            a = a[:, ::-1]
        a = np.clip(a * np.random.uniform(0.8, 1.2) + np.random.uniform(-0.1, 0.1), 0, 1)
        return torch.from_numpy(np.ascontiguousarray(a.transpose(2, 0, 1))), i % 10


dl = torch.utils.data.DataLoader(Images(), batch_size=32, shuffle=True, num_workers=0)
model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=2), torch.nn.ReLU(),
                            torch.nn.AdaptiveAvgPool2d(4), torch.nn.Flatten(), torch.nn.Linear(128, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for x, y in dl:
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
