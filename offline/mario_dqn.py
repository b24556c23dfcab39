"""Double DQN for the Super Mario Bros. subjects, as "Search-Based Testing of Reinforcement Learning" (Section 7.3).

Runs inside .venv-mario (the Mario simulator's own environment, plus the CPU torch build): the env is the Mario
backend itself (subjects/mario/backend.py), in process, so training sees exactly the observations the
Mario simulator service serves. The network and hyper-parameters are the paper's: 3 conv + ReLU layers and 2 linear
layers on 4x84x84 grey frames, gamma 0.9, replay memory 30,000, batch 20, learn every 3 experiences, sync the target
network every 1,000, burn-in 100. What the paper does not give is ours (docs/subjects/mario.md): the PyTorch Mario
tutorial's conv widths (32/64/64) with a 256-wide hidden layer (so a model stays < 5 MB), Adam at 2.5e-4, smooth-L1
loss, and an epsilon that decays linearly from 1 to 0.1 over the first 60 % of the budget (steps or wall clock,
whichever is used up faster) (the paper's per-step factor 0.9999995 needs millions of steps; our budget is tens of
thousands).

A recipe of offline/recipes.yaml (algorithm DDQN; `gauntlet train <name>` runs this module in .venv-mario) may add
what makes a flag-reaching agent affordable on 2 CPU cores, our documented deviation from the paper:

* ``demonstrations``: DQfD-style pre-training ("Deep Q-learning from Demonstrations", Hester et al., AAAI 2018):
  the search-based DFS's own reference trace (offline/mario_demos.py; found once, stored beside the model) replayed
  from several ``noop_frames`` starts (each replay is cut where Mario dies), plus from each boundary prefix the other
  action held until Mario dies (transitions that teach what is unsafe). ``pretrain_updates`` updates on them with a
  large-margin loss (``margin``, weight ``margin_weight``, on the replayed reference actions only) plus double-DQN TD
  and L2, then online training where a ``demo_fraction`` of every batch comes from them (with the margin loss).
* ``network: small``: the frame stack averaged 2x2 (42x42) before 3 narrower conv layers; the model still takes the
  subject's 4x84x84 uint8 stack, so the agent service and the manifest's observation shape stay the same.
* ``reward: sparse``: the paper's sparse scheme (Appendix B.1) instead of the subject's dense reward, for the
  demonstrations' transitions and every online step alike: +10 per completed fifth of the level, +1 per enemy defeated,
  +10 per power-up, -25 per lost life (``sparse_reward``; scaled by 1/25 as the dense reward is). The paper does not
  say where the fifths end: ``fifths`` gives the 4 x positions where the first four end (the fifth ends at the flag);
  by default the level's flag x (``FLAG_X``) divided in five. The emulator exposes no enemy counter: a defeated enemy
  is a step whose score gain the coins and power-ups do not explain (see ``sparse_reward``).

The result is a TorchScript Q-network (model.pt, algorithm "DDQN", served by agent_service/qnetwork.py with the
observation space its manifest entry declares), summary.json and a gzipped per-episode training log. A recipe's run
checkpoints into out/resume/ every ``--checkpoint-every`` online steps (at an episode's end) and when it stops
(``--stop-at`` or SIGINT/SIGTERM); ``--resume`` continues from there and gives the same run as not stopping. Usage::

    .venv-mario/bin/python -m offline.mario_dqn --recipe mario-1-1-2moves-dqfd --out runs/mario-1-1-2moves-dqfd
    .venv-mario/bin/python -m offline.mario_dqn --subject mario_1_1 --out runs/mario --steps 40000 --wall-seconds 1500
"""

from __future__ import annotations

import argparse
import gzip
import json
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
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
RECIPES = Path(__file__).parent / "recipes.yaml"
RESUME_DIR = "resume"
# Mario's x position when he touches the flagpole, per level: 3161 on 1-1 (τ_ref of offline/mario_demos.py, replayed
# from every demonstration start). The sparse reward's default fifths divide it in five.
FLAG_X = {"SuperMarioBros-1-1": 3161}
STATUS_RAM = 0x0756  # the player's status byte: 0 small, 1 tall, 2 fireball (gym-super-mario-bros's info "status")


