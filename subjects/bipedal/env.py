"""BipedalWalker on Gymnasium's hardcore terrain, with the obstacle sequence given as the test input.

Registered on import as `GauntletBipedalObstacles-v0`. The QD fault-diversity paper ("Testing for Fault Diversity
in Reinforcement Learning", Section 5.2.1, and its authors' code) tests a walker on terrains described by 15
integer "slots": the authors' code fills the
successive obstacle slots of the hardcore terrain generator with the 15 codes, in order, cycling when the
terrain has more slots. Codes (Gymnasium's own state numbers): 0 grass (no obstacle), 1 stump, 2 stairs, 3 pit.

How the codes get into the terrain: Gymnasium's `_generate_terrain` draws each obstacle kind as
`np_random.integers(1, 4)` when a grass stretch ends. `reset(options={"obstacles": codes})` runs the env's
own generator with a stand-in random generator (`TerrainScript`) that answers those draws with the codes
and leaves every other draw (obstacle sizes, grass undulation, clouds, the initial push) to a generator
seeded with the fixed `terrain_seed` (default 0, as the authors' env seed). The episode is therefore a
function of the codes alone: the `seed` given to reset is ignored when codes are given. Without codes the
env is plain hardcore BipedalWalker seeded by `seed`.

Spacing (`grass_gap`): Gymnasium draws each grass stretch between obstacles as `integers(5, 10)` terrain
steps. With `grass_gap=g` the script answers those draws with g, so obstacles come at a fixed rhythm; None
keeps the random lengths. The first obstacle always starts at terrain step 20 (Gymnasium's start pad; the
walker starts at step 10). A walker covers only a few slots in the authors' 300-step episodes, so the
spacing decides how many codes can matter (see the subject file for the measured reach).

Where each slot went is recorded in `obstacle_slots`: (slot index, code, first terrain index) per draw.

Every reset builds a fresh Box2D world. Gymnasium's BipedalWalker keeps one world for the env's life, and its
broad-phase keeps proxy ids and pair order from earlier episodes, so the same input gave another trajectory
(and sometimes another verdict) depending on which episodes the pooled env had run before: 115 of 150 inputs
differed between a fresh and a reused env. Gymnasium's LunarLander already rebuilds its world in reset.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import Box2D
import gymnasium as gym
import numpy as np
from gymnasium.envs.box2d import bipedal_walker as bw

ENV_ID = "GauntletBipedalObstacles-v0"
GRASS, STUMP, STAIRS, PIT = range(4)
CODE_NAMES = {GRASS: "grass", STUMP: "stump", STAIRS: "stairs", PIT: "pit"}
_KIND_DRAW = (1, 4)  # Gymnasium: GRASS, STUMP, STAIRS, PIT, _STATES_ = range(5); kind = integers(1, _STATES_)
_GRASS_DRAW = (bw.TERRAIN_GRASS // 2, bw.TERRAIN_GRASS)  # grass stretch length: integers(5, 10)


class TerrainScript:
    """A Generator stand-in: obstacle-kind draws return the scripted codes (cycling), grass-length draws return
    `grass_gap` when set; everything else is delegated to the wrapped generator."""

    def __init__(
        self, rng: np.random.Generator, codes: Sequence[int], grass_gap: int | None, env: ObstacleBipedalWalker
    ) -> None:
        self._rng = rng
        self._codes = [int(c) for c in codes]
        self._gap = grass_gap
        self._env = env
        self.slot = 0

    def integers(self, low: Any, high: Any = None, size: Any = None, *args: Any, **kwargs: Any) -> Any:
        if size is None and not args and not kwargs and self._codes and (low, high) == _KIND_DRAW:
            code = self._codes[self.slot % len(self._codes)]
            # the obstacle starts at the next terrain index; terrain_x already holds the current one
            self._env.obstacle_slots.append((self.slot, code, len(self._env.terrain_x)))
            self.slot += 1
            return code
        if size is None and not args and not kwargs and self._gap is not None and (low, high) == _GRASS_DRAW:
            return self._gap
        return self._rng.integers(low, high, size, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._rng, name)


class ObstacleBipedalWalker(bw.BipedalWalker):
    """Hardcore BipedalWalker whose obstacle kinds come from `reset(options={"obstacles": [...]})`."""

    def __init__(self, render_mode: str | None = None, terrain_seed: int = 0, grass_gap: int | None = None) -> None:
        super().__init__(render_mode=render_mode, hardcore=True)
        if grass_gap is not None and not 1 <= int(grass_gap) <= 50:
            raise ValueError(f"grass_gap must be an integer in [1, 50] terrain steps or None, got {grass_gap!r}")
        self.terrain_seed = int(terrain_seed)
        self.grass_gap = None if grass_gap is None else int(grass_gap)
        self.obstacle_slots: list[tuple[int, int, int]] = []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        codes = (options or {}).get("obstacles")
        self.obstacle_slots = []
        self._destroy()  # the old bodies belong to the old world; the base reset then finds nothing to destroy
        self.world = Box2D.b2World()  # an episode must not depend on the episodes this env ran before
        if codes is None:
            return super().reset(seed=seed, options=options)
        codes = [int(c) for c in codes]
        bad = [c for c in codes if c not in CODE_NAMES]
        if not codes or bad:
            raise ValueError(
                f"obstacles must be a non-empty list of codes in 0..3 (0 grass, 1 stump, 2 stairs, "
                f"3 pit), got {codes!r}"
            )
        # TerrainScript stands in for the env's Generator by duck typing (it delegates what it does not script).
        self._np_random = TerrainScript(  # type: ignore[assignment]
            np.random.default_rng(self.terrain_seed), codes, self.grass_gap, self
        )
        return super().reset(seed=None, options=options)  # no seed: a seed would replace the script

    def obstacle_start_x(self) -> list[float]:
        """World x where each recorded obstacle slot starts (same order as `obstacle_slots`)."""
        return [
            float(self.terrain_x[i]) if i < len(self.terrain_x) else float("inf") for _, _, i in self.obstacle_slots
        ]


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point="subjects.bipedal.env:ObstacleBipedalWalker", max_episode_steps=300)
