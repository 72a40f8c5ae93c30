# expect: primary=compute-bound
# must_not: unstable, gc-pauses, host-code, input-bound, memory-capacity, undetermined
"""DCGAN-style loop: each iteration steps the discriminator's optimizer,
then the generator's (two optimizer.step calls of different cost)."""
import torch
import torch.nn as nn

torch.manual_seed(0)
Z = 64
real = torch.utils.data.TensorDataset(torch.randn(4096, 256))
dl = torch.utils.data.DataLoader(real, batch_size=64, shuffle=True, drop_last=True)
G = nn.Sequential(nn.Linear(Z, 256), nn.ReLU(), nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256))
D = nn.Sequential(nn.Linear(256, 256), nn.LeakyReLU(0.2), nn.Linear(256, 1))
optG = torch.optim.Adam(G.parameters(), lr=2e-4, betas=(0.5, 0.999))
optD = torch.optim.Adam(D.parameters(), lr=2e-4, betas=(0.5, 0.999))
bce = nn.BCEWithLogitsLoss()
ones, zeros = torch.ones(64, 1), torch.zeros(64, 1)
for epoch in range(2):
    for (x,) in dl:
        # discriminator
        fake = G(torch.randn(64, Z))
        lossD = bce(D(x), ones) + bce(D(fake.detach()), zeros)
        optD.zero_grad()
        lossD.backward()
        optD.step()
        # generator
        lossG = bce(D(fake), ones)
        optG.zero_grad()
        lossG.backward()
        optG.step()
