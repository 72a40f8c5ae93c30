# expect: primary=compute-bound
# must_not: host-code, unstable, undetermined
"""The healthy counterpart of rl_python_sim: the simulator is batched tensor
code (256 environments stepped at once with torch ops), so the episode is
model and environment compute on tensors, not Python. Compute-bound."""
import torch
import torch.nn as nn

torch.manual_seed(0)
NENV, OBS = 256, 32
policy = nn.Sequential(nn.Linear(OBS, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(),
                       nn.Linear(256, 4))
opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
W = torch.randn(4, OBS) * 0.1
for episode in range(60):
    state = torch.randn(NENV, OBS)
    logps, rewards = [], []
    for t in range(16):
        dist = torch.distributions.Categorical(logits=policy(state))
        a = dist.sample()
        logps.append(dist.log_prob(a))
        state = torch.tanh(state + W[a] + 0.01 * torch.randn_like(state))
        rewards.append(-(state ** 2).mean(dim=1))
    ret = torch.stack(rewards).flip(0).cumsum(0).flip(0)
    loss = -(torch.stack(logps) * (ret - ret.mean())).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
