"""Trust: a stored execution rerun K times with fresh episode seeds (RerunExecution), for how often it fails.

On a stochastic subject (e.g. a slippery taxi) or model, one failing episode says little: the rerun counts failures
over K new episodes, each reset with a seed of its own derived from the campaign seed, the marker "rerun", the test
case id and the run (never one of the campaign's own episode seeds), and gives the failure probability with its
Wilson 95 % interval. A failure that fails in some reruns but not all is *flaky*.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from statistics import NormalDist

from common.seeding import derive_seed
from common.test_case import TestCase
from generator_service.config import CampaignConfig
from generator_service.pipeline.judge import VERDICT_NAMES
from generator_service.replay import Replayer
from generator_service.store import ExecutionRow

DEFAULT_RUNS = 20
MAX_RUNS = 100  # episodes of one test case in one RunEpisodes call (the simulator's repetition limit)
CONFIDENCE = 0.95


def wilson(failures: int, runs: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (the same interval the reports give failure rates)."""
    if runs == 0:
        return 0.0, 1.0
    z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
    p = failures / runs
    centre = (p + z * z / (2 * runs)) / (1 + z * z / runs)
    half = z * ((p * (1 - p) / runs + z * z / (4 * runs * runs)) ** 0.5) / (1 + z * z / runs)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class Reruns:
    verdicts: list[str]
    seeds: list[int]
    reasons: list[str]

    @property
    def failures(self) -> int:
        return self.verdicts.count("fail")

    @property
    def judged(self) -> int:
        return len(self.verdicts) - self.verdicts.count("invalid")

    @property
    def flaky(self) -> bool:
        return 0 < self.failures < self.judged


def rerun(replayer: Replayer, campaign_id: str, config: CampaignConfig, stored: ExecutionRow, runs: int) -> Reruns:
    """``runs`` fresh episodes of the stored input, one verdict each."""
    case = replace(TestCase.from_stored(stored.values), seed_origin=None)
    fresh = config.model_copy(update={"seed": derive_seed(config.seed, "rerun"), "repetitions": runs})
    oracle_name, signals, space = replayer.context(fresh)
    _, ran = replayer._run(campaign_id, fresh, [(stored.test_case_id, case)], "rerun", oracle_name, signals, space)
    episodes = ran[0].episodes
    verdicts = replayer.judge_episodes(oracle_name, episodes)
    return Reruns(
        [VERDICT_NAMES[v.verdict] for v in verdicts], [int(e.seed) for e in episodes], [v.reason for v in verdicts]
    )
