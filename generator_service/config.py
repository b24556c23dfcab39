"""The campaign spec: validated once, whether it comes from a YAML file or a StartCampaign request."""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format, struct_pb2
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from common.generated.gauntlet.v1 import generator_pb2


class BudgetConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_executions: int = Field(
        0,
        ge=0,
        le=10_000_000,
        description=(
            "test cases to execute (0 = no limit); inputs the subject rejects are stored as invalid and do not count"
        ),
    )
    max_steps: int = Field(0, ge=0, description="simulated environment steps (0 = no limit)")
    max_wall_seconds: float = Field(0.0, ge=0.0, description="wall-clock seconds (0 = no limit)")

    @model_validator(mode="after")
    def _one_limit(self) -> BudgetConfig:
        if not (self.max_executions or self.max_steps or self.max_wall_seconds):
            raise ValueError("set at least one of max_executions, max_steps, max_wall_seconds")
        return self


class CampaignConfig(BaseModel):
    """One strategy against one subject under a budget."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field("campaign", min_length=1, max_length=200)
    subject: str = Field(min_length=1)
    model: str = Field(min_length=1)
    strategy: str = "random"
    strategy_params: dict[str, Any] = Field(default_factory=dict)
    seed: int = Field(0, ge=0, le=2**63 - 1)
    budget: BudgetConfig
    batch_size: int = Field(64, ge=1, le=4096)
    parallelism: int = Field(64, ge=1, le=512)
    stop_at_first_failure: bool = False
    repetitions: int = Field(1, ge=1, le=100)
    oracle: str = ""
    keep_final_observations: bool = Field(
        False,
        description="store each execution's final observation (final-state sparsity needs it; "
        "off by default because image observations make every stored row large)",
    )

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
        )
        spec.model.name = self.model
        return spec

    @staticmethod
    def from_proto(spec: generator_pb2.CampaignSpec) -> CampaignConfig:
        return CampaignConfig(
            name=spec.name or "campaign",
            subject=spec.subject,
            model=spec.model.name,
            strategy=spec.strategy or "random",
            strategy_params=json_format.MessageToDict(spec.strategy_params),
            seed=spec.seed,
            budget=BudgetConfig(
                max_executions=spec.budget.max_executions,
                max_steps=spec.budget.max_steps,
                max_wall_seconds=spec.budget.max_wall_seconds,
            ),
            batch_size=spec.batch_size or 64,
            parallelism=spec.parallelism or 64,
            stop_at_first_failure=spec.stop_at_first_failure,
            repetitions=spec.repetitions or 1,
            oracle=spec.oracle,
            keep_final_observations=spec.keep_final_observations,
        )


def explain(error: ValidationError, prefix: str = "") -> str:
    """One line per problem, naming the field and what it allows (pydantic's wording, without its URLs)."""
    lines = []
    for problem in error.errors():
        where = ".".join(str(p) for p in problem["loc"]) or "campaign"
        lines.append(
            f"{prefix}{where}: {problem['msg']}"
            + (
                f" (got {problem['input']!r})"
                if problem["type"] not in ("missing", "value_error") and not isinstance(problem.get("input"), dict)
                else ""
            )
        )
    return "; ".join(lines)
