"""Subjects: an environment bound to its parameter space, injector, oracle and recordable signals, declared in YAML."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from common.domain.operators import ParameterOperators, make_operators
from common.domain.rules import SubjectRules
from common.domain.validators import Validator, make_validator
from common.plugins import SUBJECT_DIRS, PluginError, plugin_folders
from common.space import ParameterSpace, ParamValue, SpaceError
from simulator_service.search_spec import SEARCH_SIGNALS, SearchSpec, parse_search

# Subject files come from the installed subject packs (each pack's folder, entry-point group gauntlet.subject_dirs;
# subjects/<family>/ in this repository) and from
# extra folders of subject YAML files, separated by os.pathsep (lets users add subjects without code).
SUBJECT_PATH_ENV = "GAUNTLET_SUBJECT_PATH"

# Signals every backend records; subjects add their own (e.g. lunar's game_over).
STANDARD_SIGNALS: dict[str, tuple[str, str]] = {
    "observations": ("step", "observation before each action"),
    "actions": ("step", "action taken at each step"),
    "rewards": ("step", "reward after each step"),
    "final_observation": ("episode", "observation when the episode ended"),
}


class SubjectError(ValueError):
    """A subject file that cannot be used; the message names the file and the field."""


@dataclass(frozen=True)
class SignalDecl:
    name: str
    attribute: str
    granularity: str = "episode"
    description: str = ""


@dataclass(frozen=True)
class Subject:
    name: str
    description: str
    backend: str
    env_id: str
    space: ParameterSpace
    oracle: str
    injector: Mapping[str, Any]
    max_steps: int
    deterministic: bool = True
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    signals: tuple[SignalDecl, ...] = ()
    source: str = ""
    validators: tuple[Validator, ...] = ()  # rules across parameters (plug-ins; see common/domain/validators.py)
    # parameter name -> the operators a validator declared for it (e.g. Donkey's track; common/domain/operators.py)
    operators: Mapping[str, ParameterOperators] = field(default_factory=dict)
    # image subjects: the translator applied to each observation before the model sees it (DESIGNATE's GAN
    # stage; simulator_service/image_stage.py); "" = none, the model sees the simulator's image
    observation_translator: str = ""
    # search-based testing of RL (action-trace inputs, DFS sessions): simulator_service/search_spec.py
    search: SearchSpec | None = None
    # Python modules the backend needs in the simulator's own environment (e.g. Mario's emulator, which needs
    # numpy < 2): a simulator whose environment lacks one does not serve the subject; a simulator in an environment
    # that has them does, and the suite's other simulators forward the subject to it (--peer-simulator)
    requires: tuple[str, ...] = ()
    # subjects whose environment is this one's with another action set (Mario's basic and right-complex sets): an
    # action trace of this subject may name one as the subject its agent acts in (ActionTrace.agent_subject)
    variants: tuple[str, ...] = ()

    def missing_modules(self) -> list[str]:
        """The required modules this process cannot import (found on the path, not imported: cheap)."""
        return [m for m in self.requires if importlib.util.find_spec(m) is None]

    def signal_names(self) -> list[str]:
        return [s.name for s in self.recorded_signals()]

    def recorded_signals(self) -> list[SignalDecl]:
        """Every signal the simulator records for this subject (what DescribeEnvironment lists and an oracle may
        read): the standard ones, the search ones when it has a ``search`` declaration, then its own."""
        standard = [SignalDecl(n, n, g, d) for n, (g, d) in STANDARD_SIGNALS.items()]
        search = [SignalDecl(n, n, g, d) for n, (g, d) in SEARCH_SIGNALS.items()] if self.search is not None else []
        return [*standard, *search, *self.signals]

    @property
    def rules(self) -> SubjectRules:
        """The subject's rules and operators as declarations: what DescribeEnvironment sends a generator, which
        builds the same rules from them (common/domain/rules.py)."""
        return SubjectRules.of_validators(self.name, self.space, self.validators)

    def violations(self, values: Mapping[str, ParamValue]) -> list[str]:
        """Domain violations of the space, then those of the subject's validators; empty means valid."""
        return self.space.violations(values) + [p for v in self.validators for p in v.violations(values)]

    def sample(self, rng: np.random.Generator, max_tries: int = 10_000) -> dict[str, ParamValue]:
        """A uniform draw from the space, redrawn until the validators accept it (rejection sampling).

        A parameter whose validator brings its own operators (e.g. Donkey's track) is drawn by them instead.
        """
        for _ in range(max_tries):
            values = self.space.sample(rng)
            for name, ops in self.operators.items():
                values[name] = ops.sample(rng)
            if not self.validators or not self.violations(values):
                return values
        raise SubjectError(
            f"subject {self.name}: no valid test case in {max_tries} uniform draws; "
            f"check its validators ({'; '.join(v.text for v in self.validators)})"
        )


