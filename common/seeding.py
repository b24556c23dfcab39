"""Every random choice flows from a campaign seed; these derive sub-seeds stably (no Python hash())."""

from __future__ import annotations

import hashlib

from common.generated.gauntlet.v1 import common_pb2


def derive_seed(*parts: object) -> int:
    """A 32-bit seed determined by the parts (e.g. campaign seed, test-case id, repetition)."""
    digest = hashlib.blake2b("/".join(str(p) for p in parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % (2**32)


def episode_seed(run_seed: int, test_case_id: str, repetition: int = 0) -> int:
    """The seed of one episode of a named test case: the simulator's rule for every campaign's episodes.

    Offline evaluation of named inputs uses the same rule, so rerunning a campaign's inputs with its seed
    replays the same episodes.
    """
    return derive_seed(run_seed, test_case_id, repetition)


def case_episode_seed(run_seed: int, case: common_pb2.TestCase, repetition: int = 0) -> int:
    """The reset seed of repetition ``repetition`` of a test case as it travels (gauntlet.v1 TestCase): an action
    trace's own ``reset_seed`` when it pins one; else, for a replayed case (``seed_origin``: a regression campaign),
    the seed its episode had in its original campaign; else ``episode_seed(run_seed, case.id, repetition)``. The
    simulator resets with it; the replay and the reports show it."""
    if case.HasField("action_trace") and case.action_trace.HasField("reset_seed"):
        return int(case.action_trace.reset_seed)
    if case.HasField("seed_origin"):
        return episode_seed(case.seed_origin.campaign_seed, case.seed_origin.test_case_id, repetition)
    return episode_seed(run_seed, case.id, repetition)


def strategy_seed(campaign_seed: int) -> int:
    """The seed of a campaign's strategy: every campaign, resumed campaign, archive listing and benchmark that
    rebuilds a campaign's strategy seeds it with this, so it asks the same test cases again."""
    return derive_seed(campaign_seed, "strategy")
