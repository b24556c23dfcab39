"""Mario's Double DQN recipe with DQfD-style pre-training (offline/mario_dqn.py, issue 29): the recipe's options are
checked, the large-margin loss is the one DQfD defines, and `offline.training.train` runs a DDQN recipe in the Mario
environment (.venv-mario) in two sittings (--stop-at, then --resume) to the same budget."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch

from cli.launcher import SIMULATOR_ENVIRONMENTS
from offline.mario_dqn import Options, QNetwork, dqfd_loss, noop_for
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
