"""Step 2 of search-based testing of RL: the safety test suites ST, IT(is) and AC(k), as a campaign strategy.

"Search-Based Testing of Reinforcement Learning" (IJCAI-ECAI 2022), Section 4. Every test case is a prefix of the
reference action trace τ_A,ref (from the DFS artifact), replayed open loop from s0, after which the agent acts for
l steps:

* ST: the prefix ending in boundary state i (length DB[i]); |ST| = |DB|;
* IT(is): the prefixes of length DB[i] + off for -is <= off <= is, clipped to [0, |τ_ref|] (duplicates of one
  boundary state dropped); |IT(is)| <= (2·is + 1)·|DB|;
* AC(k): the prefix of length DB[i] − k (clipped at 0) followed by each of the |A|^k action combinations, A being
  the agent's action set; |AC(k)| = |A|^k·|DB|;
* RS (ours, not the paper's): `count` prefixes whose lengths are drawn uniformly from 0..|τ_ref|−1 (the agent starts
  from a random state on τ_ref) — the baseline that tells whether boundary states are where agents fail.

Run with the oracle ``trace_safety`` and ``repetitions`` n (the paper: n = 10, l = 40): each execution's
failed_repetitions / repetitions is the test case's fail frequency.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BeforeValidator, Field

from common.generated.gauntlet.v1 import simulator_pb2
from common.space import ParameterSpace
from common.test_case import TestCase, trace_case
from generator_service.search_based.artifact import read_reference
from generator_service.strategies.base import Result
from generator_service.strategies.params import ARTIFACT_PATH, Integer, StrategyParams

SOURCE = "Search-Based Testing of Reinforcement Learning (IJCAI-ECAI 2022)"


def _path_text(value: Any) -> Any:
    return str(value) if isinstance(value, Path) else value


ArtifactPath = Annotated[str, BeforeValidator(_path_text)]


def reference_field() -> Any:
    return Field(
        "",
        description="the DFS's reference artifact (a gauntlet.search_reference.v1 JSON file)",
        json_schema_extra={"allowed": "a file path", ARTIFACT_PATH: True},
    )


def suite_cases(
    reference: Mapping[str, Any],
    suite: str,
    interval: int = 1,
    k: int = 1,
    count: int = 0,
    rng: np.random.Generator | None = None,
) -> list[tuple[list[int], dict[str, Any]]]:
    """The suite's test cases as (actions, provenance), in boundary-state order (RS: in draw order)."""
    ref = [int(a) for a in reference["reference_actions"]]
    depths = [int(b["depth"]) for b in reference["boundary"]]
    cases: list[tuple[list[int], dict[str, Any]]] = []
    if suite == "RS":  # the baseline of the boundary-state claim: states on τ_ref drawn uniformly at random
        draws = (rng or np.random.default_rng(0)).integers(0, max(len(ref), 1), size=count or len(depths))
        return [(ref[: int(n)], {"suite": "RS", "boundary": -1, "prefix_length": int(n)}) for n in draws]
    for i, depth in enumerate(depths):
        if suite == "ST":
            cases.append((ref[:depth], {"suite": "ST", "boundary": i, "prefix_length": depth}))
        elif suite == "IT":
            lengths = dict.fromkeys(min(max(depth + off, 0), len(ref)) for off in range(-interval, interval + 1))
            for length in lengths:
                cases.append((ref[:length], {"suite": f"IT({interval})", "boundary": i, "prefix_length": length}))
        elif suite == "AC":
            start = max(depth - k, 0)
            for combo in itertools.product(range(int(reference["agent_actions"])), repeat=k):
                cases.append((ref[:start] + list(combo), {"suite": f"AC({k})", "boundary": i, "prefix_length": start}))
        else:
            raise ValueError(f"suite must be one of ST, IT, AC, RS, got {suite!r}")
    return cases


class SafetySuiteParams(StrategyParams):
    reference: ArtifactPath = reference_field()
    suite: Literal["ST", "IT", "AC", "RS"] = Field(
        "ST", description="simple, interval or k-wise action coverage suite, or RS: random states on τ_ref"
    )
    interval: Integer = Field(1, ge=0, le=1000, description="IT(is): offsets -is..is around each boundary state")
    k: Integer = Field(1, ge=1, le=4, description="AC(k): actions combined at the k-th predecessor")
    agent_steps: Integer = Field(40, ge=1, le=100_000, description="l: steps the agent acts after the prefix")
    count: Integer = Field(0, ge=0, le=100_000, description="RS: random states drawn (0: as many as |DB|)")
    agent_subject: str = Field(
        "",
        max_length=64,
        pattern=r"^[A-Za-z0-9._-]*$",
        description="the subject variant the agent acts in after the prefix (one the subject declares in `variants`, "
        "e.g. mario_1_1_basic for an agent with the basic action set); empty: the campaign's subject",
    )


class SafetySuite:
    """Safety test suites of search-based testing of RL: reference-trace prefixes that end at (or around) boundary
    states, replayed open loop, then the agent acts for l steps (ST, IT(is), AC(k))."""

    source = f"{SOURCE}, Section 4"
    Params = SafetySuiteParams

    def __init__(
        self,
        space: ParameterSpace,
        rng: np.random.Generator,
        params: SafetySuiteParams,
        search: simulator_pb2.SearchDeclaration | None = None,
    ) -> None:
        if not params.reference:
            raise ValueError("strategy parameter reference is required: the DFS's reference artifact")
        self.reference = read_reference(Path(params.reference))
        cases = suite_cases(self.reference, params.suite, params.interval, params.k, params.count, rng)
        artifact = Path(params.reference).name
        self._pending = [
            trace_case(
                self.reference["initial"],
                actions,
                params.agent_steps,
                int(self.reference["seed"]),
                artifact=artifact,
                agent_subject=params.agent_subject or None,
                **meta,
            )
            for actions, meta in cases
        ]

    def ask(self, n: int) -> list[TestCase]:
        batch, self._pending = self._pending[:n], self._pending[n:]
        return batch

    def tell(self, results: Sequence[Result]) -> None:
        """A suite is fixed in advance: it learns nothing."""
