"""Each run of ``seeder verify`` in its own working directory, seeing the user's files.

A script that writes to a fixed relative path (``lightning_logs/``, a Trainer's
``output_dir``, ``ckpt/last.pt``) must not share it with a run going at the same time,
so every run starts in its run directory (``OUT/runs/<name>/``). That directory mirrors
the directory verify was started in (:func:`mirror_user_dir`): its folders are real
folders, its small files copies (up to :data:`COPY_LIMIT` each, :data:`COPY_BUDGET` in
all), its other files (and folders of more than :data:`MIRROR_BUDGET` entries) links to one
read-only copy the runs share (:mod:`seeder.verify._shared`), never links to the user's
files. A relative path the script reads (a ``configurator.py`` or a ``data/`` folder next to
it) resolves as it would there, what the script writes under a new name lands in the run's
own folder, what it appends to a small file of the user's (a ``notes.txt``) goes to the run's
copy, and a write into a large one fails (``PermissionError``) or, for a process that ignores
permissions, changes the shared copy and fails the verdict: no write reaches the user's
folder through the mirror. Dotfiles and credential files (``.env``, ``.netrc``,
``secrets.yaml``, ``*.pem``: :func:`left_out_by_name`) are left out unless asked for. An
earlier output of ``seeder verify`` or ``seeder locate`` (a folder with its marker file,
whatever its name) is never mirrored. After the runs, :func:`unmirror` removes the shared
copies, every link into them or into the user's folder and every copy the run left
unchanged: what stays is what the runs wrote. Paths in the command
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
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from seeder.env._secretnames import credential_file
from seeder.verify._shared import SHARE_BUDGET, SharedStore

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
    "Unmirrored",
    "left_out_by_name",
]

#: Files seeder verify writes into a run directory itself: not copied into a resumed run's
#: directory.
OWN_FILES = ("log.txt", "run.json", "metrics.jsonl", "steps.jsonl", "parser.json")
#: Entries mirrored one by one in one run directory; past this many, a folder is one link to its
#: shared read-only copy.
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
#: A file of the user's up to this size is copied into a run's folder: a write to it changes the
#: run's copy. A larger one is shared read-only (:mod:`seeder.verify._shared`).
COPY_LIMIT = 1024 * 1024
#: At most this many bytes are copied into one run's folder; past it, files are shared.
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


def left_out_by_name(name: str, is_dir: bool = False) -> bool:
    """Whether an entry of the user's folder stays out of the runs' folders unless asked for: a
    dotfile or dot-folder (``.env``, ``.netrc``, ``.aws/``, ``.venv/``) or a file, not Python
    source, whose name says it holds credentials (``credentials.json``, ``db.pgpass``,
    ``id_rsa``, ``*.pem``: :func:`seeder.env._secretnames.credential_file`).

    >>> [left_out_by_name(n) for n in (".env", ".netrc", "secrets.yaml", "key.pem", "train.py")]
    [True, True, True, True, False]
    >>> left_out_by_name("env", is_dir=True), left_out_by_name("secret_toy.py")
    (False, False)
    """
    if name.startswith("."):
        return True
    return not is_dir and not name.endswith(".py") and credential_file(name)


def mirror_user_dir(
    base: Path,
    dst: Path,
    keep_out: Sequence[Path] = (),
    budget: int = MIRROR_BUDGET,
    secret_files: bool = False,
) -> None:
    """Fill ``dst`` with ``base``'s entries: folders as real folders (mirrored in turn), small files
    as copies, other files (and folders past ``budget`` entries) as links to the session's
    read-only copies (:class:`seeder.verify._shared.SharedStore`, in ``dst``'s parent folder).

    Entries ``dst`` already has (what a resumed run copied from its stopped run) win. ``keep_out``
    (verify's output folder), earlier outputs of seeder verify and locate (a folder with one of
    :data:`OUTPUT_MARKERS`), the names of verify's own files (:data:`OWN_FILES`, traces) and, unless
    ``secret_files``, dotfiles and credential files (:func:`left_out_by_name`, recorded in the
    store for the report) are left out.

    >>> import tempfile, pathlib
    >>> base, runs = (pathlib.Path(tempfile.mkdtemp()) for _ in range(2))
    >>> (base / "data").mkdir(); _ = (base / "data" / "x.txt").write_text("x")
    >>> _ = (base / "cfg.py").write_text(""); _ = (base / ".netrc").write_text("password pw")
    >>> _ = (base / "big.bin").write_bytes(bytes(COPY_LIMIT + 1))
    >>> mirror_user_dir(base, runs / "full-0")
    >>> (runs / "full-0" / "data").is_symlink(), (runs / "full-0" / "data" / "x.txt").read_text()
    (False, 'x')
    >>> (runs / "full-0" / "cfg.py").is_symlink()  # a copy: writes stay here
    False
    >>> os.path.realpath(runs / "full-0" / "big.bin").startswith(str(runs.resolve() / ".shared"))
    True
    >>> os.path.lexists(runs / "full-0" / ".netrc")
    False
    """
    top = Path(dst)
    top.mkdir(parents=True, exist_ok=True)
    _Mirror(top, keep_out, budget, secret_files).fill(Path(base).resolve(), top)


class _Mirror:
    """One run's mirror of the user's folder (see :func:`mirror_user_dir`)."""

    def __init__(
        self, top: Path, keep_out: Sequence[Path], budget: int, secret_files: bool
    ) -> None:
        self.top, self.left, self.copy_left = top, budget, COPY_BUDGET
        self.skip = {Path(p).resolve() for p in keep_out}
        self.secret_files = secret_files
        self.store = SharedStore(top.parent)

    def fill(self, src: Path, into: Path) -> None:
        try:
            entries = sorted(os.scandir(src), key=lambda e: e.name)
        except OSError:
            return
        for entry in entries:
            target = into / entry.name
            if not self._wanted(entry, target, into):
                continue
            path = Path(entry.path).resolve()
            holds_out = any(path in p.parents for p in self.skip)
            is_dir = entry.is_dir()
            if is_dir and _is_output(path):  # an earlier verify's or locate's output
                continue
            if is_dir and (holds_out or self.left > 0):
                target.mkdir()
                self.left -= 1
                self.fill(path, target)
            elif not holds_out:
                self._place(entry, path, target, is_dir)

    def _wanted(self, entry: os.DirEntry[str], target: Path, into: Path) -> bool:
        """Whether ``entry`` is mirrored at ``target`` (a left-out secret is recorded)."""
        if (
            entry.name in NOT_MIRRORED
            or Path(entry.path).resolve() in self.skip
            or os.path.lexists(target)
            or (into == self.top and _own(entry.name))
        ):
            return False
        if not self.secret_files and left_out_by_name(entry.name, entry.is_dir()):
            self.store.note("secret", self._rel(target))
            return False
        return True

    def _rel(self, target: Path) -> str:
        return str(target.relative_to(self.top))

    def _place(self, entry: os.DirEntry[str], path: Path, target: Path, is_dir: bool) -> None:
        """A copy of a small file; else a link to the shared read-only copy, or nothing past the
        store's budget."""
        self.left -= 1
        if not is_dir and self._copy_small(entry, target):
            return
        ignore = None if self.secret_files else left_out_by_name
        shared = self.store.share(path, self._rel(target), ignore)
        if shared is not None:
            target.symlink_to(shared.resolve(), target_is_directory=is_dir)

    def _copy_small(self, entry: os.DirEntry[str], target: Path) -> bool:
        """Copy a small regular file (times kept) while the run's copy budget lasts; ``False``:
        share it instead."""
        try:
            size = entry.stat().st_size
            if not entry.is_file() or size > COPY_LIMIT or size > self.copy_left:
                return False
            shutil.copy2(entry.path, target)
        except OSError:
            return False
        self.copy_left -= size
        return True


@dataclass
class Unmirrored:
    """What :func:`unmirror` found: ``removed`` entries, the shared copies the runs ``changed``,
    and what was ``left_out`` of the runs' folders (``{"secret": [...], "budget": [...]}``)."""

    removed: int
    changed: list[str]
    left_out: dict[str, list[str]]

    def findings(self) -> list[str]:
        """A FAIL's reasons: the runs wrote into a copy they all share."""
        if not self.changed:
            return []
        return [
            f"the runs wrote into {len(self.changed)} file(s) of the read-only copy of the user's "
            f"folder that all runs share (first {self.changed[0]}; files over "
            f"{COPY_LIMIT // 1024 // 1024} MiB and crowded folders are shared, not copied per "
            f"run), so one run could read what another wrote; make the script write new files "
            f"under its working directory, not into the user's large files"
        ]

    def notes(self) -> list[str]:
        """The report's notes: what the runs' folders left out, and how to include it."""
        out = []
        if self.left_out.get("secret"):
            out.append(
                f"left out of the runs' folders as dotfiles or credential files: "
                f"{_names(self.left_out['secret'])}; a script that reads one does not find it: "
                f"pass --include-secret-files to copy them"
            )
        if self.left_out.get("budget"):
            out.append(
                f"left out of the runs' folders past {SHARE_BUDGET // 1024**3} GiB of shared "
                f"copies: {_names(self.left_out['budget'])}; a script that reads one by a relative "
                f"path does not find it: pass its absolute path on the command line"
            )
        return out


def _names(rels: Sequence[str], most: int = 10) -> str:
    shown = ", ".join(rels[:most])
    return shown + (f" and {len(rels) - most} more" if len(rels) > most else "")


def unmirror(
    runs: Path, base: Path, before: Optional[Mapping[str, tuple[int, int]]] = None
) -> Unmirrored:
    """Remove the session's shared copies and, from every folder under ``runs``, the links into
    ``base`` (the user's folder) or into the shared copies, and the copies of ``base``'s files that
    the runs left unchanged (byte for byte the user's file, or with the size and modification time
    it had in ``before``, a :func:`seeder.verify._escapes.snapshot` taken before the runs: a copy
    keeps its file's time), then the folders left empty.

    >>> import tempfile, pathlib
    >>> base, runs = (pathlib.Path(tempfile.mkdtemp()) for _ in range(2))
    >>> _ = (base / "cfg.py").write_text("x = 1")
    >>> _ = (base / "big.bin").write_bytes(bytes(COPY_LIMIT + 1))
    >>> mirror_user_dir(base, runs / "full-0"); _ = (runs / "full-0" / "out.txt").write_text("1")
    >>> done = unmirror(runs, base)
    >>> done.removed, done.changed, sorted(p.name for p in runs.rglob("*"))
    (2, [], ['full-0', 'out.txt'])
    """
    store = SharedStore(runs)
    changed = store.changed(base)
    left_out = {why: store.left_out(why) for why in ("secret", "budget")}
    store.remove()
    home, shared = Path(base).resolve(), store.root.resolve()
    removed = 0
    for folder, dirs, files in os.walk(runs, topdown=False):
        for name in files + dirs:
            path = Path(folder) / name
            if _mirrored(path, Path(runs), home, shared, before or {}, name in files):
                path.unlink()
                removed += 1
        if Path(folder) != Path(runs) and not os.listdir(folder):
            os.rmdir(folder)
    return Unmirrored(removed, changed, left_out)


def _mirrored(
    path: Path,
    runs: Path,
    home: Path,
    shared: Path,
    before: Mapping[str, tuple[int, int]],
    is_file: bool,
) -> bool:
    """Whether ``path`` is the mirror's: a link into the user's folder or the shared copies, or a
    copy of a user's file left unchanged."""
    if path.is_symlink():
        target = Path(os.path.realpath(path))
        runs_real = runs.resolve()
        into_runs = target == runs_real or runs_real in target.parents
        return shared in (target, *target.parents) or (
            home in (target, *target.parents) and not into_runs
        )
    rel = path.relative_to(runs)
    if not is_file or len(rel.parts) < 2:
        return False
    inner = Path(*rel.parts[1:])
    return _as_before(path, str(inner), before) or _same_file_content(path, home / inner)


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
