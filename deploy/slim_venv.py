#!/usr/bin/env python3
"""Slim an image's virtual environment (deploy/Dockerfile's builder runs it on /opt/venv after the dependencies).

    python3 deploy/slim_venv.py /opt/venv

What goes, none of it imported by a running service:
- the libraries' own test suites (``tests`` folders below a package: pandas, scipy, sklearn, numpy...);
- C/C++/Cython sources and headers and type stubs that wheels carry for building against them or for type
  checkers (``*.c *.cpp *.h *.hpp *.pyx *.pxd *.pxi *.pyi``): the images have no compiler and no type checker;
- the debug symbols of the shared objects (``strip --strip-unneeded``). Stripping a file that patchelf has
  rewritten (auditwheel's vendored ``*.libs`` folders, and a few others such as numba's omppool) can leave it
  unloadable ("ELF load command address/offset not page-aligned"), so each stripped copy is kept only when a
  fresh process can still load it (dlopen); auditwheel's ``*.libs`` folders are left as they are (~5 MB to gain).

Bytecode is not here: the builder installs with ``pip --no-compile`` and compiles only what a service imports at
start (the Dockerfile). Standard library only, plus ``strip`` (binutils, in the builder stage alone).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

SOURCES = {".c", ".cpp", ".h", ".hpp", ".pyx", ".pxd", ".pxi", ".pyi"}
LOADS = "import ctypes, sys; ctypes.CDLL(sys.argv[1])"


def site_packages(venv: Path) -> Path:
    found = sorted(venv.glob("lib/python3*/site-packages"))
    if len(found) != 1:
        sys.exit(f"{venv}: expected one lib/python3*/site-packages, found {found}")
    return found[0]


def size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def drop_tests(site: Path) -> None:
    # below a package only (mindepth 2): a distribution named "tests" at the top would be a real import
    for folder in sorted(site.glob("*/**/tests")):
        if folder.is_dir() and not folder.is_symlink():
            shutil.rmtree(folder, ignore_errors=True)


def drop_sources(site: Path) -> None:
    for path in site.rglob("*"):
        if path.suffix in SOURCES and path.is_file() and not path.is_symlink():
            path.unlink()


def is_elf(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(4) == b"\x7fELF"


def loads(path: Path) -> bool:
    done = subprocess.run([sys.executable, "-c", LOADS, str(path)], capture_output=True, timeout=120, check=False)
    return done.returncode == 0


def strip(site: Path) -> tuple[int, list[str]]:
    """Strip every shared object outside auditwheel's *.libs folders; the count stripped and those kept as they were."""
    stripped, kept = 0, []
    for path in sorted(site.rglob("*.so*")):
        if path.is_symlink() or not path.is_file() or not is_elf(path):
            continue
        if any(part.endswith(".libs") for part in path.relative_to(site).parts):
            continue
        # the copy sits beside the original so that its $ORIGIN-relative RPATH finds the same libraries
        copy = path.with_name(f".{path.name}.stripped")
        done = subprocess.run(["strip", "--strip-unneeded", "-o", str(copy), str(path)], capture_output=True)
        if done.returncode == 0 and copy.stat().st_size < path.stat().st_size and loads(copy):
            shutil.copymode(path, copy)
            os.replace(copy, path)
            stripped += 1
        else:
            copy.unlink(missing_ok=True)
            if done.returncode != 0 or loads(path):  # (one that does not load even unstripped is no loss)
                kept.append(str(path.relative_to(site)))
    return stripped, kept


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    venv = Path(sys.argv[1])
    site = site_packages(venv)
    before = size(venv)
    drop_tests(site)
    drop_sources(site)
    stripped, kept = strip(site)
    print(
        f"slim_venv: {before / 1e6:.0f} MB -> {size(venv) / 1e6:.0f} MB ({stripped} shared objects stripped"
        + (f"; left unstripped since the stripped copy did not load: {', '.join(kept)}" if kept else "")
        + ")"
    )


if __name__ == "__main__":
    main()
