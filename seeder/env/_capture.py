"""Environment snapshots: write one with :func:`capture_environment`, read one back.

:func:`capture_environment` writes, into a directory readable by its owner only, the
environment variables (``env.txt``), ``pip freeze``, ``module list``, the commit and the
changed files of each editable install and of the current repository (with the sha256 of the
change; its text only when asked, ``diff=True``), dpkg and conda package lists,
``nvidia-smi``, torch's build configuration and ``lscpu``, every secret redacted
(:mod:`seeder.env._redact`), and ``manifest.json``: each file's sha256, each tool's status
and the structured view that :func:`seeder.env._diff.diff_environments` compares. The
files are listed in ``docs/environment.md``.

A missing tool is recorded as ``missing``, a failing one as ``failed``; neither
stops the snapshot. ``manifest.json`` is written last: a directory without it is
an interrupted snapshot. :func:`load_snapshot` reads the manifest back.

Example:
    >>> default_snapshot_dir("/ckpt").parent
    PosixPath('/ckpt/repro')
"""

from __future__ import annotations

import datetime as _dt
import getpass
import json
import logging
import os
import re
import socket
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional, Union

from seeder._checks import check_bool
from seeder._safefile import check_directory, names, write_file
from seeder.env._probe import installed_distributions, python_info, system_info, torch_info
from seeder.env._recorded import recorded_environ
from seeder.env._redact import Redactor
from seeder.env._tools import (
    SnapshotWriter,
    ToolResult,
    conda_list,
    git_state,
    gpu_list,
    module_list,
    pip_freeze,
)

__all__ = [
    "SNAPSHOT_FORMAT",
    "SNAPSHOT_VERSION",
    "PathLike",
    "capture_environment",
    "default_snapshot_dir",
    "load_snapshot",
]

logger = logging.getLogger("seeder")

#: The ``format`` field of every snapshot's ``manifest.json``.
SNAPSHOT_FORMAT = "seeder-environment"
#: The manifest layout version this seeder writes and reads.
SNAPSHOT_VERSION = 1
#: Every name a snapshot writes at its top level: a directory holding anything else is not used.
SNAPSHOT_FILES = (
    "env.txt",
    "requirements.txt",
    "modules.txt",
    "editable",
    "git.txt",
    "git.diff",
    "apt-packages.txt",
    "conda-list.txt",
    "nvidia-smi.txt",
    "nvidia-smi-q.txt",
    "nvidia-smi-topo.txt",
    "torch-config.txt",
    "lscpu.txt",
    "manifest.json",
)

#: A directory or file path.
PathLike = Union[str, "os.PathLike[str]"]


def default_snapshot_dir(base: Optional[PathLike] = None) -> Path:
    """The snapshot directory: ``<base>/repro/$SLURM_JOB_ID`` (``base`` defaults to the working
    directory).

    A requeued SLURM job (``SLURM_RESTART_COUNT`` > 0) gets ``<job>-restart<N>``; outside
    SLURM the name is ``local-<UTC time>-<pid>``.

    Args:
        base: the folder that holds ``repro/``; ``None`` is the working directory.

    Returns:
        The directory (not created).

    Example:
        >>> default_snapshot_dir("/ckpt").parent
        PosixPath('/ckpt/repro')
    """
    root = Path(base) if base is not None else Path.cwd()
    job = os.environ.get("SLURM_JOB_ID", "").strip()
    if job:
        restart = os.environ.get("SLURM_RESTART_COUNT", "").strip()
        name = job + (f"-restart{restart}" if restart not in ("", "0") else "")
    else:
        name = f"local-{_dt.datetime.now(_dt.timezone.utc).strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    return root / "repro" / name


def _make_private_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    # mkdir's mode is filtered by the umask; an existing directory keeps its own.
    os.chmod(path, 0o700)


