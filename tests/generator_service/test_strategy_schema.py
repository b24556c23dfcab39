"""ListStrategies carries each strategy's parameter schema as JSON Schema, so a client in another language can check
a campaign's strategy_params before it sends them: the schema a real generator process serves accepts the
parameters of the bundled campaign files (as they travel, in a protobuf Struct) and refuses what the generator
refuses."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import jsonschema
import pytest
import yaml
from google.protobuf import json_format, struct_pb2

from cli.launcher import LocalSuite
from common.generated.gauntlet.v1 import generator_pb2, generator_pb2_grpc

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def listed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, generator_pb2.StrategyInfo]]:
    root = tmp_path_factory.mktemp("schema")
    local = LocalSuite(
        store_url=f"sqlite:///{root / 'store.db'}", log_dir=root / "logs", roles=frozenset({"generator"})
    )
    with local:
        stub = generator_pb2_grpc.GeneratorServiceStub(grpc.insecure_channel(local.endpoint("generator")))
        yield {s.name: s for s in stub.ListStrategies(generator_pb2.ListStrategiesRequest(), timeout=30).strategies}


def _over_the_wire(params: dict) -> dict:
    """The params as a StartCampaignRequest carries them (a Struct: every number a double)."""
    struct = struct_pb2.Struct()
    struct.update(params)
    return json_format.MessageToDict(struct)


def _keywords(node: object) -> list[str]:
    """Every key of a JSON Schema that is a keyword (not a property name), at any depth."""
    if isinstance(node, list):
        return [k for item in node for k in _keywords(item)]
    if not isinstance(node, dict):
        return []
    found = []
    for key, value in node.items():
        found.append(key)
        named = key in ("properties", "$defs") and isinstance(value, dict)
        found += [k for v in value.values() for k in _keywords(v)] if named else _keywords(value)
    return found


def _validator(info: generator_pb2.StrategyInfo) -> jsonschema.protocols.Validator:
    schema = json.loads(info.params_schema)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_every_strategy_has_a_schema_its_defaults_fit(listed: dict[str, generator_pb2.StrategyInfo]) -> None:
    assert {"random", "prt", "map_elites", "novelty_search", "designate", "indago"} <= set(listed)
    for name, info in listed.items():
        assert not {"ge", "gt", "le", "lt"} & set(_keywords(json.loads(info.params_schema))), name
        validator = _validator(info)
        defaults = _over_the_wire(json_format.MessageToDict(info.default_params))
        # a null default (e.g. "no surrogate yet") is the model's own: only the given values need to fit
        given = {k: v for k, v in defaults.items() if v is not None}
        assert not list(validator.iter_errors(given)), name
        assert info.package, name


def test_schema_accepts_the_bundled_campaigns_params(listed: dict[str, generator_pb2.StrategyInfo]) -> None:
    checked = 0
    for path in sorted(EXAMPLES.glob("*.yaml")):
        campaign = yaml.safe_load(path.read_text())["campaign"]
        params = campaign.get("strategy_params") or {}
        _validator(listed[campaign["strategy"]]).validate(_over_the_wire(params))
        checked += bool(params)
    assert checked >= 2  # prt and map_elites examples carry parameters


@pytest.mark.parametrize(
    ("strategy", "params", "field"),
    [
        ("prt", {"lam": 0.5}, "lam"),  # below its minimum
        ("prt", {"variant": "nope"}, "variant"),  # not one of the allowed values
        ("prt", {"lamda": 20}, "lamda"),  # unknown name
        ("map_elites", {"initial_tests": 2.5}, "initial_tests"),  # an integer parameter given a fraction
        ("map_elites", {"cells": 0}, "cells"),  # a bound inside a union (pydantic's own name would be ignored)
        ("map_elites", {"cells": [4, 0]}, "cells"),  # ... and inside a list of that union
        ("designate", {"t_diversity": -1.0}, "t_diversity"),  # a bound of an optional number
    ],
)
def test_schema_refuses_what_the_generator_refuses(
    listed: dict[str, generator_pb2.StrategyInfo], strategy: str, params: dict, field: str
) -> None:
    from generator_service.strategies.base import strategy_info
    from generator_service.strategies.params import StrategyParamError, validate

    errors = list(_validator(listed[strategy]).iter_errors(_over_the_wire(params)))
    assert errors and field in json.dumps([e.message for e in errors] + [list(e.path) for e in errors])
    with pytest.raises(StrategyParamError, match=field):
        validate(strategy, strategy_info(strategy).schema, params)