@dataclass(frozen=True)
class Options:
    """A recipe's hyperparams (the defaults are the paper's plain Double DQN)."""

    network: str = "paper"  # "paper" or "small"
    memory: int = MEMORY
    eps_start: float = 1.0
    eps_min: float = EPS_MIN
    eps_fraction: float = 0.6  # of the budget over which epsilon decays
    lr: float = LR
    demonstrations: dict[str, Any] = field(default_factory=dict)  # {reference, noop_starts, boundary_hold}
    pretrain_updates: int = 0
    pretrain_batch: int = 32
    margin: float = 0.8
    margin_weight: float = 1.0
    l2: float = 1e-5
    demo_fraction: float = 0.25
    eval_episodes: int = 20
    # pre-training update counts at which an earlier stage of the agent is saved and evaluated (out/stages/pretrainN)
    stages: tuple[int, ...] = ()
    reward: str = "dense"  # "dense": the subject's; "sparse": the paper's sparse scheme (sparse_reward)
    fifths: tuple[int, ...] = ()  # sparse: x where the level's first 4 fifths end (default: FLAG_X divided in five)

    @staticmethod
    def from_hyperparams(params: dict[str, Any]) -> Options:
        known = set(Options.__dataclass_fields__)
        unknown = sorted(set(params) - known)
        if unknown:
            raise ValueError(
                f"hyperparams: unknown DDQN option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        options = Options(
            **{**params, "stages": tuple(params.get("stages") or ()), "fifths": tuple(params.get("fifths") or ())}
        )
        if options.network not in ("paper", "small"):
            raise ValueError(f"hyperparams.network must be 'paper' or 'small', got {options.network!r}")
        for name in ("eps_start", "eps_min", "eps_fraction", "demo_fraction"):
            if not 0.0 <= float(getattr(options, name)) <= 1.0:
                raise ValueError(f"hyperparams.{name} must be in [0, 1]")
        if options.memory < 1_000 or options.pretrain_updates < 0 or options.eval_episodes < 1:
            raise ValueError("hyperparams: memory >= 1000, pretrain_updates >= 0 and eval_episodes >= 1")
        stages = options.stages
        if len(stages) > 10 or any(type(n) is not int or not 0 < n < options.pretrain_updates for n in stages):
            raise ValueError("hyperparams.stages: at most 10 integers in (0, pretrain_updates)")
        if list(stages) != sorted(set(stages)):
            raise ValueError("hyperparams.stages must be increasing")
        if options.reward not in ("dense", "sparse"):
            raise ValueError(f"hyperparams.reward must be 'dense' or 'sparse', got {options.reward!r}")
        fifths = options.fifths
        if fifths and options.reward != "sparse":
            raise ValueError("hyperparams.fifths applies to reward: sparse only")
        if fifths and (
            len(fifths) != 4 or any(type(x) is not int or x <= 0 for x in fifths) or list(fifths) != sorted(set(fifths))
        ):
            raise ValueError("hyperparams.fifths: 4 increasing positive x positions (the fifth fifth ends at the flag)")
        return options


@dataclass(frozen=True)
class Progress:
    """What the sparse reward reads after a step: the episode's largest x, the emulator's score, coin counter (mod
    100) and player status (0 small, 1 tall, 2 fireball), whether Mario reached the flag or lost a life."""

    max_x: int
    score: int = 0
    coins: int = 0
    status: int = 0
    flag: bool = False
    life_lost: bool = False


def fifths_completed(progress: Progress, fifths: tuple[int, ...]) -> int:
    """How many fifths of the level the episode has completed: those whose end its largest x has reached; the flag
    completes the fifth (and any before it)."""
    return 5 if progress.flag else sum(progress.max_x >= end for end in fifths)


