"""The external tools an environment snapshot runs (git, pip or uv, conda, environment modules,
nvidia-smi) and the writer that stores their redacted output (:mod:`seeder.env._capture` puts them
together).

Every tool runs with a timeout, no input and no prompts; a tool that is missing or fails is recorded
with its status, never raised. Everything written goes through
one :class:`~seeder.env._redact.Redactor`.

Example:
    >>> run_tool(["seeder-no-such-tool"]).status
    'missing'
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from seeder._safefile import write_file
from seeder.env._redact import Redactor

__all__ = [
    "ToolResult",
    "run_tool",
    "SnapshotWriter",
    "git_state",
    "gpu_list",
    "module_list",
    "pip_freeze",
    "conda_list",
    "sha256",
    "TOOL_TIMEOUT",
]

PathLike = Union[str, "os.PathLike[str]"]
TOOL_TIMEOUT = 120.0


def sha256(data: bytes) -> str:
    """The hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


@dataclass
class ToolResult:
    """How one tool run ended: ``status`` ok, missing or failed, its output and the error to
    record."""

    status: str  # ok | missing | failed
    stdout: str = ""
    stderr: str = ""
    returncode: Optional[int] = None
    error: str = ""


def run_tool(
    argv: Sequence[str],
    cwd: Optional[PathLike] = None,
    timeout: float = TOOL_TIMEOUT,
    env: Optional[Mapping[str, str]] = None,
) -> ToolResult:
    """Run ``argv`` (no input, no prompts, C locale) and say how it ended; never raises for the
    tool's sake."""
    exe = argv[0]
    if os.sep not in exe and shutil.which(exe) is None:
        return ToolResult("missing", error=f"{exe} not found on PATH")
    child_env = dict(os.environ if env is None else env)
    child_env.update(
        {
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PIP_NO_INPUT": "1",
            "GIT_OPTIONAL_LOCKS": "0",
            "GIT_TERMINAL_PROMPT": "0",
            "LC_ALL": "C",
        }
    )
    try:
        proc = subprocess.run(
            list(argv),
            cwd=None if cwd is None else str(cwd),
            env=child_env,
            capture_output=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        return ToolResult("missing", error=f"{exe} not found")
    except subprocess.TimeoutExpired:
        return ToolResult("failed", error=f"timed out after {timeout:.0f} s")
    except OSError as exc:
        return ToolResult("failed", error=str(exc))
    out = proc.stdout.decode("utf-8", "replace")
    err = proc.stderr.decode("utf-8", "replace")
    if proc.returncode != 0:
        return ToolResult(
            "failed",
            out,
            err,
            proc.returncode,
            err.strip()[-500:] or f"exit code {proc.returncode}",
        )
    return ToolResult("ok", out, err, 0)


class SnapshotWriter:
    """Writes redacted files (mode 0o600) into a 0o700 directory and indexes them."""

    def __init__(self, root: Path, redactor: Redactor):
        self.root = root
        self.redactor = redactor
        self.files: dict[str, dict[str, Any]] = {}
        self.tools: dict[str, dict[str, Any]] = {}

    def write(self, name: str, text: str, source: str) -> str:
        data = self.redactor.text(text).encode("utf-8")
        write_file(self.root, name, data)
        self.files[name] = {"source": source, "sha256": sha256(data), "bytes": len(data)}
        return name

    def tool(
        self, label: str, argv: Sequence[str], result: ToolResult, file: Optional[str] = None
    ) -> None:
        entry: dict[str, Any] = {"status": result.status, "command": self.redactor.argv(argv)}
        if file:
            entry["file"] = file
        if result.error:
            entry["error"] = self.redactor.text(result.error)
        self.tools[label] = entry

    def run_to_file(
        self, label: str, argv: Sequence[str], name: str, stream: str = "stdout", **kw: Any
    ) -> ToolResult:
        result = run_tool(argv, **kw)
        file = None
        if result.status == "ok":
            text = result.stderr if stream == "stderr" else result.stdout
            file = self.write(name, text, " ".join(self.redactor.argv(argv)))
        self.tool(label, argv, result, file)
        return result


def git_state(
    path: PathLike, writer: SnapshotWriter, label: str, diff_name: str, diff: bool = False
) -> dict[str, Any]:
    """Commit, branch, status and what the uncommitted change (against HEAD, staged included) of
    the repo holding ``path`` touches: the changed files and the sha256 of the redacted diff; the
    diff text itself (redacted) only with ``diff``."""
    top = run_tool(["git", "-C", str(path), "rev-parse", "--show-toplevel"])
    if top.status != "ok":
        status = "missing" if top.status == "missing" else "not a git repository"
        return {"status": status, "error": writer.redactor.text(top.error)}
    root = top.stdout.strip()
    state: dict[str, Any] = {"status": "ok", "root": root}
    head = run_tool(["git", "-C", root, "rev-parse", "HEAD"])
    state["commit"] = head.stdout.strip() if head.status == "ok" else None
    branch = run_tool(["git", "-C", root, "rev-parse", "--abbrev-ref", "HEAD"])
    state["branch"] = branch.stdout.strip() if branch.status == "ok" else None
    porcelain = run_tool(
        ["git", "-C", root, "status", "--porcelain=v1", "--untracked-files=normal"]
    )
    lines = porcelain.stdout.splitlines() if porcelain.status == "ok" else []
    state["untracked"] = [writer.redactor.text(line[3:]) for line in lines if line.startswith("??")]
    remotes = run_tool(["git", "-C", root, "remote", "-v"])
    state["remotes"] = (
        sorted(
            {writer.redactor.text(line.rsplit(" ", 1)[0]) for line in remotes.stdout.splitlines()}
        )
        if remotes.status == "ok"
        else []
    )
    against = ["HEAD"] if state["commit"] else ["--cached"]
    options = ["--no-color", "--no-ext-diff"]
    change = run_tool(["git", "-C", root, "diff", *against, *options])
    names = run_tool(["git", "-C", root, "diff", *against, "--name-status", "-z", *options])
    if change.status == "ok" and names.status == "ok":
        state["dirty"] = bool(change.stdout) or bool(state["untracked"])
        words = names.stdout.split("\0")
        state["changed"] = [  # "M path", "R100 old new" as "R old -> new"
            writer.redactor.text(w) for w in _name_status(words)
        ]
        text = writer.redactor.diff(change.stdout)
        state["diff_sha256"] = sha256(writer.redactor.text(text).encode()) if text else None
        if text and diff:
            state["diff"] = writer.write(diff_name, text, label)
    else:
        state["dirty"] = None
        state["error"] = writer.redactor.text(change.error or names.error)
    return state


def _name_status(words: list[str]) -> list[str]:
    """``git diff --name-status -z`` output as ``"M path"`` / ``"R old -> new"`` lines."""
    out, i = [], 0
    while i < len(words) and words[i]:
        status = words[i]
        if status[:1] in ("R", "C") and i + 2 < len(words):
            out.append(f"{status[0]} {words[i + 1]} -> {words[i + 2]}")
            i += 3
        elif i + 1 < len(words):
            out.append(f"{status[0]} {words[i + 1]}")
            i += 2
        else:
            break
    return out


def gpu_list() -> tuple[list[dict[str, str]], ToolResult]:
    """The GPUs ``nvidia-smi`` lists (index, name, uuid, driver, memory, PCI bus), and how the query
    ended."""
    query = [
        "nvidia-smi",
        "--query-gpu=index,name,uuid,driver_version,memory.total,pci.bus_id",
        "--format=csv,noheader",
    ]
    result = run_tool(query, timeout=60)
    gpus = []
    if result.status == "ok":
        for line in result.stdout.splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) == 6:
                gpus.append(
                    dict(zip(("index", "name", "uuid", "driver", "memory", "pci_bus_id"), parts))
                )
    return gpus, result


