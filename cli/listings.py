"""`gauntlet environments|models|strategies|oracles`: what a suite serves, asked of the service that owns it
(ListEnvironments + DescribeEnvironment, ListModels, ListStrategies, ListOracles). With an endpoint (--simulator,
--agent, --generator, --oracle) the listing describes that suite; without one the command starts that one service
on loopback for the listing and stops it. No plug-in is loaded in the CLI's own process.

Every listing is plain text, one block per item with its name first and whole (a name is something to copy: a
table would cut it at the terminal's width), or with --json the service's own answer as JSON."""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message

from cli.endpoints import reach
from cli.errors import UserError
from cli.launcher import LaunchError, LocalSuite, available_environments
from common.credentials import ClientCredentials, CredentialError, client_credentials
from common.generated.gauntlet.v1 import (
    agent_pb2,
    agent_pb2_grpc,
    generator_pb2,
    generator_pb2_grpc,
    oracle_pb2,
    oracle_pb2_grpc,
    simulator_pb2,
    simulator_pb2_grpc,
)
from common.remote import describe
from common.server import client_channel
from common.space import ParameterSpace

LIST_SECONDS = 30.0  # a listing call's deadline (the services answer from memory)
MAX_WIDTH = 100  # detail lines wrap at the terminal's width, at most here; names are never wrapped or cut


def width() -> int:
    """Where detail lines wrap: the terminal's columns (COLUMNS when set), between 40 and MAX_WIDTH."""
    return max(40, min(MAX_WIDTH, shutil.get_terminal_size((MAX_WIDTH, 24)).columns))


@contextlib.contextmanager
def service_channel(role: str, endpoint: str | None, args: argparse.Namespace) -> Iterator[tuple[grpc.Channel, str]]:
    """(a channel to the `role` service, its endpoint): the given endpoint, reached within seconds, or that one
    service started on loopback for this command (its store and logs in a temporary folder, removed after)."""
    if endpoint:
        try:
            credentials = client_credentials(args)
        except CredentialError as exc:
            raise UserError(str(exc)) from None
        channel = client_channel(endpoint, credentials)
        with channel:
            reach(channel, role, endpoint, plaintext=credentials.ca is None)
            yield channel, endpoint
        return
    with tempfile.TemporaryDirectory(prefix="gauntlet-list-") as folder:
        local = LocalSuite(
            store_url=f"sqlite:///{Path(folder) / 'store.db'}",  # a generator that lists never touches a store
            log_dir=Path(folder) / "logs",
            model_root=getattr(args, "model_root", None),
            resume_on_start=False,
            agent_preload=False,  # ListModels reads the manifest, no model
            roles=frozenset({role}),
            environments=available_environments() if role == "simulator" else (),  # e.g. Mario's, where built
        )
        try:
            local.start()
        except LaunchError as exc:
            raise UserError(str(exc)) from None
        try:
            with client_channel(local.endpoint(role), ClientCredentials()) as channel:
                yield channel, f"local {role} service"
        finally:
            local.stop()


def _call(where: str, call: Callable[[], Any]) -> Any:
    try:
        return call()
    except grpc.RpcError as exc:
        raise UserError(f"{where}: {describe(exc)}") from None


def _print_json(messages: list[Message]) -> None:
    print(json.dumps([json_format.MessageToDict(m, preserving_proto_field_name=True) for m in messages], indent=1))


def _detail(label: str, text: str) -> list[str]:
    """`  label: text`, wrapped at WIDTH with the continuation lines indented under the text."""
    if not text:
        return []
    head = f"  {label}: " if label else "  "
    return textwrap.wrap(
        text, width(), initial_indent=head, subsequent_indent=" " * len(head), break_on_hyphens=False
    ) or [head]


def _print_blocks(blocks: list[list[str]], empty: str) -> None:
    print("\n\n".join("\n".join(b) for b in blocks) if blocks else empty, flush=True)


