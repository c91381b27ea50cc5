"""The files each run of ``seeder verify`` writes, compared between runs.

After the runs, a run's folder holds what the script wrote (the user's files it only read
are gone: :func:`seeder.verify._workdirs.unmirror`). Two runs that should agree (a seeded
run and the first one; a resumed run and its uninterrupted run) must leave the same files
with the same content: tensors by value (a file ``torch.load(weights_only=True)`` reads is
compared as what it holds), JSON by value, other files byte for byte. What differs by
design is left out, and named in the report:

* the paths of the runs' own folders inside a file (a checkpoint names the run that saved
  it): each is read as ``<run>``;
* :data:`BY_DESIGN`: files that hold wall-clock times or are split by a resume by design;
* JSON keys that hold times (:data:`TIME_KEYS`);
* what ``--ignore-output GLOB`` names.

A resumed run's folder starts as a copy of its stopped run's, so a file the uninterrupted
run wrote last and the resumed run did not rewrite differs, and is named. A file only the
resumed run leaves (:func:`only_in`) differs too, unless its stopped run left it as well (the
checkpoint the resume loaded): that one is named as left out.

Example:
    >>> import pathlib, tempfile
    >>> runs = pathlib.Path(tempfile.mkdtemp())
    >>> for name, text in (("full-0", "loss 1"), ("full-1", "loss 2")):
    ...     (runs / name).mkdir(); _ = (runs / name / "log.csv").write_text(text)
    >>> first_file_difference(runs / "full-0", runs / "full-1", runs)
    ('log.csv', 'its bytes differ')
"""

from __future__ import annotations

import fnmatch
import io
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

__all__ = ["BY_DESIGN", "TIME_KEYS", "run_files", "first_file_difference", "left_out", "only_in"]

#: Files left out of the comparison, by name pattern (on the path in the run's folder), and why.
BY_DESIGN = {
    "log.txt": "seeder verify's log of the run (times, process ids)",
    "run.json": "seeder verify's record of the run (times)",
    "metrics.jsonl": "compared as the per-step values",
    "steps.jsonl": "compared as the per-step values and states",
    "parser.json": "seeder verify's probe of the script's parser",
    "trace.*": "compared as the per-step traces",
    "*events.out.tfevents.*": "TensorBoard event files hold wall-clock times",
    "lightning_logs/*": "Lightning logs each fit() to a new version folder: a resumed run's logs "
    "are split between two",
    "*training_args.bin": "the Trainer's arguments hold a logging_dir named after the start time",
    "*trainer_state.json": "the Trainer's log of metrics: a run stopped at an epoch's end saves "
    "its checkpoint before that epoch's evaluation, so the resumed run's log lacks the entry",
    "*.pyc": "Python's bytecode cache",
    "*__pycache__/*": "Python's bytecode cache",
}
#: JSON keys whose values are times, left out of a JSON file's comparison.
TIME_KEYS = re.compile(r"(runtime|per_second|time|timestamp|date|duration|elapsed)", re.I)
_LIMIT = 256 * 1024 * 1024  # a larger file is compared by its bytes only


def _ignored(rel: str, ignore: Sequence[str]) -> bool:
    return any(fnmatch.fnmatch(rel, p) for p in (*BY_DESIGN, *ignore))


def run_files(run_dir: Path, ignore: Sequence[str] = ()) -> list[str]:
    """The files a run left in its folder (not links, not :data:`BY_DESIGN`, not ``ignore``), as
    paths relative to it, sorted.

    >>> run_files(Path("/nonexistent"))
    []
    """
    found = []
    root = str(run_dir)
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in files:
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root)
            if os.path.islink(path) or _ignored(rel, ignore):
                continue
            found.append(rel)
    return sorted(found)


def only_in(run_dir: Path, other_dir: Path, ignore: Sequence[str] = ()) -> list[str]:
    """The files of :func:`run_files` that ``run_dir`` holds and ``other_dir`` does not, sorted.

    >>> only_in(Path("/nonexistent"), Path("/nonexistent"))
    []
    """
    return [
        rel
        for rel in run_files(run_dir, ignore)
        if not (other_dir / rel).is_file() or (other_dir / rel).is_symlink()
    ]