def sparse_reward(before: Progress, after: Progress, fifths: tuple[int, ...]) -> float:
    """The paper's sparse reward (Appendix B.1) of the step from `before` to `after`: +10 per fifth of the level
    completed in it, +1 per enemy defeated, +10 per power-up, -25 if Mario lost a life (the components add up).

    A power-up is a rise of the player status (small -> tall -> fireball). The emulator exposes no enemy counter, so
    an enemy counts as defeated in a step whose score gain, less 200 per coin and 1,000 per power-up, is at least 100
    (the least an enemy gives; bricks give 50): one per step at most; a star, or a power-up taken at full status,
    would count as an enemy; the flag's points are not one."""
    reward = 10.0 * (fifths_completed(after, fifths) - fifths_completed(before, fifths))
    powerups = max(after.status - before.status, 0)
    reward += 10.0 * powerups
    coins = (after.coins - before.coins) % 100
    unexplained = after.score - before.score - 200 * coins - 1000 * powerups
    if unexplained >= 100 and not after.flag:
        reward += 1.0
    if after.life_lost:
        reward -= 25.0
    return reward


def progress_of(mario: Any) -> Progress:
    """The Progress of a MarioEnv (subjects/mario/backend.py) as it stands, read from its emulator."""
    nes = mario._nes
    return Progress(
        int(mario.max_x_pos),
        int(nes._score),
        int(nes._coins),
        int(nes.ram[STATUS_RAM]),
        bool(mario.flag_get),
        bool(mario.life_lost),
    )


class Rewards:
    """The reward the trainer learns from, per step: the subject's (dense), or the sparse scheme computed from the
    emulator (`reset` at each episode's start, then called after every step of it)."""

    def __init__(self, sparse: bool, fifths: tuple[int, ...] = ()) -> None:
        self.sparse, self.fifths = sparse, fifths
        self.last: Progress | None = None

    def reset(self, env: Any) -> None:
        self.last = progress_of(env.unwrapped) if self.sparse else None

    def __call__(self, env: Any, reward: float) -> float:
        if not self.sparse:
            return float(reward)
        now = progress_of(env.unwrapped)
        assert self.last is not None, "Rewards.reset was not called at the episode's start"
        value = sparse_reward(self.last, now, self.fifths)
        self.last = now
        return value


def rewards_for(options: Options, env_id: str) -> Rewards:
    """The recipe's reward: dense, or sparse with its fifths (default: the level's flag x divided in five)."""
    if options.reward != "sparse":
        return Rewards(False)
    if options.fifths:
        return Rewards(True, options.fifths)
    if env_id not in FLAG_X:
        raise ValueError(f"reward: sparse on {env_id}: no flag x known for the level, give hyperparams.fifths")
    return Rewards(True, tuple(round(FLAG_X[env_id] * k / 5) for k in range(1, 5)))


