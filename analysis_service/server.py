"""gRPC servicer of the analysis service: reads executions from the generator, computes metrics, writes reports."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import json_format

from analysis_service.comparison import (
    ALTERNATIVES,
    build_comparison,
    comparison_stem,
    group_of,
    render_comparison_html,
)
from analysis_service.designate_archive_report import (
    ARCHIVE_IMAGES,
    ArchiveView,
    fetch_archive,
    is_segmentation,
    relevant_images,
    with_shared_relevance,
)
from analysis_service.filmstrips import MAX_FILMSTRIPS, filmstrips
from analysis_service.metrics import ExecutionRecord, compute_metrics
from analysis_service.report import build_report, render_html, replay_command, report_stem, write_report
from analysis_service.report_files import folder_parts
from analysis_service.seen_failures import Clustered, Failure, cluster_seen, distinct
from analysis_service.shrinks import fetch_shrinks
from common.credentials import ClientCredentials
from common.errors import InvalidArgument, grpc_method
from common.generated.gauntlet.v1 import analysis_pb2, analysis_pb2_grpc, common_pb2, generator_pb2, generator_pb2_grpc
from common.remote import local_error
from common.retry import Retry
from common.seeding import case_episode_seed
from common.server import client_channel
from common.space import value_from_proto
from common.validation import check_id, check_ids, resolve_under, shown

_VERDICT = {1: "pass", 2: "fail", 3: "invalid"}
_STATE = {1: "running", 2: "completed", 3: "cancelled", 4: "interrupted", 5: "failed"}
# Reads from the generator are retried this long while it is unreachable (e.g. restarting under the launcher)
GENERATOR_RETRY_SECONDS = 60.0
REPORT_ROOT_NAME = "the analysis service's report root (--report-root)"


class AnalysisServicer(analysis_pb2_grpc.AnalysisServiceServicer):
    def __init__(
        self,
        generator_endpoint: str,
        report_root: Path,
        credentials: ClientCredentials | None = None,
        archive_images: int = ARCHIVE_IMAGES,
    ) -> None:
        self.generator = generator_pb2_grpc.GeneratorServiceStub(client_channel(generator_endpoint, credentials))
        self.report_root = report_root
        self.archive_images = archive_images  # archive members re-rendered per campaign for a report's image grid

    def _fetch(self, campaign_id: str) -> tuple[dict[str, Any], list[ExecutionRecord]]:
        retry = Retry(budget_seconds=GENERATOR_RETRY_SECONDS, idempotent=True)  # both reads are idempotent
        try:
            # with the subject's parameters, for the units the report prints inputs in (none: bare numbers)
            answer = retry.call(
                lambda: self.generator.GetCampaign(
                    generator_pb2.GetCampaignRequest(campaign_id=campaign_id, with_parameter_space=True), timeout=30
                )
            )
            status = answer.status
            listed = retry.call(
                lambda: list(
                    self.generator.ListExecutions(
                        generator_pb2.ListExecutionsRequest(campaign_id=campaign_id), timeout=300
                    )
                )
            )
            records = [
                ExecutionRecord(
                    index=e.index,
                    values={k: value_from_proto(v) for k, v in e.test_case.values.items()},
                    verdict=_VERDICT[e.verdict],
                    margin=e.margin,
                    steps=e.steps,
                    total_reward=e.total_reward,
                    elapsed_seconds=e.elapsed_seconds,
                    descriptors=tuple(e.descriptors),
                    final_observation=tuple(e.final_observation),
                    trace_labels=dict(e.test_case.action_trace.labels),
                    test_case_id=e.test_case.id,
                    reason=e.reason,
                    episode_seed=_episode_seed(status.spec.seed, e.test_case),
                )
                for e in (r.execution for r in listed)
            ]
        except grpc.RpcError as exc:
            raise local_error(exc, "generator service") from None
        spec = status.spec
        info = {
            "campaign_id": campaign_id,
            "name": spec.name,
            "subject": spec.subject,
            "model": spec.model.name,
            "strategy": spec.strategy,
            "oracle": spec.oracle,
            "seed": spec.seed,
            "state": _STATE.get(status.state, "unknown"),
            "stop_reason": status.stop_reason,
            "repetitions": spec.repetitions,
            "budget": json_format.MessageToDict(spec.budget, preserving_proto_field_name=True),
            "units": {p.name: p.unit for p in answer.parameter_space.parameters if p.unit},
        }
        return info, records

    def _shrinks(self, campaign_id: str) -> list[dict[str, Any]]:
        """The campaign's stored shrinks, each beside its original failure (the generator's ListShrinks)."""
        retry = Retry(budget_seconds=GENERATOR_RETRY_SECONDS, idempotent=True)
        try:
            return retry.call(lambda: fetch_shrinks(self.generator, campaign_id))
        except grpc.RpcError as exc:
            raise local_error(exc, "generator service") from None

    def _archive(self, info: dict[str, Any], records: list[ExecutionRecord]) -> ArchiveView | None:
        """The campaign's archive (ListArchive), else its relevant images when it ran on an image subject."""
        if not is_segmentation(records):  # no image subject: skip ListArchive (it would rebuild the strategy)
            return None
        oracle = str(info.get("oracle") or "")
        view = fetch_archive(self.generator, info["campaign_id"], records, oracle, self.archive_images)
        return view if view is not None else relevant_images(records, oracle)

    def _output_dir(self, output_dir: str) -> tuple[str, ...]:
        """The folder a report goes to, as components under the report root (none: the root itself); checked
        before any work, and walked without following links when the files are written (report_files.py)."""
        if not output_dir:
            return ()
        resolve_under(self.report_root, output_dir, "output_dir", REPORT_ROOT_NAME)
        return folder_parts(output_dir, "output_dir", REPORT_ROOT_NAME)

    def _write(self, report: dict[str, Any], html: str, parts: tuple[str, ...], stem: str) -> tuple[Path, Path]:
        return write_report(report, html, self.report_root, stem, parts, "output_dir", REPORT_ROOT_NAME)

    @grpc_method
    def ComputeMetrics(
        self, request: analysis_pb2.ComputeMetricsRequest, context: grpc.ServicerContext
    ) -> analysis_pb2.ComputeMetricsResponse:
        out = []
        for cid in check_ids("campaign_ids", request.campaign_ids):
            _, records = self._fetch(cid)
            m = compute_metrics(cid, records)
            out.append(analysis_pb2.CampaignMetrics(**dataclasses.asdict(m)))
        return analysis_pb2.ComputeMetricsResponse(metrics=out)

    @grpc_method
    def RenderReport(
        self, request: analysis_pb2.RenderReportRequest, context: grpc.ServicerContext
    ) -> analysis_pb2.RenderReportResponse:
        ids = check_ids("campaign_ids", request.campaign_ids)
        out_dir = self._output_dir(request.output_dir)
        fetched = [self._fetch(cid) for cid in ids]
        archives = {info["campaign_id"]: a for info, records in fetched if (a := self._archive(info, records))}
        if request.failure_filmstrips > MAX_FILMSTRIPS:
            raise InvalidArgument(
                f"failure_filmstrips={request.failure_filmstrips} is out of range [0, {MAX_FILMSTRIPS}]"
            )
        report = build_report([(info, records) for info, records in fetched], archives)
        for entry in report["campaigns"]:
            entry["shrinks"] = self._shrinks(str(entry["info"]["campaign_id"]))
        strips: dict[str, dict[str, str]] = {}
        for entry in report["campaigns"] if request.failure_filmstrips else ():
            cid = str(entry["info"]["campaign_id"])
            entry["filmstrips"], strips[cid] = filmstrips(
                self.generator, cid, entry["failures"], request.failure_filmstrips
            )
        html = render_html(
            report, {info["campaign_id"]: records for info, records in fetched}, archives, filmstrips=strips
        )
        json_path, html_path = self._write(report, html, out_dir, report_stem(ids))
        return analysis_pb2.RenderReportResponse(
            json_path=str(json_path.resolve()), html_path=str(html_path.resolve()), json=json.dumps(report)
        )

    @grpc_method
    def Compare(
        self, request: analysis_pb2.CompareRequest, context: grpc.ServicerContext
    ) -> analysis_pb2.CompareResponse:
        ids = list(dict.fromkeys(check_ids("campaign_ids", request.campaign_ids)))
        if len(ids) < 2:
            raise InvalidArgument(f"campaign_ids must name at least 2 distinct campaigns, got {len(ids)}")
        alternative = request.alternative or "two-sided"
        if alternative not in ALTERNATIVES:
            raise InvalidArgument(f"alternative must be one of {', '.join(ALTERNATIVES)}, got {shown(alternative)}")
        out_dir = self._output_dir(request.output_dir)
        fetched = [self._fetch(cid) for cid in ids]
        strategies = {group_of(info) for info, _ in fetched}
        if request.baseline and request.baseline not in strategies:
            known = ", ".join(sorted(strategies))
            raise InvalidArgument(f"baseline {shown(request.baseline)} is not among the compared strategies: {known}")
        archives = with_shared_relevance(
            [self._archive(info, records) for info, records in fetched],
            [info for info, _ in fetched],
            [records for _, records in fetched],
        )
        comparison = build_comparison(
            fetched, baseline=request.baseline or None, alternative=alternative, archives=archives
        )
        stem = comparison_stem(ids)
        json_path, html_path = self._write(comparison, render_comparison_html(comparison), out_dir, stem)
        # each campaign's own report beside it, linking back: the comparison's campaign ids link to them
        back = [(f"the comparison of {len(ids)} campaigns", f"{stem}.html")]
        for (info, records), view in zip(fetched, archives):
            cid = info["campaign_id"]
            one = build_report([(info, records)], {cid: view} if view is not None else None)
            one["campaigns"][0]["shrinks"] = self._shrinks(cid)
            page = render_html(one, {cid: records}, {cid: view} if view is not None else None, links=back)
            self._write(one, page, out_dir, report_stem([cid]))
        return analysis_pb2.CompareResponse(
            json_path=str(json_path.resolve()), html_path=str(html_path.resolve()), json=json.dumps(comparison)
        )

    def _earlier(self, campaign_id: str, subject: str) -> list[str]:
        """Every stored campaign on `subject` created before `campaign_id` (ListCampaigns), oldest first."""
        retry = Retry(budget_seconds=GENERATOR_RETRY_SECONDS, idempotent=True)
        try:
            listed = retry.call(
                lambda: self.generator.ListCampaigns(generator_pb2.ListCampaignsRequest(), timeout=60).campaigns
            )
        except grpc.RpcError as exc:
            raise local_error(exc, "generator service") from None
        own = next((c.created_at for c in listed if c.campaign_id == campaign_id), "")
        return [
            c.campaign_id
            for c in sorted(listed, key=lambda c: c.created_at)
            if c.spec.subject == subject and c.created_at < own and not c.read_error
        ]

    @grpc_method
    def ClusterFailures(
        self, request: analysis_pb2.ClusterFailuresRequest, context: grpc.ServicerContext
    ) -> analysis_pb2.ClusterFailuresResponse:
        cid = check_id("campaign_id", request.campaign_id)
        against = list(dict.fromkeys(check_ids("against", request.against, at_least=0)))
        if cid in against:
            raise InvalidArgument(f"against[{against.index(cid)}]: {shown(cid)} is the campaign itself")
        info, records = self._fetch(cid)
        if not request.against:
            against = self._earlier(cid, str(info["subject"]))
        earlier: list[Failure] = []
        for i, other in enumerate(against):
            other_info, other_records = self._fetch(other)
            if other_info["subject"] != info["subject"]:
                raise InvalidArgument(
                    f"against[{i}]: campaign {shown(other)} ran on subject {shown(other_info['subject'])}, "
                    f"not {shown(info['subject'])}: failures compare only on the same subject"
                )
            earlier += distinct(_failures(other, other_records))
        mine, theirs, k = cluster_seen(distinct(_failures(cid, records)), earlier)
        return analysis_pb2.ClusterFailuresResponse(
            failures=[_clustered(c) for c in mine],
            earlier=[_clustered(c) for c in theirs],
            against=against,
            clusters=k,
        )