def load_subject_file(path: Path) -> Subject:
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise SubjectError(f"{path}: not valid YAML ({exc})") from None
    if not isinstance(data, dict):
        raise SubjectError(f"{path}: expected a mapping at the top level")
    required = ("subject", "backend", "env_id", "parameters", "oracle", "injector", "max_steps")
    missing = [k for k in required if k not in data]
    if missing:
        raise SubjectError(f"{path}: missing field(s) {', '.join(missing)}")
    try:
        space = ParameterSpace.from_config(data["parameters"], data.get("constraints", ()))
    except SpaceError as exc:
        raise SubjectError(f"{path}: parameters: {exc}") from None
    validators = []
    for i, spec in enumerate(data.get("validators", []) or []):
        try:
            validators.append(make_validator(spec, space.names))
        except (ValueError, PluginError) as exc:
            raise SubjectError(f"{path}: validators[{i}]: {exc}") from None
    operators: dict[str, ParameterOperators] = {}
    for v in validators:
        if v.operator is None:
            continue
        if v.operator.parameter in operators:
            raise SubjectError(f"{path}: two validators declare search operators for {v.operator.parameter!r}")
        try:
            operators[v.operator.parameter] = make_operators(v.operator, space.names)
        except (ValueError, PluginError) as exc:
            raise SubjectError(f"{path}: validator {v.kind!r}: {exc}") from None
    # the rules also travel as the space's free-text constraints, so clients see them in DescribeEnvironment
    extra = [v.text for v in validators if v.text not in space.constraints]
    if extra:
        space = ParameterSpace(space.parameters, (*space.constraints, *extra))
    if not isinstance(data["injector"], dict) or "kind" not in data["injector"]:
        raise SubjectError(f"{path}: injector must be a mapping with a 'kind'")
    max_steps = data["max_steps"]
    if not isinstance(max_steps, int) or max_steps < 1:
        raise SubjectError(f"{path}: max_steps must be a positive integer, got {max_steps!r}")
    signals = []
    for s in data.get("signals", []) or []:
        if not isinstance(s, dict) or not {"name", "attribute"} <= set(s):
            raise SubjectError(f"{path}: each signal needs 'name' and 'attribute', got {s!r}")
        if s.get("granularity", "episode") not in ("episode", "step"):
            raise SubjectError(f"{path}: signal {s['name']!r}: granularity must be 'episode' or 'step'")
        signals.append(SignalDecl(s["name"], s["attribute"], s.get("granularity", "episode"), s.get("description", "")))
    search = None
    if "search" in data:
        try:
            search = parse_search(data["search"], space.names)
        except ValueError as exc:
            raise SubjectError(f"{path}: {exc}") from None
        if problems := space.violations(search.initial):
            raise SubjectError(f"{path}: search.initial: {'; '.join(problems)}")
    requires = data.get("requires", []) or []
    if not isinstance(requires, list) or not all(isinstance(m, str) and m.isidentifier() for m in requires):
        raise SubjectError(f"{path}: requires must be a list of Python module names, got {requires!r}")
    variants = data.get("variants", []) or []
    if not isinstance(variants, list) or not all(isinstance(v, str) and v and len(v) <= 64 for v in variants):
        raise SubjectError(f"{path}: variants must be a list of subject names, got {variants!r}")
    if data["subject"] in variants:
        raise SubjectError(f"{path}: variants must not name the subject itself")
    return Subject(
        name=str(data["subject"]),
        description=str(data.get("description", "")),
        backend=str(data["backend"]),
        env_id=str(data["env_id"]),
        space=space,
        oracle=str(data["oracle"]),
        injector=dict(data["injector"]),
        max_steps=max_steps,
        deterministic=bool(data.get("deterministic", True)),
        env_kwargs=dict(data.get("env_kwargs", {}) or {}),
        signals=tuple(signals),
        source=str(path),
        validators=tuple(validators),
        operators=operators,
        observation_translator=_translator_name(path, data.get("observation_translator")),
        search=search,
        requires=tuple(requires),
        variants=tuple(variants),
    )


NO_TRANSLATOR = "none"  # a subject's or a request's explicit "no translator" (DESIGNATE_NoGAN)


def _translator_name(path: Path, raw: object) -> str:
    if raw is None or raw == NO_TRANSLATOR:
        return ""
    if not isinstance(raw, str) or not raw.strip():
        raise SubjectError(
            f"{path}: observation_translator must be a translator name or {NO_TRANSLATOR!r}, got {raw!r}"
        )
    return raw


def subject_dirs() -> list[Path]:
    """The installed packs' subject folders, then those of $GAUNTLET_SUBJECT_PATH."""
    extra = [Path(p) for p in os.environ.get(SUBJECT_PATH_ENV, "").split(os.pathsep) if p]
    return [*plugin_folders(SUBJECT_DIRS), *extra]


def load_subjects(dirs: list[Path] | None = None) -> dict[str, Subject]:
    """Every subject in the given folders (default: the installed packs' plus $GAUNTLET_SUBJECT_PATH's)."""
    subjects: dict[str, Subject] = {}
    for folder in dirs or subject_dirs():
        for path in sorted(folder.glob("*.yaml")):
            subject = load_subject_file(path)
            if subject.name in subjects:
                raise SubjectError(
                    f"{path}: subject {subject.name!r} is already declared in {subjects[subject.name].source}"
                )
            subjects[subject.name] = subject
    return subjects


def get_subject(name: str, subjects: Mapping[str, Subject] | None = None) -> Subject:
    known = subjects if subjects is not None else load_subjects()
    if name not in known:
        raise KeyError(f"unknown subject {name!r}; known subjects: {', '.join(sorted(known))}")
    return known[name]
