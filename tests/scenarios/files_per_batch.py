# expect: primary=input-bound
# must: input-bound
# must_not: host-code, unstable, memory-capacity, undetermined, compute-bound
"""A Dataset over a directory of per-sample files (one .npy and one .json
label each), opened and parsed in __getitem__, no workers: reading and
parsing the files is most of each step."""
import json
import os
import tempfile

import numpy as np
import torch

torch.set_num_threads(1)
root = tempfile.mkdtemp()
rng = np.random.default_rng(0)
for i in range(2000):
    np.save(os.path.join(root, "%05d.npy" % i), rng.standard_normal((16, 64)).astype(np.float32))
    with open(os.path.join(root, "%05d.json" % i), "w") as f:
        json.dump({"label": int(i % 10), "id": i, "tags": ["a"] * 20}, f)


class Files(torch.utils.data.Dataset):
    def __init__(self, root):
        self.names = sorted(n[:-4] for n in os.listdir(root) if n.endswith(".npy"))
        self.root = root

    def __len__(self):
        return len(self.names)

    def __getitem__(self, i):
        base = os.path.join(self.root, self.names[i])
        x = torch.from_numpy(np.load(base + ".npy")).mean(0)
        with open(base + ".json") as f:
            y = json.load(f)["label"]
        return x, y


dl = torch.utils.data.DataLoader(Files(root), batch_size=32, shuffle=True)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(2):
    for x, y in dl:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
