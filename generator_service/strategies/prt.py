"""Prior Random Testing (PRT): failure-based test generation that spreads tests evenly and favours hint locations.

Source: W. Lin, J. Meng, Z. Zheng, "Failure-Based Testing for Deep Reinforcement Learning Agents",
Proc. ACM Softw. Eng. 3 (FSE), FSE178, 2026 (Section 3: Algorithms 1-3, Eqs. 4-9).

How a new test case is made (Alg. 1), on the unit cube (every dimension normalised to [0, 1]):

1. The first test case is uniform at random.
2. Every later one is built one dimension at a time. The candidate set C starts as all earlier tests.
   *Dimension Reduction* (Alg. 2) finds, in each dimension not yet assigned, the largest empty interval of C's
   projection: half of the widest gap between neighbours, or the full distance from the outermost point to
   the domain boundary (so a boundary wins over an interior gap of less than twice its size). It assigns
   the dimension with the largest one. The value is drawn by Eq. 4 with confidence lambda: interior values
   concentrate on the gap's midpoint, boundary values on the boundary, and lambda = 1 is uniform.
   *Local Recombination* (Alg. 3, Eq. 6) then keeps the ceil(tau*|C|) members of C nearest to the new value
   in that dimension, with tau = (|T|+1)^(-1/M) (the adaptive form of Alg. 1 line 7).
3. The mapping F (Eq. 8) moves the favoured boundary to each dimension's failure-prone location.

Variants (parameter ``variant``):

* ``"paper"`` (default): Alg. 1-3 and Eq. 4 as printed, with the paper's strict ``<`` in the boundary tests
  and |C'| = ceil(tau*|C|). It is the default because it is the specification the paper analyses (Eq. 4's
  lambda semantics, the boundary priority of Sec. 3.4, the cost in Eq. 9). The published code differs from
  it, and neither version reproduces the paper's Table 4 (Section 5.2, RQ2: entropy), so the code gives
  no better claim to "what was measured".
* ``"authors_code"``: the behaviour of the authors' repository as the notes describe it. (a) Early
  assignment: every remaining dimension whose largest normalised interval exceeds tau is assigned at once,
  without recombination. (b) Interior values concentrate on the quarter points of the widest gap, at
  p_k + (1 - |1-2theta|^lambda) * gap/4 measured from a random end of the gap. Boundary ties go to the
  boundary (``<=``), and the quantile is numpy's ``method='higher'``. Boundary values are drawn as in the
  paper (the code's formula has the same distribution).

Mappings F (parameter ``mapping``), applied per dimension after generation:

* ``"hints"`` (default): from the parameter's first failure hint. ``boundary``, or no hint, gives the
  identity (PRT's built-in boundary priority). ``centre`` gives F1 of Eq. 8. ``value`` v gives F_v, which
  reflects each side of v onto itself (t -> v - t below v, t -> 1 + v - t above, in normalised units). F_v
  maps both boundaries to v, preserves measure (uniform stays uniform) and equals F1 when v is the midpoint.
* ``"identity"``: F(t) = t in every dimension.
* ``"centre"``: F1 in every dimension.

Cost: the generator keeps, per dimension, the sorted projection of all tests and which test owns each
entry (the paper's matrices D and alpha, Sec. 3.6), so nothing is ever re-sorted. Dimension Reduction reads
the sorted rows: each row's largest gap is one O(n) pass. Local Recombination finds the tau-quantile
distance by introselect (``np.partition``, O(n)). It derives the sorted rows of the smaller candidate set
by filtering the current rows through a membership mask, which keeps their order and costs O(n) per row.
A new test enters each row at its rank, O(k) per row. Test k therefore costs sum_t O(tau^t k (M - t))
(Eq. 9), and N tests cost O(N^2) for a fixed M. Once ceil(tau*|C|) = |C|, C stops shrinking and no
interval changes any more, so the remaining dimensions are assigned in one pass without recomputing.
The paper's "~ O(Mk)" hides a factor of about 1/(1 - tau). That factor approaches M / ln k for large M
(about 5 for M = 47, k = 10^4).

Integer parameters are rounded after mapping and clipped into their range. Parameters with low == high stay
at that value. PRT needs a box (real and integer parameters only); any other space is refused with a
ValueError naming the first non-numeric parameter. PRT takes no feedback: ``tell`` ignores results, and
the sequence depends only on the seed. Asking n tests at once or in several batches therefore gives the same
tests, which the campaign runner relies on when it resumes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal, get_args

import numpy as np
from pydantic import Field

from common.space import Parameter, ParameterSpace
from generator_service.strategies.base import Result, TestInput, require_numeric_box
from generator_service.strategies.params import Number, StrategyParams
from generator_service.strategies.unit_cube import UnitCube

PRTVariant = Literal["paper", "authors_code"]
PRTMapping = Literal["hints", "identity", "centre"]
VARIANTS: tuple[str, ...] = get_args(PRTVariant)

# lambda = 20 is the value the paper uses in every experiment (Sec. 4.3, "Confidence"), and also the authors'
# code constant. With it, the Eq. 4 deviation |1-2*theta|^20 exceeds 10 % of the half-gap with probability
# 1 - 0.1^(1/20) = 10.9 %, and exceeds 2 % with probability 17.8 %: most tests land on the midpoint or
# boundary, and the rest keep the spread random.
DEFAULT_LAMBDA = 20.0

_INTERIOR, _LEFT, _RIGHT = 0, 1, 2


def eq4(theta: float, inf: float, sup: float, lam: float) -> float:
    """Eq. 4: a value in [inf, sup] that concentrates on (inf + sup)/2 as lam grows (lam = 1: uniform)."""
    mid, half = 0.5 * (inf + sup), 0.5 * (sup - inf)
    if theta <= 0.5:
        return mid - (1.0 - 2.0 * theta) ** lam * half
    return mid + (2.0 * theta - 1.0) ** lam * half


class PRTGenerator:
    """PRT's point generator on the unit cube [0, 1]^dims (Alg. 1 lines 2-17; the mapping F is not applied).

    ``next()`` proposes the next test case and records it. ``add(point)`` records any point, for example
    to start from given tests. ``propose()`` draws the next point without recording it.

    State: the points in insertion order, and per dimension the sorted projection D (dims x n) with the
    owner matrix alpha (dims x n, which point each entry of D belongs to), as in Sec. 3.6.
    """

    def __init__(
        self, dims: int, rng: np.random.Generator, lam: float = DEFAULT_LAMBDA, variant: str = "paper"
    ) -> None:
        if dims < 1:
            raise ValueError(f"PRT needs at least one dimension, got {dims}")
        if not (lam >= 1.0 and math.isfinite(lam)):
            raise ValueError(f"PRT's confidence lambda must be a finite number >= 1, got {lam!r}")
        if variant not in VARIANTS:
            raise ValueError(f"PRT variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
        self.dims = int(dims)
        self.rng = rng
        self.lam = float(lam)
        self.variant = variant
        self._authors = variant == "authors_code"
        self._count = 0
        # T, D and alpha of the O(MN^2) realisation, (re)allocated by _reserve.
        self._points: np.ndarray
        self._sorted: np.ndarray
        self._owner: np.ndarray
        self._reserve(64)

    def __len__(self) -> int:
        return self._count

    @property
    def points(self) -> np.ndarray:
        """The recorded points in insertion order, shape (n, dims) (a copy)."""
        return self._points[: self._count].copy()

    def sorted_projection(self, dim: int) -> tuple[np.ndarray, np.ndarray]:
        """Dimension ``dim``'s coordinates of the recorded points, ascending, and the owning points' indices."""
        return self._sorted[dim, : self._count].copy(), self._owner[dim, : self._count].copy()

    def next(self) -> np.ndarray:
        """Generates the next test case, records it, and returns it."""
        point = self.propose()
        self.add(point)
        return point

    def add(self, point: Sequence[float] | np.ndarray) -> None:
        """Records a point of [0, 1]^dims: a binary search and one O(n) shift per sorted row."""
        x = np.asarray(point, dtype=float).reshape(-1)
        if x.shape != (self.dims,):
            raise ValueError(f"a PRT point needs {self.dims} coordinates, got {x.shape[0]}")
        if not (np.all(np.isfinite(x)) and np.all(x >= 0.0) and np.all(x <= 1.0)):
            raise ValueError(f"a PRT point must lie in [0, 1]^{self.dims}, got {x.tolist()}")
        k = self._count
        if k == self._points.shape[0]:
            self._reserve(2 * k)
        self._points[k] = x
        sorted_, owner = self._sorted, self._owner
        pos = np.empty(self.dims, dtype=np.int64)
        for i in range(self.dims):
            p = pos[i] = np.searchsorted(sorted_[i, :k], x[i], side="right")  # after equal values
            if p < k:  # numpy copies overlapping slices safely
                sorted_[i, p + 1 : k + 1] = sorted_[i, p:k]
                owner[i, p + 1 : k + 1] = owner[i, p:k]
        every = np.arange(self.dims)
        sorted_[every, pos] = x
        owner[every, pos] = k
        self._count = k + 1

    def propose(self) -> np.ndarray:
        """The next test case of Alg. 1 (not recorded): uniform if nothing is recorded yet."""
        k = self._count
        if k == 0:
            return self.rng.random(self.dims)
        tau = (k + 1) ** (-1.0 / self.dims)
        out = np.empty(self.dims)
        rows = list(range(self.dims))  # the original dimension of each row still to assign
        # C's sorted projections, one row per unassigned dimension: first views of D and alpha, then filtered
        # copies that alternate between two scratch buffers
        values, owners = self._sorted[:, :k], self._owner[:, :k]
        first, flip = True, 0
        while True:
            # Alg. 2: each row's largest empty interval (already normalised: the cube is [0, 1])
            r, n = values.shape
            if n > 1:
                scratch = self._values_buf[flip][: r * (n - 1)].reshape(r, n - 1)  # free until _recombine
                gaps = np.subtract(values[:, 1:], values[:, :-1], out=scratch)
                half = gaps.max(axis=1) * 0.5
            else:
                half = np.zeros(values.shape[0])
            interval = np.maximum(np.maximum(half, values[:, 0]), 1.0 - values[:, -1])
            if self._authors:
                early = interval > tau
                if early.any():
                    for i in np.flatnonzero(early):
                        out[rows[i]] = self._place(values[i], float(half[i]))
                    if early.all():
                        return out
                    late = ~early
                    values, owners, half, interval = values[late], owners[late], half[late], interval[late]
                    rows = [rows[i] for i in np.flatnonzero(late)]
                    first = False  # fresh copies now, no longer views of D and alpha
            n = values.shape[1]
            m = self._kept_count(n, tau)
            if m == n:
                # Local Recombination keeps all of C from here on, so no row's interval changes any more: the
                # remaining rows are assigned in the order repeated argmax would take (stable, descending)
                for i in np.argsort(-interval, kind="stable"):
                    out[rows[i]] = self._place(values[i], float(half[i]))
                return out
            j = int(interval.argmax())
            value = self._place(values[j], float(half[j]))
            out[rows.pop(j)] = value
            if not rows:
                return out
            values, owners = self._recombine(values, owners, j, value, m, first, flip)
            first, flip = False, 1 - flip

    def _kept_count(self, n: int, tau: float) -> int:
        """How many of n candidates Local Recombination keeps (before ties at the threshold)."""
        if self._authors:  # np.quantile(dist, tau, method="higher"): 0-based index ceil(tau*(n-1))
            m = math.ceil(tau * (n - 1)) + 1
        else:  # the ceil(tau*|C|)-th smallest distance (Alg. 3, Eq. 7)
            m = math.ceil(tau * n)
        return min(max(m, 1), n)

    # -- Alg. 2: the value of the sparsest dimension --------------------------------------------------
    def _place(self, row: np.ndarray, half: float) -> float:
        """Where the largest interval of a sorted row lies (Alg. 2 lines 13-27), and a value drawn in it."""
        rng, lam = self.rng, self.lam
        left, right = float(row[0]), 1.0 - float(row[-1])
        where, interval = _INTERIOR, half if row.size > 1 else 0.0
        if (interval <= left) if self._authors else (interval < left):
            where, interval = _LEFT, left
        if (interval <= right) if self._authors else (interval < right):
            where = _RIGHT
        if where == _LEFT:  # lines 20-21: theta ~ U(0.5, 1) on [2*inf - p_1, p_1]
            value = eq4(0.5 + 0.5 * float(rng.random()), -left, left, lam)
        elif where == _RIGHT:  # lines 25-26: theta ~ U(0, 0.5) on [p_n, 2*sup - p_n]
            pn = float(row[-1])
            value = eq4(0.5 * float(rng.random()), pn, 2.0 - pn, lam)
        else:  # lines 13-16: theta ~ U(0, 1) on the widest gap [p_k, p_k+1]
            at = int((row[1:] - row[:-1]).argmax())
            lo, hi = float(row[at]), float(row[at + 1])
            theta = float(rng.random())
            if self._authors:  # the authors' code: concentrates on the quarter points, not the midpoint
                offset = 0.5 * (1.0 - abs(1.0 - 2.0 * theta) ** lam) * 0.5 * (hi - lo)
                value = lo + offset if theta < 0.5 else hi - offset
            else:
                value = eq4(theta, lo, hi, lam)
            value = min(max(value, lo), hi)
        return min(max(value, 0.0), 1.0)

    # -- Alg. 3: Local Recombination ------------------------------------------------------------------
    def _recombine(
        self, values: np.ndarray, owners: np.ndarray, j: int, value: float, m: int, first: bool, flip: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Keeps the members of C whose coordinate j lies within the m-th smallest distance to ``value``, and
        returns their sorted projections in the other rows (row j dropped): O(n) per row, no sorting.

        ``first``: values/owners are the views D[:, :k] / alpha[:, :k]. The result goes to scratch buffer
        ``flip``, which must not hold the input.
        """
        r, n = values.shape
        dist = np.abs(values[j] - value)
        threshold = np.partition(dist, m - 1)[m - 1]  # introselect, O(n)
        kept = owners[j][dist <= threshold]
        member = self._member
        member[kept] = True
        mask = np.take(member, owners, out=self._mask_buf[: r * n].reshape(r, n), mode="clip")  # (r, n): in C'?
        member[kept] = False
        mask[j] = False  # row j is assigned: drop it
        where = np.flatnonzero(mask)  # row-major, so every row keeps its ascending order
        size, total = kept.size, where.size
        if first:  # positions in the (dims, capacity) buffers behind the views
            capacity = self._sorted.shape[1]
            rows = np.floor_divide(where, n, out=self._owner_buf[flip][:total])  # consumed before the takes
            rows *= capacity - n
            where += rows
            src_values, src_owners = self._sorted.ravel(), self._owner.ravel()
        else:
            src_values, src_owners = values.ravel(), owners.ravel()
        out_values = np.take(src_values, where, out=self._values_buf[flip][:total], mode="clip")
        out_owners = np.take(src_owners, where, out=self._owner_buf[flip][:total], mode="clip")
        return out_values.reshape(r - 1, size), out_owners.reshape(r - 1, size)

    def _reserve(self, capacity: int) -> None:
        """(Re)allocates the state and scratch buffers for ``capacity`` points, keeping the recorded ones."""
        k, dims = self._count, self.dims
        points = np.empty((capacity, dims))
        sorted_ = np.empty((dims, capacity))  # D: row i holds every point's i-th coordinate, ascending
        owner = np.empty((dims, capacity), dtype=np.int64)  # alpha: the point each entry of D belongs to
        if k:
            points[:k], sorted_[:, :k], owner[:, :k] = self._points[:k], self._sorted[:, :k], self._owner[:, :k]
        self._points, self._sorted, self._owner = points, sorted_, owner
        self._member = np.zeros(capacity, dtype=bool)  # membership of C' (all False between uses)
        size = dims * capacity
        self._values_buf = (np.empty(size), np.empty(size))  # filtered sorted projections, ping-pong
        self._owner_buf = (np.empty(size, dtype=np.int64), np.empty(size, dtype=np.int64))
        self._mask_buf = np.empty(size, dtype=bool)


