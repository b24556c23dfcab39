"""The QD fault-diversity metric core (analysis_service/fault_diversity.py) and the "nearby" integer mutation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis_service.fault_diversity import (
    Grid,
    checkpoints_for,
    improvement,
    quartiles,
    relative_to_baseline,
    run_curves,
)
from common.space import ParameterSpace
from generator_service.strategies.mutation import mutate

GRID = Grid((0.0, 0.0), (1.0, 1.0), (2, 2))


def test_curves_count_distinct_faults_cells_and_sparsity() -> None:
    inputs = ["a", "b", "a", "c", "d", "e", "a", "f"]
    failed = [True, False, True, True, False, True, True, True]
    # cells: (0,0) (1,1) (0,0) (0,1) (1,0) (1,1) (0,0) clamped (1,1)
    descriptors = [(0.1, 0.1), (0.9, 0.9), (0.2, 0.2), (0.1, 0.8), (0.7, 0.3), (0.6, 0.6), (0.1, 0.1), (5.0, 5.0)]
    states = [(0.0,), (1.0,), (0.0,), (3.0,), (4.0,), (6.0,), (0.0,), (10.0,)]
    curves = run_curves(inputs, failed, descriptors, states, GRID, [2, 4, 8])
    assert curves.faults == [1, 2, 4]  # a counted once; the repeated a adds nothing; a, c, e, f at the end
    assert curves.bs == [2, 3, 4]
    assert curves.fbs == [1, 2, 3]  # (0,0), (0,1), then (1,1) from e and f
    # FS at 8 tests: distinct states {0, 1, 3, 4, 6, 10}; mean distance to the 3 nearest, median over points
    per_point = {
        0: (1 + 3 + 4) / 3,
        1: (1 + 2 + 3) / 3,
        3: (1 + 2 + 3) / 3,
        4: (1 + 2 + 3) / 3,
        6: (2 + 3 + 4) / 3,
        10: (4 + 6 + 7) / 3,
    }
    assert curves.fs[-1] == pytest.approx(float(np.median(list(per_point.values()))))
    assert math.isnan(curves.fs[0]) and math.isnan(curves.ffs[1])  # <= 3 distinct points: undefined
    # failing states at the end: {0, 3, 6, 10}
    assert curves.ffs[-1] == pytest.approx(
        float(np.median([(3 + 6 + 10) / 3, (3 + 3 + 7) / 3, (3 + 4 + 6) / 3, (4 + 7 + 10) / 3]))
    )


def test_helpers_and_bad_input() -> None:
    assert checkpoints_for(120) == [50, 100, 120] and checkpoints_for(100) == [50, 100]
    q1, med, q3 = quartiles([[1, 10], [2, 20], [3, 30]])
    assert med.tolist() == [2, 20] and q1.tolist() == [1.5, 15] and q3.tolist() == [2.5, 25]
    assert relative_to_baseline([[2.0, np.nan], [4.0, 1.0]], [[3.0, 2.0], [3.0, 2.0]]).tolist() == [1.0, 0.5]
    assert improvement(13, 10) == pytest.approx(30.0)
    with pytest.raises(ValueError, match="same length"):
        run_curves(["a"], [True, False], [(0, 0)], None, GRID, [1])
    with pytest.raises(ValueError, match="low must be < high"):
        Grid((1.0,), (0.0,), (5,))


INTS = ParameterSpace.from_config(
    [
        {"name": "row", "kind": "integer", "low": 0, "high": 10},
        {"name": "col", "kind": "integer", "low": 0, "high": 10},
        {"name": "x", "low": 0.0, "high": 1.0},
    ]
)


def test_nearby_integer_mutation_moves_one_coordinate_towards_near_values() -> None:
    rng = np.random.default_rng(0)
    parent = {"row": 0, "col": 5, "x": 0.5}
    children = [mutate(INTS, parent, rng, p=0.0, integer="nearby") for _ in range(3000)]
    changed = [sum(c[k] != parent[k] for k in ("row", "col")) for c in children]
    assert set(changed) == {1}  # p = 0: exactly one integer coordinate, never left in place
    rows = [c["row"] for c in children if c["row"] != 0]
    assert rows.count(1) > 3 * rows.count(10) > 0  # weight 1/distance: the neighbour is ten times likelier
    assert all(INTS.violations(c) == [] for c in children)
    many = [mutate(INTS, parent, rng, p=1.0, integer="nearby") for _ in range(50)]
    assert all(c["row"] != 0 and c["col"] != 5 for c in many)
    with pytest.raises(ValueError, match="shift, nearby"):
        mutate(INTS, parent, rng, integer="bogus")
