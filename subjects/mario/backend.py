"""The Super Mario Bros. backend: nes-py's NES emulator through gym-super-mario-bros, as a Gymnasium env.

"Search-Based Testing of Reinforcement Learning" (IJCAI-ECAI 2022, Section 7 and Appendix A) tests DQN agents on
levels 1-1 and 1-2. gym-super-mario-bros 7.4.0 / nes-py 8.2.1 need numpy < 2 and the old gym 0.26 API, so this
module imports only in the `mario` extra's own virtual environment (`make .venv-mario`), where a second simulator
service serves the Mario subjects (docs/subjects/mario.md).

One agent step is 4 emulator frames with the same buttons (frame skip 4, as the PyTorch Mario tutorial the paper
builds on); the observation is the last frame of each of the last 4 steps, grey, resized 240x256 -> 84x84, stacked
(uint8, shape 4x84x84). The reward is the emulator's per-frame reward (x progress, clock penalty) summed over the 4
frames, and -25 when Mario loses a life (the paper's death penalty, 5x the largest per-step progress).

Snapshots: nes-py keeps one native backup slot (`_backup`/`_restore`), which it fills with the level start. A
snapshot of this env (what `copy.deepcopy` makes, and what the simulator's sessions store) is the state's action
history; going back to it restores the slot natively and replays the rest of the history. After a replay the slot
holds the state replayed to (a checkpoint), since a search comes back to a state for its other actions and then to
its descendants: those restores replay only the actions after the checkpoint. Going back to a state that does not
extend the checkpoint power-cycles the emulator and skips the start screen again, which gives the level start bit for
bit, then replays the whole history. The emulator is deterministic, so a restored state is bit for bit the same
(tests/subjects/test_mario.py checks it through the simulator's sessions).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from common.space import ParamValue
from simulator_service.plugin_api import Injector, Subject, SubjectEnv

# The paper's action sets (Section 7.2 names them, not their buttons; this mapping is ours, documented in
# docs/subjects/mario.md). B held is running; A is jump.
ACTION_SETS: dict[str, tuple[tuple[str, ...], ...]] = {
    # "fast running and jumping to the right"
    "2-moves": (("right", "B"), ("right", "A", "B")),
    # "2-moves plus slow running to the right and left"
    "basic": (("right", "B"), ("right", "A", "B"), ("right",), ("left",)),
    # "basic without running left, but actions for pressing up and down"
    "right-complex": (("right", "B"), ("right", "A", "B"), ("right",), ("right", "A"), ("up",), ("down",)),
}
_BUTTONS = {
    "right": 0b10000000,
    "left": 0b01000000,
    "down": 0b00100000,
    "up": 0b00010000,
    "A": 0b00000001,
    "B": 0b00000010,
}
FRAME_SKIP = 4
STACK = 4
SIZE = 84
DEATH_PENALTY = -25.0
LEVEL_START = (-1, ())  # what the native slot holds: (no-op frames, action history) of a checkpoint, or the level start


def button_byte(buttons: Sequence[str]) -> int:
    """The NES controller byte for a set of held buttons."""
    return sum(_BUTTONS[b] for b in buttons)


def grey_84(frame: np.ndarray) -> np.ndarray:
    """A 240x256 RGB frame as 84x84 grey (luma, nearest-neighbour rows/columns: no image library needed)."""
    grey = frame[..., 0] * 0.299 + frame[..., 1] * 0.587 + frame[..., 2] * 0.114
    rows = (np.arange(SIZE) * frame.shape[0] // SIZE).astype(np.intp)
    cols = (np.arange(SIZE) * frame.shape[1] // SIZE).astype(np.intp)
    return np.asarray(grey[np.ix_(rows, cols)], dtype=np.uint8)


class MarioEnv(gym.Env):
    """One Super Mario Bros. level with one of the paper's action sets (see the module docstring)."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, world: int, stage: int, action_set: str, render_mode: str | None = None) -> None:
        from gym_super_mario_bros.smb_env import SuperMarioBrosEnv  # type: ignore[import-not-found]  # only in .venv-mario

        if action_set not in ACTION_SETS:
            raise ValueError(f"action_set must be one of {', '.join(ACTION_SETS)}, got {action_set!r}")
        self._nes = SuperMarioBrosEnv(target=(world, stage))  # ends its constructor with a backup of the level start
        self._nes._gauntlet_slot = LEVEL_START
        self._bytes = [button_byte(b) for b in ACTION_SETS[action_set]]
        self.action_set = action_set
        self.render_mode = render_mode
        self.action_space = gym.spaces.Discrete(len(self._bytes))
        self.observation_space = gym.spaces.Box(0, 255, shape=(STACK, SIZE, SIZE), dtype=np.uint8)
        self._history: list[int] = []  # actions since the level start (after the no-op frames)
        self._noop_frames = 0
        self._frames = np.zeros((STACK, SIZE, SIZE), dtype=np.uint8)
        self.life_lost = False
        self.flag_get = False
        self.x_pos = 0
        self.y_pos = 0
        self.max_x_pos = 0

    # --- episode -----------------------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        noop = int((options or {}).get("noop_frames", 0))
        self._start(noop)
        return self._frames.copy(), self._info()

    def _level_start(self) -> None:
        nes = self._nes
        if nes._gauntlet_slot == LEVEL_START:
            nes.reset()  # restores nes-py's native backup of the level start
            return
        # the slot holds a checkpoint: power-cycle and skip the start screen again, as SuperMarioBrosEnv's constructor
        from nes_py.nes_env import _LIB  # type: ignore[import-not-found]  # only in .venv-mario

        # nes-py's Reset is the console's reset button: work RAM survives it, and the game's start screen then depends
        # on what the last episode left there (on 1-2 the level restarted 21 px further on after a lost life). Zeroed
        # RAM is the power-on state the constructor started from, so the start below is its level start bit for bit.
        nes.ram[:] = 0
        nes._will_reset()
        _LIB.Reset(nes._env)
        nes._did_reset()
        nes._skip_start_screen()
        nes._did_reset()
        nes.done = False

    def _start(self, noop_frames: int) -> None:
        self._level_start()
        for _ in range(noop_frames):  # the test input: frames without input before Mario moves
            self._nes.step(0)
        self._noop_frames, self._history = noop_frames, []
        self.life_lost = self.flag_get = False
        self._read_position()
        self.max_x_pos = self.x_pos
        self._frames = np.repeat(grey_84(self._nes.screen)[None], STACK, axis=0)

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        index = int(action)
        reward, done = self._advance(index)
        self._frames = np.concatenate([self._frames[1:], grey_84(self._nes.screen)[None]])
        # The flag truncates (a goal, not a failure), so generic oracles fail exactly on a lost life.
        return self._frames.copy(), reward, done and not self.flag_get, self.flag_get, self._info()

    def _advance(self, index: int) -> tuple[float, bool]:
        reward, done = 0.0, False
        lives = int(self._nes._life)
        for _ in range(FRAME_SKIP):
            _, r, done, _ = self._nes.step(self._bytes[index])
            reward += float(r)
            if done:
                break
        self._history.append(index)
        self._read_position()
        self.flag_get = bool(self._nes._flag_get)
        self.life_lost = bool(self._nes._is_dying or self._nes._is_dead or int(self._nes._life) < lives)
        if self.life_lost:
            reward = DEATH_PENALTY
        return reward, bool(done or self.life_lost or self.flag_get)

    def _read_position(self) -> None:
        self.x_pos = int(self._nes._x_position)
        self.y_pos = int(self._nes._y_position)
        self.max_x_pos = max(self.max_x_pos, self.x_pos)

    def _info(self) -> dict:
        return {"x_pos": self.x_pos, "y_pos": self.y_pos, "flag_get": self.flag_get, "life_lost": self.life_lost}

    def render(self) -> np.ndarray:
        return np.asarray(self._nes.screen).copy()

    def close(self) -> None:
        # The emulator is shared with this env's snapshots (see __deepcopy__); it is freed with the last of them.
        return None

    # --- snapshots ---------------------------------------------------------------------------------------------
    def __deepcopy__(self, memo: dict[int, Any]) -> MarioEnv:
        """A snapshot: the same emulator, this state's action history; using it first brings the emulator there."""
        twin = object.__new__(MarioEnv)
        twin.__dict__.update(self.__dict__)
        twin._history = list(self._history)
        twin._frames = self._frames.copy()
        twin._np_random = None
        memo[id(self)] = twin
        return twin

    def sync(self) -> None:
        """Puts the shared emulator into this env's state (level start restored natively, history replayed)."""
        nes = self._nes
        owner = getattr(nes, "_gauntlet_owner", None)
        if owner is self and owner._history == self._history:
            return
        history, frames, max_x = list(self._history), self._frames, self.max_x_pos
        slot_noop, slot_history = nes._gauntlet_slot
        if slot_noop == self._noop_frames and tuple(history[: len(slot_history)]) == slot_history:
            nes._restore()  # the checkpoint this state extends
            nes._did_reset()  # the reward's "last" x and clock from the restored RAM, as after a step
            nes.done = False
            self._history = list(slot_history)
            todo = history[len(slot_history) :]
        else:
            self._start(self._noop_frames)
            todo = history
        for index in todo:
            self._advance(index)
        if todo:  # a checkpoint here: the search comes back to this state, or to states after it
            nes._backup()
            nes._gauntlet_slot = (self._noop_frames, tuple(history))
        self.max_x_pos, self._frames = max_x, frames
        nes._gauntlet_owner = self


