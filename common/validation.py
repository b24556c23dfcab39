"""The one place for checks of what a request carries: identifiers, numbers, text and paths.

Every service checks a request with these before it stores or opens anything, and every refusal is an
InvalidArgument whose sentence names the field and the rule, never the whole bad value: a 3 MB name is summarised
as "name of 3,000,000 characters", so an error stays short whatever the caller sent (common/errors.py also cuts
every detail to MAX_DETAIL_BYTES as a last guard).

* Identifiers (campaign and test-case ids; model, subject, strategy, oracle and translator names) match ID_PATTERN:
  a letter or digit, then up to 63 letters, digits, '.', '_' or '-'. No '/', no '..' on its own, no whitespace or
  control characters, so an id is safe as a file name, a URL segment and a log field.
* Numbers are finite and inside the range the field documents.
* Paths a client may name (a surrogate folder, a training log, a report folder) are relative to a root the service
  declares, and must stay inside it: no absolute path, no '..', no NUL byte, no symbolic link leading out. A refused
  path's error does not say whether it exists.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from common.errors import InvalidArgument

ID_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"
ID_RULE = "1 to 64 characters: a letter or digit, then letters, digits, '.', '_' or '-'"
_ID = re.compile(ID_PATTERN)
MAX_TEXT = 200  # the longest free text (a campaign's name) a request may carry
MAX_IDS = 1000  # the most campaign ids one request may name
SHOWN_CHARACTERS = 80  # longer values are summarised by their length in messages


def shown(value: Any) -> str:
    """`value` for an error sentence: its repr when short, else what it is and how long, never its whole text."""
    if isinstance(value, (str, bytes)):
        if len(value) <= SHOWN_CHARACTERS:
            return repr(value)  # escapes control characters
        kind = "bytes" if isinstance(value, bytes) else "characters"
        head = repr(value[:20])
        return f"a value of {len(value):,} {kind} starting {head}"
    text = repr(value)
    if len(text) <= SHOWN_CHARACTERS:
        return text
    size = f" of {len(value):,} items" if hasattr(value, "__len__") else ""
    return f"a {type(value).__name__}{size}"


def check_id(field: str, value: str, *, required: bool = True) -> str:
    """`value` if it is a valid identifier (ID_PATTERN); '' is allowed when not `required`."""
    if not value and not required:
        return value
    if not isinstance(value, str) or not _ID.fullmatch(value):
        got = "nothing" if value == "" else shown(value)
        raise InvalidArgument(f"{field} must be {ID_RULE}; got {got}")
    return value


def check_ids(field: str, values: Iterable[str], *, at_least: int = 1, at_most: int = MAX_IDS) -> list[str]:
    """Each of `values` checked with check_id, and their number in [at_least, at_most]."""
    listed = list(values)
    if not at_least <= len(listed) <= at_most:
        raise InvalidArgument(f"{field} must name {at_least} to {at_most} ids, got {len(listed)}")
    return [check_id(f"{field}[{i}]", v) for i, v in enumerate(listed)]


def check_text(field: str, value: str, *, at_most: int = MAX_TEXT) -> str:
    """Free text of at most `at_most` printable characters (no control characters such as a newline)."""
    if len(value) > at_most:
        raise InvalidArgument(f"{field} must be at most {at_most} characters; got {_length(value)}")
    if not value.isprintable():
        raise InvalidArgument(f"{field} must not contain control characters (newline, tab, NUL ...)")
    return value


def check_number(field: str, value: float, low: float, high: float) -> float:
    """`value` if it is a finite number in [low, high]; else one sentence naming the field and the range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"{field} must be a number in [{low:g}, {high:g}], got {shown(value)}")
    if not math.isfinite(value) or not low <= value <= high:
        raise InvalidArgument(f"{field} must be a finite number in [{low:g}, {high:g}], got {value:g}")
    return value


def non_finite_summary(array: np.ndarray, what: str = "observations") -> str | None:
    """None when every element of a float array is finite, else e.g.
    "observations contain 3 non-finite values (first at [0, 2])" (never the array itself)."""
    if not np.issubdtype(array.dtype, np.floating):
        return None
    bad = ~np.isfinite(array)
    count = int(bad.sum())
    if not count:
        return None
    first = ", ".join(str(int(i)) for i in np.argwhere(bad)[0])
    return f"{what} contain {count:,} non-finite value{'s' if count != 1 else ''} (first at [{first}])"


def resolve_under(root: Path, relative: str, field: str, root_name: str) -> Path:
    """The absolute path of `relative` inside `root`, refusing anything that could lead out of it.

    `root_name` says which root in words ("the generator's artifact root"). The refusal reads the same whether or
    not the path exists, so a caller learns nothing about the server's files from it.
    """
    rule = f"{field} must be a path relative to {root_name}, without '..'"
    if not relative:
        raise InvalidArgument(f"{field} must name a path relative to {root_name}; got nothing")
    if len(relative) > 1024:
        raise InvalidArgument(f"{rule}; got {_length(relative)}")
    if "\x00" in relative or not relative.isprintable():
        raise InvalidArgument(f"{rule} and without control characters; got one with control characters")
    candidate = Path(relative)
    if candidate.is_absolute() or relative.startswith("~"):
        raise InvalidArgument(f"{rule}; got an absolute path")
    if ".." in candidate.parts:
        raise InvalidArgument(f"{rule}; got one with '..'")
    base = root.resolve()
    resolved = (base / candidate).resolve()  # follows symbolic links, existing or not
    if resolved != base and base not in resolved.parents:
        raise InvalidArgument(f"{rule}; got one that leads outside it (a symbolic link)")
    return resolved


def root_from_environment(variable: str, default: str) -> Path:
    """A root folder from an environment variable, else `default` (relative to the working directory)."""
    return Path(os.environ.get(variable) or default)


def _length(value: str) -> str:
    return f"a value of {len(value):,} characters"
