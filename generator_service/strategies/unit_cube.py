"""The unit cube over a box space's free dimensions, and the test input a point of it stands for.

Strategies that generate in [0, 1]^d (PRT's recombination, G-Model's diffusion samples) generate only the
dimensions whose range is not a single value; fixed ones (low == high) keep their value. A point is scaled
to the parameters' bounds, clipped, and integer parameters are rounded into their range.
"""

from __future__ import annotations

import numpy as np

from common.space import ParameterSpace
from generator_service.strategies.base import TestInput


class UnitCube:
    def __init__(self, space: ParameterSpace) -> None:
        self.space = space
        self.low, self.high = space.bounds()
        self.integer = np.array([p.kind == "integer" for p in space.parameters])
        self.active = np.flatnonzero(self.high > self.low)  # the dimensions a strategy generates

    def values(self, u: np.ndarray) -> TestInput:
        """The test input of ``u`` in [0, 1]^len(active) (out-of-range coordinates land on the bounds)."""
        x = self.low.copy()
        if self.active.size:
            lo, hi = self.low[self.active], self.high[self.active]
            x[self.active] = lo + u * (hi - lo)
        x = np.clip(x, self.low, self.high)
        out: TestInput = {}
        for i, param in enumerate(self.space.parameters):
            if self.integer[i]:
                out[param.name] = int(min(max(round(float(x[i])), int(param.low)), int(param.high)))  # type: ignore[arg-type]
            else:
                out[param.name] = float(x[i])
        return out
