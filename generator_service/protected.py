"""Paths no campaign may name: the generator's store, its log and its credentials.

A strategy parameter that names an artifact (a surrogate, a training log, a reference trace) resolves under the
artifact root (common.validation.resolve_under). This refuses one that leads to the store, a log or a credential,
by the same path, a symbolic link or a hard link, before anything opens it: opening and closing the SQLite file
alone drops the process's POSIX locks on it, and the next process that opens the database then deletes the
write-ahead log under the running generator, losing campaigns it had acknowledged.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from common.errors import InvalidArgument


@dataclass(frozen=True)
class ProtectedPaths:
    """Resolved folders (refused with everything under them) and files (refused by path or by inode)."""

    folders: tuple[Path, ...] = ()
    files: tuple[Path, ...] = ()

    @staticmethod
    def of(files: Iterable[Path], folders: Iterable[Path], artifact_root: Path) -> ProtectedPaths:
        """Protects `files` and `folders`. A folder that holds the artifact root itself (a store or a log in the
        root's parent) cannot be refused as a whole without refusing every artifact: its protected files still
        are."""
        root = artifact_root.resolve()
        kept = []
        for folder in folders:
            resolved = folder.resolve()
            if resolved != root and resolved not in root.parents:
                kept.append(resolved)
        return ProtectedPaths(tuple(dict.fromkeys(kept)), tuple(dict.fromkeys(f.resolve() for f in files)))

    def check(self, resolved: Path, field: str) -> None:
        """InvalidArgument naming `field` when the resolved path is protected; never opens it (lstat only)."""
        refusal = f"{field} names a file the generator keeps for itself (its store, logs or credentials)"
        for folder in self.folders:
            if resolved == folder or folder in resolved.parents:
                raise InvalidArgument(refusal)
        if resolved in self.files:
            raise InvalidArgument(refusal)
        identity = _identity(resolved)
        if identity is not None and any(identity == _identity(f) for f in self.files):
            raise InvalidArgument(refusal)  # a hard link to one of them


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()  # stat takes no lock and drops none, unlike open()
    except OSError:
        return None
    return st.st_dev, st.st_ino


def own_log_files() -> list[Path]:
    """The files this process's stdout and stderr go to, when they are files (the local launcher's service logs)."""
    out = []
    for stream in (sys.stdout, sys.stderr):
        try:
            fd = stream.fileno()
            if os.path.isfile(f"/proc/self/fd/{fd}"):
                out.append(Path(os.readlink(f"/proc/self/fd/{fd}")))
        except (OSError, ValueError, AttributeError):  # no /proc (not Linux), or a stream without a descriptor
            continue
    return out
