"""A campaign's archive for ListArchive: rebuilt from the store by replaying, its members' images re-rendered.

A strategy that keeps an archive (DESIGNATE's, Algorithm 1 of "Search-based DNN Testing and Retraining with
GAN-enhanced Simulations") has no table of its own in the store: the strategy is deterministic given the campaign
seed, so replaying the stored batches through a fresh one (``rebuild_strategy``, which resuming uses too)
rebuilds the very archive the campaign ended with, for a finished, cancelled or interrupted campaign alike.

Images are not stored either (a row per execution would grow by ~50 KB): a member's images are rendered again by
running its stored test case through the simulator with the campaign's subject, model, translator and seed. Image
subjects are deterministic (tests/system/test_designate_e2e.py: the same pose gives the same images and verdict), so
these are the images the campaign judged.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import grpc

from common.errors import FailedPrecondition
from common.generated.gauntlet.v1 import common_pb2, simulator_pb2, simulator_pb2_grpc
from common.remote import local_error
from common.space import ParameterSpace
from common.test_case import TestCase
from generator_service.config import CampaignConfig
from generator_service.pipeline.plan import ReplayMismatch, rebuild_strategy, results_of, stored_batches
from generator_service.simulators import SimulatorPool
from generator_service.store import CampaignStore, ExecutionRow

# what a member's images come from: the image stage's signals (simulator_service/image_stage.py)
IMAGE_SIGNALS = ("image", "realistic_image", "label_map", "prediction_realistic", "prediction_simulated", "features")
RENDER_CHUNK = 64  # members per RunEpisodes call: ListArchive streams the first images while the rest render
RENDER_TIMEOUT_SECONDS = 600.0


@runtime_checkable
class KeepsArchive(Protocol):
    """A strategy whose result is an archive (generator_service/strategies/designate.py)."""

    def archive_inputs(self) -> list[tuple[dict[str, Any], float]]: ...

    def archive_summary(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Member:
    values: dict[str, Any]
    f_accuracy: float
    execution: ExecutionRow  # the stored execution of this input


@dataclass(frozen=True)
class Archive:
    summary: dict[str, Any]  # ArchiveSummary's fields but `strategy` and `members`
    members: list[Member]


def replay(
    store: CampaignStore,
    campaign_id: str,
    config: CampaignConfig,
    info: simulator_pb2.DescribeEnvironmentResponse,
) -> Archive:
    """The archive of a stored campaign; ``config`` with its artifact paths resolved (a thresholds file).
    FailedPrecondition when the strategy keeps no archive or asks other inputs than the stored ones."""
    stored = {row.test_case_id: row for row in store.executions(campaign_id)}
    batches = stored_batches(store, campaign_id)
    try:
        rebuilt = rebuild_strategy(config, info, batches, lambda batch: results_of(batch, stored))
    except ReplayMismatch as exc:
        raise FailedPrecondition(
            f"campaign {campaign_id!r}: the replayed strategy asks other inputs than stored batch {exc.batch}"
        ) from None
    except ValueError as exc:  # e.g. a thresholds file removed since the campaign ran
        raise FailedPrecondition(f"campaign {campaign_id!r}: its strategy cannot be rebuilt: {exc}") from None
    strategy = rebuilt.strategy
    if not isinstance(strategy, KeepsArchive):
        raise FailedPrecondition(f"campaign {campaign_id!r} ran strategy {config.strategy!r}, which keeps no archive")
    by_values = {_key(p.case.values): stored[p.id] for b in batches for p in b.cases if p.id in stored}
    members = [Member(values, f, by_values[_key(values)]) for values, f in strategy.archive_inputs()]
    return Archive(strategy.archive_summary(), members)


def render(
    simulators: SimulatorPool,
    config: CampaignConfig,
    space: ParameterSpace,
    members: Sequence[Member],
    request_id: str,
) -> Iterator[tuple[Member, common_pb2.EpisodeResult]]:
    """Each member with its episode run again, recording IMAGE_SIGNALS, in archive order, RENDER_CHUNK at a time;
    each chunk on the first simulator that answers (the pool's single-call failover)."""
    for start in range(0, len(members), RENDER_CHUNK):
        chunk = members[start : start + RENDER_CHUNK]
        request = simulator_pb2.RunEpisodesRequest(
            request_id=f"{request_id}/{start}",
            subject=config.subject,
            seed=config.seed,
            repetitions=1,
            trace=common_pb2.TraceSpec(signals=list(IMAGE_SIGNALS)),
            parallelism=config.parallelism,
            test_cases=[
                TestCase.from_stored(m.execution.values).to_proto(space, m.execution.test_case_id) for m in chunk
            ],
            observation_translator=config.observation_translator,
        )
        request.model.name = config.model
        try:
            episodes = simulators.call(functools.partial(_run, request=request))
        except grpc.RpcError as exc:
            raise local_error(exc, "simulator service") from None
        for member in chunk:
            episode = episodes.get(member.execution.test_case_id)
            if episode is None or episode.error:
                why = episode.error[:300] if episode is not None else "no result"
                raise FailedPrecondition(f"archive member {member.execution.test_case_id!r} did not render: {why}")
            yield member, episode


def _run(
    stub: simulator_pb2_grpc.SimulatorServiceStub, request: simulator_pb2.RunEpisodesRequest
) -> dict[str, common_pb2.EpisodeResult]:
    return {r.result.test_case_id: r.result for r in stub.RunEpisodes(request, RENDER_TIMEOUT_SECONDS)}


def _key(values: Mapping[str, Any]) -> str:
    return json.dumps(values, sort_keys=True)


def judged_views(episode: common_pb2.EpisodeResult) -> dict[str, common_pb2.Tensor]:
    """ArchiveMember's image fields from a rendered episode: the image the DNN was judged on (the realistic one,
    or the simulator's without a translator) and the DNN's label map on it."""
    signals = episode.signals
    realistic = len(signals["realistic_image"].shape) == 3  # shape (0,) without a translator
    return {
        "image": signals["realistic_image" if realistic else "image"],
        "label_map": signals["label_map"],
        "prediction": signals["prediction_realistic" if realistic else "prediction_simulated"],
        "features": signals["features"],
        "simulator_image": signals["image"],
    }
