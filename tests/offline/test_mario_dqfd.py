"""Mario's Double DQN recipe with DQfD-style pre-training (offline/mario_dqn.py, issue 29): the recipe's options are
checked, the large-margin loss is the one DQfD defines, and `offline.training.train` runs a DDQN recipe in the Mario
environment (.venv-mario) in two sittings (--stop-at, then --resume) to the same budget."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from cli.launcher import SIMULATOR_ENVIRONMENTS
from offline.mario_dqn import (
    Options,
    Progress,
    QNetwork,
    Rewards,
    demonstrations,
    dqfd_loss,
    noop_for,
    rewards_for,
    sparse_reward,
)
from offline.training import Recipe, train
from simulator_service.subject import SUBJECT_PATH_ENV, load_subjects


def test_recipe_options_are_checked_by_name() -> None:
    assert Options.from_hyperparams({"network": "small", "pretrain_updates": 10}).network == "small"
    with pytest.raises(ValueError, match="unknown DDQN option\\(s\\) nework"):
        Options.from_hyperparams({"nework": "small"})
    with pytest.raises(ValueError, match="hyperparams.demo_fraction must be in \\[0, 1\\]"):
        Options.from_hyperparams({"demo_fraction": 1.5})
    with pytest.raises(ValueError, match="hyperparams.network must be 'paper' or 'small'"):
        Options.from_hyperparams({"network": "huge"})
    assert [noop_for(e, 20) for e in (0, 1, 19)] == [0, 3, 60]  # the evaluation's starts cover 0..60


def test_stages_are_increasing_update_counts_before_the_last() -> None:
    options = Options.from_hyperparams({"pretrain_updates": 8000, "stages": [2000, 5000]})
    assert options.stages == (2000, 5000)
    for bad in ([8000], [0], [5000, 2000], [2000, 2000], [2.5], [True]):
        with pytest.raises(ValueError, match="hyperparams.stages"):
            Options.from_hyperparams({"pretrain_updates": 8000, "stages": bad})


def test_the_sparse_reward_pays_fifths_enemies_power_ups_and_lost_lives_as_the_paper_does() -> None:
    fifths = rewards_for(Options(reward="sparse"), "SuperMarioBros-1-1").fifths
    assert fifths == (632, 1264, 1897, 2529)  # 1-1's flag x, 3161, divided in five
    start = Progress(max_x=600, score=100, coins=3, status=0)

    def reward(**after: object) -> float:
        return sparse_reward(start, Progress(**{**start.__dict__, **after}), fifths)

    assert reward() == 0.0  # nothing happened
    assert reward(max_x=640) == 10.0  # the first fifth completed
    assert reward(max_x=1300) == 20.0  # two fifths in one step
    assert sparse_reward(Progress(max_x=1300), Progress(max_x=1300), fifths) == 0.0  # a fifth is paid once
    assert reward(score=200) == 1.0  # 100 points no coin or power-up explains: an enemy stomped
    assert reward(score=300, coins=4) == 0.0  # a coin's 200 points
    assert sparse_reward(Progress(600, 0, 99), Progress(600, 200, 0), fifths) == 0.0  # the counter wraps: one coin
    assert reward(score=150) == 0.0  # a brick's 50 points
    assert reward(score=1100, status=1) == 10.0  # a mushroom: a power-up, its 1,000 points no enemy
    assert reward(score=1200, status=1) == 11.0  # a power-up and an enemy in one step
    assert reward(life_lost=True) == -25.0
    assert reward(status=0, max_x=600) == 0.0 and reward(status=1) == 10.0  # growing is the power-up
    assert reward(max_x=640, life_lost=True) == -15.0  # the components add up
    near = Progress(max_x=2600, score=100)  # four fifths done: the flag completes the fifth, its points are no enemy
    assert sparse_reward(near, Progress(max_x=3161, score=5100, flag=True), fifths) == 10.0
    assert sparse_reward(start, Progress(max_x=3161, flag=True), fifths) == 50.0  # from before the first fifth's end


class _ScriptedMario:
    """Stands in for the Mario env (and its emulator): step t sets the progress `script[t]` gives, whatever the action;
    the subject's (dense) reward is 1 a step."""

    def __init__(self, script: list[dict[str, int]]) -> None:
        self.script, self.unwrapped, self._nes = script, self, self
        self.ram = np.zeros(0x800, dtype=np.uint8)

    def _set(self, x: int = 40, score: int = 0, coins: int = 0, status: int = 0, life: int = 0) -> None:
        self.max_x_pos, self._score, self._coins, self.life_lost = x, score, coins, bool(life)
        self.ram[0x0756], self.flag_get = status, False

    def reset(self, seed: int, options: dict) -> tuple[np.ndarray, dict]:
        self.t = 0
        self._set()
        return np.zeros((4, 84, 84), dtype=np.uint8), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self._set(**self.script[self.t])
        self.t += 1
        return np.zeros((4, 84, 84), dtype=np.uint8), 1.0, self.life_lost, False, {}