# -- environments -----------------------------------------------------------------------------------------------
def cmd_environments(args: argparse.Namespace) -> None:
    if getattr(args, "name", None):
        _describe_environment(args)
        return
    with service_channel("simulator", args.simulator, args) as (channel, where):
        stub = simulator_pb2_grpc.SimulatorServiceStub(channel)
        listed = _call(
            f"simulator service ({where})",
            lambda: stub.ListEnvironments(simulator_pb2.ListEnvironmentsRequest(), timeout=LIST_SECONDS),
        ).environments

        def described(subject: str) -> simulator_pb2.DescribeEnvironmentResponse | str:
            request = simulator_pb2.DescribeEnvironmentRequest(subject=subject)
            try:
                return stub.DescribeEnvironment(request, timeout=LIST_SECONDS)
            except grpc.RpcError as exc:  # one subject that cannot be described does not hide the others
                return describe(exc)

        with ThreadPoolExecutor(max_workers=8) as pool:
            descriptions = list(pool.map(described, [e.subject for e in listed]))
        if args.json:  # printed before a local service stops: the listing does not wait for its shutdown
            _print_json([d if isinstance(d, Message) else e for e, d in zip(listed, descriptions, strict=True)])
            return
        blocks = [_environment_block(e, d) for e, d in zip(listed, descriptions, strict=True)]
        _print_blocks(blocks, f"no subjects ({where})")


def _environment_block(
    summary: simulator_pb2.EnvironmentSummary, described: simulator_pb2.DescribeEnvironmentResponse | str
) -> list[str]:
    lines = [f"{summary.subject}  ({summary.backend} {summary.env_id})"]
    lines += _detail("", summary.description)
    if isinstance(described, str):
        return lines + _detail("not described", described)
    params = [f"{p.name} {p.domain_text()}" for p in ParameterSpace.from_proto(described.parameter_space).parameters]
    lines += _detail("oracle", f"{described.default_oracle}; at most {described.max_steps} steps")
    lines += _detail(f"parameters ({len(params)})", ", ".join(params))
    return lines


def _describe_environment(args: argparse.Namespace) -> None:
    """`gauntlet environments NAME`: one subject in full, from DescribeEnvironment (and its oracle's descriptors and
    signals from the oracle service, ListOracles)."""
    with service_channel("simulator", args.simulator, args) as (channel, where):
        stub = simulator_pb2_grpc.SimulatorServiceStub(channel)
        request = simulator_pb2.DescribeEnvironmentRequest(subject=args.name)
        described = _call(
            f"simulator service ({where})", lambda: stub.DescribeEnvironment(request, timeout=LIST_SECONDS)
        )
    with service_channel("oracle", getattr(args, "oracle", None), args) as (channel, where):
        ostub = oracle_pb2_grpc.OracleServiceStub(channel)
        oracles = _call(
            f"oracle service ({where})",
            lambda: ostub.ListOracles(oracle_pb2.ListOraclesRequest(), timeout=LIST_SECONDS),
        ).oracles
    oracle = next((o for o in oracles if o.name == described.default_oracle), None)
    if args.json:
        _print_json([described, *([oracle] if oracle is not None else [])])
        return
    print("\n".join(environment_detail(described, oracle)), flush=True)


def _space_text(spec: Any) -> str:
    if not spec.kind:
        return ""
    if spec.kind == "discrete":
        return f"discrete, {spec.n} actions"
    return f"{spec.kind} of shape {list(spec.shape)}"


