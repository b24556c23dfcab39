"""A subject's validity rules and search operators as declarations: what DescribeEnvironment carries
(``validity_rules``, ``search_operators``; docs/contracts/subject-rules.md), and how a strategy builds them.

The simulator describes its subjects with ``SubjectRules`` (simulator_service/subject.py: ``Subject.rules``) and
sends them with ``to_proto_fields``; the generator reads them back with ``from_description`` and builds the rules
and operators through the same plug-ins (``validators``, ``parameter_operators``). It never reads subject files of
its own: a subject that exists only on the simulator's host is searched with its rules all the same.

A rule or operator kind that is not installed where it is built is a FAILED_PRECONDITION naming it (a strategy
that ignored it would search, and report, inputs the subject refuses). A subject without rules has none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format, struct_pb2

from common.domain.operators import OperatorSpec, ParameterOperators, UnknownOperatorKind, make_operators
from common.domain.validators import UnknownRuleKind, Validator, build_validator
from common.errors import FailedPrecondition
from common.generated.gauntlet.v1 import simulator_pb2
from common.plugins import SEARCH_OPERATORS, VALIDATORS, PluginError
from common.space import ParameterSpace


@dataclass(frozen=True)
class RuleSpec:
    """The declaration of one validity rule: its kind, its one-line text and the options the subject gave it."""

    kind: str
    text: str
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SubjectRules:
    """What a strategy needs to respect a subject beyond its space: its rules and its parameters' own operators."""

    subject: str
    space: ParameterSpace
    rules: tuple[RuleSpec, ...] = ()
    operators: tuple[OperatorSpec, ...] = ()

    @staticmethod
    def of_validators(subject: str, space: ParameterSpace, validators: tuple[Validator, ...]) -> SubjectRules:
        """The declarations of rules built from a subject's file (and the operators they declare)."""
        return SubjectRules(
            subject,
            space,
            tuple(RuleSpec(v.kind, v.text, dict(v.options)) for v in validators),
            tuple(v.operator for v in validators if v.operator is not None),
        )

    # -- building (the generator's side) ---------------------------------------------------------------------
    def validators(self) -> list[Validator]:
        """Every rule built by its installed plug-in; FailedPrecondition names a kind that is not installed."""
        built = []
        for i, spec in enumerate(self.rules):
            try:
                built.append(build_validator(spec.kind, spec.options, self.space.names))
            except UnknownRuleKind as exc:
                raise FailedPrecondition(
                    f"subject {self.subject!r} declares validity rule {i} of kind {spec.kind!r} ({spec.text}), "
                    f"which is not installed here: {exc}; install the package that provides the "
                    f"{VALIDATORS!r} entry point {spec.kind!r}"
                ) from None
            except (ValueError, PluginError) as exc:
                raise FailedPrecondition(
                    f"subject {self.subject!r}: validity rule {i} ({spec.kind!r}) cannot be built here: {exc}"
                ) from None
        return built

    def parameter_operators(self) -> dict[str, ParameterOperators]:
        """Parameter name -> its operators, built by the installed plug-ins; FailedPrecondition as ``validators``."""
        built: dict[str, ParameterOperators] = {}
        for spec in self.operators:
            try:
                built[spec.parameter] = make_operators(spec, self.space.names)
            except UnknownOperatorKind as exc:
                raise FailedPrecondition(
                    f"subject {self.subject!r} declares search operator kind {spec.kind!r} for parameter "
                    f"{spec.parameter!r}, which is not installed here: {exc}; install the package that provides "
                    f"the {SEARCH_OPERATORS!r} entry point {spec.kind!r}"
                ) from None
            except (ValueError, PluginError) as exc:
                raise FailedPrecondition(
                    f"subject {self.subject!r}: the {spec.kind!r} operators of {spec.parameter!r} cannot be built "
                    f"here: {exc}"
                ) from None
        return built

    # -- the contract ----------------------------------------------------------------------------------------
    def to_proto_fields(self) -> dict[str, Any]:
        """DescribeEnvironmentResponse's ``validity_rules`` and ``search_operators``, as keyword arguments."""
        return {
            "validity_rules": [
                simulator_pb2.ValidityRule(kind=r.kind, text=r.text, options=_struct(r.options)) for r in self.rules
            ],
            "search_operators": [
                simulator_pb2.SearchOperator(parameter=o.parameter, kind=o.kind, options=_struct(o.options))
                for o in self.operators
            ],
        }

    @staticmethod
    def from_description(response: simulator_pb2.DescribeEnvironmentResponse) -> SubjectRules:
        """The rules a DescribeEnvironment response declares (nothing is built yet: see ``validators``)."""
        return SubjectRules(
            response.summary.subject,
            ParameterSpace.from_proto(response.parameter_space),
            tuple(RuleSpec(r.kind, r.text, json_format.MessageToDict(r.options)) for r in response.validity_rules),
            tuple(
                OperatorSpec(o.parameter, o.kind, json_format.MessageToDict(o.options))
                for o in response.search_operators
            ),
        )


def _struct(options: Mapping[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(dict(options))
    return struct
