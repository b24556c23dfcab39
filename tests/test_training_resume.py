"""Resumable training: a sitting stops at a checkpoint and the next one continues from it to the budget."""

from __future__ import annotations

import dataclasses
import gzip
import json
import pickle
from pathlib import Path

import pytest

from common.interaction_log import read_interaction_log
from offline.training import BUFFER_NAME, RESUME_DIR, STATE_NAME, RecipeError, get_recipe, train


def _tiny_tqc() -> object:
    recipe = get_recipe("parking-her-tqc")
    params = {
        **recipe.hyperparams,
        "buffer_size": 1000,
        "learning_starts": 100,
        "batch_size": 16,
        "policy_kwargs": {"net_arch": [16], "n_critics": 2},
    }
    return dataclasses.replace(recipe, hyperparams=params)


def _saved_steps(path: Path) -> int:
    from stable_baselines3.common.save_util import load_from_zip_file

    data, _, _ = load_from_zip_file(path, device="cpu")
    assert data is not None
    return int(data["num_timesteps"])


def test_a_stopped_run_resumes_from_its_checkpoint_to_the_budget(tmp_path: Path) -> None:
    recipe = _tiny_tqc()
    first = train(recipe, tmp_path, timesteps=600, stop_at=300)  # type: ignore[arg-type]
    assert first["finished"] is False and first["num_timesteps"] == 300
    assert not (tmp_path / "model.zip").exists()  # an unfinished run is not a model yet
    state = json.loads((tmp_path / RESUME_DIR / STATE_NAME).read_text())
    assert state["num_timesteps"] == 300 and state["budget"] == 600 and len(state["sittings"]) == 1
    assert _saved_steps(tmp_path / RESUME_DIR / "model.zip") == 300
    rows_then = read_interaction_log(tmp_path / RESUME_DIR / "training_log.jsonl.gz")
    assert len(rows_then) == state["training_episodes"] >= 2  # 100-step episodes at most
    assert (tmp_path / RESUME_DIR / BUFFER_NAME).stat().st_size > 0

    meta = train(recipe, tmp_path, timesteps=600, resume=True)  # type: ignore[arg-type]
    assert "finished" not in meta and meta["timesteps"] == 600 and meta["sittings"] == 2
    assert _saved_steps(tmp_path / "model.zip") == _saved_steps(tmp_path / RESUME_DIR / "model.zip") == 600
    # the replay buffer came back: the final checkpoint's holds both sittings' transitions (a fresh one only 300)
    with gzip.open(tmp_path / RESUME_DIR / BUFFER_NAME, "rb") as stream:
        assert pickle.load(stream).pos == 600
    state = json.loads((tmp_path / RESUME_DIR / STATE_NAME).read_text())
    first_sitting, second = state["sittings"]
    assert first_sitting["to_step"] == second["from_step"] == 300 and second["to_step"] == 600
    assert second["replay_buffer_restored"] is True
    assert state["train_cpu_seconds"] == pytest.approx(first_sitting["cpu_seconds"] + second["cpu_seconds"], abs=0.2)
    # the log goes on from the checkpoint: the first sitting's rows unchanged, numbering and timesteps continued
    rows = read_interaction_log(tmp_path / "training_log.jsonl.gz")
    assert rows[: len(rows_then)] == rows_then and len(rows) == meta["training_episodes"] > len(rows_then)
    assert [r["episode"] for r in rows] == list(range(1, len(rows) + 1))
    assert rows[len(rows_then)]["timestep"] > 300 and rows[-1]["timestep"] <= 600


def test_resume_refuses_a_missing_checkpoint_and_another_recipe(tmp_path: Path) -> None:
    recipe = _tiny_tqc()
    with pytest.raises(RecipeError, match="no checkpoint to resume"):
        train(recipe, tmp_path, timesteps=600, resume=True)  # type: ignore[arg-type]
    train(recipe, tmp_path, timesteps=400, stop_at=200)  # type: ignore[arg-type]
    other = dataclasses.replace(recipe, seed=1)  # type: ignore[type-var]
    with pytest.raises(RecipeError, match="another seed"):
        train(other, tmp_path, timesteps=400, resume=True)
