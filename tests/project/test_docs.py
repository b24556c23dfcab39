"""Docs are tested like code: the site builds, and every command and example in README.md and docs/ is checked.

Every fenced code block carries a marker on the line before it saying how it is checked (an HTML comment, which
neither GitHub nor MkDocs shows):

    <!-- docs-test: run -->                each command runs for real, in a scratch folder (exit code 0)
    <!-- docs-test: parse -->              each command's arguments go through the real argument parser, and
                                           nothing else runs (for campaigns that take hours, `make demo`, ...)
    <!-- docs-test: campaign [file=F] -->  a campaign file, loaded by `gauntlet run`'s own loader; its subject,
                                           model and strategy must exist (bundled, or declared by an earlier
                                           subject/recipe block of the same page); with file=F it is saved as F
                                           for the commands of later `run` blocks of the same page
    <!-- docs-test: subject -->            a subject file, loaded by the simulator's subject loader
    <!-- docs-test: recipe -->             a training recipe file (`gauntlet train --recipe`), loaded by the
                                           recipe loader; its subject must be bundled or declared on the page
    <!-- docs-test: output from=PATH -->   printed output of PATH (shown, not run; PATH must exist)
    <!-- docs-test: excerpt from=PATH -->  lines quoted from PATH: each non-blank line of the block is a line of
                                           PATH, in the same order (so the quote cannot drift from the file)

A block without a marker, or a command the checks do not know, fails the test. Inline code that reads as a
complete command (`gauntlet ...`, `python bench/...`, `python -m ...`, `make ...`, without placeholders such as
N, <id> or ...) is parse-checked too.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import os
import re
import runpy
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
MARKER = re.compile(r"^\s*<!--\s*docs-test:\s*(?P<kind>[\w-]+)(?P<options>[^>]*?)\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```+|~~~+)\s*(?P<lang>[\w+-]*)")
KINDS = ("run", "parse", "campaign", "subject", "recipe", "output", "excerpt")
# a token that stands for a value the reader fills in: N, MODEL, <id>, ..., [ID ...], A|B
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*$|[<>\[\]|]|\.\.\.|…")
COMMAND_SPAN = re.compile(r"^(gauntlet |python bench/|python replications/|python -m |make )")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    body: str
    kind: str | None
    options: dict[str, str]

    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def code_blocks(page: Path) -> list[Block]:
    """The fenced blocks of a markdown page, each with the docs-test marker on the line before it (if any)."""
    lines = page.read_text().splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j].lstrip())
            j += 1
        previous = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        marker = MARKER.match(previous)
        options = dict(o.split("=", 1) for o in marker["options"].split()) if marker else {}
        blocks.append(Block(page, i + 1, opening["lang"], "\n".join(body), marker["kind"] if marker else None, options))
        i = j + 1
    return blocks


def prose_commands(page: Path) -> list[tuple[int, str]]:
    """Inline code spans outside fenced blocks that read as complete commands: (line, command)."""
    text = page.read_text()
    fenced = {(b.line, b.line + b.body.count("\n") + 1) for b in code_blocks(page)}
    kept = [
        line if not any(start <= n <= end + 1 for start, end in fenced) else ""
        for n, line in enumerate(text.splitlines(), 1)
    ]
    found = []
    # spans may wrap across lines within a paragraph; single backticks only (``...`` is not used for commands)
    for match in re.finditer(r"(?<!`)`([^`]+)`(?!`)", "\n".join(kept)):
        span = " ".join(match[1].split())
        tokens = shlex.split(span)
        # `gauntlet run` in a sentence names a command; with arguments (or `make X`) it is one to type
        complete = len(tokens) >= 3 or tokens[0] == "make"
        if COMMAND_SPAN.match(span) and complete and not any(PLACEHOLDER.search(tok) for tok in tokens):
            found.append(("\n".join(kept)[: match.start()].count("\n") + 1, span))
    return found


def commands(body: str) -> Iterator[list[str]]:
    """Shell commands of a block as argument lists: comments dropped, backslash continuations joined."""
    for line in body.replace("\\\n", " ").splitlines():
        args = shlex.split(line, comments=True)
        if args:
            yield args


# -- parse-only checks ------------------------------------------------------------------------------
class _Parsed(Exception):
    """Raised by the patched ArgumentParser.parse_args once the real parser accepted the arguments."""


@contextlib.contextmanager
def parse_only(argv0: str, args: list[str], path_entry: str | None = None) -> Iterator[io.StringIO]:
    """Inside: the first top-level parse_args parses, then stops the program before it does any work."""
    original = argparse.ArgumentParser.parse_args

    def parse_then_stop(self: argparse.ArgumentParser, args_: list[str] | None = None, namespace: object = None):
        original(self, args_, namespace)
        raise _Parsed

    errors = io.StringIO()
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [argv0, *args]
    if path_entry:
        sys.path.insert(0, path_entry)
    argparse.ArgumentParser.parse_args = parse_then_stop  # type: ignore[method-assign]
    try:
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            yield errors
    finally:
        argparse.ArgumentParser.parse_args = original  # type: ignore[method-assign]
        sys.argv, sys.path[:] = saved_argv, saved_path


def parse_check(args: list[str], where: str) -> None:
    """Fail unless the command's own argument parser accepts args (nothing beyond parsing runs)."""
    program, rest = args[0], args[1:]
    if program in ("gauntlet", ".venv/bin/gauntlet"):
        from cli.main import main as gauntlet_main

        _expect_parse(lambda: gauntlet_main(rest), rest, where, "gauntlet")
    # .venv-mario's Python runs the same modules (the Mario simulator): their parsers are checked here
    elif program in ("python", "python3", ".venv/bin/python", ".venv-mario/bin/python") and rest[:1] == ["-m"]:
        module = rest[1]
        spec = importlib.util.find_spec(module)
        source = Path(spec.origin) if spec and spec.origin else None
        if source and source.name == "__init__.py":
            source = source.with_name("__main__.py")
        assert source and source.is_file(), f"{where}: no module {module}"
        assert "argparse" in source.read_text(), f"{where}: {module} has no argument parser to check against"
        _expect_parse(lambda: runpy.run_module(module, run_name="__main__", alter_sys=True), rest[2:], where, module)
    elif program in ("python", "python3", ".venv/bin/python"):
        script = ROOT / rest[0]
        assert script.is_file(), f"{where}: {rest[0]} does not exist"
        assert "argparse" in script.read_text(), f"{where}: {rest[0]} has no argument parser to check against"
        _expect_parse(
            lambda: runpy.run_path(str(script), run_name="__main__"), rest[1:], where, str(script), str(script.parent)
        )
    elif program == "make":
        targets = [a for a in rest if not a.startswith("-") and "=" not in a]
        declared = set(re.findall(r"^([\w.-]+):", (ROOT / "Makefile").read_text(), re.M))  # and .venv-mario
        assert targets and set(targets) <= declared, f"{where}: make {' '.join(rest)}: targets {sorted(declared)}"
        dry = subprocess.run(["make", "-n", *rest], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert dry.returncode == 0, f"{where}: make -n {' '.join(rest)} failed: {dry.stderr}"
    elif program == "export":
        name = rest[0].split("=", 1)[0]
        assert _read_by_code(name), f"{where}: no code reads the environment variable {name}"
    elif program == "docker" and rest[:1] == ["build"]:
        dockerfile = ROOT / rest[rest.index("-f") + 1]
        assert dockerfile.is_file(), f"{where}: {dockerfile} does not exist"
        if "--target" in rest:
            target = rest[rest.index("--target") + 1]
            assert re.search(rf"^FROM .* AS {re.escape(target)}$", dockerfile.read_text(), re.M), (
                f"{where}: {dockerfile.name} has no stage {target}"
            )
    elif program == "docker" and rest[:1] == ["compose"]:
        assert (ROOT / rest[rest.index("-f") + 1]).is_file(), f"{where}: compose file missing"
    elif program == "kubectl" and ("-k" in rest or "kustomize" in rest):
        folder = rest[rest.index("-k" if "-k" in rest else "kustomize") + 1]
        assert (ROOT / folder / "kustomization.yaml").is_file(), f"{where}: {folder} has no kustomization.yaml"
    else:
        pytest.fail(f"{where}: the docs test does not know how to check `{shlex.join(args)}`")


def _expect_parse(
    call: Callable[[], object], args: list[str], where: str, argv0: str, path_entry: str | None = None
) -> None:
    with parse_only(argv0, args, path_entry) as errors:
        try:
            call()
        except _Parsed:
            return
        except SystemExit as exc:
            if exc.code in (0, None):  # --help
                return
            pytest.fail(f"{where}: {argv0} {shlex.join(args)} is refused by its parser: {errors.getvalue().strip()}")
    pytest.fail(f"{where}: {argv0} {shlex.join(args)} ran without parsing any arguments")


def _read_by_code(name: str) -> bool:
    scripts = ("bench", "replications")
    folders = [p for p in ROOT.iterdir() if p.is_dir() and ((p / "__init__.py").exists() or p.name in scripts)]
    return any(name in f.read_text() for folder in folders if folder.name != "tests" for f in folder.rglob("*.py"))


# -- real runs --------------------------------------------------------------------------------------
def run_for_real(args: list[str], where: str, workdir: Path, env: dict[str, str]) -> None:
    program = args[0]
    if program == "export":
        name, _, value = args[1].partition("=")
        parse_check(args, where)
        env[name] = value
        return
    if program not in ("gauntlet", "python"):
        pytest.fail(f"{where}: the docs test runs only gauntlet and python commands for real, not `{program}`")
    done = subprocess.run(
        [str(VENV_BIN / program), *args[1:]], cwd=workdir, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"{where}: `{shlex.join(args)}` exited {done.returncode}:\n{done.stderr[-3000:]}"


def check_campaign(block: Block, workdir: Path, subjects: set[str], models: set[str]) -> None:
    """`subjects` and `models`: those declared by earlier blocks of the page, besides the bundled ones."""
    from cli.commands import UserError, load_campaign_file
    from generator_service.strategies import strategies
    from simulator_service.subject import load_subjects

    path = workdir / block.options.get("file", "docs-campaign.yaml")
    path.write_text(block.body + "\n")
    try:
        config, _ = load_campaign_file(path)
    except UserError as exc:
        pytest.fail(f"{block.where()}: {exc}")
    import yaml

    from agent_service.registry import DEFAULT_MODEL_ROOT

    bundled = yaml.safe_load((DEFAULT_MODEL_ROOT / "manifest.yaml").read_text())["models"]
    assert config.subject in {*load_subjects(), *subjects}, f"{block.where()}: unknown subject {config.subject}"
    assert config.model in {*bundled, *models}, f"{block.where()}: unknown model {config.model}"
    assert config.strategy in strategies(), f"{block.where()}: unknown strategy {config.strategy}"


def check_subject(block: Block, workdir: Path) -> str:
    """The subject's name, once the simulator's loader accepts the block."""
    from simulator_service.subject import SubjectError, load_subject_file

    path = workdir / "docs-subject.yaml"
    path.write_text(block.body + "\n")
    try:
        return load_subject_file(path).name
    except SubjectError as exc:
        pytest.fail(f"{block.where()}: {exc}")


def check_recipe(block: Block, workdir: Path, subjects: set[str]) -> set[str]:
    """The recipes' names, once the recipe loader accepts the block and each recipe's subject exists."""
    from offline.training import RecipeError, load_recipes
    from simulator_service.subject import load_subjects

    path = workdir / "docs-recipe.yaml"
    path.write_text(block.body + "\n")
    try:
        recipes = load_recipes(path)
    except RecipeError as exc:
        pytest.fail(f"{block.where()}: {exc}")
    known = {*load_subjects(), *subjects}
    for recipe in recipes.values():
        assert recipe.subject in known, f"{block.where()}: recipe {recipe.name}: unknown subject {recipe.subject}"
    return set(recipes)


def check_excerpt(block: Block) -> None:
    source = block.options.get("from", "")
    assert source and (ROOT / source).is_file(), f"{block.where()}: excerpt block needs from=<existing file>"
    lines = [line.strip() for line in (ROOT / source).read_text().splitlines()]
    at = 0
    for quoted in (line.strip() for line in block.body.splitlines() if line.strip()):
        try:
            at = lines.index(quoted, at) + 1
        except ValueError:
            pytest.fail(f"{block.where()}: {quoted!r} is not a line of {source} (after the lines quoted before it)")


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_block_of_the_page_is_checked(page: Path, tmp_path: Path) -> None:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = dict(os.environ, PATH=f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}")
    subjects: set[str] = set()  # declared by the page's subject blocks, for its later recipe and campaign blocks
    models: set[str] = set()  # declared by its recipe blocks
    for block in code_blocks(page):
        if block.kind not in KINDS:
            pytest.fail(f"{block.where()}: code block without a known <!-- docs-test: {'|'.join(KINDS)} --> marker")
        if block.kind == "run":
            for args in commands(block.body):
                run_for_real(args, block.where(), tmp_path, env)
        elif block.kind == "parse":
            for args in commands(block.body):
                parse_check(args, block.where())
        elif block.kind == "campaign":
            check_campaign(block, tmp_path, subjects, models)
        elif block.kind == "subject":
            subjects.add(check_subject(block, tmp_path))
        elif block.kind == "recipe":
            models |= check_recipe(block, tmp_path, subjects)
        elif block.kind == "output":
            source = block.options.get("from", "")
            assert source and (ROOT / source).exists(), f"{block.where()}: output block needs from=<existing path>"
        elif block.kind == "excerpt":
            check_excerpt(block)
    for line, command in prose_commands(page):
        parse_check(shlex.split(command), f"{page.relative_to(ROOT)}:{line}")


def test_readme_opens_with_the_two_commands() -> None:
    first = code_blocks(ROOT / "README.md")[0]
    assert [args[:2] for args in commands(first.body)] == [["make", "demo"], ["make", "test"]]
    assert len((ROOT / "README.md").read_text().splitlines()) < 200


def test_relative_links_of_the_readme_resolve() -> None:
    for target in re.findall(r"\]\((?!https?:|#|mailto:)([^)#\s]+)", (ROOT / "README.md").read_text()):
        assert (ROOT / target).exists(), f"README.md links to {target}, which does not exist"


REPO_FILE = re.compile(r"`((?:[\w.-]+/)+[\w.-]+\.(?:py|yaml|yml|proto|md|json|jsonl|toml))`")


def test_the_files_the_docs_name_exist() -> None:
    """A page that names `simulator_service/subject.py` goes stale when the file moves; runs/ is generated."""
    for page in PAGES:
        for match in REPO_FILE.finditer(page.read_text()):
            if not match[1].startswith("runs/"):
                assert (ROOT / match[1]).exists(), f"{page.relative_to(ROOT)} names {match[1]}, which does not exist"


def test_the_site_builds_without_warnings(tmp_path: Path) -> None:
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, f"mkdocs build --strict failed (mkdocs is in the dev extras):\n{build.stderr}"


def test_a_wrong_flag_fails_the_parse_check() -> None:
    with pytest.raises(pytest.fail.Exception, match="refused by its parser"):
        parse_check(["gauntlet", "run", "examples/cartpole_random.yaml", "--no-such-flag"], "example")
    with pytest.raises(pytest.fail.Exception, match="refused by its parser"):
        parse_check(["python", "replications/replicate_qd.py", "--subject", "taxi_large", "--seedz", "5"], "example")
    with pytest.raises(pytest.fail.Exception, match="does not know how to check"):
        parse_check(["rm", "-rf", "runs"], "example")