def _failures(campaign_id: str, records: list[ExecutionRecord]) -> list[Failure]:
    """The campaign's failing executions in asking order."""
    failing = sorted((r for r in records if r.verdict == "fail"), key=lambda r: r.index)
    return [Failure(campaign_id, r.test_case_id, r.reason, r.values) for r in failing]


def _clustered(c: Clustered) -> analysis_pb2.ClusteredFailure:
    f = c.failure
    return analysis_pb2.ClusteredFailure(
        campaign_id=f.campaign_id,
        test_case_id=f.test_case_id,
        reason=f.reason,
        replay=replay_command(f.campaign_id, f.test_case_id) if f.test_case_id else "",
        cluster=c.cluster,
        seen_before=c.seen is not None,
        seen_campaign_id=c.seen.campaign_id if c.seen else "",
        seen_test_case_id=c.seen.test_case_id if c.seen else "",
    )


def register(
    server: grpc.Server,
    generator_endpoint: str,
    report_root: Path,
    credentials: ClientCredentials | None = None,
    archive_images: int = ARCHIVE_IMAGES,
) -> list[str]:
    analysis_pb2_grpc.add_AnalysisServiceServicer_to_server(
        AnalysisServicer(generator_endpoint, report_root, credentials, archive_images), server
    )
    return [analysis_pb2.DESCRIPTOR.services_by_name["AnalysisService"].full_name]


def _episode_seed(campaign_seed: int, case: common_pb2.TestCase) -> int:
    """The first repetition's reset seed, by the simulator's rule (an action trace's own reset_seed wins)."""
    return case_episode_seed(campaign_seed, case, 0)
