"""Trains the zoo's agents on the same subject environments the simulator serves, logging every episode.

The per-episode log (generator_service.api's InteractionLog: test case, verdict under the subject's oracle, margin,
episode index, timestep) is Indago's interaction dataset: surrogates learn from it which inputs fail.
The bundled recipes live beside this module (offline/recipes.yaml); the models they produced are the bundled zoo
the agent service serves (agent_service/zoo/, with manifest.yaml). A user's recipe file has the same form, and
`register_model` lists a model it trained in the manifest of the user's own model root, which the agent service
serves with --model-root.
"""

from __future__ import annotations

import copy
import gzip
import io
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

import gymnasium as gym
import numpy as np
import yaml

from generator_service.api import INTERACTION_LOG_NAME, InteractionLog
from offline.interaction_logger import InteractionLogger
from offline.manifest import set_entry
from simulator_service.api import check_first_observation, get_subject, make_env

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
    an agent service started with that model root serves it; returns the manifest's path. Only the entry's lines
    change (offline/manifest.py's set_entry: the rest of the file, comments included, stays), and the file is
    replaced whole (written beside it, then renamed), so a reader never sees half of it."""
    section = "translators" if recipe.algorithm == "PIX2PIX" else "models"  # the translator service's manifest
    description = recipe.description or f"{recipe.algorithm} trained on {recipe.subject} from recipe {recipe.name}"
    return set_entry(model_root, recipe.name, {"description": description, **meta}, section)


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
    resume: bool = False,
    stop_at: int | None = None,
    checkpoint_every: int | None = None,
) -> dict[str, Any]:
    """Trains `recipe` (optionally with a smaller budget), writes model.zip and the interaction log into out_dir.

    A QLEARNING recipe trains a Q-table instead (offline/qlearning.py): model.npz, the same log. A subject whose
    first observation does not fit its observation space is refused (SubjectError) before anything is trained.

    A Stable-Baselines3 recipe can take more than one sitting: every `checkpoint_every` steps (default: a tenth of
    the budget, at most 10,000) and when it stops, the run saves out_dir/resume/ (the model with its optimizers,
    the replay buffer, the random generators, the log so far and the run's counters), and `resume=True`
    continues from there to the budget. A sitting stops early at `stop_at` total steps or on SIGINT/SIGTERM
    (checkpointed, not listed: the returned `finished` is then False and no model.zip is written).
    """
    if recipe.algorithm == "DDQN":  # Mario's Double DQN trains in the subject's own environment (.venv-mario)
        return _train_ddqn(recipe, out_dir, timesteps, resume, stop_at, checkpoint_every)
    check_first_observation(make_env(get_subject(recipe.subject)))
    sb3 = recipe.algorithm not in (*IMAGE_ALGORITHMS, "QLEARNING")
    if (resume or stop_at is not None) and not sb3:
        raise RecipeError(f"recipe {recipe.name!r}: only Stable-Baselines3 recipes checkpoint and resume")
    if recipe.algorithm in IMAGE_ALGORITHMS:  # DESIGNATE's DNN under test and its translator (no episodes)
        from offline.image_training import train_image_recipe

        return train_image_recipe(recipe, out_dir)
    if recipe.algorithm == "QLEARNING":
        from offline.qlearning import train_qlearning

        return train_qlearning(recipe, out_dir, timesteps=timesteps, progress=progress)
    return _train_sb3(recipe, out_dir, timesteps or recipe.timesteps, progress, resume, stop_at, checkpoint_every)


# The environment a subject whose modules this one lacks trains in (Mario's emulator needs numpy < 2)
SUBJECT_PYTHON = Path(__file__).resolve().parent.parent / ".venv-mario" / "bin" / "python"


def _train_ddqn(
    recipe: Recipe,
    out_dir: Path,
    timesteps: int | None,
    resume: bool,
    stop_at: int | None,
    checkpoint_every: int | None,
) -> dict[str, Any]:
    """A DDQN recipe (offline/mario_dqn.py: Double DQN, optionally DQfD pre-training on the search's demonstrations)
    in a child process of the subject's environment: this one when it has the subject's modules, else .venv-mario.
    Resumable the same way (out_dir/resume/); the summary it prints is the run's metadata."""
    import subprocess
    import sys

    subject = get_subject(recipe.subject)
    python = Path(sys.executable) if not subject.missing_modules() else SUBJECT_PYTHON
    if not python.exists():
        raise RecipeError(f"recipe {recipe.name!r}: subject {recipe.subject} needs {python} (make .venv-mario)")
    entry = {"subject": recipe.subject, "algorithm": recipe.algorithm, "seed": recipe.seed}
    entry |= {"timesteps": recipe.timesteps if timesteps is None else timesteps, "hyperparams": recipe.hyperparams}
    command = [str(python), "-m", "offline.mario_dqn", "--recipe-json", json.dumps(entry), "--out", str(out_dir)]
    command += ["--resume"] if resume else []
    command += ["--stop-at", str(stop_at)] if stop_at is not None else []
    command += ["--checkpoint-every", str(checkpoint_every)] if checkpoint_every is not None else []
    done = subprocess.run(command, cwd=Path(__file__).resolve().parent.parent, capture_output=True, text=True)
    if done.returncode != 0:
        raise RecipeError(f"recipe {recipe.name!r}: offline.mario_dqn failed: {done.stderr.strip()[-2000:]}")
    summary: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if summary.get("finished") is False:
        return {**summary, "num_timesteps": summary["train_steps"]}
    return ddqn_meta(recipe, summary)


def ddqn_meta(recipe: Recipe, summary: dict[str, Any]) -> dict[str, Any]:
    """A DDQN model's manifest entry from its summary.json (offline/mario_dqn.py's), as `register_model` lists it."""
    keep = ("seed", "train_wall_seconds", "file_bytes")
    meta = {"subject": recipe.subject, "algorithm": "DDQN", "observation_shape": [4, 84, 84]}
    meta |= {"observation_dtype": "uint8", "timesteps": summary["train_steps"], **{k: summary[k] for k in keep}}
    meta["training_episodes"] = summary["train_episodes"]  # the key the other DDQN entries use
    return meta | {k: v for k, v in summary.items() if k.startswith(("eval_", "pretrain_", "demo", "expert"))}


# A run's resumable checkpoint, out_dir/resume/: written whole beside it and renamed, so a sitting killed while
# writing leaves the previous one intact.
RESUME_DIR = "resume"
STATE_NAME = "state.json"  # counters: steps, episodes, failures, budget, per-sitting wall and CPU seconds
BUFFER_NAME = "replay_buffer.pkl.gz"  # off-policy algorithms only
RNG_NAME = "rng.pkl"  # torch, numpy, random, the action space and each env's test-case sampler and own generator


class _SealableGzipLog(io.TextIOBase):
    """The interaction log's text sink: `seal()` ends the current gzip member, so the file is a complete gzip file
    up to that point (gzip readers read a file of several members as one), and later lines go to a new member."""

    def __init__(self, path: Path, mode: str) -> None:
        self._path = path
        self._stream = cast("IO[str]", gzip.open(path, mode))

    def write(self, text: str) -> int:
        return self._stream.write(text)

    def seal(self) -> None:
        self._stream.close()
        self._stream = gzip.open(self._path, "at")

    def close(self) -> None:
        self._stream.close()
        super().close()


class _ResetMark(gym.Wrapper):
    """Outermost wrapper of a training env: remembers the random state (the test-case sampler's and the env's own
    generator) each reset started from. A checkpoint taken just after an episode ended saves that state, so the
    resumed run redraws the very episode the checkpointed run had begun and goes on exactly as it would have."""

    def __init__(self, env: gym.Env, sampler: np.random.Generator) -> None:
        super().__init__(env)
        self._sampler = sampler
        self.before_reset = self.random_state()

    def reset(self, **kwargs: Any) -> tuple[Any, dict]:
        self.before_reset = self.random_state()
        return self.env.reset(**kwargs)

    def random_state(self) -> dict[str, Any]:
        return {
            "sampler": self._sampler.bit_generator.state,
            "env": self.env.unwrapped.np_random.bit_generator.state,
        }

    def set_random_state(self, state: dict[str, Any]) -> None:
        self._sampler.bit_generator.state = state["sampler"]
        self.env.unwrapped.np_random.bit_generator.state = state["env"]


def _recipe_identity(recipe: Recipe) -> dict[str, Any]:
    """What a resumed run must share with its checkpoint (the budget may grow)."""
    return {
        "recipe": recipe.name,
        "subject": recipe.subject,
        "algorithm": recipe.algorithm,
        "seed": recipe.seed,
        "n_envs": recipe.n_envs,
        "hyperparams": json.loads(json.dumps(recipe.hyperparams)),
    }


def read_checkpoint_state(out_dir: Path) -> dict[str, Any]:
    """The counters of out_dir's resumable checkpoint; RecipeError when there is none."""
    path = out_dir / RESUME_DIR / STATE_NAME
    if not path.exists():
        raise RecipeError(f"no checkpoint to resume in {path.parent} (train without --resume first)")
    state: dict[str, Any] = json.loads(path.read_text())
    return state


def _train_sb3(
    recipe: Recipe,
    out_dir: Path,
    budget: int,
    progress: Callable[[int, int, InteractionLog], None] | None,
    resume: bool,
    stop_at: int | None,
    checkpoint_every: int | None,
) -> dict[str, Any]:
    import pickle
    import random
    import shutil
    import signal
    import threading
    import warnings

    import torch
    from stable_baselines3.common.callbacks import BaseCallback, CallbackList, CheckpointCallback
    from stable_baselines3.common.vec_env import DummyVecEnv

    from agent_service.api import algorithm_class

    torch.set_num_threads(1)  # small MLPs: one thread is fastest and leaves the other core free
    subject = get_subject(recipe.subject)
    out_dir.mkdir(parents=True, exist_ok=True)
    resume_dir = out_dir / RESUME_DIR
    identity = _recipe_identity(recipe)
    previous: dict[str, Any] = {}
    if resume:
        previous = read_checkpoint_state(out_dir)
        differs = sorted(k for k, v in identity.items() if previous.get(k) != v)
        if differs:
            raise RecipeError(
                f"checkpoint in {resume_dir} was trained with another {', '.join(differs)} than recipe {recipe.name!r}"
            )
        if previous["num_timesteps"] >= budget:
            raise RecipeError(
                f"checkpoint in {resume_dir} is at {previous['num_timesteps']} steps, budget {budget}: nothing to "
                "train (a larger --timesteps trains on from it)"
            )
        # the log as it was at the checkpoint
        shutil.copyfile(resume_dir / INTERACTION_LOG_NAME, out_dir / INTERACTION_LOG_NAME)
    every = checkpoint_every or max(min(budget // 10, 10_000), 1)
    started, cpu_started = time.time(), time.process_time()
    sink = _SealableGzipLog(out_dir / INTERACTION_LOG_NAME, "at" if resume else "wt")
    log = InteractionLog(cast("IO[str]", sink))
    log.episodes = previous.get("training_episodes", 0)
    log.failures = previous.get("training_failures", 0)
    log.timesteps = previous.get("num_timesteps", 0)
    samplers = [np.random.default_rng([recipe.seed, rank]) for rank in range(recipe.n_envs)]  # test-case draws

    marks: list[_ResetMark] = []

    def factory(rank: int) -> Callable[[], gym.Env]:
        def build() -> gym.Env:
            env = make_env(subject)
            env._sampler = samplers[rank]  # type: ignore[attr-defined]
            marks.append(_ResetMark(InteractionLogger(env, subject, log), samplers[rank]))
            return marks[-1]

        return build

    vec = DummyVecEnv([factory(r) for r in range(recipe.n_envs)])
    cls = algorithm_class(recipe.algorithm)
    buffer_restored = False
    if resume:
        model = cls.load(resume_dir / MODEL_NAME, env=vec, device="cpu")
        if (resume_dir / BUFFER_NAME).exists():
            # SB3 reads plain files or BytesIO. HER: the buffer is re-attached to the env and its last episode is
            # cut where the checkpoint was taken (the env starts a new one), which SB3 warns about.
            with gzip.open(resume_dir / BUFFER_NAME, "rb") as buffer_in, warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="The last trajectory in the replay buffer will be truncated")
                model.load_replay_buffer(io.BytesIO(buffer_in.read()))
            buffer_restored = True
        elif getattr(model, "replay_buffer", None) is not None:  # warm start: collect before updating again
            model.learning_starts = model.num_timesteps + int(recipe.hyperparams.get("learning_starts", 100))
        with open(resume_dir / RNG_NAME, "rb") as rng_file:
            rng = pickle.load(rng_file)
        torch.set_rng_state(rng["torch"])  # after load(), which reseeds everything with the recipe's seed
        np.random.set_state(rng["numpy"])
        random.setstate(rng["random"])
        model.action_space.np_random.bit_generator.state = rng["action_space"]
        for mark, env_state in zip(marks, rng["envs"], strict=True):
            mark.set_random_state(env_state)
        vec._seeds = [None] * recipe.n_envs  # the first reset goes on from the restored generators, as an autoreset
    else:
        params = schedule_params(replay_buffer_params(copy.deepcopy(recipe.hyperparams)))  # SB3 edits nested dicts
        policy = params.pop("policy", "MlpPolicy")
        model = cls(policy, vec, seed=recipe.seed, verbose=0, device="cpu", **params)
    start_step = int(model.num_timesteps)
    sittings = list(previous.get("sittings", []))

    def state(steps: int) -> dict[str, Any]:
        sitting = {
            "from_step": start_step,
            "to_step": steps,
            "wall_seconds": round(time.time() - started, 1),
            "cpu_seconds": round(time.process_time() - cpu_started, 1),
        }
        if resume and getattr(model, "replay_buffer", None) is not None:  # off-policy: buffer back, or warm start
            sitting["replay_buffer_restored"] = buffer_restored
        done = [*sittings, sitting]
        return {
            **identity,
            "budget": budget,
            "num_timesteps": steps,
            "training_episodes": log.episodes,
            "training_failures": log.failures,
            "train_wall_seconds": round(sum(s["wall_seconds"] for s in done), 1),
            "train_cpu_seconds": round(sum(s["cpu_seconds"] for s in done), 1),
            "sittings": done,
        }

    episode_ended = [True]  # did every env just end an episode (set by the callback from each step's dones)

    def at_episode_end() -> bool:
        return episode_ended[0]

    def save_checkpoint() -> None:
        exact = at_episode_end()  # every env has just begun an episode: its reset can be replayed
        sink.seal()  # the log on disk is whole up to this step
        partial = out_dir / (RESUME_DIR + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        model.save(partial / MODEL_NAME)
        if getattr(model, "replay_buffer", None) is not None:
            raw = io.BytesIO()
            model.save_replay_buffer(raw)
            with gzip.open(partial / BUFFER_NAME, "wb", compresslevel=6) as buffer_out:
                buffer_out.write(raw.getbuffer())
        rng = {
            "torch": torch.get_rng_state(),
            "numpy": np.random.get_state(),
            "random": random.getstate(),
            "action_space": model.action_space.np_random.bit_generator.state,
            "envs": [mark.before_reset if exact else mark.random_state() for mark in marks],
        }
        with open(partial / RNG_NAME, "wb") as rng_out:
            pickle.dump(rng, rng_out)
        shutil.copyfile(out_dir / INTERACTION_LOG_NAME, partial / INTERACTION_LOG_NAME)
        counters = {**state(int(model.num_timesteps)), "exact": exact}
        (partial / STATE_NAME).write_text(json.dumps(counters, indent=1) + "\n")
        old = out_dir / (RESUME_DIR + ".old")
        shutil.rmtree(old, ignore_errors=True)
        if resume_dir.exists():
            resume_dir.rename(old)
        partial.rename(resume_dir)
        shutil.rmtree(old, ignore_errors=True)

    interrupted = threading.Event()

    class StopSitting(Exception):
        pass

    class Sitting(BaseCallback):
        """Progress, the periodic resumable checkpoint, and a clean stop (checkpointed) at stop_at or a signal.

        Checkpoints are taken when a rollout starts: every step so far is in the replay buffer and every update
        for it is done. With one env a due checkpoint waits for the end of the running episode (at most one
        episode's steps), so resuming from it gives the same run as not stopping (`exact` in state.json); with
        several envs it is taken at once, and the resumed envs start new episodes."""

        last_saved = start_step

        def _on_step(self) -> bool:
            episode_ended[0] = bool(np.all(self.locals["dones"]))
            if progress and self.num_timesteps % 2048 < recipe.n_envs:
                progress(self.num_timesteps, budget, log)
            return True

        def _on_rollout_start(self) -> None:
            steps = self.num_timesteps
            stopping = interrupted.is_set() or (stop_at is not None and steps >= stop_at)
            if not (stopping or steps - self.last_saved >= every):
                return
            if recipe.n_envs == 1 and not at_episode_end():
                return
            save_checkpoint()
            self.last_saved = steps
            if stopping:
                raise StopSitting

    snapshots = CheckpointCallback(  # model-only snapshots of the run at each tenth of the budget
        save_freq=max(budget // (10 * recipe.n_envs), 1), save_path=str(out_dir / "checkpoints"), name_prefix="ckpt"
    )
    handlers: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            handlers[sig] = signal.signal(sig, lambda *_: interrupted.set())
    try:
        model.learn(
            total_timesteps=budget - start_step,
            callback=CallbackList([Sitting(), snapshots]),
            reset_num_timesteps=not resume,
        )
    except StopSitting:
        pass
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    steps = int(model.num_timesteps)
    finished = steps >= budget
    if finished:
        save_checkpoint()  # a later --resume with a larger budget trains on from here
        model.save(out_dir / MODEL_NAME)
        if (out_dir / MODEL_NAME).stat().st_size > MAX_MODEL_BYTES:
            save_for_serving(model, out_dir / MODEL_NAME)
    sink.close()
    totals = json.loads((resume_dir / STATE_NAME).read_text())
    meta = {
        "subject": recipe.subject,
        "algorithm": recipe.algorithm,
        "seed": recipe.seed,
        "timesteps": budget,
        "n_envs": recipe.n_envs,
        "train_wall_seconds": totals["train_wall_seconds"],
        "train_cpu_seconds": totals["train_cpu_seconds"],
        "training_episodes": log.episodes,
        "training_failures": log.failures,
    }
    if len(totals["sittings"]) > 1:
        meta["sittings"] = len(totals["sittings"])
    if finished:
        return {**meta, "file_bytes": (out_dir / MODEL_NAME).stat().st_size}
    return {**meta, "finished": False, "num_timesteps": steps}


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