def hint_cut(param: Parameter, mapping: str) -> float | None:
    """The normalised point v whose two sides F reflects (see the module docstring); None is the identity."""
    if mapping == "identity":
        return None
    if mapping == "centre":
        return 0.5
    hint = param.hints[0] if param.hints else None
    if hint is None or hint.kind == "boundary":
        return None
    if hint.kind == "centre":
        return 0.5
    low, high = float(param.low), float(param.high)  # type: ignore[arg-type]
    if hint.value is None or not low <= hint.value <= high:
        raise ValueError(
            f"parameter {param.name!r}: failure hint value {hint.value!r} lies outside its domain {param.domain_text()}"
        )
    return (hint.value - low) / (high - low)


def apply_mapping(u: np.ndarray, cuts: np.ndarray) -> np.ndarray:
    """F per dimension on normalised values: identity where cuts is NaN, else reflect each side of the cut."""
    reflected = np.where(u <= cuts, cuts - u, cuts + 1.0 - u)
    return np.clip(np.where(np.isnan(cuts), u, reflected), 0.0, 1.0)


class PRTParams(StrategyParams):
    lam: Number = Field(DEFAULT_LAMBDA, ge=1.0, description="confidence lambda of Eq. 4 (1 = uniform)")
    variant: PRTVariant = Field("paper", description="Alg. 1-3 as printed, or the authors' code")
    mapping: PRTMapping = Field("hints", description="the mapping F of Eq. 8")