def test_the_demonstrations_rewards_are_relabelled_by_the_sparse_scheme() -> None:
    script = [
        {"x": 700},  # the first fifth (ends at 632): +10
        {"x": 700, "score": 100},  # an enemy: +1
        {"x": 1300, "score": 1100, "status": 1},  # the second fifth and a mushroom: +20
        {"x": 1300, "score": 1100, "status": 1, "life": 1},  # a lost life: -25
    ]
    reference = {"reference_actions": [0, 0, 0, 0], "initial": {}, "seed": 0, "boundary": [{"depth": 2}]}
    sparse = demonstrations(
        _ScriptedMario(script), reference, [0], 5, rewards_for(Options(reward="sparse"), "SuperMarioBros-1-1")
    )
    # τ_ref (4 steps, the last one dies), then the boundary prefix of depth 2 (its fifth and enemy paid in the
    # prefix, not again) and the other action held until Mario dies
    assert (sparse.reward[: len(sparse)] * 25).tolist() == [10.0, 1.0, 20.0, -25.0, 20.0, -25.0]
    assert sparse.expert[: len(sparse)].tolist() == [1, 1, 1, 0, 0, 0]
    dense = demonstrations(_ScriptedMario(script), reference, [0], 5, Rewards(False))
    assert (dense.reward[: len(dense)] * 25).tolist() == [1.0] * 6  # the subject's own reward, unchanged


def test_the_reward_options_are_checked() -> None:
    assert Options.from_hyperparams({}).reward == "dense"
    assert Options.from_hyperparams({"reward": "sparse", "fifths": [1, 2, 3, 4]}).fifths == (1, 2, 3, 4)
    assert rewards_for(Options(reward="sparse", fifths=(1, 2, 3, 4)), "SuperMarioBros-1-2").fifths == (1, 2, 3, 4)
    with pytest.raises(ValueError, match="no flag x known for the level, give hyperparams.fifths"):
        rewards_for(Options(reward="sparse"), "SuperMarioBros-1-2")
    assert rewards_for(Options(), "SuperMarioBros-1-2").sparse is False
    with pytest.raises(ValueError, match="hyperparams.reward must be 'dense' or 'sparse'"):
        Options.from_hyperparams({"reward": "shaped"})
    with pytest.raises(ValueError, match="hyperparams.fifths applies to reward: sparse only"):
        Options.from_hyperparams({"fifths": [1, 2, 3, 4]})
    for bad in ([1, 2, 3], [4, 3, 2, 1], [1, 1, 2, 3], [0, 1, 2, 3], [1.5, 2, 3, 4]):
        with pytest.raises(ValueError, match="hyperparams.fifths: 4 increasing"):
            Options.from_hyperparams({"reward": "sparse", "fifths": bad})


def test_the_large_margin_loss_vanishes_only_when_the_expert_action_leads_by_the_margin() -> None:
    torch.manual_seed(0)
    net = QNetwork(2, small=True)
    obs = torch.zeros((1, 4, 84, 84), dtype=torch.uint8)
    q = net(obs)[0].detach()
    expert = int(q.argmax())
    batch = (obs, torch.tensor([expert]), torch.zeros(1), obs, torch.ones(1), torch.ones(1))
    td_only = dqfd_loss(net, net, batch, Options(margin_weight=0.0)).item()
    with_margin = dqfd_loss(net, net, batch, Options(margin=0.8)).item()
    gap = float(q[expert] - q[1 - expert])
    assert with_margin == pytest.approx(td_only + max(0.0, 0.8 - gap), abs=1e-5)


