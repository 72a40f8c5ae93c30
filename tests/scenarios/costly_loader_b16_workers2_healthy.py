# expect: primary=compute-bound
# must_not: input-bound, host-code, unstable, undetermined
"""The healthy twin of costly_loader_b16_workers0: the same per-sample
decoding (4 ms a batch of 16) in 2 persistent workers, beside a model with
more work per step than the decoding: the workers keep ahead, and the
verdict is the model's."""
import time

import torch


class Decode(torch.utils.data.Dataset):
    def __len__(self):
        return 2048

    def __getitem__(self, i):
        t = time.perf_counter() + 0.00025
        while time.perf_counter() < t:
            pass
        return torch.randn(64), i % 10


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    dl = torch.utils.data.DataLoader(Decode(), batch_size=16, shuffle=True, num_workers=2,
                                     persistent_workers=True)
    model = torch.nn.Sequential(torch.nn.Linear(64, 2048), torch.nn.ReLU(),
                                torch.nn.Linear(2048, 2048), torch.nn.ReLU(),
                                torch.nn.Linear(2048, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in dl:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
