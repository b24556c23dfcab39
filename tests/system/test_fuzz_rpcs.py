"""A seeded fuzz of every RPC of every Gauntlet service, started as real processes (conftest's `suite`).

Requests are built from the protobuf descriptors in common/generated, so a new RPC or field is fuzzed without
editing this file. Each request is one of: empty; a message filled at random (strings that are paths, control
characters, huge or id-like; numbers that are NaN, infinite or extreme; random bytes; nested messages, maps and
Struct parameters); a valid encoding with a field re-tagged to the wrong wire type; a valid encoding cut short or
with flipped bytes; random bytes. The raw ones are sent through a generic channel call with identity serializers.

Every answer must be OK or a deliberate status: never INTERNAL or UNKNOWN, except gRPC's own "Exception
deserializing request!" for bytes that do not parse. No detail may exceed 1 KiB or hold a traceback or file
content. DEADLINE_EXCEEDED and CANCELLED answers (no answer within DEADLINE_SECONDS) are counted apart, per RPC,
and each such request is sent again with HANG_SECONDS to answer: one that still gets no answer is a handler
hanging on hostile input, and fails the test. Afterwards every service is still SERVING and answers a listing
(hung handlers holding its admitted calls would refuse it).
"""

from __future__ import annotations

import os
import random
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from google.protobuf import descriptor, struct_pb2
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agent_service.server import MAX_BATCH_BYTES, MAX_BATCH_OBSERVATIONS
from cli.launcher import LocalSuite
from common.errors import MAX_DETAIL_BYTES
from common.generated.gauntlet.v1 import (
    agent_pb2,
    analysis_pb2,
    common_pb2,
    generator_pb2,
    generator_pb2_grpc,
    oracle_pb2,
    simulator_pb2,
    translator_pb2,
)
from common.server import client_channel
from common.tensor import to_tensor
from generator_service.config import CampaignConfig

SEED = int(os.environ.get("GAUNTLET_FUZZ_SEED", "19"))  # another seed explores other requests
# 25 RPCs: 10,500 requests in all (about 1.5 minutes on 2 cores); $GAUNTLET_FUZZ_REQUESTS sets another number per RPC
REQUESTS_PER_METHOD = int(os.environ.get("GAUNTLET_FUZZ_REQUESTS", "420"))
DEADLINE_SECONDS = 5.0
HANG_SECONDS = 60.0  # a request that got no answer in DEADLINE_SECONDS gets this long again; none: a hang
RESENT_PER_METHOD = 3  # slow requests re-sent per RPC (each may cost HANG_SECONDS)
UNANSWERED = (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED)
# a cheap listing per service, called after the fuzz: it must answer OK (the analysis service has none)
LISTINGS = {
    "agent": "ListModels",
    "simulator": "ListEnvironments",
    "oracle": "ListOracles",
    "generator": "ListCampaigns",
    "translator": "ListTranslators",
}
STREAM_MESSAGES_READ = 3  # a server stream is read this far, then cancelled
MODULES = {
    "agent": agent_pb2,
    "simulator": simulator_pb2,
    "oracle": oracle_pb2,
    "generator": generator_pb2,
    "analysis": analysis_pb2,
    "translator": translator_pb2,
}
DESERIALISATION_FAILURE = "Exception deserializing request!"  # gRPC's own answer to bytes that do not parse
FORBIDDEN_IN_DETAILS = ("Traceback", 'File "', "root:x:0:0", "PATH=", "tensor(")
# Strings that reach deep code paths: valid names (so that checks past the name run), paths, control characters,
# oversized values. Valid model names only go to the agent, so no fuzzed campaign or episode batch runs for real.
NAMES = ["cartpole", "taxi_large", "random", "prt", "indago", "train_fail_replay", "cartpole_balance", "two-sided"]
MODELS = ["cartpole-ppo", "taxi-qlearning"]
HOSTILE = [
    "",
    "../../etc/passwd",
    "/etc/passwd",
    "/proc/self/environ",
    "../../../../../../tmp/evil",
    "a/b",
    "a\nb",
    "\x00",
    "\x1b[31mred",
    "~root",
    "%s%n%x",
    "' OR 1=1 --",
    "é\u202e\ufeff",
    "surrogate",
    "log",
]


