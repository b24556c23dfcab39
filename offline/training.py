"""Trains the zoo's agents on the same subject environments the simulator serves, logging every episode.

The per-episode log (common/interaction_log.py: test case, verdict under the subject's oracle, margin,
episode index, timestep) is Indago's interaction dataset: surrogates learn from it which inputs fail.
The bundled recipes live beside this module (offline/recipes.yaml); the models they produced are the bundled zoo
the agent service serves (agent_service/zoo/, with manifest.yaml). A user's recipe file has the same form, and
`register_model` lists a model it trained in the manifest of the user's own model root, which the agent service
serves with --model-root.
"""

from __future__ import annotations

import gzip
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import yaml

from common.interaction_log import LOG_NAME, InteractionLog
from offline.interaction_logger import InteractionLogger
from simulator_service.backends import check_first_observation, make_env
from simulator_service.subject import get_subject

RECIPES = Path(__file__).parent / "recipes.yaml"
MODEL_NAME = "model.zip"
IMAGE_ALGORITHMS = ("SEGMENTATION", "PIX2PIX")  # trained on image pairs by offline/image_training.py
MAX_MODEL_BYTES = 5 * 1024 * 1024  # a bundled model file stays under 5 MiB (the zoo ships in the repository)


class RecipeError(ValueError):
    """A recipe file or entry that cannot be used; the message names the file, the recipe and the field."""


@dataclass(frozen=True)
class Recipe:
    name: str
    subject: str
    algorithm: str
    seed: int
    timesteps: int
    n_envs: int
    hyperparams: dict[str, Any]
    description: str = ""


RECIPE_FIELDS = {"subject": str, "algorithm": str, "seed": int, "timesteps": int, "n_envs": int, "hyperparams": dict}


