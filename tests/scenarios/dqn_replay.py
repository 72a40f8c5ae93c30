# expect: primary=host-code
# must_not: compute-bound, unstable, undetermined
# says: sample
"""DQN on a cart-pole simulated in Python: each environment step acts with
the Q-network under no_grad (in training mode), stores the transition, then
samples a replay batch in Python (random.sample over tuples, torch.tensor
of lists) for one small optimizer step. The replay sampling dominates; the
acting forward is training, not evaluation (it read 37% "eval" before)."""
import math, random, collections, torch, torch.nn as nn
random.seed(0); torch.manual_seed(0)
class CartPole:
    def reset(self):
        self.s = [random.uniform(-0.05, 0.05) for _ in range(4)]; return list(self.s)
    def step(self, a):
        x, xd, th, thd = self.s; f = 10.0 if a else -10.0
        ct, st = math.cos(th), math.sin(th)
        tmp = (f + 0.05 * thd * thd * st) / 1.1
        tha = (9.8 * st - ct * tmp) / (0.5 * (4.0 / 3.0 - 0.1 * ct * ct / 1.1))
        xa = tmp - 0.05 * tha * ct / 1.1
        self.s = [x + 0.02 * xd, xd + 0.02 * xa, th + 0.02 * thd, thd + 0.02 * tha]
        done = abs(self.s[0]) > 2.4 or abs(self.s[2]) > 0.21
        return list(self.s), 1.0, done
class Replay:
    def __init__(self): self.buf = collections.deque(maxlen=10000)
    def push(self, *t): self.buf.append(t)
    def sample(self, n):
        b = random.sample(self.buf, n)
        s, a, r, s2, d = zip(*b)
        return (torch.tensor(s), torch.tensor(a), torch.tensor(r), torch.tensor(s2), torch.tensor(d, dtype=torch.float32))
q = nn.Sequential(nn.Linear(4, 128), nn.ReLU(), nn.Linear(128, 2)); tq = nn.Sequential(nn.Linear(4, 128), nn.ReLU(), nn.Linear(128, 2))
opt = torch.optim.Adam(q.parameters(), lr=1e-3); env = CartPole(); rb = Replay(); s = env.reset(); eps = 1.0
for t in range(2500):
    if random.random() < eps: a = random.randrange(2)
    else:
        with torch.no_grad(): a = int(q(torch.tensor(s)).argmax())
    s2, r, d = env.step(a); rb.push(s, a, r, s2, d); s = env.reset() if d else s2
    eps = max(0.05, eps * 0.999)
    if len(rb.buf) >= 256:
        bs, ba, br, bs2, bd = rb.sample(256)
        with torch.no_grad(): tgt = br + 0.99 * (1 - bd) * tq(bs2).max(1).values
        loss = nn.functional.smooth_l1_loss(q(bs).gather(1, ba[:, None]).squeeze(1), tgt)
        opt.zero_grad(); loss.backward(); opt.step()
    if t % 500 == 0: tq.load_state_dict(q.state_dict())