@dataclass
class Findings:
    requests: int = 0
    by_code: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    # RPC path -> {DEADLINE_EXCEEDED or CANCELLED: count}: requests not answered within DEADLINE_SECONDS
    unanswered: dict[str, dict[str, int]] = field(default_factory=dict)

    def record_unanswered(self, method: str, code: grpc.StatusCode) -> None:
        self.requests += 1
        self.by_code[code.name] = self.by_code.get(code.name, 0) + 1
        per_method = self.unanswered.setdefault(method, {})
        per_method[code.name] = per_method.get(code.name, 0) + 1

    def record(self, method: str, code: grpc.StatusCode, details: str) -> None:
        self.requests += 1
        self.by_code[code.name] = self.by_code.get(code.name, 0) + 1
        size = len(details.encode("utf-8", "replace"))
        if code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN) and details != DESERIALISATION_FAILURE:
            self.problems.append(f"{method}: {code.name}: {details[:300]!r}")
        if size > MAX_DETAIL_BYTES:
            self.problems.append(f"{method}: {code.name} detail of {size} bytes: {details[:100]!r}")
        for marker in FORBIDDEN_IN_DETAILS:
            if marker in details:
                self.problems.append(f"{method}: {code.name} detail holds {marker!r}: {details[:300]!r}")


