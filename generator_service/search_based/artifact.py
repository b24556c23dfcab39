"""The stored output of the DFS (Step 1): τ_ref, the boundary states with their depths, the search statistics.

One JSON file, versioned by its ``format`` field; the safety suites and trace fuzzing read it by a path under the
generator's artifact root (strategy parameter ``reference``).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from generator_service.search_based.dfs import SearchResult

FORMAT = "gauntlet.search_reference.v1"


def reference_document(
    result: SearchResult,
    subject: str,
    initial: dict[str, Any],
    seed: int,
    search_actions: list[int],
    agent_actions: int,
) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "subject": subject,
        "initial": initial,
        "seed": seed,
        "search_actions": search_actions,
        "agent_actions": agent_actions,
        "success": result.success,
        "reference_actions": result.actions,
        "reference_rewards": result.rewards,
        "reference_states": [list(s) if isinstance(s, tuple) else s for s in result.states],
        "boundary": [
            {"depth": b.depth, "state": list(b.key) if isinstance(b.key, tuple) else b.key} for b in result.boundary
        ],
        "stats": asdict(result.stats),
    }


def write_reference(path: Path, document: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1))


def read_reference(path: Path) -> dict[str, Any]:
    """The stored reference; ValueError naming the file when it is not one, or the search found no goal."""
    try:
        document = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(
            f"reference {Path(path).name}: cannot be read as a search reference ({type(exc).__name__})"
        ) from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ValueError(f"reference {Path(path).name}: not a {FORMAT} document")
    if not document.get("success"):
        raise ValueError(f"reference {Path(path).name}: the search found no goal, so there is no reference trace")
    return document