class QNetwork(nn.Module):
    """Q-values for a (B, 4, 84, 84) uint8 frame stack: 3 conv + ReLU layers, then 2 linear layers ("small": the
    stack averaged 2x2 to 42x42 first, narrower layers)."""

    def __init__(self, n_actions: int, small: bool = False) -> None:
        super().__init__()
        self.n_actions = n_actions
        if small:
            self.body = nn.Sequential(
                nn.AvgPool2d(2),
                nn.Conv2d(4, 16, 4, stride=2),
                nn.ReLU(),
                nn.Conv2d(16, 32, 3, stride=2),
                nn.ReLU(),
                nn.Conv2d(32, 32, 3, stride=1),
                nn.ReLU(),
                nn.Flatten(),
                nn.Linear(1568, 128),
                nn.ReLU(),
                nn.Linear(128, n_actions),
            )
        else:
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
    """A ring of (obs, action, reward, next frame, done, expert); the next stack is obs[1:] + the next frame."""

    def __init__(self, size: int) -> None:
        self.obs = np.zeros((size, 4, 84, 84), dtype=np.uint8)
        self.next_frame = np.zeros((size, 84, 84), dtype=np.uint8)
        self.action = np.zeros(size, dtype=np.int64)
        self.reward = np.zeros(size, dtype=np.float32)
        self.done = np.zeros(size, dtype=np.float32)
        self.expert = np.zeros(size, dtype=np.float32)  # 1: a demonstrated action (the margin loss applies)
        self.size, self.count = size, 0

    def add(self, obs: np.ndarray, action: int, reward: float, next_obs: np.ndarray, done: bool, expert=False) -> None:
        i = self.count % self.size
        self.obs[i], self.next_frame[i] = obs, next_obs[-1]
        self.action[i], self.reward[i], self.done[i] = action, reward, float(done)
        self.expert[i] = float(expert)
        self.count += 1

    def __len__(self) -> int:
        return min(self.count, self.size)

    def sample(self, rng: np.random.Generator, n: int = BATCH) -> tuple[torch.Tensor, ...]:
        idx = rng.integers(0, len(self), n)
        obs = self.obs[idx]
        nxt = np.concatenate([obs[:, 1:], self.next_frame[idx][:, None]], axis=1)
        return (
            torch.from_numpy(obs),
            torch.from_numpy(self.action[idx]),
            torch.from_numpy(self.reward[idx]),
            torch.from_numpy(nxt),
            torch.from_numpy(self.done[idx]),
            torch.from_numpy(self.expert[idx]),
        )

    def state(self) -> dict[str, Any]:
        n = len(self)
        return {
            "obs": self.obs[:n], "next_frame": self.next_frame[:n], "action": self.action[:n],
            "reward": self.reward[:n], "done": self.done[:n], "expert": self.expert[:n],
            "count": np.array(self.count),
        }  # fmt: skip

    def load(self, state: Any) -> None:
        n = len(state["action"])
        for name in ("obs", "next_frame", "action", "reward", "done", "expert"):
            getattr(self, name)[:n] = state[name]
        self.count = int(state["count"])


def demonstrations(
    env: Any, reference: dict[str, Any], noop_starts: list[int], hold: int, rewards: Rewards | None = None
) -> Replay:
    """The DQfD demonstration transitions: τ_ref's actions replayed from each start in `noop_starts` (expert, cut
    where Mario dies: the dying step is kept as an ordinary transition), then from each boundary prefix (the declared
    start) the other 2-moves action held for up to `hold` steps (ordinary transitions: what leads to a lost life).
    Their rewards are `rewards`' (default the subject's), counted from the level start (a prefix's fifths are paid
    in the prefix, not again after it)."""
    rewards = rewards or Rewards(False)
    actions = [int(a) for a in reference["reference_actions"]]
    initial = dict(reference["initial"])
    rows: list[tuple[np.ndarray, int, float, np.ndarray, bool, bool]] = []
    for noop in noop_starts:
        obs, _ = env.reset(seed=int(reference["seed"]), options={"values": {**initial, "noop_frames": int(noop)}})
        rewards.reset(env)
        for a in actions:
            nxt, r, terminated, truncated, _ = env.step(a)
            r = rewards(env, r)
            rows.append((obs, a, r / 25.0, nxt, terminated, not terminated))
            obs = nxt
            if terminated or truncated:
                break
    for boundary in reference["boundary"]:
        depth = int(boundary["depth"])
        if depth >= len(actions):
            continue
        obs, _ = env.reset(seed=int(reference["seed"]), options={"values": initial})
        rewards.reset(env)
        for a in actions[:depth]:
            obs, r, *_ = env.step(a)
            rewards(env, r)
        other = 1 - actions[depth]
        for _ in range(hold):
            nxt, r, terminated, truncated, _ = env.step(other)
            r = rewards(env, r)
            rows.append((obs, other, r / 25.0, nxt, terminated, False))
            obs = nxt
            if terminated or truncated:
                break
    demo = Replay(max(len(rows), 1))
    for obs, a, r, nxt, done, expert in rows:
        demo.add(obs, a, r, nxt, done, expert)
    return demo


