"""MAP-Elites for policy testing, as the QD fault-diversity paper and its code run it.

Source: Q. Mazouni, H. Spieker, A. Gotlieb, M. Acher, "Testing for Fault Diversity in Reinforcement Learning",
AST 2024, Sections 3.2 and 4 (Algorithm 1 with MAP-Elites, Mouret & Clune 2015) and 5.4 (implementation); what
the paper leaves open follows the authors' published code.

1. The first ``initial_tests`` asks (default 1000, as the paper) are uniform random inputs. An ask that
   reaches the end of this phase returns only the remaining random inputs (fewer than asked), so that every
   mutation is chosen from an archive that holds their results.
2. Every told result with a finite margin enters a ``ribs.archives.GridArchive`` over the behaviour
   descriptors, ``cells`` bins per descriptor (default 50, the paper's 50x50 grid) within
   ``descriptor_bounds``. The archive objective is ``-margin``: the paper minimises the episode reward, and
   our margins are "lower = closer to failure" (the lunar_crash margin IS the episode return), so the elite
   of a cell is its lowest-margin test. Ties keep the earlier test. Descriptors outside the bounds fall into
   the edge cells (pyribs clips them, as the authors' code clamps them).
3. Afterwards every asked input is a mutant (mutation.py, ``mutation_scale`` = +-5 % of each range by
   default, the papers' operator) of the elite of a cell chosen uniformly among the occupied ones, as the
   authors' code. The paper's batch size is 1; here an ask of n draws n cells (with replacement) from the
   archive as it is, and the results update it when told.

Faults are not removed from the archive (as the paper: they are retrieved afterwards by filtering the
archive, and a failing elite keeps being mutated, which concentrates search around faults).

``descriptor_bounds`` should be given: the grid bounds decide the cells. The authors precomputed them per
environment (e.g. lunar lander x in [-0.0439, 0.2975], vy in [-0.2002, -0.0203]). If absent, they are learned
once from the results of the initial random tests (min/max per descriptor), which makes the grid depend on
the seed. Oracles without descriptors use the input normalised to [0, 1] instead (see search_support.py).
``cells`` may also be a list, one count per descriptor (Taxi's code uses one cell per integer value).

Results refused as invalid, or with a non-finite margin or descriptor, are not archived. pyribs is imported
when the archive is first built, so listing strategies does not pay its import (it pulls in torch).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

import numpy as np
from annotated_types import MinLen
from pydantic import Field

from common.space import ParameterSpace
from generator_service.strategies.base import Result, TestInput
from generator_service.strategies.mutation import mutate
from generator_service.strategies.params import Count, StrategyParamError
from generator_service.strategies.search_support import (
    AskLedger,
    BehaviourScale,
    DescriptorBounds,
    MutationParams,
    bounds_array,
    check_mutable_space,
    descriptor_bounds_field,
    usable,
)

NAME = "map_elites"


# no archive grid may have more cells than this (pyribs allocates every cell up front: ~50 bytes per cell)
MAX_GRID_CELLS = 1_000_000


class MapElitesParams(MutationParams):
    cells: Count | Annotated[list[Count], MinLen(1)] = Field(
        50, description="bins per behaviour descriptor: one count for all, or one per descriptor"
    )
    descriptor_bounds: DescriptorBounds | None = descriptor_bounds_field()


class MapElites:
    """MAP-Elites: after random initial tests, mutates the lowest-margin elite of a random occupied cell of a
    grid over the oracle's behaviour descriptors (quality-diversity search for diverse faults)."""

    source = "Mazouni et al.: Testing for Fault Diversity in Reinforcement Learning (AST 2024); Mouret & Clune 2015"
    Params = MapElitesParams

    def __init__(self, space: ParameterSpace, rng: np.random.Generator, params: MapElitesParams) -> None:
        check_mutable_space(NAME, space)
        self.space = space
        self.rng = rng
        self.initial_tests = params.initial_tests
        self.cells = list(params.cells) if isinstance(params.cells, list) else [params.cells]
        self.mutation_scale = params.mutation_scale
        self.integer_mutation, self.mutation_p = params.integer_mutation, params.mutation_p
        self.behaviour = BehaviourScale(NAME, space, bounds_array(params.descriptor_bounds))
        self._tests: list[TestInput] = []  # every archived-candidate test; the archive's solution is an index here
        self._waiting: list[tuple[int, np.ndarray, float]] = []  # (index, raw behaviour, objective) before the archive
        self._archive: Any = None
        self._asked = 0
        self._ledger: AskLedger[None] = AskLedger()

    # -- ask/tell ---------------------------------------------------------------------------------
    def ask(self, n: int) -> list[TestInput]:
        self._ledger.close()
        if n <= 0:
            return []
        if self._asked < self.initial_tests:
            batch = [self.space.sample(self.rng) for _ in range(min(n, self.initial_tests - self._asked))]
        else:
            archive = self._build_archive()
            if archive is None or archive.empty:  # nothing told yet: keep sampling at random
                batch = [self.space.sample(self.rng) for _ in range(n)]
            else:
                parents = archive.sample_elites(n)["solution"]
                batch = [
                    mutate(
                        self.space,
                        self._tests[int(i)],
                        self.rng,
                        scale=self.mutation_scale,
                        p=self.mutation_p,
                        integer=self.integer_mutation,
                    )
                    for i in parents
                ]
        for values in batch:
            self._ledger.record(values, None)
        self._asked += len(batch)
        return batch

    def tell(self, results: Sequence[Result]) -> None:
        rows = []
        for _, r in self._ledger.match(results):
            if not usable(r):
                continue
            raw = self.behaviour.raw(r)
            if raw is None:
                continue
            self._tests.append(dict(r.values))
            rows.append((len(self._tests) - 1, raw, -float(r.margin)))
        if self._archive is None:
            self._waiting.extend(rows)
        elif rows:
            self._add(rows)

    # -- inspection -------------------------------------------------------------------------------
    @property
    def archive(self) -> Any:
        """The ribs GridArchive (None until the initial phase is over); solutions are indices of ``elite``."""
        return self._archive

    def elite(self, solution: int) -> TestInput:
        return dict(self._tests[int(solution)])

    @property
    def cells_filled(self) -> int:
        return 0 if self._archive is None else len(self._archive)

    # -- internals --------------------------------------------------------------------------------
    def _build_archive(self) -> Any:
        if self._archive is not None:
            return self._archive
        if not self._waiting:
            return None
        self.behaviour.learn([raw for _, raw, _ in self._waiting])
        bounds = self.behaviour.learned_bounds()
        dims = len(bounds)
        cells = self.cells * dims if len(self.cells) == 1 else self.cells
        if len(cells) != dims:
            raise StrategyParamError(
                f"{NAME} parameter cells gives {len(cells)} count(s), but the behaviour "
                f"descriptors have {dims} value(s)"
            )
        if float(np.prod(np.asarray(cells, dtype=float))) > MAX_GRID_CELLS:
            raise StrategyParamError(
                f"{NAME} parameter cells: a grid of {' x '.join(map(str, cells))} cells "
                f"exceeds the limit of {MAX_GRID_CELLS} cells"
            )
        from ribs.archives import GridArchive  # imported here: pyribs pulls in torch (seconds)

        self._archive = GridArchive(
            solution_dim=(),
            dims=list(cells),
            ranges=[tuple(b) for b in bounds],
            seed=int(self.rng.integers(2**63)),
            solution_dtype=np.int64,
        )
        rows, self._waiting = self._waiting, []
        self._add(rows)
        return self._archive

    def _add(self, rows: list[tuple[int, np.ndarray, float]]) -> None:
        self._archive.add(
            solution=np.array([i for i, _, _ in rows], dtype=np.int64),
            objective=np.array([o for _, _, o in rows], dtype=float),
            measures=np.array([raw for _, raw, _ in rows], dtype=float),
        )
