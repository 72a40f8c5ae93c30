# expect: primary=eval-often
# must_not: eval-grad
# says: Inference between training steps; step several environments together
"""A policy-gradient loop on a cart-pole written in Python: every update
puts the policy in eval mode and collects a 512-step rollout under no_grad,
one observation (one row) per forward; then it trains 32 minibatch steps
on it. The rollout is ~60% of the loop. It read "Evaluation takes much of
the run: evaluate less often", the wrong advice for data that training
needs: the fix is to step several environments per forward."""
import math
import random

import torch
import torch.nn as nn
random.seed(0); torch.manual_seed(0)
class Env:
    def reset(self): self.s = [random.uniform(-0.05, 0.05) for _ in range(4)]; self.t = 0; return self.s
    def step(self, a):
        x, v, th, w = self.s
        f = 10.0 if a == 1 else -10.0
        acc = (f + 0.05 * w * w * math.sin(th)) / 1.1
        tha = (9.8 * math.sin(th) - math.cos(th) * acc) / (0.5 * (4 / 3 - 0.1 * math.cos(th) ** 2 / 1.1))
        self.s = [x + 0.02 * v, v + 0.02 * acc, th + 0.02 * w, w + 0.02 * tha]; self.t += 1
        done = abs(self.s[2]) > 0.21 or abs(self.s[0]) > 2.4 or self.t >= 200
        return self.s, 1.0, done
pol = nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 2))
opt = torch.optim.Adam(pol.parameters(), 3e-3)
env = Env()
for update in range(40):
    pol.eval()                                  # rollouts: no dropout, no grad
    S, A, R = [], [], []
    s = env.reset()
    with torch.no_grad():
        for t in range(512):
            p = pol(torch.tensor(s)).softmax(-1)
            a = int(torch.multinomial(p, 1))
            s2, r, d = env.step(a)
            S.append(s); A.append(a); R.append(r)
            s = env.reset() if d else s2
    pol.train()
    St, At, Rt = torch.tensor(S), torch.tensor(A), torch.tensor(R)
    for epoch in range(4):
        for i in range(0, 512, 64):
            logp = pol(St[i:i+64]).log_softmax(-1).gather(1, At[i:i+64, None]).squeeze(1)
            loss = -(logp * (Rt[i:i+64] - Rt.mean())).mean()
            opt.zero_grad(); loss.backward(); opt.step()