def load_recipes(path: Path = RECIPES) -> dict[str, Recipe]:
    """Every recipe of a recipe file (a mapping: name -> subject, algorithm, seed, timesteps, n_envs, hyperparams
    and an optional description); RecipeError names the first problem."""
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise RecipeError(f"recipe file {path} cannot be read ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        raise RecipeError(f"{path}: not valid YAML ({exc})") from None
    if not isinstance(data, dict) or not data:
        raise RecipeError(f"{path}: expected a mapping of recipe name -> recipe")
    recipes = {}
    for name, entry in data.items():
        if not isinstance(entry, dict):
            raise RecipeError(f"{path}: recipe {name!r} must be a mapping with {', '.join(RECIPE_FIELDS)}")
        missing = [f for f in RECIPE_FIELDS if f not in entry]
        unknown = sorted(set(entry) - set(RECIPE_FIELDS) - {"description"})
        if missing or unknown:
            problem = f"missing {', '.join(missing)}" if missing else f"unknown field(s) {', '.join(unknown)}"
            raise RecipeError(f"{path}: recipe {name!r}: {problem}; fields: {', '.join(RECIPE_FIELDS)}, description")
        for field, kind in RECIPE_FIELDS.items():
            value = entry[field]
            if not isinstance(value, kind) or isinstance(value, bool):
                raise RecipeError(f"{path}: recipe {name!r}: {field} must be a {kind.__name__}, got {value!r}")
        if entry["n_envs"] < 1 or entry["timesteps"] < 0:
            raise RecipeError(f"{path}: recipe {name!r}: n_envs must be >= 1 and timesteps >= 0")
        recipes[str(name)] = Recipe(name=str(name), **{**entry, "description": str(entry.get("description", ""))})
    return recipes


def get_recipe(name: str, path: Path = RECIPES) -> Recipe:
    recipes = load_recipes(path)
    if name not in recipes:
        raise KeyError(f"unknown recipe {name!r} in {path}; recipes: {', '.join(sorted(recipes))}")
    return recipes[name]


def register_model(model_root: Path, recipe: Recipe, meta: dict[str, Any]) -> Path:
    """Lists the model trained from `recipe` in `model_root`/manifest.yaml (added, or replaced under its name), so
    an agent service started with that model root serves it; returns the manifest's path. The file is replaced
    whole (written beside it, then renamed), so a reader never sees half of it."""
    manifest = model_root / "manifest.yaml"
    data = (yaml.safe_load(manifest.read_text()) or {}) if manifest.exists() else {}
    section = "translators" if recipe.algorithm == "PIX2PIX" else "models"  # the translator service's manifest
    models = data.setdefault(section, {}) or {}
    description = recipe.description or f"{recipe.algorithm} trained on {recipe.subject} from recipe {recipe.name}"
    models[recipe.name] = {"description": description, **meta}
    data[section] = models
    partial = manifest.with_name(manifest.name + ".partial")
    partial.write_text(yaml.safe_dump(data, sort_keys=False))
    partial.replace(manifest)
    return manifest


def save_for_serving(model: Any, path: Path) -> int:
    """Saves ``model`` at ``path`` without its optimizers' running moments; returns the file's size in bytes.

    Serving needs the networks only, and Adam's two moment tensors per weight make up about half of an
    off-policy model's file (Humanoid SAC with [256, 256] nets: over 5 MiB with them). The loaded model acts
    exactly as before; training it further restarts Adam's statistics (the full state stays in checkpoints/).
    """
    from operator import attrgetter

    state_dicts, _ = model._get_torch_save_params()
    for name in state_dicts:
        if name.split(".")[-1].endswith("optimizer"):
            attrgetter(name)(model).state.clear()
    model.save(path)
    return path.stat().st_size


def train(
    recipe: Recipe,
    out_dir: Path,
    timesteps: int | None = None,
    progress: Callable[[int, int, InteractionLog], None] | None = None,
) -> dict[str, Any]:
    """Trains `recipe` (optionally with a smaller budget), writes model.zip and the interaction log into out_dir.

    A QLEARNING recipe trains a Q-table instead (offline/qlearning.py): model.npz, the same log. A subject whose
    first observation does not fit its observation space is refused (SubjectError) before anything is trained.
    """
    check_first_observation(make_env(get_subject(recipe.subject)))
    if recipe.algorithm in IMAGE_ALGORITHMS:  # DESIGNATE's DNN under test and its translator (no episodes)
        from offline.image_training import train_image_recipe

        return train_image_recipe(recipe, out_dir)
    if recipe.algorithm == "QLEARNING":
        from offline.qlearning import train_qlearning

        return train_qlearning(recipe, out_dir, timesteps=timesteps, progress=progress)
    import torch
    from stable_baselines3.common.callbacks import BaseCallback, CallbackList, CheckpointCallback
    from stable_baselines3.common.vec_env import DummyVecEnv

    from agent_service.algorithms import algorithm_class

    torch.set_num_threads(1)  # small MLPs: one thread is fastest and leaves the other core free
    subject = get_subject(recipe.subject)
    budget = timesteps or recipe.timesteps
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    with gzip.open(out_dir / LOG_NAME, "wt") as stream:
        log = InteractionLog(stream)

        def factory(rank: int) -> Callable[[], gym.Env]:
            def build() -> gym.Env:
                env = make_env(subject)
                env._sampler = np.random.default_rng([recipe.seed, rank])  # type: ignore[attr-defined]
                return InteractionLogger(env, subject, log)

            return build

        vec = DummyVecEnv([factory(r) for r in range(recipe.n_envs)])
        params = schedule_params(replay_buffer_params(dict(recipe.hyperparams)))
        policy = params.pop("policy", "MlpPolicy")
        model = algorithm_class(recipe.algorithm)(policy, vec, seed=recipe.seed, verbose=0, device="cpu", **params)

        class Progress(BaseCallback):
            def _on_step(self) -> bool:
                if progress and self.num_timesteps % 2048 < recipe.n_envs:
                    progress(self.num_timesteps, budget, log)
                return True

        checkpoints = CheckpointCallback(
            save_freq=max(budget // (10 * recipe.n_envs), 1), save_path=str(out_dir / "checkpoints"), name_prefix="ckpt"
        )
        model.learn(total_timesteps=budget, callback=CallbackList([Progress(), checkpoints]))
        model.save(out_dir / MODEL_NAME)
        if (out_dir / MODEL_NAME).stat().st_size > MAX_MODEL_BYTES:
            save_for_serving(model, out_dir / MODEL_NAME)
    return {
        "subject": recipe.subject,
        "algorithm": recipe.algorithm,
        "seed": recipe.seed,
        "timesteps": budget,
        "n_envs": recipe.n_envs,
        "train_wall_seconds": round(time.time() - started, 1),
        "training_episodes": log.episodes,
        "training_failures": log.failures,
        "file_bytes": (out_dir / MODEL_NAME).stat().st_size,
    }


# Replay buffers a recipe may name (YAML holds names, not classes). HER relabels goals of a goal-conditioned
# (Dict observation) subject: `replay_buffer_class: HerReplayBuffer`, `replay_buffer_kwargs:
# {goal_selection_strategy: future, n_sampled_goal: 4}`, `policy: MultiInputPolicy`. The interaction log
# is written by the env wrapper, so it is the same whatever the buffer.
REPLAY_BUFFERS = ("HerReplayBuffer",)


def replay_buffer_params(params: dict[str, Any]) -> dict[str, Any]:
    """`params` with a named replay buffer class resolved; ValueError names an unknown one."""
    name = params.get("replay_buffer_class")
    if name is None:
        return params
    if name not in REPLAY_BUFFERS:
        raise ValueError(f"hyperparams.replay_buffer_class {name!r} is not one of {', '.join(REPLAY_BUFFERS)}")
    from stable_baselines3 import HerReplayBuffer

    return {**params, "replay_buffer_class": HerReplayBuffer}


# Hyper-parameters that may follow a schedule over the training budget (SB3 calls them with the progress
# remaining, 1 -> 0). A recipe writes `learning_rate: {linear: [0.0003, 0.0]}` for a linear decay.
SCHEDULED = ("learning_rate", "clip_range")


def schedule_params(params: dict[str, Any]) -> dict[str, Any]:
    """`params` with `{linear: [start, end]}` values turned into SB3 schedules; ValueError names a bad one."""
    from stable_baselines3.common.utils import LinearSchedule

    out = dict(params)
    for key in SCHEDULED:
        value = params.get(key)
        if not isinstance(value, dict):
            continue
        ends = value.get("linear")
        if set(value) != {"linear"} or not (
            isinstance(ends, list) and len(ends) == 2 and all(isinstance(v, (int, float)) for v in ends)
        ):
            raise ValueError(f"hyperparams.{key} must be a number or {{linear: [start, end]}}, got {value!r}")
        out[key] = LinearSchedule(float(ends[0]), float(ends[1]), 1.0)
    return out