def dqfd_loss(online: QNetwork, target: QNetwork, batch: tuple[torch.Tensor, ...], options: Options) -> torch.Tensor:
    """Double-DQN TD (smooth L1) plus the large-margin loss on the batch's expert transitions."""
    o, a, r, n, d, expert = batch
    with torch.no_grad():  # double Q-learning: the online net picks, the target net values
        best = online(n).argmax(1, keepdim=True)
        y = r + GAMMA * (1.0 - d) * target(n).gather(1, best).squeeze(1)
    q_all = online(o)
    q = q_all.gather(1, a[:, None]).squeeze(1)
    loss = nn.functional.smooth_l1_loss(q, y)
    if expert.sum() > 0 and options.margin_weight > 0:
        margins = torch.full_like(q_all, options.margin)
        margins.scatter_(1, a[:, None], 0.0)
        large_margin = (q_all + margins).max(1).values - q
        loss = loss + options.margin_weight * (large_margin * expert).sum() / expert.sum()
    return loss


def noop_for(episode: int, episodes: int) -> int:
    """The evaluation's start for greedy episode `episode` of `episodes`: noop_frames spread evenly over 0..60."""
    return round(episode * 60 / max(episodes - 1, 1))


def run_greedy(
    env: Any, net: QNetwork, noop: int, rewards: Rewards | None = None
) -> tuple[int, bool, bool, float, list[int], float]:
    """One greedy episode: largest x, flag, lost life, the subject's return, the actions, and the return in
    `rewards` (the sparse scheme's when it is sparse; else the subject's again)."""
    rewards = rewards or Rewards(False)
    obs, _ = env.reset(seed=0, options={"values": {"noop_frames": noop}})
    rewards.reset(env)
    done, total, trained, taken = False, 0.0, 0.0, []
    with torch.no_grad():
        while not done:
            action = int(net(torch.from_numpy(obs[None])).argmax(1).item())
            taken.append(action)
            obs, r, terminated, truncated, _ = env.step(action)
            total += float(r)
            trained += rewards(env, r)
            done = terminated or truncated
    mario = env.unwrapped
    return int(mario.max_x_pos), bool(mario.flag_get), bool(mario.life_lost), total, taken, trained


def evaluate(
    env: Any, net: QNetwork, episodes: int, spread: bool = False, rewards: Rewards | None = None
) -> dict[str, float]:
    """Greedy episodes: mean and max of the largest x position, flag and death rates, the mean return in the
    subject's reward (comparable across agents) and, with a sparse `rewards`, in the sparse scheme too
    (`eval_mean_sparse_return`). The emulator is deterministic from a start, so the starts differ: noop_frames
    spread evenly over 0..60 (`spread`, the recipes'), else the original 6e mod 61. `eval_repeat_identical` says
    whether the first start run again gave the same actions."""
    xs, flags, deaths, returns, sparse_returns = [], [], [], [], []
    first: list[int] = []
    for e in range(episodes):
        noop = noop_for(e, episodes) if spread else (6 * e) % 61
        x, flag, death, total, taken, trained = run_greedy(env, net, noop, rewards)
        first = first or taken
        xs.append(x)
        flags.append(float(flag))
        deaths.append(float(death))
        returns.append(total)
        sparse_returns.append(trained)
    again = run_greedy(env, net, noop_for(0, episodes) if spread else 0)[4]
    quality = {
        "eval_episodes": float(episodes),
        "eval_mean_max_x": float(np.mean(xs)),
        "eval_best_max_x": float(np.max(xs)),
        "eval_flag_rate": float(np.mean(flags)),
        "eval_death_rate": float(np.mean(deaths)),
        "eval_mean_return": float(np.mean(returns)),
        "eval_repeat_identical": float(again == first),
    }
    if rewards is not None and rewards.sparse:
        quality["eval_mean_sparse_return"] = float(np.mean(sparse_returns))
    return quality


def demo_accuracy(net: QNetwork, demo: Replay) -> float:
    """How well the network fits the demonstrations: the share of expert transitions whose greedy action is the
    demonstrated one."""
    with torch.no_grad():
        n = len(demo)
        greedy = net(torch.from_numpy(demo.obs[:n])).argmax(1).numpy()
        expert = demo.expert[:n] > 0
        return round(float((greedy[expert] == demo.action[:n][expert]).mean()), 4)