class PriorRandomTesting:
    """Prior Random Testing: each test fills the sparsest region, favouring each parameter's failure hint
    (boundary, centre or a value); no feedback needed."""

    source = "Lin, Meng, Zheng: Failure-Based Testing for Deep Reinforcement Learning Agents (FSE 2026), Alg. 1-3"
    Params = PRTParams

    def __init__(self, space: ParameterSpace, rng: np.random.Generator, params: PRTParams) -> None:
        lam, variant, mapping = params.lam, params.variant, params.mapping
        require_numeric_box(space, "prt", "needs a box of real/integer parameters")
        self.space = space
        self.lam, self.variant, self.mapping = float(lam), variant, mapping
        self._cube = UnitCube(space)  # PRT generates the dimensions whose low < high; fixed ones keep their value
        active = [space.parameters[i] for i in self._cube.active]
        cuts = [hint_cut(p, mapping) for p in active]
        self._cuts = np.array([np.nan if c is None else c for c in cuts], dtype=float)
        self._generator = PRTGenerator(len(active), rng, lam, variant) if len(active) else None

    def ask(self, n: int) -> list[TestInput]:
        return [self._values(self._generator.next() if self._generator is not None else np.empty(0)) for _ in range(n)]

    def tell(self, results: Sequence[Result]) -> None:
        """PRT is not feedback-driven: the next tests depend only on the earlier ones, never on verdicts."""

    def _values(self, u: np.ndarray) -> TestInput:
        return self._cube.values(apply_mapping(u, self._cuts) if self._cube.active.size else u)