class SyncedMario(gym.Wrapper):
    """Makes every use of a MarioEnv (step, reset) start by putting the shared emulator into its state."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        obs, info = self.env.reset(seed=seed, options=options)
        mario: MarioEnv = self.env.unwrapped  # type: ignore[assignment]
        mario._nes._gauntlet_owner = mario
        return obs, info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        mario: MarioEnv = self.env.unwrapped  # type: ignore[assignment]
        mario.sync()
        obs, reward, terminated, truncated, info = self.env.step(action)
        mario._nes._gauntlet_owner = mario
        return obs, float(reward), terminated, truncated, info


def level(env_id: str) -> tuple[int, int]:
    """World and stage of an env id like SuperMarioBros-1-1 (ValueError naming the allowed form)."""
    parts = env_id.split("-")
    if len(parts) != 3 or parts[0] != "SuperMarioBros" or not parts[1].isdigit() or not parts[2].isdigit():
        raise ValueError(f"env_id must look like SuperMarioBros-<world>-<stage>, got {env_id!r}")
    return int(parts[1]), int(parts[2])


def make_env(subject: Subject, render_mode: str | None = None) -> SubjectEnv:
    world, stage = level(subject.env_id)
    action_set = str(subject.env_kwargs.get("action_set", "2-moves"))
    env = gym.wrappers.TimeLimit(
        SyncedMario(MarioEnv(world, stage, action_set, render_mode)), max_episode_steps=subject.max_steps
    )
    return SubjectEnv(env, subject)


def mario_start(subject: Subject, options: Mapping[str, Any]) -> Injector:
    """Mario levels: the test input is the number of frames without input before Mario starts (`noop_frames`;
    the parameter name can be mapped with `parameter:`), which shifts the enemies' timing relative to Mario."""
    name = str(options.get("parameter", "noop_frames"))

    def inject(env: gym.Env, values: Mapping[str, ParamValue], seed: int | None) -> np.ndarray:
        obs, _ = env.reset(seed=seed, options={"noop_frames": int(values[name])})
        return np.asarray(obs)

    return inject
