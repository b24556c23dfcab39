"""The campaign spec: validated once, whether it comes from a YAML file or a StartCampaign request."""

from __future__ import annotations

import math
from typing import Annotated, Any

from google.protobuf import json_format, struct_pb2
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from common.errors import InvalidArgument
from common.generated.gauntlet.v1 import generator_pb2
from common.validation import ID_RULE, MAX_TEXT, check_id, check_text, shown

MAX_STEPS = 10**12  # simulated steps: far beyond any campaign, small enough to count in a float without loss
MAX_WALL_SECONDS = 366 * 24 * 3600.0  # a year


def _identifier(value: str) -> str:
    try:
        return check_id("it", value)
    except InvalidArgument:
        raise ValueError(f"must be {ID_RULE}") from None


def _optional_identifier(value: str) -> str:
    return _identifier(value) if value else value


def _free_text(value: str) -> str:
    try:
        return check_text("it", value)
    except InvalidArgument:
        raise ValueError(f"must be 1 to {MAX_TEXT} characters without control characters (newline, tab ...)") from None


def _finite_params(value: dict[str, Any]) -> dict[str, Any]:
    """Strategy parameters are JSON: a NaN or infinity anywhere would be stored as null (or not at all)."""
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise ValueError("numbers must be finite (no NaN or infinity)")
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return value


# names used as identifiers (in the store, in file names, in other services' lookups): ID_PATTERN
Identifier = Annotated[str, AfterValidator(_identifier)]


class BudgetConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    max_executions: int = Field(
        0,
        ge=0,
        le=10_000_000,
        description=(
            "test cases to execute (0 = no limit); inputs the subject rejects are stored as invalid and do not count"
        ),
    )
    max_steps: int = Field(0, ge=0, le=MAX_STEPS, description="simulated environment steps (0 = no limit)")
    max_wall_seconds: float = Field(
        0.0, ge=0.0, le=MAX_WALL_SECONDS, description="wall-clock seconds (0 = no limit), finite, at most a year"
    )

    @model_validator(mode="after")
    def _one_limit(self) -> BudgetConfig:
        if not (self.max_executions or self.max_steps or self.max_wall_seconds):
            raise ValueError("set at least one of max_executions, max_steps, max_wall_seconds")
        return self


MAX_SHRINK_FIRST = 100


class ShrinkConfig(BaseModel):
    """Shrinking at the end of a campaign (generator_service/shrink.py): its first distinct failures."""

    model_config = ConfigDict(extra="forbid")
    first: int = Field(
        0, ge=0, le=MAX_SHRINK_FIRST, description="distinct failures to shrink, in asking order (0 = none)"
    )
    max_executions: int = Field(60, ge=1, le=1000, description="executions each shrink may spend")


