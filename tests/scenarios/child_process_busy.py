# expect: primary=oversubscription
# must_not: unstable, input-bound, host-code
# says: started within the run
"""The script starts a helper process (here a stand-in for an evaluation or
conversion job) that keeps a core busy while the model trains with torch's
2 intra-op threads on 2 cores: the training threads wait for a CPU and the
steps become irregular (it read "Unstable step time, no cause measured")."""
import subprocess
import sys

import torch
import torch.nn as nn

helper = subprocess.Popen([sys.executable, "-c",
                           "import time\nt = time.time()\nwhile time.time() - t < 60: pass"])
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                      nn.Linear(256, 10))
opt = torch.optim.Adam(model.parameters())
X = torch.randn(8192, 256)
Y = torch.randint(0, 10, (8192,))
for step in range(250):
    i = (step * 256) % 8192
    loss = nn.functional.cross_entropy(model(X[i:i + 256]), Y[i:i + 256])
    opt.zero_grad()
    loss.backward()
    opt.step()
helper.kill()
helper.wait()
