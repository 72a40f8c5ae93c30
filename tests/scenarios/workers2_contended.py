# expect: primary=cpu-contention
# background: cpu_burn=4
# must: cpu-contention
# must_not: input-bound, unstable, host-code, undetermined, memory-capacity, gc-pauses
"""healthy_workers2 (two DataLoader workers, cheap batches) on a machine
where four other processes keep every core busy: the workers wait in the run
queue for a CPU, so the main process waits for batches. That data wait is
the contention's, not slow storage or heavy batches: no separate input-bound
finding (the workers' run-queue share is the contention's evidence)."""
import torch


class Cheap(torch.utils.data.Dataset):
    def __init__(self):
        self.x = torch.randn(4096, 256)
        self.y = torch.randint(0, 10, (4096,))

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)  # the workers have the other core
    dl = torch.utils.data.DataLoader(Cheap(), batch_size=64, shuffle=True, num_workers=2)
    model = torch.nn.Sequential(torch.nn.Linear(256, 768), torch.nn.ReLU(),
                                torch.nn.Linear(768, 768), torch.nn.ReLU(),
                                torch.nn.Linear(768, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for epoch in range(2):
        for x, y in dl:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
