"""Before a campaign runs: its oracle reads only signals its subject records.

An oracle declares the signals it reads (ListOracles ``required_signals``); a subject declares the signals its
simulator records (DescribeEnvironment ``signals``). A campaign that pairs an oracle with a subject that does not
record one of them is refused at StartCampaign, naming both, before any test case runs: otherwise it would start and
fail at its first batch, when the simulator refuses the trace spec.
"""

from __future__ import annotations

import grpc

from common.errors import FailedPrecondition, InvalidArgument, NotFound
from common.generated.gauntlet.v1 import oracle_pb2, oracle_pb2_grpc, simulator_pb2
from common.remote import local_error

ORACLE_FIELD = "spec.oracle"


def missing_signals(oracle: oracle_pb2.OracleInfo, subject: simulator_pb2.DescribeEnvironmentResponse) -> list[str]:
    """The signals ``oracle`` reads that ``subject`` does not record, in the oracle's order."""
    recorded = {s.name for s in subject.signals}
    return [name for name in oracle.required_signals if name not in recorded]


def check_oracle_fits(
    oracle_name: str, subject: simulator_pb2.DescribeEnvironmentResponse, oracles: oracle_pb2.ListOraclesResponse
) -> None:
    """Refuses the campaign's oracle (``oracle_name``; "" = the subject's default) when it is not installed or reads
    a signal the subject does not record. A campaign's own choice is the caller's mistake (NOT_FOUND /
    INVALID_ARGUMENT naming ``spec.oracle``); a subject whose default oracle does not fit is the deployment's
    (FAILED_PRECONDITION)."""
    subject_name = subject.summary.subject
    chosen = oracle_name or subject.default_oracle
    if oracle_name:
        where = f"{ORACLE_FIELD}: oracle {chosen!r}"
    else:
        where = f"subject {subject_name!r}'s default oracle {chosen!r}"
    found = next((o for o in oracles.oracles if o.name == chosen), None)
    if found is None:
        installed = ", ".join(sorted(o.name for o in oracles.oracles)) or "none"
        if oracle_name:
            raise NotFound(f"{where} is not installed on the oracle service; installed oracles: {installed}")
        raise FailedPrecondition(f"{where} is not installed on the oracle service; installed oracles: {installed}")
    missing = missing_signals(found, subject)
    if not missing:
        return
    recorded = ", ".join(s.name for s in subject.signals) or "none"
    message = (
        f"{where} reads signal(s) {', '.join(missing)}, which subject {subject_name!r} does not record "
        f"(it records: {recorded})"
    )
    raise (InvalidArgument if oracle_name else FailedPrecondition)(message)


def check_signals(
    oracle_name: str, subject: simulator_pb2.DescribeEnvironmentResponse, oracle: oracle_pb2_grpc.OracleServiceStub
) -> None:
    """``check_oracle_fits`` with the oracle service's own listing (one ListOracles call)."""
    try:
        listing = oracle.ListOracles(oracle_pb2.ListOraclesRequest(), timeout=30)
    except grpc.RpcError as exc:
        raise local_error(exc, "oracle service") from None
    check_oracle_fits(oracle_name, subject, listing)