def environment_detail(d: simulator_pb2.DescribeEnvironmentResponse, oracle: oracle_pb2.OracleInfo | None) -> list[str]:
    """Every line `gauntlet environments NAME` prints: the subject, its parameters (domain, unit, meaning, failure
    hints), validity rules, search operators, the oracle (margin, descriptors, the signals it reads) and the signals
    the simulator records."""
    summary = d.summary
    lines = [f"{summary.subject}  ({summary.backend} {summary.env_id})", *_detail("", summary.description)]
    facts = [f"at most {d.max_steps} steps", "deterministic" if d.deterministic else "not deterministic"]
    lines += _detail("episodes", "; ".join(facts))
    lines += _detail("observation", _space_text(d.observation_space))
    lines += _detail("action", _space_text(d.action_space))
    params = ParameterSpace.from_proto(d.parameter_space).parameters
    lines.append(f"  parameters ({len(params)}): name  domain [unit]  meaning")
    for p in params:
        text = f"{p.name}  {p.domain_text()}" + (f" [{p.unit}]" if p.unit else "")
        if p.description:
            text += f"  {p.description}"
        if p.hints:
            hints = ", ".join(h.kind if h.value is None else f"{h.kind} {h.value:g}" for h in p.hints)
            text += f"; failure-prone: {hints}"
        lines += textwrap.wrap(text, width(), initial_indent="    ", subsequent_indent="      ", break_on_hyphens=False)
    rules = [r.text or r.kind for r in d.validity_rules] or list(d.parameter_space.constraints)
    lines += _detail("validity rules", "; ".join(rules) or "none")
    operators = [f"{o.parameter} ({o.kind})" for o in d.search_operators]
    if operators:
        lines += _detail("search operators", ", ".join(operators))
    if d.HasField("search"):
        lines += _detail("search-based testing", f"actions {list(d.search.actions)}; snapshot {d.search.snapshot}")
    lines += _detail("oracle", d.default_oracle or "none")
    if oracle is not None:
        lines += _detail("  margin", oracle.margin_description)
        lines += _detail("  descriptors", ", ".join(oracle.descriptor_names) or "none")
        lines += _detail("  reads signals", ", ".join(oracle.required_signals) or "none")
    lines.append(f"  signals recorded ({len(d.signals)}): name (per episode or step)  meaning")
    for sig in d.signals:
        text = f"{sig.name} ({sig.granularity})" + (f"  {sig.description}" if sig.description else "")
        lines += textwrap.wrap(text, width(), initial_indent="    ", subsequent_indent="      ", break_on_hyphens=False)
    return lines


# -- models -----------------------------------------------------------------------------------------------------
def cmd_models(args: argparse.Namespace) -> None:
    if args.agent and args.model_root:
        raise UserError("--model-root starts a local agent service; a running one (--agent) has its own model root")
    if args.model_root and not (args.model_root / "manifest.yaml").is_file():
        root = args.model_root
        raise UserError(f"--model-root {root} has no manifest.yaml (gauntlet train --model-root {root} writes one)")
    with service_channel("agent", args.agent, args) as (channel, where):
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        models = _call(
            f"agent service ({where})", lambda: stub.ListModels(agent_pb2.ListModelsRequest(), timeout=LIST_SECONDS)
        ).models
        if args.json:
            _print_json(list(models))
            return
        _print_blocks([_model_block(m) for m in models], f"no models ({where})")


def _model_block(m: agent_pb2.ModelSummary) -> list[str]:
    meta = m.metadata
    facts = [f"{m.algorithm} on {m.subject}"]
    if "success_rate" in meta:
        facts.append(f"success rate {100 * float(meta['success_rate']):.2f} %")
    if "eval_tests" in meta:
        facts.append(f"{int(float(meta['eval_tests'])):,} evaluation tests")
    if "timesteps" in meta:
        facts.append(f"{int(float(meta['timesteps'])):,} training steps")
    return [f"{m.name}  ({'; '.join(facts)})", *_detail("", m.description)]


# -- strategies -------------------------------------------------------------------------------------------------
def cmd_strategies(args: argparse.Namespace) -> None:
    with service_channel("generator", args.generator, args) as (channel, where):
        stub = generator_pb2_grpc.GeneratorServiceStub(channel)
        listed = _call(
            f"generator service ({where})",
            lambda: stub.ListStrategies(generator_pb2.ListStrategiesRequest(), timeout=LIST_SECONDS),
        ).strategies
        if args.json:
            _print_json(list(listed))
            return
        _print_blocks([_strategy_block(s) for s in listed], f"no strategies ({where})")