def save_stage(
    env: Any,
    net: QNetwork,
    demo: Replay,
    options: Options,
    folder: Path,
    facts: dict[str, Any],
    rewards: Rewards | None = None,
) -> None:
    """An earlier stage of a run (the paper's agents after fewer training episodes): folder/model.pt and its
    summary.json, evaluated as the finished model is, so safety and performance can be compared across stages."""
    folder.mkdir(parents=True, exist_ok=True)
    net.eval()
    torch.jit.script(net).save(str(folder / "model.pt"))
    started = time.process_time()
    quality = evaluate(env, net, options.eval_episodes, spread=True, rewards=rewards)
    summary = {
        **facts,
        "train_steps": 0,
        "train_episodes": 0,
        "train_wall_seconds": 0.0,
        **{k: round(v, 4) for k, v in quality.items()},
        "eval_cpu_seconds": round(time.process_time() - started, 1),
        "demo_accuracy": demo_accuracy(net, demo),
        "network": options.network,
        "reward": options.reward,
        "file_bytes": (folder / "model.pt").stat().st_size,
    }
    (folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    with gzip.open(folder / "training_log.jsonl.gz", "wt") as fh:  # no online episode yet: the summary alone
        fh.write(json.dumps({"summary": summary}) + "\n")
    net.train()


def read_recipe(name: str, path: Path = RECIPES) -> dict[str, Any]:
    """One DDQN recipe of a recipe file (read here: offline/training.py needs the suite's environment)."""
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict) or name not in data:
        raise SystemExit(f"unknown recipe {name!r} in {path}")
    recipe = data[name]
    if recipe.get("algorithm") != "DDQN":
        raise SystemExit(f"recipe {name!r} is not a DDQN recipe")
    return recipe


def reference_for(subject: str, options: Options, out: Path) -> dict[str, Any]:
    """The DFS's reference document the demonstrations come from: out/demonstrations.json, searched once."""
    path = out / "demonstrations.json"
    if not path.exists():
        from offline.mario_demos import search

        document = search(subject, int(options.demonstrations.get("max_samples", 20_000)))
        if not document["success"]:
            raise SystemExit(f"the DFS on {subject} found no flag within its budget: no demonstrations")
        path.write_text(json.dumps(document, indent=1))
    return json.loads(path.read_text())


class Interrupted:
    """SIGINT/SIGTERM ask the sitting to stop at the next episode's end (checkpointed)."""

    def __init__(self) -> None:
        self.set = False
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._handle)

    def _handle(self, *_: Any) -> None:
        self.set = True