class RequestMaker:
    """Random requests for one message type, by reflection over its descriptor."""

    def __init__(self, rng: random.Random, with_models: bool) -> None:
        self.rng = rng
        self.strings = NAMES + HOSTILE + (MODELS if with_models else [])

    def string(self) -> str:
        r = self.rng.random()
        if r < 0.02:
            return "x" * self.rng.choice([1_000, 70_000, 1_100_000])  # past every bound (1 MB: rarely, it is slow)
        if r < 0.1:
            return "".join(chr(self.rng.randrange(0, 0x3000)) for _ in range(self.rng.randrange(1, 40)))
        return self.rng.choice(self.strings)

    def number(self) -> float:
        return self.rng.choice(
            [0.0, -0.0, 1.0, -1.0, 0.5, 1e-300, -1e300, 1e300, float("nan"), float("inf"), float("-inf"), 3.0]
        )

    def integer(self, kind: int) -> int:
        signed = kind in (
            descriptor.FieldDescriptor.TYPE_INT32,
            descriptor.FieldDescriptor.TYPE_INT64,
            descriptor.FieldDescriptor.TYPE_SINT32,
            descriptor.FieldDescriptor.TYPE_SINT64,
            descriptor.FieldDescriptor.TYPE_SFIXED32,
            descriptor.FieldDescriptor.TYPE_SFIXED64,
        )
        bits = (
            32
            if kind
            in (
                descriptor.FieldDescriptor.TYPE_INT32,
                descriptor.FieldDescriptor.TYPE_UINT32,
                descriptor.FieldDescriptor.TYPE_SINT32,
                descriptor.FieldDescriptor.TYPE_FIXED32,
                descriptor.FieldDescriptor.TYPE_SFIXED32,
            )
            else 64
        )
        low, high = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
        value = self.rng.choice([0, 1, 2, 3, 5, 64, 4097, -1, high, low, high // 2, self.rng.randrange(low, high)])
        return min(max(value, low), high)

    def scalar(self, f: descriptor.FieldDescriptor) -> Any:
        t = f.type
        if t == f.TYPE_STRING:
            return self.string()
        if t == f.TYPE_BYTES:
            return self.rng.randbytes(self.rng.choice([0, 1, 3, 16, 64, 1000]))
        if t in (f.TYPE_DOUBLE, f.TYPE_FLOAT):
            return self.number()
        if t == f.TYPE_BOOL:
            return self.rng.random() < 0.5
        if t == f.TYPE_ENUM:
            return self.rng.choice([v.number for v in f.enum_type.values] + [99])
        return self.integer(t)

    def struct(self, target: struct_pb2.Struct) -> None:
        for _ in range(self.rng.randrange(0, 4)):
            value: Any = self.rng.choice([self.string(), self.number(), True, None, [self.number()], {"k": 1.0}])
            target.update({self.rng.choice(["log", "surrogate", "setting", "budget", self.string()[:50]]): value})

    def fill(self, message: Message, depth: int = 0) -> Message:
        if message.DESCRIPTOR.full_name == "google.protobuf.Struct":
            self.struct(message)  # type: ignore[arg-type]
            return message
        for f in message.DESCRIPTOR.fields:
            if self.rng.random() < 0.35:
                continue
            if f.message_type is not None and f.message_type.GetOptions().map_entry:
                target = getattr(message, f.name)
                key_field, value_field = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
                for _ in range(self.rng.randrange(0, 3)):
                    key = self.scalar(key_field)
                    if value_field.message_type is not None:
                        if depth < 3:
                            self.fill(target[key], depth + 1)
                    else:
                        target[key] = self.scalar(value_field)
                continue
            if f.is_repeated:
                items = self.rng.choice([0, 1, 2, 3, 3, 40])
                if f.message_type is not None:
                    if depth < 3:
                        for _ in range(min(items, 4)):
                            self.fill(getattr(message, f.name).add(), depth + 1)
                else:
                    getattr(message, f.name).extend(self.scalar(f) for _ in range(items))
                continue
            if f.message_type is not None:
                if depth < 4:
                    self.fill(getattr(message, f.name), depth + 1)
                    if not getattr(message, f.name).ListFields():
                        getattr(message, f.name).SetInParent()
                continue
            setattr(message, f.name, self.scalar(f))
        return message

    def wrong_wire_type(self, message_class: type[Message]) -> bytes:
        """A valid encoding plus one field re-sent with a wire type its declaration does not allow."""
        body = self.fill(message_class()).SerializeToString()
        fields = list(message_class.DESCRIPTOR.fields) or [None]
        chosen = self.rng.choice(fields)
        number = chosen.number if chosen is not None else self.rng.randrange(1, 30)
        wire = self.rng.choice([0, 1, 2, 5])
        payload = {0: b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 1: b"\x00" * 8, 2: b"\x05hello", 5: b"\x00" * 4}
        return body + _varint((number << 3) | wire) + payload[wire]

    def raw(self, message_class: type[Message]) -> bytes:
        r = self.rng.random()
        if r < 0.4:
            return self.rng.randbytes(self.rng.randrange(0, 200))
        if r < 0.7:
            return self.wrong_wire_type(message_class)
        body = bytearray(self.fill(message_class()).SerializeToString())
        if body and self.rng.random() < 0.5:
            return bytes(body[: self.rng.randrange(0, len(body))])  # cut short
        for _ in range(self.rng.randrange(1, 4)):
            if body:
                body[self.rng.randrange(len(body))] = self.rng.randrange(256)
        return bytes(body)

    def request(self, message_class: type[Message]) -> bytes:
        r = self.rng.random()
        if r < 0.05:
            return b""
        if r < 0.25:
            return self.raw(message_class)
        return self.fill(message_class()).SerializeToString()


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def _identity(data: bytes) -> bytes:
    return data


def call_once(
    channel: grpc.Channel,
    path: str,
    method: descriptor.MethodDescriptor,
    requests: list[bytes],
    deadline: float = DEADLINE_SECONDS,
) -> tuple:
    """(code, details) of one call: a server stream is read STREAM_MESSAGES_READ far, then cancelled."""
    kwargs: dict[str, Callable[[bytes], bytes]] = {
        "request_serializer": _identity,
        "response_deserializer": _identity,
    }
    try:
        if method.client_streaming:
            stream = channel.stream_stream(path, **kwargs)(iter(requests), timeout=deadline)
            return _drain(stream)
        if method.server_streaming:
            return _drain(channel.unary_stream(path, **kwargs)(requests[0], timeout=deadline))
        channel.unary_unary(path, **kwargs)(requests[0], timeout=deadline)
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as exc:
        return exc.code(), exc.details() or ""


def _drain(stream: Iterator[bytes]) -> tuple:
    for read, _ in enumerate(stream, 1):
        if read >= STREAM_MESSAGES_READ:
            stream.cancel()  # type: ignore[attr-defined]
            return grpc.StatusCode.OK, ""
    return grpc.StatusCode.OK, ""


def _planted_cases(suite: LocalSuite, outside: Path) -> list[tuple[str, str, Message, grpc.StatusCode]]:
    """Hand-written hostile requests beside the random ones (issue 35), each with the one status it must get: a
    symbolic link at a report's file name and on its folder, a 0 or empty spec field, an oversized batch, an
    artifact path that leads to the generator's store or log.

    Two real campaigns ("random", "random-2": names the fuzzer also draws) exist so that the report RPCs reach
    the write; links at their report files and on folders the fuzzer names point out of the report root."""
    generator = generator_pb2_grpc.GeneratorServiceStub(client_channel(suite.endpoint("generator")))
    spec = CampaignConfig(subject="cartpole", model="cartpole-ppo", budget={"max_executions": 4}).to_proto()
    for cid in ("random", "random-2"):
        generator.StartCampaign(generator_pb2.StartCampaignRequest(campaign_id=cid, spec=spec), timeout=120)
        list(generator.WatchCampaign(generator_pb2.WatchCampaignRequest(campaign_id=cid), timeout=300))
    root = suite.report_root
    root.mkdir(parents=True, exist_ok=True)
    victim = outside / "victim"
    victim.write_text("precious")
    for name in ("report-random.json", "report-random.html"):
        (root / name).symlink_to(victim)
    for name in ("log", "surrogate"):
        (root / name).symlink_to(outside, target_is_directory=True)
    ok, invalid = grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT
    cases: list[tuple[str, str, Message, grpc.StatusCode]] = []
    for output_dir, code in [
        ("", ok),
        ("log", invalid),
        ("log/sub", invalid),
        ("surrogate", invalid),
        ("n" * 300, invalid),
    ]:
        cases.append(
            (
                "analysis",
                "RenderReport",
                analysis_pb2.RenderReportRequest(campaign_ids=["random"], output_dir=output_dir),
                code,
            )
        )
        cases.append(
            (
                "analysis",
                "Compare",
                analysis_pb2.CompareRequest(campaign_ids=["random", "random-2"], output_dir=output_dir),
                code,
            )
        )
    for name, value in [("batch_size", 0), ("parallelism", 0), ("repetitions", 0), ("name", "")]:
        bad = generator_pb2.CampaignSpec()
        bad.CopyFrom(spec)
        setattr(bad, name, value)
        cases.append(
            (
                "generator",
                "StartCampaign",
                generator_pb2.StartCampaignRequest(campaign_id=f"zero-{name.replace('_', '-')}", spec=bad),
                invalid,
            )
        )
    # artifact paths that lead to the generator's store or log (by a link, a hard link, a name): refused before
    # anything opens them (opening the SQLite file would drop the generator's locks on it)
    store = Path(suite.store_url.removeprefix("sqlite:///"))
    artifacts = suite.artifact_root
    artifacts.mkdir(parents=True, exist_ok=True)
    (artifacts / "store-link.db").symlink_to(store)
    os.link(store, artifacts / "store-hard.db")
    (artifacts / "store-folder").symlink_to(store.parent, target_is_directory=True)
    (artifacts / "log-link").symlink_to(suite.log_dir / "generator.log")
    for reference in ("store-link.db", "store-hard.db", f"store-folder/{store.name}-wal", "log-link"):
        bad = generator_pb2.CampaignSpec()
        bad.CopyFrom(spec)
        bad.strategy = "search_safety"
        bad.strategy_params.update({"reference": reference})
        cases.append(("generator", "StartCampaign", generator_pb2.StartCampaignRequest(spec=bad), invalid))
    model = common_pb2.ModelRef(name="cartpole-ppo")
    too_many = to_tensor(np.zeros((MAX_BATCH_OBSERVATIONS + 1, 4), np.float32))
    too_big = common_pb2.Tensor(dtype=common_pb2.ELEMENT_TYPE_FLOAT32, shape=[4096, MAX_BATCH_BYTES // 4096])
    for tensor in (too_many, too_big):
        cases.append(("agent", "Act", agent_pb2.ActRequest(model=model, observations=tensor), invalid))
        cases.append(("agent", "ActStream", agent_pb2.ActStreamRequest(model=model, observations=tensor), invalid))
        cases.append(("agent", "Embed", agent_pb2.EmbedRequest(model=model, images=tensor), invalid))
    return cases


@pytest.mark.slow
def test_every_rpc_survives_seeded_hostile_requests(suite: LocalSuite, tmp_path: Path) -> None:
    rng = random.Random(SEED)
    findings = Findings()
    outside = tmp_path / "outside-the-report-root"
    outside.mkdir()
    for service_name, method_name, message, expected in _planted_cases(suite, outside):
        module = MODULES[service_name]
        (service,) = module.DESCRIPTOR.services_by_name.values()
        method = service.methods_by_name[method_name]
        path = f"/{service.full_name}/{method_name}"
        with client_channel(suite.endpoint(service_name)) as channel:
            code, details = call_once(channel, path, method, [message.SerializeToString()])
            if code in UNANSWERED:  # slow (a real report under load): counted, then judged on a longer deadline
                findings.record_unanswered(f"planted {path}", code)
                findings.requests -= 1  # the same request, counted once below
                code, details = call_once(channel, path, method, [message.SerializeToString()], HANG_SECONDS)
        findings.record(f"planted {method_name}", code, details)
        if code != expected:
            findings.problems.append(
                f"planted {method_name}({str(message)[:200]!r}): {code.name} {details[:200]!r}, not {expected.name}"
            )
    planted = findings.requests
    started = time.monotonic()
    methods = 0
    resend: list[tuple[str, str, descriptor.MethodDescriptor, list[bytes]]] = []  # unanswered requests, again
    for service_name, module in MODULES.items():
        channel = client_channel(suite.endpoint(service_name))
        maker = RequestMaker(rng, with_models=service_name == "agent")
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                methods += 1
                message_class = _message_class(method.input_type)
                path = f"/{service.full_name}/{method.name}"
                for _ in range(REQUESTS_PER_METHOD):
                    count = rng.randrange(1, 4) if method.client_streaming else 1
                    requests = [maker.request(message_class) for _ in range(count)]
                    code, details = call_once(channel, path, method, requests)
                    if code in UNANSWERED:  # slow or hung: counted apart, and sent again below with more time
                        findings.record_unanswered(path, code)
                        if sum(1 for r in resend if r[1] == path) < RESENT_PER_METHOD:
                            resend.append((service_name, path, method, requests))
                        continue
                    findings.record(path, code, details)
        channel.close()
    elapsed = time.monotonic() - started
    hangs = []
    for service_name, path, method, requests in resend:
        with client_channel(suite.endpoint(service_name)) as channel:
            code, details = call_once(channel, path, method, requests, deadline=HANG_SECONDS)
        if code in UNANSWERED:
            hangs.append(f"{path}: {code.name} again after {HANG_SECONDS:.0f} s for {requests[0][:120]!r}")
        else:
            findings.record(f"{path} (sent again)", code, details)
            findings.requests -= 1  # the same request: counted once
    assert methods >= 25 and findings.requests == planted + methods * REQUESTS_PER_METHOD, (methods, findings.requests)
    assert findings.requests >= 10_000 or "GAUNTLET_FUZZ_REQUESTS" in os.environ  # the floor, by default
    assert not hangs, "handlers that hang on hostile input:\n" + "\n".join(hangs[:20])
    assert not findings.problems, "\n".join(findings.problems[:30] + logged(suite, findings.problems[:5]))
    # nothing was written through a link out of the report root
    assert [p.name for p in outside.iterdir()] == ["victim"] and (outside / "victim").read_text() == "precious"
    for name, service in suite.services.items():
        assert service.process.poll() is None, f"{name} service exited"
        health = health_pb2_grpc.HealthStub(client_channel(service.endpoint))
        status = health.Check(health_pb2.HealthCheckRequest(), timeout=10).status
        assert status == health_pb2.HealthCheckResponse.SERVING, name
    for service_name, method_name in LISTINGS.items():  # admits and answers a call: no hung handler holds it
        (service,) = MODULES[service_name].DESCRIPTOR.services_by_name.values()
        with client_channel(suite.endpoint(service_name)) as channel:
            code, details = call_once(
                channel, f"/{service.full_name}/{method_name}", service.methods_by_name[method_name], [b""], 60.0
            )
        assert code == grpc.StatusCode.OK, f"{service_name} {method_name} after the fuzz: {code.name} {details!r}"
    unanswered = {m.rsplit("/", 1)[1]: c for m, c in sorted(findings.unanswered.items())}
    print(
        f"fuzz: {findings.requests} requests over {methods} RPCs in {elapsed:.0f} s; codes {findings.by_code}; "
        f"unanswered in {DEADLINE_SECONDS:.0f} s, by RPC: {unanswered or 'none'} ({len(resend)} sent again, "
        "all answered)"
    )


def logged(suite: LocalSuite, problems: list[str]) -> list[str]:
    """The service log records of the correlation ids in `problems` (what went wrong, for the failure message)."""
    ids = set(re.findall(r"correlation id ([0-9a-f]{16})", " ".join(problems)))
    records = []
    for service in suite.services.values():
        for line in service.log_path.read_text(errors="replace").splitlines():
            if any(i in line for i in ids):
                records.append(f"{service.name} log: {line[-1500:]}")
    return records


def _message_class(message_descriptor: descriptor.Descriptor) -> type[Message]:
    from google.protobuf import message_factory

    return message_factory.GetMessageClass(message_descriptor)