class CampaignConfig(BaseModel):
    """One strategy against one subject under a budget."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    name: Annotated[str, AfterValidator(_free_text)] = Field("campaign", min_length=1, max_length=MAX_TEXT)
    subject: Identifier
    model: Identifier
    strategy: Identifier = "random"
    strategy_params: Annotated[dict[str, Any], AfterValidator(_finite_params)] = Field(default_factory=dict)
    seed: int = Field(0, ge=0, le=2**63 - 1)
    budget: BudgetConfig
    batch_size: int = Field(64, ge=1, le=4096)
    parallelism: int = Field(64, ge=1, le=512)
    stop_at_first_failure: bool = False
    repetitions: int = Field(1, ge=1, le=100)
    oracle: Annotated[str, AfterValidator(_optional_identifier)] = ""  # "": the subject's default oracle
    keep_final_observations: bool = Field(
        False,
        description="store each execution's final observation (final-state sparsity needs it; "
        "off by default because image observations make every stored row large)",
    )
    # image subjects: "" = the subject's own translator, "none" = no translator (DESIGNATE_NoGAN)
    observation_translator: Annotated[str, AfterValidator(_optional_identifier)] = ""
    shrink: ShrinkConfig = ShrinkConfig(first=0, max_executions=60)

    def to_proto(self) -> generator_pb2.CampaignSpec:
        params = struct_pb2.Struct()
        params.update(self.strategy_params)
        spec = generator_pb2.CampaignSpec(
            name=self.name,
            subject=self.subject,
            strategy=self.strategy,
            strategy_params=params,
            seed=self.seed,
            budget=generator_pb2.Budget(**self.budget.model_dump()),
            batch_size=self.batch_size,
            parallelism=self.parallelism,
            stop_at_first_failure=self.stop_at_first_failure,
            repetitions=self.repetitions,
            oracle=self.oracle,
            keep_final_observations=self.keep_final_observations,
            observation_translator=self.observation_translator,
        )
        if self.shrink.first:
            spec.shrink.first = self.shrink.first
            spec.shrink.max_executions = self.shrink.max_executions
        spec.model.name = self.model
        return spec

    @staticmethod
    def from_proto(spec: generator_pb2.CampaignSpec) -> CampaignConfig:
        """The spec of a request; ValidationError for a bad field, InvalidArgument for parameters JSON cannot hold.

        name, batch_size, parallelism and repetitions have no default on the wire: proto3 cannot tell 0 or "" from
        unset, and silently turning a 0 into 64 ran a campaign nobody asked for; so 0 and "" are refused with the
        field's range (the campaign file's defaults apply in CampaignConfig, before to_proto sends them)."""
        try:
            params = json_format.MessageToDict(spec.strategy_params)
        except ValueError:  # a NaN or infinity, which JSON (and so the store) cannot hold
            raise InvalidArgument("spec.strategy_params: numbers must be finite (no NaN or infinity)") from None
        # validated as one document, so that an error names the full field path (spec.budget.max_wall_seconds)
        return CampaignConfig.model_validate(
            {
                "name": spec.name,
                "subject": spec.subject,
                "model": spec.model.name,
                "strategy": spec.strategy or "random",
                "strategy_params": params,
                "seed": spec.seed,
                "budget": {
                    "max_executions": spec.budget.max_executions,
                    "max_steps": spec.budget.max_steps,
                    "max_wall_seconds": spec.budget.max_wall_seconds,
                },
                "batch_size": spec.batch_size,
                "parallelism": spec.parallelism,
                "stop_at_first_failure": spec.stop_at_first_failure,
                "repetitions": spec.repetitions,
                "oracle": spec.oracle,
                "keep_final_observations": spec.keep_final_observations,
                "observation_translator": spec.observation_translator,
                "shrink": {"first": spec.shrink.first, "max_executions": spec.shrink.max_executions or 60},
            }
        )


_RANGE_ERRORS = {"greater_than_equal", "less_than_equal", "greater_than", "less_than", "string_too_short"}


def _allowed(model: type[BaseModel], loc: tuple[int | str, ...]) -> str | None:
    """The documented range of the field at `loc` ("an integer in [1, 4096]", "1 to 200 characters"), or None."""
    for depth, part in enumerate(loc):
        info = model.model_fields.get(str(part))
        if info is None:
            return None
        if depth < len(loc) - 1:
            nested = info.annotation
            if not (isinstance(nested, type) and issubclass(nested, BaseModel)):
                return None
            model = nested
            continue
        bounds = {
            name: getattr(m, name)
            for m in info.metadata
            for name in ("ge", "le", "min_length", "max_length")
            if getattr(m, name, None) is not None
        }
        if "ge" in bounds and "le" in bounds:
            kind = "an integer" if info.annotation is int else "a number"
            return f"{kind} in [{bounds['ge']}, {bounds['le']}]"
        if "min_length" in bounds and "max_length" in bounds:
            return f"{bounds['min_length']} to {bounds['max_length']:,} characters"
    return None


def explain(error: ValidationError, prefix: str = "") -> str:
    """One line per problem, naming the field and what it allows (pydantic's wording, without its URLs); a value
    out of a campaign field's range names the whole range ("spec.batch_size: must be an integer in [1, 4096]")."""
    lines = []
    for problem in error.errors():
        where = ".".join(str(p) for p in problem["loc"]) or "campaign"
        allowed = (
            _allowed(CampaignConfig, problem["loc"])
            if error.title == CampaignConfig.__name__ and problem["type"] in _RANGE_ERRORS
            else None
        )
        message = f"must be {allowed}" if allowed else problem["msg"].removeprefix("Value error, ")
        lines.append(
            f"{prefix}{where}: {message}"
            + (
                f" (got {shown(problem['input'])})"
                if problem["type"] != "missing" and not isinstance(problem.get("input"), dict)
                else ""
            )
        )
    return "; ".join(lines)