def left_out(run_dir: Path, ignore: Sequence[str] = ()) -> dict[str, str]:
    """``{path: why}`` of the files of ``run_dir`` left out of the comparison by design or by
    ``ignore``."""
    out: dict[str, str] = {}
    root = str(run_dir)
    for folder, _dirs, files in os.walk(root):
        for name in files:
            rel = os.path.relpath(os.path.join(folder, name), root)
            why = next((w for p, w in BY_DESIGN.items() if fnmatch.fnmatch(rel, p)), None)
            if why is None and any(fnmatch.fnmatch(rel, p) for p in ignore):
                why = "--ignore-output"
            if why is not None and not _verify_own(rel):
                out[rel] = why
    return out


def _verify_own(rel: str) -> bool:
    """A file seeder verify writes into a run's folder itself (not the script's)."""
    return rel in ("log.txt", "run.json", "metrics.jsonl", "steps.jsonl", "parser.json") or (
        rel.startswith("trace.")
    )


def _runs_pattern(runs_root: Path) -> re.Pattern[bytes]:
    roots = {str(runs_root), os.path.realpath(runs_root)}
    alternatives = b"|".join(re.escape(r.encode()) for r in sorted(roots, key=len, reverse=True))
    return re.compile(rb"(?:" + alternatives + rb")/[^/\s\"'\x00]+")


def _normalized(obj: Any, pattern: re.Pattern[bytes]) -> Any:
    if isinstance(obj, str):
        return pattern.sub(b"<run>", obj.encode("utf-8", "surrogatepass")).decode(
            "utf-8", "surrogatepass"
        )
    if isinstance(obj, dict):
        return {k: _normalized(v, pattern) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_normalized(v, pattern) for v in obj]
    return obj


def _without_times(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {
            k: _without_times(v)
            for k, v in obj.items()
            if not (isinstance(k, str) and TIME_KEYS.search(k))
        }
    if isinstance(obj, list):
        return [_without_times(v) for v in obj]
    return obj


def _tensors(data: bytes) -> Any:
    import torch

    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)


def _why_differs(a: bytes, b: bytes, pattern: re.Pattern[bytes]) -> Optional[str]:
    """Why two files' contents differ (``None``: they agree, as tensors, JSON or bytes)."""
    if a == b or pattern.sub(b"<run>", a) == pattern.sub(b"<run>", b):
        return None
    if len(a) <= _LIMIT and len(b) <= _LIMIT:
        try:
            from seeder._digest import digest

            ta, tb = _tensors(a), _tensors(b)
        except Exception:  # not a file torch.load reads with weights_only: JSON or bytes
            pass
        else:
            same = digest(_normalized(ta, pattern)) == digest(_normalized(tb, pattern))
            return None if same else "the tensors and values it holds differ"
        try:
            ja, jb = json.loads(a), json.loads(b)
        except ValueError:
            pass
        else:
            same = _normalized(_without_times(ja), pattern) == _normalized(
                _without_times(jb), pattern
            )
            return None if same else "its JSON values differ (times left out)"
    return "its bytes differ"


def first_file_difference(
    ref_dir: Path, other_dir: Path, runs_root: Path, ignore: Sequence[str] = ()
) -> Optional[tuple[str, str]]:
    """The first file (by path) that ``ref_dir``'s run left and ``other_dir``'s run left otherwise
    or not at all: ``(path, why)``, or ``None``.

    A file only ``other_dir`` holds is not looked at here (:func:`only_in` finds it).
    """
    pattern = _runs_pattern(runs_root)
    for rel in run_files(ref_dir, ignore):
        other = other_dir / rel
        if not other.is_file() or other.is_symlink():
            return rel, "the run did not write it"
        try:
            a, b = (ref_dir / rel).read_bytes(), other.read_bytes()
        except OSError as exc:
            return rel, f"it cannot be read ({exc.strerror or exc})"
        why = _why_differs(a, b, pattern)
        if why is not None:
            return rel, why
    return None