def capture_environment(
    directory: Optional[PathLike] = None,
    *,
    overwrite: bool = False,
    extra: Optional[Mapping[str, Any]] = None,
    diff: bool = False,
) -> Path:
    """Write a snapshot of this process's software and system environment into ``directory``; return
    it.

    The directory is made mode 0o700 and its files 0o600. Environment variables are recorded by
    name, with values only for those that change numerics or the run (CUDA, NCCL, threads,
    ``PYTHONHASHSEED``, ...); secrets are redacted in every file. Tools run with this
    interpreter (``sys.executable -m pip``).

    Args:
        directory: where to write; ``None`` uses :func:`default_snapshot_dir`
            (``./repro/$SLURM_JOB_ID``).
        overwrite: replace a snapshot already in ``directory``.
        extra: JSON-serialisable facts stored under ``manifest["run"]["extra"]``.
        diff: also write the text of each repository's uncommitted change (``git.diff``,
            ``editable/<name>.diff``, redacted); by default a snapshot records the changed files
            and the sha256 of the change, not its text.

    Returns:
        The snapshot directory.

    Raises:
        FileExistsError: ``directory`` holds a snapshot and ``overwrite`` is false, or files
            seeder did not write (:class:`UnsafeDirectoryError`).
        NotADirectoryError: ``directory`` is a file.
        TypeError: ``directory`` is not a path, ``overwrite`` or ``diff`` not a bool, or ``extra``
            is not JSON-serialisable.

    Example:
        >>> import tempfile
        >>> d = capture_environment(tempfile.mkdtemp() + "/snap")
        >>> load_snapshot(d)["python"]["executable"] == sys.executable
        True
    """
    check_bool(overwrite, "overwrite")
    check_bool(diff, "diff")
    if directory is not None and not isinstance(directory, (str, os.PathLike)):
        raise TypeError(
            f"directory must be a path (str or os.PathLike) or None, got {type(directory).__name__}"
        )
    if extra is not None:
        json.dumps(dict(extra))  # raises TypeError now, before anything is written
    target = Path(directory) if directory is not None else default_snapshot_dir()
    if target.exists() and not target.is_dir():
        raise NotADirectoryError(
            f"{target} exists and is not a directory; pass a directory for the snapshot"
        )
    if (target / "manifest.json").exists() and not overwrite:
        raise FileExistsError(
            f"{target} already holds a snapshot; pass overwrite=True (--force) or another directory"
        )
    # A directory seeder created (it holds a snapshot, whose owner may have added notes) or one with
    # nothing else.
    check_directory(
        target,
        (lambda name: True) if (target / "manifest.json").is_file() else names(SNAPSHOT_FILES),
        "environment snapshot",
    )
    environ = dict(os.environ)
    redactor = Redactor(environ, [sys.argv])
    _make_private_dir(target)
    _remove_previous(target)
    writer = SnapshotWriter(target, redactor)
    started = _dt.datetime.now(_dt.timezone.utc)

    env = recorded_environ(environ, redactor)
    writer.write("env.txt", "".join(f"{k}={_one_line(v)}\n" for k, v in env.items()), "os.environ")
    writer.tool("printenv", ["os.environ"], ToolResult("ok"), "env.txt")

    pip_freeze(writer)
    packages, editables = installed_distributions()
    for entry in editables:  # the manifest is redacted as a whole when written
        entry["git"] = (
            git_state(
                entry["path"],
                writer,
                f"git diff ({entry['name']})",
                f"editable/{_safe(entry['name'])}.diff",
                diff,
            )
            if os.path.isdir(entry["path"])
            else {"status": "source missing"}
        )
    module_list(writer)

    git = git_state(os.getcwd(), writer, "git diff (working directory)", "git.diff", diff)
    if git["status"] == "ok":
        summary = (
            [
                f"root: {git['root']}",
                f"commit: {git['commit']}",
                f"branch: {git['branch']}",
                f"dirty: {git['dirty']}",
                f"diff sha256: {git.get('diff_sha256')}",
                "changed:",
            ]
            + [f"  {c}" for c in git.get("changed", [])]
            + ["remotes:"]
            + [f"  {r}" for r in git["remotes"]]
            + ["untracked:"]
            + [f"  {u}" for u in git["untracked"]]
        )
        git["summary"] = writer.write(
            "git.txt", "\n".join(summary) + "\n", "git rev-parse/status/remote"
        )
    writer.tools["git"] = {
        "status": git["status"],
        "command": ["git", "-C", os.getcwd()],
        **({"error": git["error"]} if "error" in git else {}),
    }

    writer.run_to_file(
        "dpkg-query",
        ["dpkg-query", "-W", "-f=${Package}\\t${Version}\\t${Architecture}\\n"],
        "apt-packages.txt",
    )
    conda_list(writer)
    gpus, query = gpu_list()
    if query.status == "ok":
        writer.run_to_file("nvidia-smi", ["nvidia-smi"], "nvidia-smi.txt", timeout=60)
        writer.run_to_file("nvidia-smi -q", ["nvidia-smi", "-q"], "nvidia-smi-q.txt", timeout=60)
        writer.run_to_file(
            "nvidia-smi topo", ["nvidia-smi", "topo", "-m"], "nvidia-smi-topo.txt", timeout=60
        )
    else:
        writer.tool("nvidia-smi", ["nvidia-smi"], query)
    writer.run_to_file("lscpu", ["lscpu"], "lscpu.txt")

    torch_facts, torch_config = torch_info()
    if torch_facts is not None:
        torch_facts["config"] = writer.write("torch-config.txt", torch_config, "torch.__config__")
        torch_facts["configsha256"] = writer.files["torch-config.txt"]["sha256"]
        writer.tool("torch", ["torch.__config__.show()"], ToolResult("ok"), "torch-config.txt")
    else:
        writer.tool(
            "torch", ["import torch"], ToolResult("missing", error="torch is not installed")
        )

    manifest = {
        "format": SNAPSHOT_FORMAT,
        "version": SNAPSHOT_VERSION,
        "run": {
            "time": started.isoformat(timespec="seconds"),
            "hostname": socket.gethostname(),
            "user": _user(),
            "pid": os.getpid(),
            "cwd": os.getcwd(),
            "argv": list(sys.argv),
            "extra": dict(extra or {}),
        },
        "python": python_info(),
        "system": system_info(),
        "torch": torch_facts,
        "gpus": gpus,
        "environment": env,
        "packages": packages,
        "editables": editables,
        "git": git,
        "tools": writer.tools,
        "files": writer.files,
    }
    text = json.dumps(redactor.data(manifest), indent=2, sort_keys=False) + "\n"
    write_file(target, "manifest.json", text.encode("utf-8"))
    missing = sorted(k for k, v in writer.tools.items() if v["status"] != "ok")
    logger.info(
        "environment snapshot written to %s (%d files; not captured: %s)",
        target,
        len(writer.files) + 1,
        ", ".join(missing) or "none",
    )
    return target


