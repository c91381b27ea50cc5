"""Each run of ``seeder verify`` in its own working directory.

A script that writes to a fixed relative path (``lightning_logs/``, a Trainer's
``output_dir``, ``ckpt/last.pt``) must not share it with a run going at the same time,
so every run starts in its run directory (``OUT/runs/<name>/``). Paths in the command
that name existing files or directories relative to where ``seeder verify`` was started
are made absolute, and that directory is put on ``PYTHONPATH`` (``python -m pkg.train``
keeps working). A resumed run starts from a copy of its stopped run's directory: what
the script saved there, wherever it saved it, is what it resumes from.

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
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

__all__ = ["absolute_command", "copy_run_dir", "base_environment", "OWN_FILES"]

#: Files seeder verify writes into a run directory itself: not copied into a resumed run's directory.
OWN_FILES = ("log.txt", "run.json", "metrics.jsonl", "steps.jsonl")


def _absolute(word: str, base: Path) -> str:
    if not word or os.path.isabs(word) or word.startswith("-"):
        return word
    return str((base / word).resolve()) if (base / word).exists() else word


def absolute_command(command: Sequence[str], base: Path) -> List[str]:
    """``command`` with every word (or ``--opt=value`` value) naming an existing path under ``base`` made absolute."""
    out = []
    for word in command:
        name, sep, value = word.partition("=")
        if sep and name.startswith("-"):
            out.append(f"{name}={_absolute(value, base)}")
        else:
            out.append(_absolute(word, base))
    return out


def base_environment(base: Path) -> Dict[str, str]:
    """``PYTHONPATH`` with ``base`` first: modules next to where verify was started still import."""
    old = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": str(base) + (os.pathsep + old if old else "")}


def copy_run_dir(src: Path, dst: Path) -> Callable[[], Optional[str]]:
    """A run's ``prepare``: fill ``dst`` with what the stopped run left in ``src`` (not verify's own files)."""
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
