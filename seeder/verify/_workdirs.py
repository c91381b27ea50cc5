"""Each run of ``seeder verify`` in its own working directory, seeing the user's files.

A script that writes to a fixed relative path (``lightning_logs/``, a Trainer's
``output_dir``, ``ckpt/last.pt``) must not share it with a run going at the same time,
so every run starts in its run directory (``OUT/runs/<name>/``). That directory mirrors
the directory verify was started in (:func:`mirror_user_dir`): its folders are real
folders, its small files copies (up to :data:`COPY_LIMIT` each, :data:`COPY_BUDGET` in
all), its other files symbolic links, so a relative path the script reads (a
``configurator.py`` or a ``data/`` folder next to it) resolves as it would there, what
the script writes under a new name lands in the run's own folder, and what it appends to
a file of the user's (a ``notes.txt``) goes to the run's copy. An earlier output of
``seeder verify`` or ``seeder locate`` (a folder with its marker file, whatever its name) is
never mirrored. After the runs, :func:`unmirror` removes every link into the user's folder
and every copy the run left unchanged: what stays is what the runs wrote. Paths in the command
that name existing files or directories relative to where ``seeder verify`` was started
are made absolute, and that directory is put on ``PYTHONPATH`` (``python -m pkg.train``
keeps working). A resumed run starts from a copy of its stopped run's directory: what
the script saved there, wherever it saved it, is what it resumes from.
:mod:`seeder.verify._escapes` finds what the runs wrote outside their folders.

Example:
    >>> import tempfile, pathlib
    >>> base = pathlib.Path(tempfile.mkdtemp()); (base / "train.py").write_text("")
    0
    >>> cmd = absolute_command(["python", "train.py", "--data=train.py", "--lr", "0.1"], base)
    >>> [w.replace(str(base), "BASE") for w in cmd]
    ['python', 'BASE/train.py', '--data=BASE/train.py', '--lr', '0.1']
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Callable, Optional

__all__ = [
    "absolute_command",
    "copy_run_dir",
    "base_environment",
    "mirror_user_dir",
    "OWN_FILES",
    "MIRROR_BUDGET",
    "NOT_MIRRORED",
    "COPY_LIMIT",
    "COPY_BUDGET",
    "OUTPUT_MARKERS",
    "unmirror",
]

#: Files seeder verify writes into a run directory itself: not copied into a resumed run's
#: directory.
OWN_FILES = ("log.txt", "run.json", "metrics.jsonl", "steps.jsonl", "parser.json")
#: Folders mirrored entry by entry in one run directory; past this many entries a folder is one
#: symbolic link.
MIRROR_BUDGET = 2000
#: Names never mirrored: version control and caches (git finds the repository from the run's folder
#: anyway).
NOT_MIRRORED = (
    ".git",
    ".hg",
    ".svn",
    "__pycache__",
    ".ipynb_checkpoints",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
)
#: The files that mark a seeder verify/compare output folder and a seeder locate output folder
#: (``session.MARKER``, ``_locate.MARKER``): a folder holding one is never mirrored.
OUTPUT_MARKERS = (".seeder-verify", ".seeder-locate")
#: A file of the user's up to this size is copied into a run's folder, not linked: a write to it
#: changes the run's copy, never the user's file.
COPY_LIMIT = 1024 * 1024
#: At most this many bytes are copied into one run's folder; past it, files are links.
COPY_BUDGET = 64 * 1024 * 1024


def _is_output(path: Path) -> bool:
    """A folder ``seeder verify``, ``compare`` or ``locate`` wrote (it holds their marker)."""
    return any((path / m).exists() for m in OUTPUT_MARKERS)


def _absolute(word: str, base: Path) -> str:
    if not word or os.path.isabs(word) or word.startswith("-"):
        return word
    return str((base / word).resolve()) if (base / word).exists() else word


def absolute_command(command: Sequence[str], base: Path) -> list[str]:
    """``command`` with every word (or ``--opt=value`` value) naming an existing path under ``base``
    made absolute."""
    out = []
    for word in command:
        name, sep, value = word.partition("=")
        if sep and name.startswith("-"):
            out.append(f"{name}={_absolute(value, base)}")
        else:
            out.append(_absolute(word, base))
    return out


def base_environment(base: Path) -> dict[str, str]:
    """``PYTHONPATH`` with ``base`` first: modules next to where verify was started still import."""
    old = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": str(base) + (os.pathsep + old if old else "")}


def copy_run_dir(src: Path, dst: Path) -> Callable[[], Optional[str]]:
    """A run's ``prepare``: fill ``dst`` with what the stopped run left in ``src`` (not verify's own
    files)."""

    def prepare() -> Optional[str]:
        dst.mkdir(parents=True, exist_ok=True)
        if not src.is_dir():
            return None
        for entry in src.iterdir():
            if entry.name in OWN_FILES or entry.name.startswith("trace."):
                continue
            target = dst / entry.name
            if target.is_dir():
                shutil.rmtree(target)
            if entry.is_dir():
                shutil.copytree(entry, target, symlinks=True)
            else:
                shutil.copy2(entry, target, follow_symlinks=False)
        return None

    return prepare


def mirror_user_dir(
    base: Path, dst: Path, keep_out: Sequence[Path] = (), budget: int = MIRROR_BUDGET
) -> None:
    """Fill ``dst`` with ``base``'s entries: folders as real folders (mirrored in turn), small files
    as copies, other files as symbolic links.

    Entries ``dst`` already has (what a resumed run copied from its stopped run) win. ``keep_out``
    (verify's output folder), earlier outputs of seeder verify and locate (a folder with one of
    :data:`OUTPUT_MARKERS`, however many entries came before) and the names of verify's own files
    (:data:`OWN_FILES`, traces) are left out; past ``budget`` entries a folder becomes one
    symbolic link.

    >>> import tempfile, pathlib
    >>> base, dst = (pathlib.Path(tempfile.mkdtemp()) for _ in range(2))
    >>> (base / "data").mkdir(); _ = (base / "data" / "x.txt").write_text("x")
    >>> _ = (base / "cfg.py").write_text("")
    >>> mirror_user_dir(base, dst)
    >>> (dst / "data").is_symlink(), (dst / "data" / "x.txt").read_text()
    (False, 'x')
    >>> (dst / "cfg.py").is_symlink(), (dst / "cfg.py").is_file()  # a copy: writes stay here
    (False, True)
    """
    skip = {Path(p).resolve() for p in keep_out}
    left = [budget]
    copy_left = [COPY_BUDGET]

    def mirror(src: Path, into: Path) -> None:
        try:
            entries = sorted(os.scandir(src), key=lambda e: e.name)
        except OSError:
            return
        for entry in entries:
            path = Path(entry.path).resolve()
            target = into / entry.name
            if (
                entry.name in NOT_MIRRORED
                or path in skip
                or os.path.lexists(target)
                or (into == top and _own(entry.name))
            ):
                continue
            holds_out = any(path in p.parents for p in skip)
            is_dir = entry.is_dir()
            if is_dir and _is_output(path):  # an earlier verify's or locate's output
                continue
            if is_dir and (holds_out or left[0] > 0):
                target.mkdir()
                left[0] -= 1
                mirror(path, target)
            elif holds_out:
                continue
            elif not is_dir and _copy_small(entry, target, copy_left):
                left[0] -= 1
            else:
                target.symlink_to(path, target_is_directory=is_dir)
                left[0] -= 1

    top = Path(dst)
    top.mkdir(parents=True, exist_ok=True)
    mirror(Path(base).resolve(), top)


def _copy_small(entry: os.DirEntry[str], target: Path, copy_left: list[int]) -> bool:
    """Copy a small regular file (times kept) while the run's copy budget lasts; ``False``: link
    it instead."""
    try:
        size = entry.stat().st_size
        if not entry.is_file() or size > COPY_LIMIT or size > copy_left[0]:
            return False
        shutil.copy2(entry.path, target)
    except OSError:
        return False
    copy_left[0] -= size
    return True


def unmirror(runs: Path, base: Path, before: Optional[Mapping[str, tuple[int, int]]] = None) -> int:
    """Remove from every folder under ``runs`` the links into ``base`` (the user's folder, not into
    ``runs``) and the copies of ``base``'s files that the runs left unchanged (byte for byte the
    user's file, or with the size and modification time it had in ``before``, a
    :func:`seeder.verify._escapes.snapshot` taken before the runs: a copy keeps its file's
    time), then the folders left empty; return how many entries were removed.

    >>> import tempfile, pathlib
    >>> base, runs = (pathlib.Path(tempfile.mkdtemp()) for _ in range(2))
    >>> _ = (base / "cfg.py").write_text("x = 1")
    >>> mirror_user_dir(base, runs / "full-0"); _ = (runs / "full-0" / "out.txt").write_text("1")
    >>> unmirror(runs, base), sorted(p.name for p in (runs / "full-0").iterdir())
    (1, ['out.txt'])
    """
    home, runs_real = Path(base).resolve(), Path(runs).resolve()
    removed = 0
    for folder, dirs, files in os.walk(runs, topdown=False):
        for name in files + dirs:
            path = Path(folder) / name
            if path.is_symlink():
                target = Path(os.path.realpath(path))
                inside_base = target == home or home in target.parents
                if inside_base and not (target == runs_real or runs_real in target.parents):
                    path.unlink()
                    removed += 1
            elif name in files:
                rel = path.relative_to(runs)
                user = home / Path(*rel.parts[1:]) if len(rel.parts) > 1 else None
                if user is not None and (
                    _as_before(path, str(Path(*rel.parts[1:])), before or {})
                    or _same_file_content(path, user)
                ):
                    path.unlink()
                    removed += 1
        if Path(folder) != Path(runs) and not os.listdir(folder):
            os.rmdir(folder)
    return removed


def _as_before(copy: Path, rel: str, before: Mapping[str, tuple[int, int]]) -> bool:
    """Whether a copy has the size and time its user's file had before the runs."""
    try:
        st = copy.stat()
    except OSError:
        return False
    return before.get(rel) == (st.st_size, st.st_mtime_ns)


def _same_file_content(a: Path, b: Path) -> bool:
    try:
        if not b.is_file() or a.stat().st_size != b.stat().st_size:  # a user's link: its file
            return False
        return a.read_bytes() == b.read_bytes()
    except OSError:
        return False


def _own(name: str) -> bool:
    """A name verify or seeder writes at the top of a run's folder: never a link into the user's
    folder."""
    return name in OWN_FILES or name.startswith("trace.")