def train(
    subject_name: str,
    out: Path,
    steps: int,
    wall_seconds: float,
    seed: int,
    eval_episodes: int,
    options: Options | None = None,
    resume: bool = False,
    stop_at: int | None = None,
    checkpoint_every: int | None = None,
) -> dict:
    options = options or Options(eval_episodes=eval_episodes)
    torch.manual_seed(seed)
    torch.set_num_threads(1)  # the CPU is shared: one core per trainer
    rng = np.random.default_rng(seed)
    subject = load_subjects()[subject_name]
    env: Any = make_env(subject)
    rewards = rewards_for(options, subject.env_id)
    n_actions = int(env.action_space.n)
    small = options.network == "small"
    online, target = QNetwork(n_actions, small), QNetwork(n_actions, small)
    target.load_state_dict(online.state_dict())
    optimiser = torch.optim.Adam(online.parameters(), lr=options.lr, weight_decay=options.l2 if small else 0.0)
    memory = Replay(options.memory)
    out.mkdir(parents=True, exist_ok=True)
    log_rows: list[dict] = []
    step, episode, spent, pretrain_seconds, sittings = 0, 0, 0.0, 0.0, 1
    demo: Replay | None = None
    if options.demonstrations:
        reference = reference_for(subject_name, options, out)
        demo = demonstrations(
            env,
            reference,
            [int(n) for n in options.demonstrations.get("noop_starts", [0])],
            int(options.demonstrations.get("boundary_hold", 20)),
            rewards,
        )
    resume_dir = out / RESUME_DIR
    if resume:
        if not (resume_dir / "state.pt").exists():
            raise SystemExit(f"no checkpoint to resume in {resume_dir} (train without --resume first)")
        saved = torch.load(resume_dir / "state.pt", weights_only=False)
        if saved["recipe"] != {"subject": subject_name, "seed": seed, "options": options.__dict__}:
            raise SystemExit(f"the checkpoint in {resume_dir} was trained with another subject, seed or options")
        online.load_state_dict(saved["online"])
        target.load_state_dict(saved["target"])
        optimiser.load_state_dict(saved["optimiser"])
        torch.set_rng_state(saved["torch_rng"])
        rng.bit_generator.state = saved["numpy_rng"]
        memory.load(np.load(resume_dir / "replay.npz"))
        step, episode, spent, pretrain_seconds = (
            saved["step"],
            saved["episode"],
            saved["spent"],
            saved["pretrain_seconds"],
        )
        sittings = saved["sittings"] + 1
        with gzip.open(resume_dir / "training_log.jsonl.gz", "rt") as fh:
            log_rows = [json.loads(line) for line in fh]
    elif demo is not None and options.pretrain_updates:
        started = time.process_time()  # CPU seconds: the wall clock on a shared CPU says little
        stage_cpu = 0.0  # the stages' evaluations, left out of the pre-training's CPU seconds
        for update in range(options.pretrain_updates):
            loss = dqfd_loss(online, target, demo.sample(rng, options.pretrain_batch), options)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            if (update + 1) % SYNC_EVERY == 0:
                target.load_state_dict(online.state_dict())
            if update + 1 in options.stages:  # greedy evaluation draws no random number: the run goes on unchanged
                mark = time.process_time()
                save_stage(
                    env, online, demo, options, out / "stages" / f"pretrain{update + 1}",
                    {"subject": subject_name, "seed": seed, "pretrain_updates": update + 1,
                     "pretrain_cpu_seconds": round(mark - started - stage_cpu, 1)},
                    rewards,
                )  # fmt: skip
                stage_cpu += time.process_time() - mark
        target.load_state_dict(online.state_dict())
        pretrain_seconds = time.process_time() - started - stage_cpu

    def save_checkpoint() -> None:
        partial = out / (RESUME_DIR + ".partial")
        partial.mkdir(exist_ok=True)
        state = {
            "recipe": {"subject": subject_name, "seed": seed, "options": options.__dict__},
            "online": online.state_dict(), "target": target.state_dict(), "optimiser": optimiser.state_dict(),
            "torch_rng": torch.get_rng_state(), "numpy_rng": rng.bit_generator.state,
            "step": step, "episode": episode, "spent": spent + (time.monotonic() - start),
            "pretrain_seconds": pretrain_seconds, "sittings": sittings,
        }  # fmt: skip
        torch.save(state, partial / "state.pt")
        np.savez_compressed(partial / "replay.npz", **memory.state())
        with gzip.open(partial / "training_log.jsonl.gz", "wt") as fh:
            fh.writelines(json.dumps(row) + "\n" for row in log_rows)
        old = out / (RESUME_DIR + ".old")
        if resume_dir.exists():
            resume_dir.rename(old)
        partial.rename(resume_dir)
        if old.exists():
            for f in old.iterdir():
                f.unlink()
            old.rmdir()

    interrupted = Interrupted()
    start = time.monotonic()
    last_saved = step
    every = checkpoint_every or max(min(steps // 10, 10_000), 1)
    stopped_by = "steps"
    demo_n = round(BATCH * options.demo_fraction) if demo is not None else 0
    while step < steps:
        if spent + time.monotonic() - start > wall_seconds:
            stopped_by = "wall_seconds"
            break
        if interrupted.set or (stop_at is not None and step >= stop_at):
            stopped_by = "stop_at"
            break
        if step - last_saved >= every:
            save_checkpoint()
            last_saved = step
        noop = int(rng.integers(0, 61))  # training covers the subject's input space
        obs, _ = env.reset(seed=episode, options={"values": {"noop_frames": noop}})
        rewards.reset(env)
        done, total, length = False, 0.0, 0
        while not done and step < steps:
            # budget used so far: steps or wall clock, whichever binds first (the CPU is shared, speed varies)
            used = max(step / steps, (spent + time.monotonic() - start) / wall_seconds)
            fraction = min(used / options.eps_fraction, 1.0) if options.eps_fraction else 1.0
            eps = max(options.eps_min, options.eps_start - (options.eps_start - options.eps_min) * fraction)
            if rng.random() < eps:
                action = int(rng.integers(n_actions))
            else:
                with torch.no_grad():
                    action = int(online(torch.from_numpy(obs[None])).argmax(1).item())
            next_obs, reward, terminated, truncated, _ = env.step(action)
            reward = rewards(env, reward)  # the subject's, or the sparse scheme's
            done = terminated or truncated
            memory.add(obs, action, reward / 25.0, next_obs, terminated)  # rewards scaled to ~[-1, 0.6]
            obs, total, length, step = next_obs, total + reward, length + 1, step + 1
            if step > BURN_IN and step % LEARN_EVERY == 0:
                batch = memory.sample(rng, BATCH - demo_n)
                if demo is not None and demo_n:  # DQfD keeps the demonstrations in every batch
                    batch = tuple(torch.cat(pair) for pair in zip(batch, demo.sample(rng, demo_n)))
                loss = dqfd_loss(online, target, batch, options)
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
                "wall_seconds": round(spent + time.monotonic() - start, 1),
            }
        )
        episode += 1
    wall = spent + time.monotonic() - start
    if stopped_by == "stop_at":
        save_checkpoint()
        return {"finished": False, "train_steps": step, "checkpoint": str(resume_dir)}
    online.eval()
    scripted = torch.jit.script(online)
    scripted.save(str(out / "model.pt"))
    eval_started = time.process_time()
    quality = evaluate(env, online, options.eval_episodes, spread=demo is not None, rewards=rewards)
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
        "eval_cpu_seconds": round(time.process_time() - eval_started, 1),
        "file_bytes": (out / "model.pt").stat().st_size,
    }
    if demo is not None:
        summary["demo_accuracy"] = demo_accuracy(online, demo)
        summary.update(
            demonstration_transitions=len(demo),
            expert_transitions=int(demo.expert[: len(demo)].sum()),
            pretrain_updates=options.pretrain_updates,
            pretrain_cpu_seconds=round(pretrain_seconds, 1),
            network=options.network,
            reward=options.reward,
            sittings=sittings,
        )
    if steps:
        save_checkpoint()  # a later --resume with a larger budget trains on from here
    with gzip.open(out / "training_log.jsonl.gz", "wt") as fh:
        for row in log_rows:
            fh.write(json.dumps(row) + "\n")
        fh.write(json.dumps({"summary": summary}) + "\n")
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", help="a DDQN recipe of --recipes (subject, seed, budget, options)")
    parser.add_argument("--recipes", type=Path, default=RECIPES)
    parser.add_argument("--recipe-json", help="the recipe itself (offline/training.py passes it this way)")
    parser.add_argument("--subject")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=40_000)
    parser.add_argument("--wall-seconds", type=float, default=1500.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--resume", action="store_true", help="continue from out/resume/")
    parser.add_argument("--stop-at", type=int, help="stop this sitting at this many online steps (checkpointed)")
    parser.add_argument("--checkpoint-every", type=int, help="online steps between checkpoints")
    args = parser.parse_args()
    if args.recipe or args.recipe_json:
        recipe = json.loads(args.recipe_json) if args.recipe_json else read_recipe(args.recipe, args.recipes)
        params = dict(recipe.get("hyperparams") or {})
        wall = float(params.pop("wall_seconds", 1e9))
        summary = train(
            recipe["subject"],
            args.out,
            int(recipe["timesteps"]),
            wall,
            int(recipe["seed"]),
            0,
            Options.from_hyperparams(params),
            args.resume,
            args.stop_at,
            args.checkpoint_every,
        )
    else:
        if not args.subject:
            parser.error("--subject or --recipe is required")
        summary = train(args.subject, args.out, args.steps, args.wall_seconds, args.seed, args.eval_episodes)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