def module_list(writer: SnapshotWriter) -> None:
    """The loaded environment modules (Lmod, Environment Modules) into ``modules.txt``."""
    label = "module list"
    for var in ("LMOD_CMD", "MODULES_CMD"):
        cmd = os.environ.get(var)
        if cmd:  # `module list` is a shell function around these; the list goes to stderr
            writer.run_to_file(label, [cmd, "bash", "list"], "modules.txt", stream="stderr")
            return
    loaded = os.environ.get("LOADEDMODULES")
    if loaded:
        text = "\n".join(loaded.split(":")) + "\n"
        writer.tool(
            label,
            ["$LOADEDMODULES"],
            ToolResult("ok"),
            writer.write("modules.txt", text, "$LOADEDMODULES"),
        )
    else:
        writer.tool(
            label,
            ["module", "list"],
            ToolResult(
                "missing",
                error="no environment modules (LMOD_CMD, MODULES_CMD, LOADEDMODULES unset)",
            ),
        )


def pip_freeze(writer: SnapshotWriter) -> None:
    """``pip freeze`` (``uv pip freeze`` in a uv environment) into ``requirements.txt``."""
    try:
        cfg = Path(sys.prefix, "pyvenv.cfg").read_text(encoding="utf-8", errors="replace")
    except OSError:
        cfg = ""
    uv_env = re.search(r"^\s*uv\s*=", cfg, re.M) is not None
    has_pip = importlib.util.find_spec("pip") is not None
    if shutil.which("uv") and (uv_env or not has_pip):
        argv = ["uv", "pip", "freeze", "--python", sys.executable]
        label = "uv pip freeze"
    else:
        argv = [sys.executable, "-m", "pip", "freeze"]
        label = "pip freeze"
        if not has_pip:
            writer.tool(label, argv, ToolResult("missing", error="neither pip nor uv is available"))
            return
    writer.run_to_file(label, argv, "requirements.txt")


def conda_list(writer: SnapshotWriter) -> None:
    """``conda list`` of this environment into ``conda-list.txt``."""
    exe = os.environ.get("CONDA_EXE") or shutil.which("conda") or "conda"
    argv = [exe, "list"]
    if os.path.isdir(os.path.join(sys.prefix, "conda-meta")):
        argv += ["--prefix", sys.prefix]
    writer.run_to_file("conda list", argv, "conda-list.txt")
