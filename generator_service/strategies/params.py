"""A strategy's parameters, declared once as a typed schema: names, types, ranges and defaults.

Each strategy class names a ``Params`` model (a subclass of ``StrategyParams``). The model is the only place a
parameter's default and allowed values are written: ``make_strategy`` validates a campaign's ``strategy_params``
against it, and ``gauntlet strategies`` lists it. Checks that need more than one parameter or the parameter
space (e.g. a surrogate that must fit the subject) stay in the strategy's constructor.

Numbers may arrive as floats (a campaign's parameters travel as a protobuf Struct), so ``Integer`` accepts an
integral float; neither numeric type accepts a bool or a string.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError
from pydantic.fields import FieldInfo

# json_schema_extra key of a parameter that names a file or folder: in a campaign the generator service resolves it
# under its artifact root (--artifact-root), refusing absolute paths and '..' (common/validation.py resolve_under)
ARTIFACT_PATH = "artifact_path"


class StrategyParamError(ValueError):
    """A strategy parameter that is unknown or out of range; the message names it."""


def _number_only(value: Any) -> Any:
    # pydantic's lax mode would read True as 1 and "3" as 3; a parameter file with those is a mistake.
    if isinstance(value, (bool, str, bytes)):
        raise ValueError("not a number")
    return value


Integer = Annotated[int, BeforeValidator(_number_only)]
Number = Annotated[float, BeforeValidator(_number_only)]
Count = Annotated[int, BeforeValidator(_number_only), annotated_types.Ge(1)]  # an integer >= 1, inside other types


# pydantic writes a bound it could not fold into the type (a Ge after a BeforeValidator, as in Count inside a union)
# under its Python name, e.g. {"ge": 1}, which a JSON Schema validator ignores; these are the keywords it means
_JSON_SCHEMA_BOUNDS = {"ge": "minimum", "gt": "exclusiveMinimum", "le": "maximum", "lt": "exclusiveMaximum"}
_JSON_SCHEMA_LENGTHS = {"min_length": ("minItems", "minLength"), "max_length": ("maxItems", "maxLength")}


def _standard_keywords(node: Any) -> None:
    """Renames, in place, pydantic's leftover constraint names in a JSON Schema to JSON Schema keywords."""
    if isinstance(node, list):
        for item in node:
            _standard_keywords(item)
        return
    if not isinstance(node, dict):
        return
    for name, keyword in _JSON_SCHEMA_BOUNDS.items():
        if name in node and keyword not in node:
            node[keyword] = node.pop(name)
    for name, (of_array, of_text) in _JSON_SCHEMA_LENGTHS.items():
        if name in node:
            node[of_array if node.get("type") == "array" else of_text] = node.pop(name)
    for key, value in node.items():
        if key in ("properties", "$defs") and isinstance(value, dict):  # names, not keywords, at this level
            for schema in value.values():
                _standard_keywords(schema)
        else:
            _standard_keywords(value)


def _json_schema_extra(schema: dict[str, Any], model: type) -> None:
    _standard_keywords(schema)


class StrategyParams(BaseModel):
    """Base of every strategy's parameter schema: unknown names, NaN and infinity are refused. Its JSON Schema
    (``model_json_schema()``, served by ListStrategies) uses standard keywords only for bounds."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True, json_schema_extra=_json_schema_extra)


@dataclass(frozen=True)
class ParameterDoc:
    """One parameter as listed: its name, default, allowed values in words, and what it means."""

    name: str
    default: Any
    allowed: str
    description: str


def _type_text(annotation: Any) -> str:
    origin = get_origin(annotation)
    if origin is Annotated:
        base, *metadata = get_args(annotation)
        return _type_text(base) + _bounds_text(metadata)
    if origin is Literal:
        return "one of " + ", ".join(str(v) for v in get_args(annotation))
    if origin in (Union, types.UnionType):
        options = [a for a in get_args(annotation) if a is not type(None)]
        text = " or ".join(_type_text(a) for a in options)
        return text + (" (or null)" if len(options) < len(get_args(annotation)) else "")
    if origin in (list, tuple):
        items = get_args(annotation)
        if origin is tuple and items and items[-1] is not Ellipsis:
            return "[" + ", ".join(_type_text(a) for a in items) + "]"
        return f"a list of items, each {_type_text(items[0])}" if items else "a list"
    names = {int: "an integer", float: "a number", str: "text", bool: "true or false"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _bound(metadata: list[Any], kinds: tuple[type, ...]) -> tuple[str, float] | None:
    """(the constraint's attribute name, its value) of the first constraint of ``kinds`` in ``metadata``."""
    for item in metadata:
        if isinstance(item, kinds):
            attr = type(item).__name__.lower()  # Ge -> ge, Gt -> gt, ...
            return attr, float(getattr(item, attr))
    return None


def _bounds_text(metadata: list[Any]) -> str:
    low = _bound(metadata, (annotated_types.Ge, annotated_types.Gt))
    high = _bound(metadata, (annotated_types.Le, annotated_types.Lt))
    if low and high:
        return f" in {'[' if low[0] == 'ge' else '('}{low[1]:g}, {high[1]:g}{']' if high[0] == 'le' else ')'}"
    signs = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
    bound = low or high
    return f" {signs[bound[0]]} {bound[1]:g}" if bound else ""


def allowed_text(field: FieldInfo) -> str:
    """The values a parameter allows, in words (e.g. "an integer >= 1", "one of paper, authors_code")."""
    if isinstance(field.json_schema_extra, dict) and "allowed" in field.json_schema_extra:
        return str(field.json_schema_extra["allowed"])
    return _type_text(field.annotation) + _bounds_text(list(field.metadata))


def describe(schema: type[StrategyParams]) -> tuple[ParameterDoc, ...]:
    """Every parameter of ``schema``, in declaration order."""
    return tuple(
        ParameterDoc(name, field.get_default(call_default_factory=True), allowed_text(field), field.description or "")
        for name, field in schema.model_fields.items()
    )


def defaults(schema: type[StrategyParams]) -> dict[str, Any]:
    return {doc.name: doc.default for doc in describe(schema)}


def validate(strategy: str, schema: type[StrategyParams], params: Mapping[str, Any]) -> StrategyParams:
    """``params`` over the schema's defaults; StrategyParamError naming the first bad parameter and its range."""
    unknown = sorted(set(params) - set(schema.model_fields))
    if unknown:
        known = ", ".join(schema.model_fields) or "none"
        raise StrategyParamError(
            f"strategy {strategy!r} has no parameter(s) {', '.join(unknown)}; its parameters: {known}"
        )
    try:
        return schema.model_validate(dict(params))
    except ValidationError as exc:
        problem = exc.errors()[0]
        name = str(problem["loc"][0]) if problem["loc"] else ""
        if name not in schema.model_fields:  # a check across parameters (model validator): its message says it all
            raise StrategyParamError(f"{strategy}: {_reason(problem)}") from None
        field = schema.model_fields[name]
        explicit = isinstance(field.json_schema_extra, dict) and "allowed" in field.json_schema_extra
        why = f" ({_reason(problem)})" if problem["type"] == "value_error" and not explicit else ""
        raise StrategyParamError(
            f"{strategy} parameter {name} must be {allowed_text(field)}, got {params.get(name)!r}{why}"
        ) from None


def _reason(problem: Any) -> str:
    message = str(problem["msg"])
    return message.removeprefix("Value error, ")
