"""The read-only copies of the user's large files that the runs of one ``seeder verify`` share.

A run's folder holds its own copies of the user's small files
(:mod:`seeder.verify._workdirs`). A larger file, or a folder with more entries than a run
mirrors one by one, is copied once per session into ``OUT/runs/.shared/files/`` and each run's
folder holds a symbolic link to that copy, never to the user's file: a write through the link
cannot reach the user's folder. The copy is read-only (files 0o444, folders 0o555), so a run
that opens it for writing fails at once with ``PermissionError`` naming the copy; a process
that ignores permissions (root) changes only the copy, and :meth:`SharedStore.changed` names
it after the runs (a FAIL: the runs shared what one of them wrote).

A copy is made with ``os.copy_file_range``: a copy-on-write clone that takes no space where
the filesystem shares extents (Btrfs, XFS with reflink, ZFS with block cloning), an in-kernel
copy elsewhere (ext4: the bytes are written once per session). At most :data:`SHARE_BUDGET`
bytes are copied in all; what lies past it is left out of the runs' folders and named in the
report. The store is removed after the runs (:func:`seeder.verify._workdirs.unmirror`).

Example:
    >>> import tempfile, pathlib
    >>> home, runs = (pathlib.Path(tempfile.mkdtemp()) for _ in range(2))
    >>> _ = (home / "big.bin").write_bytes(b"x" * 10)
    >>> store = SharedStore(runs)
    >>> copy = store.share(home / "big.bin", "big.bin")
    >>> copy.read_bytes(), oct(copy.stat().st_mode & 0o777), store.changed(home)
    (b'xxxxxxxxxx', '0o444', [])
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path
from typing import Callable, Optional

__all__ = ["SHARED", "SHARE_BUDGET", "SharedStore", "clone_file"]

#: The store's folder in ``OUT/runs``.
SHARED = ".shared"
#: At most this many bytes of the user's files are copied into one session's store.
SHARE_BUDGET = 8 * 1024**3


def clone_file(src: str, dst: str) -> None:
    """Copy ``src`` to ``dst`` with ``os.copy_file_range`` (a clone where the filesystem can), its
    times and mode kept; a plain copy where the call is refused.

    >>> import tempfile, os
    >>> d = tempfile.mkdtemp(); _ = open(os.path.join(d, "a"), "w").write("abc")
    >>> clone_file(os.path.join(d, "a"), os.path.join(d, "b")); open(os.path.join(d, "b")).read()
    'abc'
    """
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        try:
            left = os.fstat(fin.fileno()).st_size
            while left > 0:
                n = os.copy_file_range(fin.fileno(), fout.fileno(), left)
                if n == 0:
                    break
                left -= n
        except (AttributeError, OSError):  # no copy_file_range here, or not between these files
            fin.seek(0)
            fout.seek(0)
            fout.truncate()
            shutil.copyfileobj(fin, fout)
    shutil.copystat(src, dst)


def _size(path: Path) -> int:
    if not path.is_dir():
        return path.stat().st_size
    return sum(
        os.stat(os.path.join(folder, name)).st_size
        for folder, _, files in os.walk(path, followlinks=True)
        for name in files
    )


def _read_only(path: Path) -> None:
    """Files 0o444 and folders 0o555 under ``path`` (times kept)."""
    if not path.is_dir():
        os.chmod(path, 0o444)
        return
    for folder, _, files in os.walk(path, topdown=False):
        for name in files:
            os.chmod(os.path.join(folder, name), 0o444)
        os.chmod(folder, 0o555)


class SharedStore:
    """The shared read-only copies of one session (``runs/.shared``): made on first use, then the
    same for every run; what is left out is recorded there too, so every run sees the same
    folder.

    Args:
        runs: the session's ``OUT/runs`` folder.
        budget: bytes that may be copied in all.
    """

    def __init__(self, runs: Path, budget: int = SHARE_BUDGET) -> None:
        self.root = Path(runs) / SHARED
        self.files = self.root / "files"
        self.budget = budget
        self._record = self.root / "left-out.txt"
        self._bytes = self.root / "bytes.txt"

    def share(
        self, src: Path, rel: str, ignore: Optional[Callable[[str, bool], bool]] = None
    ) -> Optional[Path]:
        """The read-only copy of the file or folder ``src`` (``rel``: its path in the user's
        folder), made now if it is not there; ``None`` when it is over the budget (recorded).
        ``ignore(name, is_dir)``: what a copied folder leaves out."""
        dst = self.files / rel
        if os.path.lexists(dst):
            return dst
        if rel in self.left_out("budget"):
            return None
        size = _size(src)
        used = int(self._bytes.read_text()) if self._bytes.exists() else 0
        if used + size > self.budget:
            self.note("budget", rel)
            return None
        dst.parent.mkdir(parents=True, exist_ok=True)
        part = dst.with_name(dst.name + ".part")
        if src.is_dir():
            shutil.rmtree(part, ignore_errors=True)
            shutil.copytree(
                src,
                part,
                copy_function=clone_file,
                ignore=(
                    (lambda d, names: [n for n in names if ignore(n, os.path.isdir(f"{d}/{n}"))])
                    if ignore
                    else None
                ),
            )
        else:
            clone_file(str(src), str(part))
        _read_only(part)
        os.replace(part, dst)
        self._bytes.write_text(str(used + size))
        return dst

    def note(self, why: str, rel: str) -> None:
        """Record that ``rel`` is left out of the runs' folders, and ``why`` (``budget``,
        ``secret``)."""
        if rel not in self.left_out(why):
            self.root.mkdir(parents=True, exist_ok=True)
            with open(self._record, "a", encoding="utf-8") as fh:
                fh.write(f"{why}\t{rel}\n")

    def left_out(self, why: str) -> list[str]:
        """What is left out of the runs' folders for the reason ``why``, in the order found."""
        try:
            lines = self._record.read_text(encoding="utf-8").splitlines()
        except OSError:
            return []
        return [rel for w, _, rel in (line.partition("\t") for line in lines) if w == why]

    def changed(self, home: Path) -> list[str]:
        """The copies a run changed or added to: unlike the user's file (size or modification
        time), or with no file of the user's."""
        found = []
        for folder, _, files in os.walk(self.files):
            for name in files:
                path = Path(folder) / name
                rel = path.relative_to(self.files)
                try:
                    mine, theirs = path.stat(), (Path(home) / rel).stat()
                except OSError:
                    found.append(str(rel))
                    continue
                if (mine.st_size, mine.st_mtime_ns) != (theirs.st_size, theirs.st_mtime_ns):
                    found.append(str(rel))
        return sorted(found)

    def remove(self) -> None:
        """Delete the store (its folders made writable first)."""
        if not self.root.is_dir():
            return
        for folder, _, _ in os.walk(self.root):
            os.chmod(folder, stat.S_IRWXU)
        shutil.rmtree(self.root)
