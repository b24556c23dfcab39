"""tools/import_cycles.py (run by `make lint`): finds import circles, function-local and relative imports included,
names each import on a circle by file:line, and passes a tree without one, this repository included."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "import_cycles.py"


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(TOOL), str(root)], capture_output=True, text=True, timeout=120)


def test_a_circle_through_a_function_local_import_is_found_with_its_lines(tmp_path: Path) -> None:
    tree = write_tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/page.py": "from pkg.kit import escape\n\n\ndef page() -> str:\n    return escape('x')\n",
            # the circle hides in a function, as the analysis kit's did
            "pkg/kit.py": "def escape(s: str) -> str:\n    from pkg.page import page\n\n    return s + page()\n",
            "pkg/alone.py": "import pkg.kit\n",
        },
    )
    done = check(tree)
    assert done.returncode == 1, done.stdout
    assert "import cycle: pkg.kit -> pkg.page -> pkg.kit" in done.stdout
    assert "pkg/kit.py:2 imports pkg.page" in done.stdout
    assert "pkg/page.py:1 imports pkg.kit" in done.stdout
    assert "pkg.alone" not in done.stdout  # importing into a circle is not being on it
    assert "1 import cycle(s)" in done.stdout


def test_relative_imports_and_every_circle_of_a_bigger_knot(tmp_path: Path) -> None:
    # a -> b -> c -> a and c -> d -> c: one component, reported as two circles that cover all four modules
    tree = write_tree(
        tmp_path,
        {
            "top/__init__.py": "",
            "top/sub/__init__.py": "",
            "top/sub/a.py": "from . import b\n",
            "top/sub/b.py": "from .c import thing\n",
            "top/sub/c.py": "thing = 1\n\n\ndef f() -> None:\n    from ..sub import a, d\n",
            "top/sub/d.py": "if True:\n    import top.sub.c\n",
        },
    )
    done = check(tree)
    assert done.returncode == 1, done.stdout
    assert "import cycle: top.sub.a -> top.sub.b -> top.sub.c -> top.sub.a" in done.stdout
    assert "import cycle: top.sub.d -> top.sub.c -> top.sub.d" in done.stdout
    assert "top/sub/c.py:5 imports top.sub.a" in done.stdout
    assert "2 import cycle(s)" in done.stdout


def test_a_tree_without_a_circle_passes(tmp_path: Path) -> None:
    tree = write_tree(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.b import B\n",  # a package re-exporting its submodule is no circle
            "pkg/a.py": "import json\n\nfrom pkg import b\nfrom pkg.b import B\n",
            "pkg/b.py": "from typing import TYPE_CHECKING\n\nB = 1\nif TYPE_CHECKING:\n    import os\n",
            "scripts/run.py": "from pkg.a import b\n",
            ".venv/lib/pkg/a.py": "from pkg.b import B\nfrom pkg.a import x\n",  # hidden folders are not read
        },
    )
    done = check(tree)
    assert done.returncode == 0, done.stdout
    assert done.stdout.strip() == "no import cycles"


def test_a_file_that_does_not_parse_is_named(tmp_path: Path) -> None:
    tree = write_tree(tmp_path, {"pkg/__init__.py": "", "pkg/bad.py": "def f(:\n"})
    done = check(tree)
    assert done.returncode == 1
    assert "cannot parse pkg/bad.py" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_repository_has_no_import_circle() -> None:
    # `make lint` runs the same check; here it also guards a change that is tested but not linted
    done = check(ROOT)
    assert done.returncode == 0, done.stdout