def _mario_torch() -> bool:
    """The Mario environment with torch in it (offline/mario_dqn.py trains there; `make .venv-mario` leaves torch out:
    `.venv-mario/bin/pip install torch==2.13.0`)."""
    import subprocess

    python = SIMULATOR_ENVIRONMENTS["mario"].python
    if not python.exists():
        return False
    return subprocess.run([str(python), "-c", "import torch"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _mario_torch(), reason="needs .venv-mario with torch (make .venv-mario; pip install torch)")
def test_a_ddqn_recipe_trains_in_the_mario_environment_in_two_sittings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a 60-step copy of mario_1_1, so that sittings end at episode ends within the small budget
    subjects = tmp_path / "subjects"
    subjects.mkdir()
    text = Path(load_subjects()["mario_1_1"].source).read_text()
    short = text.replace("subject: mario_1_1\n", "subject: mario_1_1_60\n").replace(
        "max_steps: 1000\n", "max_steps: 60\n"
    )
    (subjects / "mario_1_1_60.yaml").write_text(short)
    monkeypatch.setenv(SUBJECT_PATH_ENV, str(subjects))  # the training process inherits it
    out = tmp_path / "model"
    out.mkdir()
    # a short reference (run right, jump at step 10) stands in for the DFS's: its boundary prefix has depth 10
    reference = {
        "format": "gauntlet.search_reference.v1", "subject": "mario_1_1", "initial": {"noop_frames": 0}, "seed": 0,
        "search_actions": [0, 1], "agent_actions": 2, "success": True,
        "reference_actions": [0] * 10 + [1, 1, 1] + [0] * 7, "boundary": [{"depth": 10, "state": [0, 0]}],
    }  # fmt: skip
    (out / "demonstrations.json").write_text(json.dumps(reference))
    params = {
        "network": "small", "demonstrations": {"noop_starts": [0, 30], "boundary_hold": 5}, "pretrain_updates": 20,
        "stages": [10], "eps_start": 0.1, "eps_min": 0.01, "memory": 1000, "eval_episodes": 1,
    }  # fmt: skip
    recipe = Recipe("mario-test-dqfd", "mario_1_1_60", "DDQN", 0, 160, 1, params)
    first = train(recipe, out, stop_at=60, checkpoint_every=50)
    assert first["finished"] is False and 60 <= first["num_timesteps"] < 160
    meta = train(recipe, out, resume=True)
    summary = json.loads((out / "summary.json").read_text())
    assert meta["timesteps"] == summary["train_steps"] == 160 and summary["sittings"] == 2
    assert summary["demonstration_transitions"] > summary["expert_transitions"] > 0  # boundary rows are no expert's
    assert meta["eval_flag_rate"] == summary["eval_flag_rate"] and summary["eval_repeat_identical"] == 1.0
    with gzip.open(out / "training_log.jsonl.gz", "rt") as fh:
        rows = [json.loads(line) for line in fh]
    assert rows[-1] == {"summary": summary} and len(rows) - 1 == summary["train_episodes"]
    assert torch.jit.load(str(out / "model.pt"))(torch.zeros((3, 4, 84, 84), dtype=torch.uint8)).shape == (3, 2)
    stage = json.loads((out / "stages" / "pretrain10" / "summary.json").read_text())  # an earlier agent, evaluated
    assert stage["pretrain_updates"] == 10 and stage["eval_episodes"] == 1 and 0.0 <= stage["demo_accuracy"] <= 1.0
    assert (out / "stages" / "pretrain10" / "model.pt").stat().st_size == stage["file_bytes"]
    with gzip.open(out / "stages" / "pretrain10" / "training_log.jsonl.gz", "rt") as fh:
        assert [json.loads(line) for line in fh] == [{"summary": stage}]
