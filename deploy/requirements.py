#!/usr/bin/env python3
"""Print the pinned requirements of gauntlet's core plus the named extras, one a line, read from pyproject.toml.

    python3 deploy/requirements.py pyproject.toml simulator          # core + the simulator extra
    python3 deploy/requirements.py pyproject.toml agent translator   # several roles

The image build installs this list before it copies the source (deploy/Dockerfile), so that the slow dependency
layer is rebuilt only when the dependencies change; deploy/images.sh feeds the same list to the host's pip to fill
its wheelhouse. An extra that names gauntlet's own extras (`all = ["gauntlet[simulator,...]"]`) is expanded here,
since the list is installed without the project. Standard library only: it runs on the bare base image.
"""

from __future__ import annotations

import re
import sys
import tomllib

SELF = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+)\[(?P<extras>[^\]]*)\]$")


def requirements(project: dict[str, object], extras: list[str]) -> list[str]:
    """The core dependencies and those of each extra (recursively through self-references), in order, once each."""
    name = str(project["name"])
    optional = project.get("optional-dependencies", {})
    assert isinstance(optional, dict)
    out: list[str] = []
    seen: set[str] = set()

    def add(requirement: str) -> None:
        own = SELF.match(requirement.replace(" ", ""))
        if own and own["name"] == name:
            for extra in own["extras"].split(","):
                expand(extra.strip())
        elif requirement not in out:
            out.append(requirement)

    def expand(extra: str) -> None:
        if extra in seen:
            return
        if extra not in optional:
            sys.exit(f"pyproject.toml has no extra {extra!r} (extras: {', '.join(sorted(optional))})")
        seen.add(extra)
        for requirement in optional[extra]:
            add(requirement)

    dependencies = project["dependencies"]
    assert isinstance(dependencies, list)
    for requirement in dependencies:
        add(requirement)
    for extra in extras:
        expand(extra)
    return out


def main(argv: list[str]) -> int:
    if len(argv) < 1:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[0], "rb") as file:
        project = tomllib.load(file)["project"]
    print("\n".join(requirements(project, argv[1:])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
