"""The parking pack's validity rule (simulator and generator roles): ``spot_free``, the goal spot is free.

The generator builds it from DescribeEnvironment's declaration, so this module imports only common/.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from common.domain.validators import Validator, flag_names
from common.space import ParamValue


def spot_free(options: Mapping[str, Any], names: Sequence[str]) -> Validator:
    """The spot an integer parameter names (1-based) has its 0/1 flag at 0, e.g. Parking's "the goal spot is free".

    YAML: ``{kind: spot_free, spot: goal_lane, flags: parked}``; flag ``parked_0`` is spot 1.
    """
    spot, prefix = options.get("spot"), options.get("flags")
    if not isinstance(spot, str) or spot not in names:
        raise ValueError(
            f"'spot_free' needs 'spot': the name of an integer parameter, got {spot!r} (known: {', '.join(names)})"
        )
    flags = flag_names(prefix, names) if isinstance(prefix, str) else []
    if not flags:
        raise ValueError(
            f"'spot_free' needs 'flags': the prefix of flag parameters <prefix>_0, <prefix>_1, ..., got {prefix!r}"
        )

    def check(values: Mapping[str, ParamValue]) -> list[str]:
        chosen = values.get(spot)
        if isinstance(chosen, bool) or not isinstance(chosen, int) or not 1 <= chosen <= len(flags):
            return []  # the domain check names a bad spot
        flag = flags[chosen - 1]
        if values.get(flag):
            return [
                f"{spot}={chosen} names an occupied spot ({flag}={values[flag]!r}); "
                f"the spot {spot} names must be free ({flag} = 0)"
            ]
        return []

    return Validator("spot_free", f"{prefix}_{{{spot}-1}} = 0 (the spot {spot} names is free)", check)
