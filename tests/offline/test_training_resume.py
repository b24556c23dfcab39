"""Resumable training: a sitting stops at a checkpoint and the next one continues from it to the budget."""

from __future__ import annotations

import dataclasses
import gzip
import json
import pickle
from pathlib import Path

import pytest
import torch

from generator_service.surrogates.interaction_log import read_interaction_log
from offline.training import BUFFER_NAME, RESUME_DIR, STATE_NAME, Recipe, RecipeError, get_recipe, train


def _tiny_tqc() -> Recipe:
    recipe = get_recipe("parking-her-tqc")
    params = {
        **recipe.hyperparams,
        "buffer_size": 1000,
        "learning_starts": 100,
        "batch_size": 16,
        "policy_kwargs": {"net_arch": [16], "n_critics": 2},
    }
    return dataclasses.replace(recipe, hyperparams=params)


def _saved(path: Path) -> tuple[int, dict[str, torch.Tensor]]:
    from stable_baselines3.common.save_util import load_from_zip_file

    data, params, _ = load_from_zip_file(path, device="cpu")
    assert data is not None
    return int(data["num_timesteps"]), params["policy"]


def test_a_stopped_run_resumes_from_its_checkpoint_as_if_it_had_not_stopped(tmp_path: Path) -> None:
    recipe = _tiny_tqc()
    split, whole = tmp_path / "split", tmp_path / "whole"
    first = train(recipe, split, timesteps=400, stop_at=200)
    # one env: the sitting ends with the first episode that ends at or after step 200 (episodes: <= 100 steps)
    stopped = first["num_timesteps"]
    assert first["finished"] is False and 200 <= stopped < 300
    assert not (split / "model.zip").exists()  # an unfinished run is not a model yet
    state = json.loads((split / RESUME_DIR / STATE_NAME).read_text())
    assert state["num_timesteps"] == stopped and state["budget"] == 400 and state["exact"] is True
    assert _saved(split / RESUME_DIR / "model.zip")[0] == stopped
    rows_then = read_interaction_log(split / RESUME_DIR / "training_log.jsonl.gz")
    assert len(rows_then) == state["training_episodes"] >= 3 and rows_then[-1]["timestep"] == stopped

    meta = train(recipe, split, timesteps=400, resume=True)
    assert "finished" not in meta and meta["timesteps"] == 400 and meta["sittings"] == 2
    steps, weights = _saved(split / "model.zip")
    assert steps == _saved(split / RESUME_DIR / "model.zip")[0] == 400
    # the replay buffer came back: the final checkpoint's holds both sittings' transitions (a fresh one would not)
    with gzip.open(split / RESUME_DIR / BUFFER_NAME, "rb") as stream:
        assert pickle.load(stream).pos == 400
    state = json.loads((split / RESUME_DIR / STATE_NAME).read_text())
    first_sitting, second = state["sittings"]
    assert first_sitting["to_step"] == second["from_step"] == stopped and second["to_step"] == 400
    assert second["replay_buffer_restored"] is True
    assert state["train_cpu_seconds"] == pytest.approx(first_sitting["cpu_seconds"] + second["cpu_seconds"], abs=0.2)
    rows = read_interaction_log(split / "training_log.jsonl.gz")
    assert rows[: len(rows_then)] == rows_then and len(rows) == meta["training_episodes"] > len(rows_then)

    # and it is the same run: the same episodes and the same weights as one sitting of 400 steps
    alone = train(recipe, whole, timesteps=400)
    assert alone["training_episodes"] == meta["training_episodes"]
    assert read_interaction_log(whole / "training_log.jsonl.gz") == rows
    _, alone_weights = _saved(whole / "model.zip")
    assert all(torch.equal(weights[k], alone_weights[k]) for k in alone_weights)


def test_resume_refuses_a_missing_checkpoint_and_another_recipe(tmp_path: Path) -> None:
    recipe = _tiny_tqc()
    with pytest.raises(RecipeError, match="no checkpoint to resume"):
        train(recipe, tmp_path, timesteps=600, resume=True)
    train(recipe, tmp_path, timesteps=300, stop_at=110)
    with pytest.raises(RecipeError, match="another seed"):
        train(dataclasses.replace(recipe, seed=1), tmp_path, timesteps=300, resume=True)
    with pytest.raises(RecipeError, match="budget 100"):
        train(recipe, tmp_path, timesteps=100, resume=True)
