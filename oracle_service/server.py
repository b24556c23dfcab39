"""gRPC servicer of the oracle service."""

from __future__ import annotations

import grpc
from prometheus_client import Counter

from common.errors import InvalidArgument, grpc_method
from common.generated.gauntlet.v1 import oracle_pb2, oracle_pb2_grpc
from common.plugins import ORACLES, plugin_package
from common.tensor import TensorError, from_tensor
from common.validation import shown
from oracle_service.oracles import Episode, MissingSignals, get_oracle, oracles

VERDICTS = Counter("gauntlet_oracle_verdicts_total", "Verdicts given", ["oracle", "verdict"])
VERDICT_LABELS = {
    oracle_pb2.VERDICT_KIND_PASS: "pass",
    oracle_pb2.VERDICT_KIND_FAIL: "fail",
    oracle_pb2.VERDICT_KIND_INVALID: "invalid",
}


class OracleServicer(oracle_pb2_grpc.OracleServiceServicer):
    @grpc_method
    def ListOracles(
        self, request: oracle_pb2.ListOraclesRequest, context: grpc.ServicerContext
    ) -> oracle_pb2.ListOraclesResponse:
        return oracle_pb2.ListOraclesResponse(
            oracles=[
                oracle_pb2.OracleInfo(
                    name=o.name,
                    description=o.description,
                    required_signals=o.required_signals,
                    descriptor_names=o.descriptor_names,
                    margin_description=o.margin_description,
                    package=plugin_package(ORACLES, o.name),
                )
                for o in oracles().values()
            ]
        )

    @grpc_method
    def Evaluate(
        self, request: oracle_pb2.EvaluateRequest, context: grpc.ServicerContext
    ) -> oracle_pb2.EvaluateResponse:
        oracle = get_oracle(request.oracle)
        verdicts = []
        for ep in request.episodes:
            if ep.error:
                verdicts.append(
                    oracle_pb2.Verdict(
                        test_case_id=ep.test_case_id,
                        repetition=ep.repetition,
                        verdict=oracle_pb2.VERDICT_KIND_INVALID,
                        reason=ep.error,
                    )
                )
                VERDICTS.labels(oracle.name, "invalid").inc()
                continue
            try:
                signals = {name: from_tensor(t) for name, t in ep.signals.items()}
                judgement = oracle.evaluate(Episode(ep.steps, ep.total_reward, ep.terminated, ep.truncated, signals))
            except (MissingSignals, TensorError) as exc:
                raise InvalidArgument(f"episode {shown(ep.test_case_id)}: {exc.args[0] if exc.args else exc}") from None
            kind = oracle_pb2.VERDICT_KIND_FAIL if judgement.failed else oracle_pb2.VERDICT_KIND_PASS
            if getattr(judgement, "invalid", False):  # a third-party Judgement may lack the field
                kind = oracle_pb2.VERDICT_KIND_INVALID
            VERDICTS.labels(oracle.name, VERDICT_LABELS[kind]).inc()
            verdicts.append(
                oracle_pb2.Verdict(
                    test_case_id=ep.test_case_id,
                    repetition=ep.repetition,
                    verdict=kind,
                    margin=judgement.margin,
                    descriptors=judgement.descriptors,
                    reason=judgement.reason,
                )
            )
        return oracle_pb2.EvaluateResponse(verdicts=verdicts)


def register(server: grpc.Server) -> list[str]:
    oracle_pb2_grpc.add_OracleServiceServicer_to_server(OracleServicer(), server)
    return [oracle_pb2.DESCRIPTOR.services_by_name["OracleService"].full_name]