def _strategy_block(s: generator_pb2.StrategyInfo) -> list[str]:
    lines = [f"{s.name}  (package {s.package or 'unknown'})", *_detail("", s.description)]
    lines += _detail("source", s.source)
    schema = json.loads(s.params_schema) if s.params_schema else {}
    properties: dict[str, Any] = schema.get("properties", {})
    if not properties:
        return [*lines, "  (no parameters)"]
    lines.append("  parameters (name = default: allowed values; meaning):")
    for name, prop in properties.items():
        text = f"{name} = {json.dumps(prop.get('default'))}: {allowed_text(prop, schema)}"
        if prop.get("description"):
            text += f"; {prop['description']}"
        lines += textwrap.wrap(text, width(), initial_indent="    ", subsequent_indent="      ", break_on_hyphens=False)
    return lines


def allowed_text(prop: dict[str, Any], schema: dict[str, Any]) -> str:
    """The values a JSON Schema property allows, in words (e.g. "a number >= 1", "one of paper, authors_code")."""
    if "allowed" in prop:  # the parameter's own words (json_schema_extra of its pydantic field)
        return str(prop["allowed"])
    if "$ref" in prop:
        name = str(prop["$ref"]).rsplit("/", 1)[-1]
        return allowed_text(schema.get("$defs", {}).get(name, {}), schema)
    if "anyOf" in prop:
        options = [o for o in prop["anyOf"] if o.get("type") != "null"]
        text = " or ".join(allowed_text(o, schema) for o in options)
        return text + (" (or null)" if len(options) < len(prop["anyOf"]) else "")
    if "enum" in prop:
        return "one of " + ", ".join(str(v) for v in prop["enum"])
    if "const" in prop:
        return json.dumps(prop["const"])
    kind = prop.get("type")
    if kind == "array":
        if "prefixItems" in prop:
            return "[" + ", ".join(allowed_text(i, schema) for i in prop["prefixItems"]) + "]"
        items = prop.get("items")
        return f"a list of items, each {allowed_text(items, schema)}" if items else "a list"
    names = {"integer": "an integer", "number": "a number", "string": "text", "boolean": "true or false"}
    text = names.get(str(kind), str(kind or "any value"))
    low = ("minimum", ">=") if "minimum" in prop else ("exclusiveMinimum", ">") if "exclusiveMinimum" in prop else None
    high = ("maximum", "<=") if "maximum" in prop else ("exclusiveMaximum", "<") if "exclusiveMaximum" in prop else None
    if low and high:
        left, right = "[" if low[1] == ">=" else "(", "]" if high[1] == "<=" else ")"
        return f"{text} in {left}{prop[low[0]]:g}, {prop[high[0]]:g}{right}"
    for bound in (low, high):
        if bound:
            return f"{text} {bound[1]} {prop[bound[0]]:g}"
    return text


# -- oracles ----------------------------------------------------------------------------------------------------
def cmd_oracles(args: argparse.Namespace) -> None:
    with service_channel("oracle", args.oracle, args) as (channel, where):
        stub = oracle_pb2_grpc.OracleServiceStub(channel)
        listed = _call(
            f"oracle service ({where})",
            lambda: stub.ListOracles(oracle_pb2.ListOraclesRequest(), timeout=LIST_SECONDS),
        ).oracles
        if args.json:
            _print_json(list(listed))
            return
        blocks = [
            [
                f"{o.name}  (package {o.package or 'unknown'})",
                *_detail("", o.description),
                *_detail("signals", ", ".join(o.required_signals) or "none"),
                *_detail("descriptors", ", ".join(o.descriptor_names) or "none"),
                *_detail("margin", o.margin_description),
            ]
            for o in listed
        ]
        _print_blocks(blocks, f"no oracles ({where})")
