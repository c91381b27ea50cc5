"""Files seeder writes (snapshots, verify reports and run records): created without following
symbolic links.

:func:`write_file` writes a new temporary file (``O_CREAT | O_EXCL | O_NOFOLLOW``,
its mode set on the open file) in the target's directory and renames it over the
target, so a symbolic link planted at the target's name is replaced, never followed,
and the file it points to is neither written nor chmod-ed. Subdirectories on the way
are opened with ``O_NOFOLLOW``. :func:`check_directory` refuses a directory that holds
a symbolic link, or other files than the ones seeder writes there.

Example:
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> write_file(d, "sub/a.txt", b"hi")
    >>> (d / "sub" / "a.txt").read_bytes(), oct((d / "sub" / "a.txt").stat().st_mode & 0o777)
    (b'hi', '0o600')
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Callable, Union

from seeder._atomic import write_in

__all__ = [
    "UnsafeDirectoryError",
    "write_file",
    "open_log",
    "check_directory",
    "symlinks_in",
    "names",
    "is_private_tmp",
]

_PathLike = Union[str, "os.PathLike[str]"]
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class UnsafeDirectoryError(FileExistsError):
    """A directory seeder was asked to write into holds a symbolic link or files seeder did not
    write.

    A ``FileExistsError``: something is in the way, as with a snapshot already there
    (``seeder.init`` warns and goes on).
    """


def _open_subdir(dfd: int, name: str, mode: int) -> int:
    """The descriptor of directory ``name`` under ``dfd``, made (``mode``) when missing; a symbolic
    link is refused."""
    try:
        os.mkdir(name, mode, dir_fd=dfd)
    except FileExistsError:
        pass
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=dfd)
    except OSError as exc:
        raise UnsafeDirectoryError(
            f"{name} is not a plain directory ({exc.strerror}); seeder does not write through "
            "symbolic links: remove it or choose another directory"
        ) from None
    os.fchmod(fd, mode)  # mkdir's mode is filtered by the umask
    return fd


def write_file(
    directory: _PathLike, name: str, data: bytes, mode: int = 0o600, dir_mode: int = 0o700
) -> None:
    """Write ``data`` to ``directory/name`` atomically, never following a symbolic link at ``name``
    or on its way.

    ``name`` may hold subdirectories (made with ``dir_mode`` when missing). The file gets ``mode``.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> (d / "link").symlink_to(d / "victim"); _ = (d / "victim").write_text("v")
    >>> write_file(d, "link", b"new")
    >>> (d / "victim").read_text(), (d / "link").is_symlink()
    ('v', False)
    """
    *parents, base = Path(name).parts
    dfd = os.open(os.fspath(directory), os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
    try:
        for part in parents:
            sub = _open_subdir(dfd, part, dir_mode)
            os.close(dfd)
            dfd = sub
        write_in(dfd, base, data, mode=mode)  # temporary file, fsync, rename, directory fsync
    finally:
        os.close(dfd)


def open_log(path: _PathLike, mode: int = 0o644) -> int:
    """A new, empty log file's descriptor for writing; a symbolic link at ``path`` is replaced,
    never followed.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()); (d / "log.txt").symlink_to(d / "victim")
    >>> os.close(open_log(d / "log.txt")); (d / "log.txt").is_symlink(), (d / "victim").exists()
    (False, False)
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _NOFOLLOW | _CLOEXEC
    try:
        return os.open(os.fspath(path), flags, mode)
    except OSError:
        if not os.path.islink(path):
            raise
    os.unlink(path)  # the link itself, not what it points to
    return os.open(os.fspath(path), flags | os.O_EXCL, mode)


def symlinks_in(directory: _PathLike, depth: int = 1) -> list[str]:
    """The symbolic links among ``directory``'s entries, and its subdirectories' down to ``depth``
    levels."""
    found: list[str] = []
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return found
    for entry in entries:
        if entry.is_symlink():
            found.append(entry.path)
        elif depth > 1 and entry.is_dir(follow_symlinks=False):
            found += symlinks_in(entry.path, depth - 1)
    return found


def check_directory(
    directory: _PathLike, ours: Callable[[str], bool], what: str, depth: int = 2
) -> None:
    """Refuse to write into ``directory`` when it holds a symbolic link or an entry ``ours(name)``
    does not claim.

    A missing or empty directory, or one with seeder's own files only, passes.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()); (d / "x").symlink_to("/etc/passwd")
    >>> check_directory(d, lambda n: True, "snapshot")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    seeder._safefile.UnsafeDirectoryError: ... holds a symbolic link ...
    """
    path = Path(directory)
    if not path.is_dir():
        return
    links = symlinks_in(path, depth)
    if links:
        raise UnsafeDirectoryError(
            f"{path} holds a symbolic link ({', '.join(sorted(links)[:3])}); seeder writes its "
            f"{what} only into a directory it created or an empty one: remove the link or "
            "choose another directory"
        )
    foreign = sorted(e.name for e in os.scandir(path) if not ours(e.name))
    if foreign:
        raise UnsafeDirectoryError(
            f"{path} is not empty and its files were not written by seeder "
            f"({', '.join(foreign[:5])}{', ...' if len(foreign) > 5 else ''}); seeder writes its "
            f"{what} only into a directory it created or an empty one: choose another directory"
        )


def is_private_tmp(name: str) -> bool:
    """Whether ``name`` is one of :func:`write_file`'s temporary files (left behind by a killed
    writer)."""
    return name.startswith(".") and name.endswith(".tmp")


def names(items: Iterable[str]) -> Callable[[str], bool]:
    """``ours`` for :func:`check_directory`: the given names and :func:`write_file`'s temporary
    files."""
    allowed = set(items)
    return lambda name: name in allowed or is_private_tmp(name)
