"""One atomic write for every file seeder writes: temporary file, fsync, rename, directory fsync.

A reader sees the old file or the new one, whole, whatever happens to the writer (a
kill, a power cut), and two writers of one path never disturb each other: each writes
its own temporary file, ``.NAME.<host>.<pid>.<token>.tmp`` in the target's directory
(created with ``O_EXCL | O_NOFOLLOW``, so a symbolic link planted there is never
followed), and the last rename wins. The temporary file of a writer that was killed
is removed by the next write of the same name, and only once its writer is gone: a
writer on this host whose process no longer runs, or on another host one whose lock
on its file (held while it writes) is free and whose file was last written over a
minute ago.

Example:
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "state.pt")
    >>> write_atomic(path, b"one"); write_atomic(path, b"two")
    >>> open(path, "rb").read(), sorted(os.listdir(os.path.dirname(path)))
    (b'two', ['state.pt'])
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import socket
import time
from typing import Optional, Union

try:
    import fcntl
except ImportError:
    # Windows: no advisory locks; temporary files of other hosts are then left alone
    fcntl = None  # type: ignore[assignment]  # the module where it exists, else None

__all__ = [
    "write_atomic",
    "write_in",
    "temp_name",
    "writer_gone",
    "remove_stale_temps",
    "STALE_AFTER_S",
]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
#: Seconds after its last write that another host's unlocked temporary file counts as a killed
#: write's.
STALE_AFTER_S = 60.0


def _host() -> str:
    """This host's name as temporary file names hold it: letters, digits and ``-`` (no dots)."""
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:40] or "host"


def temp_name(name: str) -> str:
    """A new temporary file name for writing ``name``, owned by this process (host, pid, token).

    >>> t = temp_name("last.pt")
    >>> t.startswith(".last.pt.") and t.endswith(".tmp") and str(os.getpid()) in t
    True
    """
    return f".{name}.{_host()}.{os.getpid()}.{secrets.token_hex(6)}.tmp"


def _owner(entry: str, name: str) -> Optional[tuple[str, int]]:
    """``(host, pid)`` of the writer of ``entry`` if it is a temporary file of ``name``, else None.

    A name with a pid only (``.NAME.<pid>.tmp``) is taken as a writer's on this host.

    >>> _owner(".a.pt.node-1.42.0f0f.tmp", "a.pt"), _owner(".a.pt.42.tmp", "a.pt")[1]
    (('node-1', 42), 42)
    >>> _owner(".a.pt.bak.x.1.ab.tmp", "a.pt") is None
    True
    """
    prefix = f".{name}."
    if not (entry.startswith(prefix) and entry.endswith(".tmp")):
        return None
    fields = entry[len(prefix) : -len(".tmp")].split(".")
    if len(fields) == 1 and fields[0].isdigit():
        return _host(), int(fields[0])
    if (
        len(fields) == 3
        and fields[1].isdigit()
        and re.fullmatch(r"[A-Za-z0-9-]+", fields[0])
        and re.fullmatch(r"[0-9a-f]+", fields[2])
    ):
        return fields[0], int(fields[1])
    return None  # another file's temporary file (``.NAME.bak...``), or not seeder's


def _pid_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host runs (a zombie does not)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[-1].split()[0] != b"Z"
    except OSError:  # no /proc (macOS), or it ended meanwhile
        return True


def writer_gone(dfd: int, entry: str, name: str) -> bool:
    """Whether ``entry`` in directory ``dfd`` is a temporary file of ``name`` whose writer is gone
    (see the module)."""
    owner = _owner(entry, name)
    if owner is None:
        return False
    host, pid = owner
    if host == _host():
        return pid != os.getpid() and not _pid_alive(pid)
    if fcntl is None:
        return False
    try:
        fd = os.open(entry, os.O_RDONLY | _NOFOLLOW | _CLOEXEC, dir_fd=dfd)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # its writer holds the lock: it is writing
    else:
        # A writer locks its file right after creating it: an old file is not one in that instant.
        return time.time() - os.fstat(fd).st_mtime > STALE_AFTER_S
    finally:
        os.close(fd)


def remove_stale_temps(dfd: int, name: str) -> None:
    """Remove the temporary files of ``name`` in directory ``dfd`` whose writers are gone."""
    for entry in os.listdir(dfd):
        if writer_gone(dfd, entry, name):
            try:
                os.unlink(entry, dir_fd=dfd)
            except FileNotFoundError:  # another writer removed it first
                pass


def write_in(dfd: int, name: str, data: bytes, *, mode: int = 0o600) -> None:
    """Write ``data`` to ``name`` in the directory open as ``dfd``, atomically (see the module).

    Args:
        dfd: a descriptor of the target's directory.
        name: the file's name in it (no ``/``).
        data: the whole content.
        mode: the file's permission bits (set on the open file: the umask does not filter them).

    Raises:
        OSError: the directory cannot be written; the target is left as it was and no temporary
            file stays.

    >>> import tempfile
    >>> d = tempfile.mkdtemp(); dfd = os.open(d, os.O_RDONLY)
    >>> write_in(dfd, "a.txt", b"x"); os.close(dfd)
    >>> open(os.path.join(d, "a.txt"), "rb").read()
    b'x'
    """
    tmp = temp_name(name)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, mode, dir_fd=dfd)
    try:
        with os.fdopen(fd, "wb") as fh:
            if fcntl is not None:
                # held until closed: other hosts see a live write
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
            os.fchmod(fh.fileno(), mode)  # open's mode is filtered by the umask
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        remove_stale_temps(dfd, name)
        os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dfd)
        except OSError:
            pass
        raise
    try:
        os.fsync(dfd)  # the rename itself survives a power cut
    except OSError as exc:
        # file systems that cannot sync a directory
        if exc.errno not in (
            errno.EINVAL,
            errno.EBADF,
            errno.ENOTSUP,
        ):
            raise


def write_atomic(path: Union[str, os.PathLike[str]], data: bytes, *, mode: int = 0o600) -> None:
    """Write ``data`` to ``path`` atomically (see the module), making its directory when missing.

    Args:
        path: the file to write; its directory is made (``0o777`` less the umask) when missing.
        data: the whole content.
        mode: the file's permission bits.

    Raises:
        IsADirectoryError: ``path`` ends in a separator or names a directory.
        OSError: the file cannot be written; ``path`` is left as it was.

    >>> import tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "sub", "f.bin")
    >>> write_atomic(p, b"\\x00"); open(p, "rb").read()
    b'\\x00'
    """
    text = os.fspath(path)
    directory, name = os.path.split(os.path.abspath(text))
    if not name or text.endswith(("/", os.sep)) or os.path.isdir(text):
        raise IsADirectoryError(
            errno.EISDIR, f"{text} names a directory, not a file to write", text
        )
    os.makedirs(directory, exist_ok=True)
    if os.open not in os.supports_dir_fd:  # Windows: no directory descriptors
        _write_by_path(directory, name, data, mode)
        return
    dfd = os.open(directory, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    try:
        write_in(dfd, name, data, mode=mode)
    finally:
        os.close(dfd)


def _write_by_path(directory: str, name: str, data: bytes, mode: int) -> None:
    """:func:`write_in` where directories cannot be opened: temporary file, fsync, rename (no
    directory fsync, no removal of other writers' temporary files)."""
    tmp = os.path.join(directory, temp_name(name))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, os.path.join(directory, name))
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
