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


def set_entry(model_root: Path, name: str, entry: Mapping[str, Any], section: str = "models") -> Path:
    """Lists `entry` under `name` in `section` of `model_root`/manifest.yaml: replaces that entry's block, or adds it
    at the end of the section, and keeps every other line as it is (a YAML round trip would drop the bundled
    manifest's comments and refold its descriptions). A new manifest or section is created. ValueError when the
    result would not parse to the old manifest plus exactly this entry."""
    manifest = Path(model_root) / "manifest.yaml"
    text = manifest.read_text() if manifest.exists() else ""
    old = yaml.safe_load(text) or {}
    block = [ENTRY_INDENT + line for line in yaml.safe_dump({name: dict(entry)}, sort_keys=False).splitlines()]
    lines = text.splitlines()
    if section not in old:
        lines += [f"{section}:", *block]
    elif name in (old.get(section) or {}):
        start = _entry_line(lines, name, section, manifest)
        lines[start : _block_end(lines, start)] = block
    else:
        header = next((i for i, line in enumerate(lines) if line.rstrip() == f"{section}:"), None)
        if header is None:
            raise ValueError(f"{manifest}: section {section!r} is not a block this editor can add to")
        end = header + 1
        while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > 0 or lines[end].startswith("#")):
            end += 1
        while end > header + 1 and (not lines[end - 1].strip() or lines[end - 1].startswith("#")):
            end -= 1  # blank lines and comments before the next section stay with it
        lines[end:end] = block
    new_text = "\n".join(lines) + "\n"
    expected = {**old, section: {**(old.get(section) or {}), name: _plain_entry(entry)}}
    if (yaml.safe_load(new_text) or {}) != expected:
        raise ValueError(f"{manifest}: entry {name!r} could not be written in place")
    partial = manifest.with_name(manifest.name + ".partial")
    partial.write_text(new_text)
    partial.replace(manifest)
    return manifest


def _plain_entry(entry: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _plain(v) for k, v in entry.items()}


def _block_end(lines: list[str], start: int) -> int:
    """The line after entry `start`'s block: its fields, and blank lines or comments inside it."""
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > len(ENTRY_INDENT)):
        end += 1
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1  # a blank line before the next entry is kept
    return end


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
