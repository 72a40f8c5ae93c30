# expect: primary=compute-bound|undetermined|cpu-contention|oversubscription|input-bound
# must_not: unstable
# alerts_not: hang
"""Hogwild training: two processes train one shared model, then the parent,
which never trained, evaluates the test set under no_grad for ~25 s and
exits. Evaluation after the trainers finished is not a stall (issue 32
item 1b)."""
import time

import torch
import torch.multiprocessing as mp


def train(model, seed):
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    ds = torch.utils.data.TensorDataset(torch.randn(1536, 64), torch.randint(0, 10, (1536,)))
    dl = torch.utils.data.DataLoader(ds, batch_size=32, shuffle=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in dl:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


def evaluate(model, seconds):
    model.eval()
    test = torch.randn(512, 64)
    correct = 0
    t0 = time.monotonic()
    with torch.no_grad():
        while time.monotonic() - t0 < seconds:
            for i in range(0, 512, 8):
                correct += int((model(test[i:i + 8]).argmax(1) == 0).sum())
    return correct


if __name__ == "__main__":
    mp.set_start_method("fork")
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    model.share_memory()
    procs = [mp.Process(target=train, args=(model, r)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    print("test:", evaluate(model, 25))
