# expect: primary=host-code
# must_not: compute-bound, unstable, input-bound, gil-contention
# says: Python code; step_particles
"""Policy-gradient training against a simulator written in pure Python (a
few dozen particles pushed by the action, forces summed in Python loops):
each episode alternates a sub-millisecond simulator step with a tiny policy
call, so the Python runs in short stretches between torch calls that give
the GIL up. A sampler that must win the GIL samples only at those calls and
reads the run as model compute; the verdict names the simulator. (40
particles: the simulator is ~32% of the loop, the rest mostly Python in
torch.distributions and the tiny policy; with 24 it was ~13% and the verdict
sat on the line between host-code and compute-bound.)"""
import math
import random

import torch
import torch.nn as nn

torch.manual_seed(0)
random.seed(0)
NP = 40


def step_particles(pos, vel, action):
    """One simulator tick: pairwise repulsion, a push from the action."""
    fx = [0.0] * NP
    fy = [0.0] * NP
    for i in range(NP):
        xi, yi = pos[i]
        for j in range(i + 1, NP):
            dx, dy = xi - pos[j][0], yi - pos[j][1]
            d2 = dx * dx + dy * dy + 1e-3
            f = 0.01 / d2
            fx[i] += f * dx
            fy[i] += f * dy
            fx[j] -= f * dx
            fy[j] -= f * dy
    ax, ay = ((0.0, 0.1), (0.1, 0.0), (0.0, -0.1), (-0.1, 0.0))[action]
    for i in range(NP):
        vel[i][0] = 0.9 * vel[i][0] + fx[i] + ax
        vel[i][1] = 0.9 * vel[i][1] + fy[i] + ay
        pos[i][0] = min(max(pos[i][0] + 0.05 * vel[i][0], -1.0), 1.0)
        pos[i][1] = min(max(pos[i][1] + 0.05 * vel[i][1], -1.0), 1.0)
    cx = sum(p[0] for p in pos) / NP
    cy = sum(p[1] for p in pos) / NP
    return -math.hypot(cx - 0.5, cy - 0.5)


def observe(pos):
    return [c for p in pos for c in p]


policy = nn.Sequential(nn.Linear(2 * NP, 64), nn.Tanh(), nn.Linear(64, 4))
opt = torch.optim.Adam(policy.parameters(), lr=3e-3)
for episode in range(80):
    pos = [[random.uniform(-1, 1), random.uniform(-1, 1)] for _ in range(NP)]
    vel = [[0.0, 0.0] for _ in range(NP)]
    logps, rewards = [], []
    for t in range(40):
        dist = torch.distributions.Categorical(logits=policy(torch.tensor(observe(pos))))
        a = dist.sample()
        logps.append(dist.log_prob(a))
        rewards.append(step_particles(pos, vel, int(a)))
    ret = torch.tensor([sum(rewards[k:]) for k in range(len(rewards))])
    loss = -(torch.stack(logps) * (ret - ret.mean()) / (ret.std() + 1e-6)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
