"""Double DQN for the Super Mario Bros. subjects, as "Search-Based Testing of Reinforcement Learning" (Section 7.3).

Runs inside .venv-mario (the Mario simulator's own environment, plus the CPU torch build): the env is the Mario
backend itself (subjects/mario/backend.py), in process, so training sees exactly the observations the
Mario simulator service serves. The network and hyper-parameters are the paper's: 3 conv + ReLU layers and 2 linear
layers on 4x84x84 grey frames, gamma 0.9, replay memory 30,000, batch 20, learn every 3 experiences, sync the target
network every 1,000, burn-in 100. What the paper does not give is ours (docs/subjects/mario.md): the PyTorch Mario
tutorial's conv widths (32/64/64) with a 256-wide hidden layer (so a model stays < 5 MB), Adam at 2.5e-4, smooth-L1
loss, and an epsilon that decays linearly from 1 to 0.1 over the first 60 % of the budget (steps or wall clock,
whichever is used up faster) (the paper's
per-step factor 0.9999995 needs millions of steps; our budget is tens of thousands).

The result is a TorchScript Q-network (model.pt, algorithm "DDQN", served by agent_service/qnetwork.py with the
observation space its manifest entry declares), summary.json and a gzipped per-episode training log. It is no recipe
of offline/recipes.yaml (those train in .venv); torch goes into .venv-mario by hand for it
(`.venv-mario/bin/pip install torch==2.13.0`, the CPU build). Usage::

    .venv-mario/bin/python -m offline.mario_dqn --subject mario_1_1 --out agent_service/zoo/mario-1-1-2moves-ddqn \\
        --steps 40000 --wall-seconds 1500 --seed 0 --eval-episodes 10
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from simulator_service.api import load_subjects, make_env

GAMMA = 0.9
MEMORY = 30_000
BATCH = 20
LEARN_EVERY = 3
SYNC_EVERY = 1_000
BURN_IN = 100
EPS_MIN = 0.1
HIDDEN = 256
LR = 2.5e-4


class QNetwork(nn.Module):
    """Q-values for a (B, 4, 84, 84) uint8 frame stack: 3 conv + ReLU layers, then 2 linear layers."""

    def __init__(self, n_actions: int) -> None:
        super().__init__()
        self.n_actions = n_actions
        self.body = nn.Sequential(
            nn.Conv2d(4, 32, 8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(3136, HIDDEN),
            nn.ReLU(),
            nn.Linear(HIDDEN, n_actions),
        )

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        return self.body(frames.float() / 255.0)


class Replay:
    """A ring of (obs, action, reward, next frame, done); the next stack is obs[1:] + the next frame."""

    def __init__(self, size: int) -> None:
        self.obs = np.zeros((size, 4, 84, 84), dtype=np.uint8)
        self.next_frame = np.zeros((size, 84, 84), dtype=np.uint8)
        self.action = np.zeros(size, dtype=np.int64)
        self.reward = np.zeros(size, dtype=np.float32)
        self.done = np.zeros(size, dtype=np.float32)
        self.size, self.count = size, 0

    def add(self, obs: np.ndarray, action: int, reward: float, next_obs: np.ndarray, done: bool) -> None:
        i = self.count % self.size
        self.obs[i], self.next_frame[i] = obs, next_obs[-1]
        self.action[i], self.reward[i], self.done[i] = action, reward, float(done)
        self.count += 1

    def sample(self, rng: np.random.Generator) -> tuple[torch.Tensor, ...]:
        idx = rng.integers(0, min(self.count, self.size), BATCH)
        obs = self.obs[idx]
        nxt = np.concatenate([obs[:, 1:], self.next_frame[idx][:, None]], axis=1)
        return (
            torch.from_numpy(obs),
            torch.from_numpy(self.action[idx]),
            torch.from_numpy(self.reward[idx]),
            torch.from_numpy(nxt),
            torch.from_numpy(self.done[idx]),
        )


def evaluate(env: Any, net: QNetwork, episodes: int) -> dict[str, float]:
    """Greedy episodes from noop_frames 0, 6, 12, ...: mean and max of the largest x position, flag and death rates."""
    xs, flags, deaths, returns = [], [], [], []
    with torch.no_grad():
        for e in range(episodes):
            obs, _ = env.reset(seed=e, options={"values": {"noop_frames": (6 * e) % 61}})
            done, total = False, 0.0
            while not done:
                action = int(net(torch.from_numpy(obs[None])).argmax(1).item())
                obs, r, terminated, truncated, _ = env.step(action)
                total += float(r)
                done = terminated or truncated
            mario = env.unwrapped
            xs.append(mario.max_x_pos)
            flags.append(float(mario.flag_get))
            deaths.append(float(mario.life_lost))
            returns.append(total)
    return {
        "eval_episodes": float(episodes),
        "eval_mean_max_x": float(np.mean(xs)),
        "eval_best_max_x": float(np.max(xs)),
        "eval_flag_rate": float(np.mean(flags)),
        "eval_death_rate": float(np.mean(deaths)),
        "eval_mean_return": float(np.mean(returns)),
    }


def train(subject_name: str, out: Path, steps: int, wall_seconds: float, seed: int, eval_episodes: int) -> dict:
    torch.manual_seed(seed)
    torch.set_num_threads(1)  # the CPU is shared: one core per trainer
    rng = np.random.default_rng(seed)
    subject = load_subjects()[subject_name]
    env = make_env(subject)
    n_actions = int(env.action_space.n)
    online, target = QNetwork(n_actions), QNetwork(n_actions)
    target.load_state_dict(online.state_dict())
    optimiser = torch.optim.Adam(online.parameters(), lr=LR)
    memory = Replay(MEMORY)
    out.mkdir(parents=True, exist_ok=True)
    log_rows: list[dict] = []
    start, step, episode = time.monotonic(), 0, 0
    stopped_by = "steps"
    while step < steps:
        if time.monotonic() - start > wall_seconds:
            stopped_by = "wall_seconds"
            break
        noop = int(rng.integers(0, 61))  # training covers the subject's input space
        obs, _ = env.reset(seed=episode, options={"values": {"noop_frames": noop}})
        done, total, length = False, 0.0, 0
        while not done and step < steps:
            # budget used so far: steps or wall clock, whichever binds first (the CPU is shared, speed varies)
            used = max(step / steps, (time.monotonic() - start) / wall_seconds)
            eps = max(EPS_MIN, 1.0 - (1.0 - EPS_MIN) * used / 0.6)
            if rng.random() < eps:
                action = int(rng.integers(n_actions))
            else:
                with torch.no_grad():
                    action = int(online(torch.from_numpy(obs[None])).argmax(1).item())
            next_obs, reward, terminated, truncated, _ = env.step(action)
            done = terminated or truncated
            memory.add(obs, action, reward / 25.0, next_obs, terminated)  # rewards scaled to ~[-1, 0.6]
            obs, total, length, step = next_obs, total + reward, length + 1, step + 1
            if step > BURN_IN and step % LEARN_EVERY == 0:
                o, a, r, n, d = memory.sample(rng)
                with torch.no_grad():  # double Q-learning: the online net picks, the target net values
                    best = online(n).argmax(1, keepdim=True)
                    y = r + GAMMA * (1.0 - d) * target(n).gather(1, best).squeeze(1)
                q = online(o).gather(1, a[:, None]).squeeze(1)
                loss = nn.functional.smooth_l1_loss(q, y)
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
            if step % SYNC_EVERY == 0:
                target.load_state_dict(online.state_dict())
        mario = env.unwrapped
        log_rows.append(
            {
                "episode": episode,
                "steps": length,
                "total_steps": step,
                "return": round(total, 3),
                "max_x_pos": int(mario.max_x_pos),
                "flag": bool(mario.flag_get),
                "life_lost": bool(mario.life_lost),
                "epsilon": round(eps, 4),
                "noop_frames": noop,
                "wall_seconds": round(time.monotonic() - start, 1),
            }
        )
        episode += 1
    wall = time.monotonic() - start
    online.eval()
    scripted = torch.jit.script(online)
    scripted.save(str(out / "model.pt"))
    quality = evaluate(env, online, eval_episodes)
    summary = {
        "subject": subject_name,
        "seed": seed,
        "train_steps": step,
        "train_episodes": episode,
        "train_wall_seconds": round(wall, 1),
        "stopped_by": stopped_by,
        "budget_steps": steps,
        "budget_wall_seconds": wall_seconds,
        **{k: round(v, 4) for k, v in quality.items()},
        "file_bytes": (out / "model.pt").stat().st_size,
    }
    with gzip.open(out / "training_log.jsonl.gz", "wt") as fh:
        for row in log_rows:
            fh.write(json.dumps(row) + "\n")
        fh.write(json.dumps({"summary": summary}) + "\n")
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--subject", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=40_000)
    parser.add_argument("--wall-seconds", type=float, default=1500.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-episodes", type=int, default=10)
    args = parser.parse_args()
    print(json.dumps(train(args.subject, args.out, args.steps, args.wall_seconds, args.seed, args.eval_episodes)))


if __name__ == "__main__":
    main()
