# expect: primary=input-bound
# needs: pandas
# says: df.iloc; df.to_numpy()
"""A Dataset over a pandas DataFrame that takes one row per sample
(df.iloc[i]) in the training process: the wait for each batch is the
rows, named with the fix (convert the frame to an array once)."""
import numpy as np
import pandas as pd
import torch

rng = np.random.default_rng(0)
df = pd.DataFrame(rng.standard_normal((20000, 64)), columns=[f"f{i}" for i in range(64)])
df["label"] = rng.integers(0, 5, 20000)


class Rows(torch.utils.data.Dataset):
    def __len__(self):
        return len(df)

    def __getitem__(self, i):
        row = df.iloc[i]
        return torch.tensor(row.values[:-1], dtype=torch.float32), int(row["label"])


dl = torch.utils.data.DataLoader(Rows(), batch_size=64, shuffle=True)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 5))
opt = torch.optim.Adam(model.parameters())
for i, (x, y) in enumerate(dl):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if i == 150:
        break
