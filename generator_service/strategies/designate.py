"""DESIGNATE: NSGA-II extended with an archive, searching simulator parameters where a vision DNN does worst.

"Search-based DNN Testing and Retraining with GAN-enhanced Simulations", Section III-C, Algorithms 1 and 2 (the
paper extends pymoo's NSGA-II; this module uses pymoo's operators, non-dominated sorting and crowding):

1. Seeding: ``seed_populations`` (r = 5) random populations of ``population_size`` (N = 12) individuals are
   evaluated; P0 is the population holding the individual with the lowest F_accuracy, and the archive is updated
   with every individual of P0 (Algorithm 1, designate_diversity_archive.py).
2. Each generation: parents by binary tournament on (rank, crowding distance); offspring Q by simulated binary
   crossover (per-mating probability 0.7) and polynomial mutation (per-individual probability 0.3), pymoo's
   duplicate elimination as in its NSGA-II; Q is evaluated (one ask of N inputs); for every individual of
   R = P u Q the archive is updated, then F_similarity is recomputed for all of R against the changed archive
   (Eq. 8); R is ranked (non-dominated sorting, crowding distance) and its best N survive. After ``generations``
   generations (100) the strategy asks nothing more: the campaign ends 'strategy_exhausted'.

Objectives (both minimised): F_accuracy is the oracle's margin (iou_car / miou: the IoU of a relevant image, 2
for an irrelevant one); an input the subject refuses (an off-road pose, stored invalid and never run) gets 2
here, as the paper assigns invalid individuals "a high fitness". F_similarity uses the vector after the oracle's
7 scalar descriptors: the DNN encoder's features (iou_car / miou), or a pixel digest of the judged image
(iou_car_pix / miou_pix, for ``variant: pix``).

Variants: ``designate`` (both objectives, feature distance), ``single`` (F_accuracy only; the archive keeps every
relevant image, as the paper's DESIGNATE_single), ``pix`` (pixel distance; run it with the *_pix oracle).
DESIGNATE_NoGAN is the campaign's ``observation_translator: none``, not a parameter here.

Thresholds: ``t_diversity`` (the paper's T_diversity, Table I: 18 for ResNet50 features, 0.02 for pixels) comes
from the parameter, else from a calibration file (``thresholds``, written by ``gauntlet designate calibrate``),
else from the seeding itself: the median pairwise distance over the r x N random seed individuals, the paper's
rule on a smaller sample (``diversity_percentile`` picks another percentile than the median). ``t_relevance`` (or
the file's) tightens the oracle's delta_IoU relevance filter: an image with delta_IoU above it gets F_accuracy = 2
(it cannot loosen the subject's own threshold).

Every random choice comes from the campaign's seeded generator, so a resumed campaign replays the same asks.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal

import numpy as np
from pydantic import Field

from common.image_diversity import DIVERSITY_PERCENTILE, IRRELEVANT, diversity_threshold
from common.space import ParameterSpace
from generator_service.strategies.base import Result, TestInput, require_numeric_box
from generator_service.strategies.designate_diversity_archive import Archive, Distance, pairwise
from generator_service.strategies.params import ARTIFACT_PATH, Integer, Number, StrategyParams
from generator_service.strategies.search_support import AskLedger

NAME = "designate"
SCALARS = 7  # iou_judged, iou_simulated, iou_realistic, delta_iou, class_share, on_road, relevant
DELTA_IOU = 3  # the descriptor index of delta_IoU


class DesignateParams(StrategyParams):
    variant: Literal["designate", "single", "pix"] = Field(
        "designate",
        description="designate: F_accuracy + F_similarity on features; single: F_accuracy only; "
        "pix: F_similarity on pixel digests (use the iou_car_pix / miou_pix oracle)",
    )
    population_size: Integer = Field(12, ge=2, description="N, individuals per population (Table I: 12)")
    seed_populations: Integer = Field(5, ge=1, description="r, random populations evaluated for seeding (5)")
    generations: Integer = Field(100, ge=0, description="g_max, generations after seeding (Table I: 100)")
    crossover_p: Number = Field(0.7, ge=0.0, le=1.0, description="SBX probability per mating (Table I: 0.7)")
    crossover_eta: Number = Field(15.0, gt=0.0, description="SBX distribution index (pymoo's default)")
    mutation_p: Number = Field(0.3, ge=0.0, le=1.0, description="polynomial mutation probability per individual")
    mutation_eta: Number = Field(20.0, gt=0.0, description="polynomial mutation distribution index (pymoo's)")
    t_diversity: Number | None = Field(
        None,
        ge=0.0,
        description="T_diversity; null: the thresholds file's, else the median pairwise distance "
        "over the seed populations",
    )
    diversity_percentile: Number = Field(
        DIVERSITY_PERCENTILE,
        ge=0.0,
        le=100.0,
        description="when t_diversity comes from the seed populations: this percentile of their pairwise "
        "distances (50, the median: the paper's rule; lower gives a larger archive)",
    )
    t_relevance: Number | None = Field(
        None,
        description="delta_IoU above this gives F_accuracy = 2; null: the thresholds file's, else only the "
        "oracle's own filter",
    )
    thresholds: str | None = Field(
        None,
        description="calibration file (JSON from gauntlet designate calibrate) giving t_relevance and t_diversity",
        json_schema_extra={"allowed": "a file path", ARTIFACT_PATH: True},
    )


@dataclass
class Individual:
    key: int
    x: np.ndarray  # the input normalised to [0, 1] per parameter (pymoo's variables)
    values: TestInput
    f_accuracy: float = IRRELEVANT
    vector: np.ndarray | None = None
    f_similarity: float = IRRELEVANT
    told: bool = False


@dataclass(frozen=True)
class CalibrationFile:
    """What a campaign takes from a calibration file (``gauntlet designate calibrate``)."""

    t_relevance: float | None
    t_diversity: float
    diversity_percentile: float | None  # the percentile T_diversity was taken at, when the file records it


def read_thresholds(path: str, distance: Distance) -> CalibrationFile:
    """T_relevance and T_diversity for ``distance`` from a calibration file; ValueError naming what is wrong."""
    try:
        data = json.loads(Path(path).read_text())
        t_div = data["t_diversity_features" if distance == "features" else "t_diversity_pixels"]
        t_rel = data.get("t_relevance")
        percentile = data.get("diversity_percentile")
        return CalibrationFile(
            None if t_rel is None else float(t_rel),
            float(t_div),
            None if percentile is None else float(percentile),
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{NAME} parameter thresholds: {path!r} is not a calibration file ({exc})") from None


class Designate:
    """DESIGNATE: NSGA-II over (F_accuracy, F_similarity) with an archive of diverse, relevant inputs on which the
    DNN does worst; the paper's variants single and pix by parameter."""

    source = "Search-based DNN Testing and Retraining with GAN-enhanced Simulations (DESIGNATE), Section III-C"
    Params = DesignateParams

    def __init__(self, space: ParameterSpace, rng: np.random.Generator, params: DesignateParams) -> None:
        require_numeric_box(space, NAME, "searches real/integer ranges with SBX")
        # pymoo is imported here: listing strategies should not pay for it
        from pymoo.algorithms.moo.nsga2 import binary_tournament
        from pymoo.core.duplicate import DefaultDuplicateElimination
        from pymoo.core.mating import Mating
        from pymoo.core.problem import Problem
        from pymoo.operators.crossover.sbx import SBX
        from pymoo.operators.mutation.pm import PM
        from pymoo.operators.selection.tournament import TournamentSelection
        from pymoo.operators.survival.rank_and_crowding import RankAndCrowding

        self.space = space
        self.rng = rng
        self.params = params
        self.distance: Distance = "pixels" if params.variant == "pix" else "features"
        self.objectives = 1 if params.variant == "single" else 2
        calibration = read_thresholds(params.thresholds, self.distance) if params.thresholds else None
        file_relevance = calibration.t_relevance if calibration else None
        self.t_relevance = params.t_relevance if params.t_relevance is not None else file_relevance
        # where T_diversity comes from, for ListArchive's summary: the parameter, the file, else the seeds
        threshold, self.t_diversity_source, self.diversity_percentile = params.t_diversity, "parameter", None
        if threshold is None and calibration is not None:
            threshold, self.t_diversity_source = calibration.t_diversity, "thresholds file"
            self.diversity_percentile = calibration.diversity_percentile
        if threshold is None:
            self.t_diversity_source, self.diversity_percentile = "seed populations", params.diversity_percentile
        self._calibrate = threshold is None
        self.archive = Archive(threshold or 0.0, self.distance, keep_all=params.variant == "single")
        self.low, self.high = space.bounds()
        dims = len(space.names)
        self._problem = Problem(n_var=dims, n_obj=self.objectives, xl=np.zeros(dims), xu=np.ones(dims))
        self._survival = RankAndCrowding()
        self._mating = Mating(
            TournamentSelection(func_comp=binary_tournament),
            SBX(prob=params.crossover_p, eta=params.crossover_eta),
            PM(prob=params.mutation_p, eta=params.mutation_eta),
            eliminate_duplicates=DefaultDuplicateElimination(),
        )
        # what pymoo's binary_tournament reads from its algorithm: the comparison and the random source
        self._tournament = SimpleNamespace(tournament_type="comp_by_rank_and_crowding", random_state=rng)
        self._next_key = 0
        self.generation = -1  # -1 while seeding
        self.population: list[Individual] = []
        self._batch: list[Individual] = []  # the phase being evaluated: the seeds, then each generation's Q
        self._pending: list[Individual] = []  # not yet asked
        self._ledger: AskLedger[int] = AskLedger()
        self.evaluations = 0
        n_seeds = params.seed_populations * params.population_size
        self._start_phase([self._individual(x) for x in rng.random((n_seeds, dims))])

    # -- ask/tell ---------------------------------------------------------------------------------
    def ask(self, n: int) -> list[TestInput]:
        for key in self._ledger.close():  # asked but never told (a stop mid-batch): an input that did not run
            self._by_key(key).told = True
        self._advance_if_done()
        batch, self._pending = self._pending[: max(n, 0)], self._pending[max(n, 0) :]
        for ind in batch:
            self._ledger.record(ind.values, ind.key)
        return [dict(ind.values) for ind in batch]

    def tell(self, results: Sequence[Result]) -> None:
        for key, result in self._ledger.match(results):
            ind = self._by_key(key)
            ind.f_accuracy, ind.vector = self._fitness(result)
            ind.told = True
            self.evaluations += 1
        self._advance_if_done()

    # -- inspection -------------------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        return self.generation >= self.params.generations and not self._pending

    def archive_inputs(self) -> list[tuple[TestInput, float]]:
        """The archive's inputs with their F_accuracy, in archive order."""
        return [(dict(m.values), m.f_accuracy) for m in self.archive.members]

    def archive_summary(self) -> dict[str, Any]:
        """What the archive is built with (the generator's ListArchive summary; fields of ArchiveSummary)."""
        summary: dict[str, Any] = {
            "variant": self.params.variant,
            "distance": self.distance,
            "t_diversity": self.archive.threshold,
            "t_diversity_source": self.t_diversity_source,
        }
        if self.t_relevance is not None:
            summary["t_relevance"] = self.t_relevance
        if self.diversity_percentile is not None:
            summary["diversity_percentile"] = self.diversity_percentile
        return summary

    # -- the algorithm ----------------------------------------------------------------------------
    def _fitness(self, result: Result) -> tuple[float, np.ndarray | None]:
        """(F_accuracy, the vector F_similarity compares) of one told result."""
        margin = float(result.margin)
        if result.invalid or not math.isfinite(margin):
            return IRRELEVANT, None
        descriptors = np.asarray(result.descriptors, dtype=np.float64)
        vector = descriptors[SCALARS:]
        f_accuracy = min(margin, IRRELEVANT)
        if self.t_relevance is not None and len(descriptors) > DELTA_IOU and descriptors[DELTA_IOU] > self.t_relevance:
            f_accuracy = IRRELEVANT
        known = next((m.vector for m in self.archive.members), None)
        if known is not None and known.shape != vector.shape:
            raise ValueError(
                f"{NAME}: a result carries {vector.size} values after the {SCALARS} scalar descriptors, earlier ones "
                f"{known.size}: the oracle must give the same feature vector or pixel digest for every image"
            )
        return f_accuracy, vector

    def _advance_if_done(self) -> None:
        if self._pending or not all(ind.told for ind in self._batch):
            return
        if self.generation < 0:
            self._finish_seeding()
        elif self._batch:
            self._finish_generation()
        else:
            return
        self._batch = []
        if self.generation < self.params.generations:
            self._start_phase(self._offspring())

    def _finish_seeding(self) -> None:
        seeds, size = self._batch, self.params.population_size
        if self._calibrate:  # the paper's rule (median pairwise distance of random images) on the seed images
            vectors = [ind.vector for ind in seeds if ind.vector is not None]
            distances = pairwise(vectors, self.distance)
            self.archive.threshold = (
                diversity_threshold(distances, self.params.diversity_percentile) if len(vectors) > 1 else 0.0
            )
        best = min(range(len(seeds)), key=lambda i: seeds[i].f_accuracy)
        first = best // size * size
        population = seeds[first : first + size]
        for ind in population:
            self.archive.update(ind.key, ind.values, ind.f_accuracy, ind.vector)
        self.population = self._survive(population)
        self.generation = 0

    def _finish_generation(self) -> None:
        merged = self.population + self._batch
        for ind in merged:
            self.archive.update(ind.key, ind.values, ind.f_accuracy, ind.vector)
        self.population = self._survive(merged)
        self.generation += 1

    def _survive(self, individuals: list[Individual]) -> list[Individual]:
        """F_similarity recomputed against the archive as it now is, then pymoo's rank-and-crowding survival
        (which also stores rank and crowding on the survivors, for the next tournament)."""
        from pymoo.core.population import Population

        for ind in individuals:
            ind.f_similarity = self.archive.f_similarity(ind.key, ind.vector)
        pop = Population.new("X", np.stack([ind.x for ind in individuals]), "F", self._objectives(individuals))
        pop.set("key", np.array([ind.key for ind in individuals]))
        survivors = self._survival.do(self._problem, pop, n_survive=self.params.population_size, random_state=self.rng)
        self._ranked = survivors
        return [self._by_key(int(k)) for k in survivors.get("key")]

    def _objectives(self, individuals: list[Individual]) -> np.ndarray:
        columns = [[ind.f_accuracy for ind in individuals]]
        if self.objectives == 2:
            columns.append([ind.f_similarity for ind in individuals])
        return np.array(columns, dtype=np.float64).T

    def _offspring(self) -> list[Individual]:
        off = self._mating.do(
            self._problem,
            self._ranked,
            self.params.population_size,
            algorithm=self._tournament,
            random_state=self.rng,
        )
        return [self._individual(np.clip(x, 0.0, 1.0)) for x in off.get("X")]

    # -- bookkeeping ------------------------------------------------------------------------------
    def _start_phase(self, individuals: list[Individual]) -> None:
        self._batch = individuals
        self._pending = list(individuals)
        self._index = {ind.key: ind for ind in [*self.population, *individuals]}

    def _by_key(self, key: int) -> Individual:
        return self._index[key]

    def _individual(self, x: np.ndarray) -> Individual:
        values: TestInput = {}
        for p, lo, hi, xi in zip(self.space.parameters, self.low, self.high, x):
            value = lo + float(xi) * (hi - lo)
            values[p.name] = int(round(value)) if p.kind == "integer" else float(value)
        self._next_key += 1
        return Individual(self._next_key, np.asarray(x, dtype=np.float64), values)
