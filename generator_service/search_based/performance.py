"""Step 4 of search-based testing of RL: simple and robust performance testing, as a campaign strategy.

"Search-Based Testing of Reinforcement Learning" (IJCAI-ECAI 2022), Section 6. The benchmark is T_fit, the fittest
trace of each trace-fuzzing generation (`fittest_traces` rebuilds it from the fuzzing campaign's executions):

* simple (Algorithm 2): R_a = the agent's mean episode reward from s0; R_t = the mean reward of the T_fit traces
  replayed from s0;
* robust (Algorithm 3): for pl = w, 2w, … while at least n_test traces have |τ| ≥ pl, n_test traces drawn from
  those; R_t^pl = mean reward of the whole traces (R⁻ of the first pl actions plus the suffix), R_a^pl = mean of R⁻
  plus the agent's reward once it takes over at s_pl. Both include R⁻, so the curves compare point by point.

Every test case is an action trace; the campaign's `repetitions` is n_ep and each execution's total_reward is the
mean over its runs. The agent acts for `horizon` steps after a prefix (the subject's own step limit ends it first
when it is shorter: the paper runs the agent "until a terminal state is reached").
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field

from common.generated.gauntlet.v1 import simulator_pb2
from common.space import ParameterSpace
from common.test_case import TestCase, trace_case
from generator_service.search_based.artifact import read_reference
from generator_service.search_based.suites import SOURCE, ArtifactPath, reference_field
from generator_service.strategies.base import Result
from generator_service.strategies.params import ARTIFACT_PATH, Integer, StrategyParams

TRACES_FORMAT = "gauntlet.fuzz_traces.v1"


def write_traces(path: Path, traces: Sequence[Sequence[int]]) -> None:
    """Stores T_fit for performance testing (`traces` strategy parameter)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"format": TRACES_FORMAT, "traces": [[int(a) for a in t] for t in traces]}))


def read_traces(path: Path) -> list[list[int]]:
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"traces file {path.name} cannot be read as JSON ({type(exc).__name__})") from None
    if not isinstance(document, dict) or document.get("format") != TRACES_FORMAT:
        raise ValueError(f"traces file {path.name} is not a {TRACES_FORMAT} document")
    traces = document.get("traces")
    if not isinstance(traces, list) or not traces or not all(isinstance(t, list) and t for t in traces):
        raise ValueError(f"traces file {path.name}: traces must be a non-empty list of non-empty action lists")
    return [[int(a) for a in t] for t in traces]


def performance_cases(
    traces: Sequence[Sequence[int]], mode: str, n_test: int, width: int, rng: np.random.Generator
) -> list[tuple[list[int], bool, dict[str, Any]]]:
    """(prefix, whether the agent takes over after it, provenance) for every test case of the mode."""
    if mode == "simple":
        cases: list[tuple[list[int], bool, dict[str, Any]]] = [([], True, {"role": "agent", "pl": 0})]
        cases += [(list(t), False, {"role": "trace", "pl": 0, "trace": i}) for i, t in enumerate(traces)]
        return cases
    if mode != "robust":
        raise ValueError(f"mode must be simple or robust, got {mode!r}")
    cases = []
    pl = width
    while True:
        long_enough = [i for i, t in enumerate(traces) if len(t) >= pl]
        if len(long_enough) < n_test:  # Algorithm 3's stop: too few traces of length pl
            return cases
        for test in range(n_test):
            i = int(rng.choice(long_enough))
            labels = {"pl": pl, "test": test, "trace": i}
            cases.append((list(traces[i][:pl]), True, {"role": "agent", **labels}))
            cases.append((list(traces[i]), False, {"role": "trace", **labels}))
        pl += width


class PerformanceParams(StrategyParams):
    reference: ArtifactPath = reference_field()
    traces: ArtifactPath = Field(
        "",
        description=f"T_fit: the fuzzing's fittest traces (a {TRACES_FORMAT} JSON file)",
        json_schema_extra={"allowed": "a file path", ARTIFACT_PATH: True},
    )
    mode: Literal["simple", "robust"] = Field("simple", description="Algorithm 2 (simple) or 3 (robust)")
    n_test: Integer = Field(10, ge=1, le=10_000, description="n_test: traces drawn per prefix length (robust)")
    width: Integer = Field(20, ge=1, le=100_000, description="w: prefix-length step (robust)")
    horizon: Integer = Field(
        1000, ge=1, le=1_000_000, description="agent steps after the prefix (the subject's limit may end it first)"
    )
    agent_subject: str = Field(
        "",
        max_length=64,
        pattern=r"^[A-Za-z0-9._-]*$",
        description="the subject variant the agent acts in after the prefix (one the subject declares in `variants`, "
        "e.g. mario_1_1_basic for an agent with the basic action set); empty: the campaign's subject",
    )


class PerformanceTest:
    """Performance testing of search-based testing of RL: the agent from s0 (simple) or from states along the
    fuzz traces (robust) against the traces' own rewards."""

    source = f"{SOURCE}, Section 6"
    Params = PerformanceParams

    def __init__(
        self,
        space: ParameterSpace,
        rng: np.random.Generator,
        params: PerformanceParams,
        search: simulator_pb2.SearchDeclaration | None = None,
    ) -> None:
        if not params.reference or not params.traces:
            raise ValueError("strategy parameters reference and traces are required (the DFS artifact and T_fit)")
        reference = read_reference(Path(params.reference))
        traces = read_traces(Path(params.traces))
        cases = performance_cases(traces, params.mode, params.n_test, params.width, rng)
        self._pending = [
            trace_case(
                reference["initial"],
                prefix,
                params.horizon if agent else 0,
                int(reference["seed"]),
                prefix_length=len(prefix),
                agent_subject=params.agent_subject or None,
                mode=params.mode,
                **labels,
            )
            for prefix, agent, labels in cases
        ]

    def ask(self, n: int) -> list[TestCase]:
        batch, self._pending = self._pending[:n], self._pending[n:]
        return batch

    def tell(self, results: Sequence[Result]) -> None:
        """The test cases are fixed in advance: it learns nothing."""
