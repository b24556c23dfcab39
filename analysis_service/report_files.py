"""Writing report files beneath the report root without following a link, each file replaced whole.

A client names at most a folder relative to the report root (`output_dir`); the file names are the service's own.
The folder is walked one component at a time from the root with O_NOFOLLOW, so a symbolic link anywhere below the
root (a folder on the way, or the report's own file name) never redirects a write: a linked folder is refused, and
a link at the file name is replaced by the new file, its target left untouched. Each file is written to a fresh
temporary file in the same folder and renamed over the old one (os.replace), so a reader sees the old report or the
new one, never half of one. Files are created 0600 and folders 0700: reports hold the campaigns' inputs.
"""

from __future__ import annotations

import errno
import os
import secrets
from pathlib import Path, PurePosixPath
from typing import NoReturn

from common.errors import InvalidArgument

NAME_MAX = 255  # bytes in one path component (Linux)
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_REFUSED = {errno.ELOOP, errno.ENOTDIR, errno.EEXIST, errno.ENAMETOOLONG, errno.EISDIR}


def folder_parts(output_dir: str, field: str, root_name: str) -> tuple[str, ...]:
    """The components of an already checked relative `output_dir` (common.validation.resolve_under); refuses one
    that no file system would take, before any work is done."""
    parts = tuple(p for p in PurePosixPath(output_dir).parts if p != ".")
    for part in parts:
        if len(part.encode("utf-8", "surrogateescape")) > NAME_MAX:
            raise InvalidArgument(
                f"{field} must be a path relative to {root_name} whose every folder name is at most {NAME_MAX} "
                f"bytes; got one of {len(part.encode('utf-8', 'surrogateescape')):,} bytes"
            )
    return parts


def write_files(root: Path, parts: tuple[str, ...], files: dict[str, bytes], field: str, root_name: str) -> Path:
    """Writes each `name: data` of `files` into root/parts (folders created 0700 on the way); returns that folder.

    InvalidArgument (naming `field`, never a server path) when a component is a file, a link or too long.
    """
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(root, _DIRECTORY_FLAGS)  # the operator's root may itself be a link; nothing beneath it may
    try:
        for depth, part in enumerate(parts):
            try:
                os.mkdir(part, 0o700, dir_fd=fd)
            except FileExistsError:
                pass
            except OSError as exc:
                _refuse(exc, field, root_name, parts[: depth + 1])
            try:
                child = os.open(part, _DIRECTORY_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                _refuse(exc, field, root_name, parts[: depth + 1])
            os.close(fd)
            fd = child
        for name, data in files.items():
            _replace(fd, name, data, field, root_name, parts)
    finally:
        os.close(fd)
    return root.resolve().joinpath(*parts)


def _replace(folder_fd: int, name: str, data: bytes, field: str, root_name: str, parts: tuple[str, ...]) -> None:
    if not name or name in (".", "..") or "/" in name or "\x00" in name:
        raise ValueError(f"a report file name must be a plain name, got {name!r}")
    temporary = f".{name[: NAME_MAX - 32]}.{secrets.token_hex(8)}.tmp"
    fd = os.open(
        temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=folder_fd
    )
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        # rename() replaces a link at `name` itself and never writes through it
        os.replace(temporary, name, src_dir_fd=folder_fd, dst_dir_fd=folder_fd)
    except BaseException as exc:
        try:
            os.unlink(temporary, dir_fd=folder_fd)
        except OSError:
            pass
        if isinstance(exc, OSError):
            _refuse(exc, field, root_name, (*parts, name))
        raise


def _refuse(exc: OSError, field: str, root_name: str, where: tuple[str, ...]) -> NoReturn:
    """A component that is in the way, as INVALID_ARGUMENT with the path relative to the root only."""
    if exc.errno not in _REFUSED:
        raise exc
    shown = "/".join(where)
    if len(shown) > 200:
        shown = f"{shown[:200]}..."
    if exc.errno == errno.ENAMETOOLONG:
        why = "is too long for the file system"
    elif exc.errno == errno.EISDIR:
        why = "is a folder where the report file belongs"
    else:
        why = "is a file or a symbolic link, not a folder"
    raise InvalidArgument(
        f"{field} must name a folder under {root_name} reached without symbolic links; {shown!r} {why}"
    ) from None
