"""Writes measured fields into one model's entry of a model root's manifest.yaml, keeping the rest of the file.

`gauntlet evaluate MODEL --model-root DIR` records its measurement (the eval_* fields) here. The bundled manifest
carries comments (why a model was chosen, what a number was measured after) that a YAML round trip would drop,
so the entry's lines are edited in place: a field the entry has gets its new value (a comment on that line went
with the old value and goes with it), a new field is added at the end of the entry. The file is parsed again
before it replaces the old one (written beside it, then renamed), so a reader never sees half of it and a
write that did not give the entry exactly these values is refused.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

ENTRY_INDENT = "  "  # models: -> name: -> fields, as register_model and the bundled manifest write them
FIELD_INDENT = "    "


def update_model_fields(model_root: Path, name: str, fields: Mapping[str, Any], section: str = "models") -> Path:
    """Sets `fields` (scalars or lists of scalars) in entry `name` of `model_root`/manifest.yaml; returns its path.
    ValueError names a missing manifest or entry, or a layout this editor does not handle."""
    manifest = Path(model_root) / "manifest.yaml"
    if not manifest.exists():
        raise ValueError(f"no manifest.yaml in model root {model_root}")
    text = manifest.read_text()
    entries = (yaml.safe_load(text) or {}).get(section) or {}
    if name not in entries:
        raise ValueError(f"model {name!r} is not listed in {manifest}")
    lines = text.splitlines()
    start = _entry_line(lines, name, section, manifest)
    end = start + 1
    last_field = start
    while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > len(ENTRY_INDENT)):
        if lines[end].startswith(FIELD_INDENT) and not lines[end].lstrip().startswith("#"):
            last_field = end
        end += 1
    for key, value in fields.items():
        line = f"{FIELD_INDENT}{key}: {_flow(value)}"
        pattern = re.compile(rf"^{FIELD_INDENT}{re.escape(key)}:(\s|$)")
        found = next((i for i in range(start + 1, last_field + 1) if pattern.match(lines[i])), None)
        if found is not None:
            lines[found] = line
        else:
            last_field += 1
            lines.insert(last_field, line)
    new_text = "\n".join(lines) + "\n"
    written = (yaml.safe_load(new_text) or {}).get(section, {}).get(name, {})
    wrong = [k for k, v in fields.items() if written.get(k) != _plain(v)]
    if wrong:
        raise ValueError(f"{manifest}: entry {name!r} could not be edited in place ({', '.join(wrong)})")
    partial = manifest.with_name(manifest.name + ".partial")
    partial.write_text(new_text)
    partial.replace(manifest)
    return manifest


def _entry_line(lines: list[str], name: str, section: str, manifest: Path) -> int:
    in_section = False
    for i, line in enumerate(lines):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if _indent(line) == 0:
            in_section = line.rstrip() == f"{section}:"
        elif in_section and _indent(line) == len(ENTRY_INDENT) and line.strip() in (f"{name}:", f"'{name}':"):
            return i
    raise ValueError(f"{manifest}: entry {name!r} is not a block under {section}: this editor can update")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _flow(value: Any) -> str:
    return yaml.safe_dump(_plain(value), default_flow_style=True, width=10_000).strip().removesuffix("\n...")


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value
