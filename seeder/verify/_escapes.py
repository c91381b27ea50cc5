"""What the runs of ``seeder verify`` wrote outside their own folders, and the flag that sent it
there.

Every run works in its own folder (:mod:`seeder.verify._workdirs`). A script whose output path
leaves it (``--save-dir ../outputs``, an absolute path, a file of the user's folder it writes
over) shares that path with the other runs: a run may then resume from another run's finished
checkpoint and train nothing, and the user's folder changes. :func:`snapshot` records the
user's folder before the session; :func:`escapes` compares it after the runs and lists what
appeared in verify's output folder outside the run folders; each finding names the option whose
value or default points there, with the fix.

Example:
    >>> import tempfile, pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp()); (out / "runs" / "full-0").mkdir(parents=True)
    >>> (out / "runs" / "outputs").mkdir()
    >>> actions = [{"options": ["--save-dir"], "default": "../outputs"}]
    >>> found = escapes(out, ["full-0"], out, {}, actions, [])[0][0]
    >>> print(found)  # doctest: +ELLIPSIS, +NORMALIZE_WHITESPACE
    the runs wrote to .../runs/outputs, outside their own folders: the script's --save-dir
    (default '../outputs') points there from every run's folder, so the runs share it and one
    can read or resume from another's output; ...
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

__all__ = ["snapshot", "escapes", "NOT_SNAPSHOT", "SNAPSHOT_LIMIT", "OUT_ENTRIES", "PROBE_NAME"]

#: Files of the user's folder whose size and modification time are recorded (a larger folder is
#: checked this far).
SNAPSHOT_LIMIT = 20000
#: What verify itself writes at the top of its output folder.
OUT_ENTRIES = (".seeder-verify", "runs", "report.json", "report.md")
#: The folder in ``OUT/runs`` where the command ran up to its parser
#: (:func:`seeder.verify._flags.probe_parser`).
PROBE_NAME = "probe"

#: Folders a snapshot leaves out: version control and tools' caches (written by editors and
#: linters at any time, and never mirrored into a run).
NOT_SNAPSHOT = (".git", ".hg", ".svn", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache")

Snapshot = dict[str, tuple[int, int]]


def snapshot(base: Path, leave_out: Sequence[Path] = (), limit: int = SNAPSHOT_LIMIT) -> Snapshot:
    """``{relative path: (size, mtime_ns)}`` of the files under ``base`` (not under ``leave_out``,
    not in :data:`NOT_SNAPSHOT`).

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()); _ = (d / "a.txt").write_text("1")
    >>> list(snapshot(d))
    ['a.txt']
    """
    skip = {str(Path(p).resolve()) for p in leave_out}
    found: Snapshot = {}
    root = str(Path(base).resolve())
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(
            d for d in dirs if d not in NOT_SNAPSHOT and os.path.join(folder, d) not in skip
        )
        for name in sorted(files):
            path = os.path.join(folder, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            found[os.path.relpath(path, root)] = (st.st_size, st.st_mtime_ns)
            if len(found) >= limit:
                return found
    return found


def _points_at(value: str, start: Path, target: Path) -> bool:
    """Whether the path ``value``, read from folder ``start``, is ``target``, lies under it, or is a
    folder that holds it below ``start``'s parent (``out`` of ``out/ckpt.pt``; never ``.`` or
    ``..``, which hold everything)."""
    if not value or value.startswith("-"):
        return False
    where = Path(os.path.normpath(os.path.join(start, value)))
    floor = start.parent
    return (
        where == target
        or target in where.parents
        or (where in target.parents and floor in where.parents and where != start)
    )


def _culprit(
    target: Path, start: Path, actions: Sequence[dict[str, Any]], argv: Sequence[str]
) -> Optional[str]:
    """The option whose value in ``argv`` or default points at ``target`` from folder ``start``, in
    words."""
    for i, word in enumerate(argv):
        option, sep, value = word.partition("=")
        if sep and option.startswith("-") and _points_at(value, start, target):
            return f"the command's {option}={value}"
        if i and argv[i - 1].startswith("-") and _points_at(word, start, target):
            return f"the command's {argv[i - 1]} {word}"
    for action in actions:
        default = action.get("default")
        if (
            isinstance(default, str)
            and action.get("options")
            and _points_at(default, start, target)
        ):
            return f"the script's {action['options'][-1]} (default {default!r})"
    return None


def _finding(
    where: Path, start: Path, actions: Sequence[dict[str, Any]], argv: Sequence[str]
) -> str:
    culprit = _culprit(where, start, actions, argv)
    shared = "so the runs share it and one can read or resume from another's output; "
    if culprit is None:
        return (
            f"the runs wrote to {where}, outside their own folders, {shared}make the script write "
            f"under its working directory (a relative path without ..), or name the path with a "
            f"flag and pass one inside the run"
        )
    option = culprit.split()[2].split("=")[0]
    return (
        f"the runs wrote to {where}, outside their own folders: {culprit} points there from every "
        f"run's folder, {shared}pass a path inside the run instead (add `{option} {where.name}` to "
        f"the command)"
    )


def escapes(
    out: Path,
    run_names: Sequence[str],
    base: Path,
    before: Snapshot,
    actions: Sequence[dict[str, Any]],
    argv: Sequence[str],
) -> tuple[list[str], list[str]]:
    """Where the runs wrote outside their folders: ``(findings, notes)``, each naming the option
    that sent them there.

    A folder in ``out`` beside the run folders can only be the runs' (a finding). A change in the
    user's folder is a finding too, naming the option of the command that points at it where one
    does: verify never changes the user's files.

    Args:
        out: verify's output folder (its ``runs/<name>`` folders are the runs').
        run_names: the runs' names.
        base: the user's folder, snapshotted as ``before`` (:func:`snapshot`) before the runs.
        actions: the script's parser actions (:func:`seeder.verify._flags.probe_parser`), for their
            defaults.
        argv: a run's command line, for the options given there.

    Returns:
        The findings and the notes; both empty when every run kept to its folder (as far as the
        user's folder and ``out`` show).
    """
    out = Path(out).resolve()
    start = out / "runs" / (run_names[0] if run_names else "full-0")
    runs = out / "runs"
    strays = (
        [p for p in sorted(runs.iterdir()) if p.name not in (*run_names, PROBE_NAME)]
        if runs.is_dir()
        else []
    )
    strays += [p for p in sorted(out.iterdir()) if p.name not in OUT_ENTRIES and p.suffix != ".png"]
    found = [_finding(p, start, actions, argv) for p in strays]
    notes: list[str] = []
    after = snapshot(base, [out])
    changed = sorted(k for k in set(after) | set(before) if after.get(k) != before.get(k))
    home = Path(base).resolve()
    for rel in changed:
        path = home / rel
        if _culprit(path, start, actions, argv) or _culprit(path, home, actions, argv):
            culprit_start = start if _culprit(path, start, actions, argv) else home
            found.append(_finding(path, culprit_start, actions, argv))
            break
    else:
        if changed:  # through a linked (large) file or an absolute path: the user's file changed
            found.append(
                f"{len(changed)} file(s) of {base} changed while the runs went (first "
                f"{home / changed[0]}): a run wrote into the user's folder (a file larger than "
                f"the copies verify makes, reached through its link, or an absolute path), and "
                f"the runs share it; make the script write under its working directory (a new "
                f"file, not one of the user's), or run nothing else in {base} while verify runs"
            )
    return found, notes