def _remove_previous(target: Path) -> None:
    """Before overwriting a snapshot, delete the files its manifest lists (so none is left
    stale)."""
    try:
        old = json.loads((target / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    names = list((old.get("files") or {}) if isinstance(old, dict) else []) + ["manifest.json"]
    root = target.resolve()
    for name in names:
        path = (target / str(name)).resolve()
        if root in path.parents and path.is_file():
            path.unlink()


def _one_line(value: str) -> str:
    """env.txt holds one variable per line: backslashes and newlines in values are escaped."""
    return value.replace("\\", "\\\\").replace("\n", "\\n") if "\n" in value else value


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9.\-]", "_", name) or "_"


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no passwd entry in some containers
        return str(os.getuid()) if hasattr(os, "getuid") else ""


def load_snapshot(path: PathLike) -> dict[str, Any]:
    """Read a snapshot's ``manifest.json`` (``path`` is the snapshot directory or the manifest
    itself).

    Args:
        path: the snapshot directory, or its ``manifest.json``.

    Returns:
        The manifest, with the snapshot directory under ``"_dir"``.

    Raises:
        FileNotFoundError: there is no manifest (the message says what to pass).
        ValueError: the manifest is not JSON, not a seeder snapshot, or of another version.

    Example:
        >>> load_snapshot("/nonexistent/snap")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        FileNotFoundError: no manifest.json in /nonexistent/snap; pass a directory written by ...
    """
    p = Path(path)
    manifest = p / "manifest.json" if p.is_dir() else p
    if not manifest.exists():
        hint = (
            " (it looks like an interrupted snapshot)"
            if p.is_dir() and (p / "env.txt").exists()
            else ""
        )
        raise FileNotFoundError(
            f"no manifest.json in {p}{hint}; pass a directory written by `seeder env snapshot`"
        )
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ValueError(f"{manifest} is not valid JSON ({exc}); take the snapshot again") from None
    if not isinstance(data, dict) or data.get("format") != SNAPSHOT_FORMAT:
        raise ValueError(f"{manifest} is not a seeder environment snapshot")
    if data.get("version") != SNAPSHOT_VERSION:
        raise ValueError(
            f"{manifest} has snapshot version {data.get('version')!r}; this seeder reads version "
            f"{SNAPSHOT_VERSION}"
        )
    data["_dir"] = str(manifest.parent)
    return data
