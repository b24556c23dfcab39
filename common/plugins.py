"""The one plug-in mechanism: Python entry points.

A package adds a strategy, oracle, injector, validator, search operator or simulator backend by declaring an entry
point in its own ``pyproject.toml`` and installing itself; nothing in Gauntlet needs editing::

    [project.entry-points."gauntlet.strategies"]
    my_search = "my_package.search:MySearch"

Gauntlet's own plug-ins are declared the same way in its ``pyproject.toml``. The entry point's name is the name
campaigns and subjects use; what it points at depends on the group (a strategy class, an oracle factory, ...), and
the module owning the group says what it expects.

A *subject pack* (``subjects/<family>/``: one subject family's YAML files, env or backend, injector, oracles, validity
rules and search operators) is a package that declares its parts under these groups, plus its folder of subject YAML
files under ``gauntlet.subject_dirs``. Each service loads only the groups of its role (``ROLE_GROUPS``): the simulator
the backends, injectors, subject folders, validators and search operators; the oracle service the oracles; the
generator the strategies, validators and search operators. A pack's modules are split the same way, so a service never
imports the part of a pack that another role runs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import cache, partial
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, TypeVar

from common.errors import FailedPrecondition

STRATEGIES = "gauntlet.strategies"
ORACLES = "gauntlet.oracles"
INJECTORS = "gauntlet.injectors"
VALIDATORS = "gauntlet.validators"
SEARCH_OPERATORS = "gauntlet.search_operators"
SIMULATORS = "gauntlet.simulators"
# a folder of subject YAML files: the entry point names a module attribute holding the folder (a str or Path)
SUBJECT_DIRS = "gauntlet.subject_dirs"

log = logging.getLogger("gauntlet.plugins")
T = TypeVar("T")

GROUPS = (STRATEGIES, ORACLES, INJECTORS, VALIDATORS, SEARCH_OPERATORS, SIMULATORS, SUBJECT_DIRS)

# The groups each service loads: a pack's part reaches only the processes of its role.
ROLE_GROUPS: dict[str, tuple[str, ...]] = {
    "simulator": (SIMULATORS, INJECTORS, SUBJECT_DIRS, VALIDATORS, SEARCH_OPERATORS),
    "oracle": (ORACLES,),
    "generator": (STRATEGIES, VALIDATORS, SEARCH_OPERATORS),
}


class PluginError(FailedPrecondition):
    """A plug-in that is installed but cannot be loaded (or names the wrong object); the message names the plug-in
    and its package. A deployment problem, not the caller's mistake: services answer FAILED_PRECONDITION."""


@cache
def plugin_names(group: str) -> tuple[str, ...]:
    """The names installed under ``group``, sorted (without importing them)."""
    return tuple(sorted({ep.name for ep in entry_points(group=group)}))


@cache
def load_plugin(group: str, name: str) -> Any:
    """The object the entry point ``name`` of ``group`` names; KeyError listing the installed names if none.

    When two installed packages declare the same name, the first one found wins; ``plugin_names`` lists it once.
    """
    for ep in entry_points(group=group):
        if ep.name == name:
            try:
                return ep.load()
            except Exception as exc:  # an installed plug-in that fails to import: say which, not a bare traceback
                package = ep.dist.name if ep.dist is not None else "an unknown package"
                reason = f"{type(exc).__name__}: {exc}"[:200]  # bounded: an import error can quote a whole file path
                raise PluginError(f"plug-in {name!r} ({group}, from {package}) failed to load: {reason}") from exc
    known = ", ".join(plugin_names(group)) or "none"
    raise KeyError(f"no {group} plug-in named {name!r}; installed: {known}")


@cache
def plugin_package(group: str, name: str) -> str:
    """The distribution (pip package) that declares the entry point ``name`` of ``group``; "" if none does."""
    for ep in entry_points(group=group):
        if ep.name == name:
            return ep.dist.name if ep.dist is not None else ""
    return ""


def load_group(group: str) -> dict[str, Any]:
    """Every plug-in of ``group`` by name, loaded."""
    return {name: load_plugin(group, name) for name in plugin_names(group)}


def loadable(group: str, load: Callable[[str], T]) -> dict[str, T]:
    """``load(name)`` for every plug-in of ``group`` that loads; a broken one is logged and left out.

    For listings: one broken third-party package must not take every listing (and every campaign that lists) down
    with it. Asking for the broken plug-in by name still raises its PluginError.
    """
    found: dict[str, T] = {}
    for name in plugin_names(group):
        try:
            found[name] = load(name)
        except PluginError as exc:
            log.warning("left out of the %s listing: %s", group, exc)
    return found


def load_role(role: str) -> dict[str, dict[str, Any]]:
    """Every plug-in a service of ``role`` loads (``ROLE_GROUPS``), by group then name; broken ones are logged and
    left out (as ``loadable``). A service calls nothing else of a pack's, so this is all of a pack it imports."""
    if role not in ROLE_GROUPS:
        raise KeyError(f"unknown role {role!r}; roles: {', '.join(sorted(ROLE_GROUPS))}")
    return {group: loadable(group, partial(load_plugin, group)) for group in ROLE_GROUPS[role]}


def plugin_folders(group: str) -> list[Path]:
    """The folders that the plug-ins of ``group`` name (e.g. each pack's subject folder), in name order; a plug-in
    that fails to load or names something that is not an existing folder is logged and left out."""
    folders = []
    for name in plugin_names(group):
        try:
            folder = Path(load_plugin(group, name))
        except (PluginError, TypeError) as exc:
            log.warning("left out of %s: %s", group, exc)
            continue
        if not folder.is_dir():
            log.warning("left out of %s: plug-in %r names %s, which is not a folder", group, name, folder)
            continue
        folders.append(folder)
    return folders
