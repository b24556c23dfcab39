"""Plan: the strategy proposes the next batch of test cases, and the batch is stored as asked.

``rebuild_strategy`` is the one way to get a campaign's strategy back from the store: a fresh strategy (seeded
by ``strategy_seed``, so it asks the same test cases again) that re-asks every stored batch, checks it asks what
was stored, and hears the stored results in asking order. Resuming a campaign uses it (running what a stopped
session left unrun before telling), and so does ListArchive (generator_service/archive_listing.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from common.domain.rules import SubjectRules
from common.generated.gauntlet.v1 import simulator_pb2
from common.seeding import strategy_seed
from common.space import ParameterSpace
from common.test_case import TestCase
from generator_service.config import CampaignConfig
from generator_service.store import CampaignStore, ExecutionRow
from generator_service.strategies import Result, make_strategy
from generator_service.strategies.base import Strategy, as_test_case


@dataclass(frozen=True)
class PlannedCase:
    """One asked test case: its id, its 1-based asking position in the campaign, and the case."""

    id: str
    position: int
    case: TestCase


@dataclass(frozen=True)
class Batch:
    number: int  # 1-based
    cases: list[PlannedCase]


class ReplayMismatch(ValueError):
    """A rebuilt strategy asked other test cases than a stored batch (it is not deterministic given its seed)."""

    def __init__(self, batch: int) -> None:
        super().__init__(f"the rebuilt strategy asks other test cases than stored batch {batch}")
        self.batch = batch


def case_id(position: int) -> str:
    """A test case's id from its asking position: t0000001, t0000002, ... (episode seeds derive from it)."""
    return f"t{position:07d}"


def build_strategy(config: CampaignConfig, info: simulator_pb2.DescribeEnvironmentResponse) -> Strategy:
    """The campaign's strategy, fresh: over the subject's space, with the rules and search declaration the simulator
    describes, seeded by ``strategy_seed(config.seed)``. ValueError for parameters it refuses."""
    return make_strategy(
        config.strategy,
        ParameterSpace.from_proto(info.parameter_space),
        strategy_seed(config.seed),
        config.strategy_params,
        subject_rules=SubjectRules.from_description(info),
        search=info.search if info.HasField("search") else None,  # search-based testing's declaration
    )


def stored_batches(store: CampaignStore, campaign_id: str) -> list[Batch]:
    """The batches the campaign asked so far, as stored (test cases of any earlier version load)."""
    batches, position = [], 0
    for number, stored in enumerate(store.asked_batches(campaign_id), 1):
        cases = []
        for cid, values in stored:
            position += 1
            cases.append(PlannedCase(cid, position, TestCase.from_stored(values)))
        batches.append(Batch(number, cases))
    return batches


def results_of(batch: Batch, executions: Mapping[str, ExecutionRow]) -> list[Result]:
    """What the strategy hears of a batch, in asking order: the stored execution of each case; a case that has none
    (the campaign stopped mid-batch) is left out, since the strategy must hear nothing of an unexecuted input."""
    out = []
    for planned in batch.cases:
        row = executions.get(planned.id)
        if row is None:
            continue
        case = planned.case
        failed, invalid = row.verdict == "fail", row.verdict == "invalid"
        out.append(Result(dict(case.values), failed, row.margin, row.descriptors, invalid, case.action_trace))
    return out


@dataclass(frozen=True)
class Rebuilt:
    strategy: Strategy
    stop_reason: str  # what run_missing returned for the last replayed batch ("" when every batch was replayed)
    batches: int  # batches replayed


def rebuild_strategy(
    config: CampaignConfig,
    info: simulator_pb2.DescribeEnvironmentResponse,
    batches: Sequence[Batch],
    results: Callable[[Batch], list[Result]],
    run_missing: Callable[[Batch], str] | None = None,
) -> Rebuilt:
    """The campaign's strategy after its stored batches: each re-asked (ReplayMismatch when it asks otherwise), then
    ``run_missing(batch)`` (a resumed campaign runs the cases a stopped session left unrun; a stop reason it returns
    ends the replay after that batch is told), then told ``results(batch)``."""
    strategy = build_strategy(config, info)
    for replayed, batch in enumerate(batches, 1):
        asked = [as_test_case(a) for a in strategy.ask(len(batch.cases))]
        if len(asked) != len(batch.cases) or not all(a.same_as(p.case) for a, p in zip(asked, batch.cases)):
            raise ReplayMismatch(batch.number)
        stop = run_missing(batch) if run_missing else ""
        strategy.tell(results(batch))
        if stop:
            return Rebuilt(strategy, stop, replayed)
    return Rebuilt(strategy, "", len(batches))


class Planner:
    """Asks the strategy for new batches, numbers them after those stored, and stores each as asked before it runs."""

    def __init__(self, strategy: Strategy, store: CampaignStore, campaign_id: str, after: Sequence[Batch]) -> None:
        self.strategy = strategy
        self.store = store
        self.campaign_id = campaign_id
        self.batches = len(after)
        self.position = sum(len(b.cases) for b in after)

    def next_batch(self, n: int) -> Batch | None:
        """Up to n new test cases, stored as asked; None when the strategy has nothing left to propose."""
        asked = self.strategy.ask(n)
        if not asked:
            return None
        self.batches += 1
        cases = [
            PlannedCase(case_id(self.position + i), self.position + i, as_test_case(a)) for i, a in enumerate(asked, 1)
        ]
        self.store.add_test_cases(
            self.campaign_id, self.batches, self.position + 1, [(c.id, c.case.to_stored()) for c in cases]
        )
        self.position += len(cases)
        return Batch(self.batches, cases)
