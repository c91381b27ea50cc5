"""The diff of two environment snapshots: what changed, the settings that change numerics first.

:func:`diff_environments` compares the structured view that
:func:`seeder.env._capture.capture_environment` stores in ``manifest.json``
(variables, torch/CUDA/cuDNN/NCCL, GPUs and driver, CPU and OS, Python,
packages, dpkg, editable installs, git) section by section into an :class:`EnvDiff`.

Example:
    >>> important_variable("LD_PRELOAD") is not None, important_variable("HOME") is None
    (True, True)
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

from seeder.env._capture import SNAPSHOT_FORMAT, PathLike, load_snapshot
from seeder.env._recorded import IMPORTANT_VARIABLES, NOT_RECORDED, important_variable

_DIFF_HEADER = re.compile(r"^diff --git a/(?P<a>.*) b/(?P<b>.*)$")

__all__ = ["DEFAULT_IGNORED_VARIABLES", "SECTIONS", "Change", "EnvDiff", "diff_environments"]

#: Variables that differ between any two runs and say nothing about the environment.
DEFAULT_IGNORED_VARIABLES = (
    "_",
    "OLDPWD",
    "SHLVL",
    "SLURM_JOB_ID",
    "SLURM_JOBID",
    "SLURM_TASK_PID",
    "SLURM_STEP_ID",
    "SLURM_STEPID",
    "SLURM_JOB_START_TIME",
    "SLURM_JOB_END_TIME",
    "SLURM_SUBMIT_DIR",
    "SLURM_RESTART_COUNT",
    "SSH_CLIENT",
    "SSH_CONNECTION",
    "SSH_TTY",
    "TMUX_PANE",
    "WINDOWID",
    "XDG_SESSION_ID",
    "TERM_SESSION_ID",
    "SEEDER_SNAPSHOT_DIR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
)


@dataclass
class Change:
    """One difference: ``kind`` is ``added`` (only in B), ``removed`` (only in A) or ``changed``."""

    key: str
    a: Any
    b: Any
    kind: str
    important: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "a": self.a,
            "b": self.b,
            "kind": self.kind,
            "important": self.important,
        }


#: Sections of a diff, in the order they are shown.
SECTIONS = (
    "environment",
    "torch",
    "gpus",
    "system",
    "python",
    "packages",
    "system_packages",
    "editables",
    "git",
    "files",
    "tools",
)
_TITLES = {
    "environment": "environment variables (performance/numerics first)",
    "torch": "torch, CUDA, cuDNN, NCCL",
    "gpus": "GPUs and driver",
    "system": "CPU and OS",
    "python": "Python",
    "packages": "Python packages",
    "system_packages": "system packages (dpkg)",
    "editables": "editable installs",
    "git": "git state of the working directory",
    "files": "other captured files",
    "tools": "tools",
}


@dataclass
class EnvDiff:
    """What differs between two snapshots, section by section (see :data:`SECTIONS`).

    Attributes:
        a, b: where the two snapshots are (their directories, or ``"A"``/``"B"``).
        sections: the changes of each section; an empty list where nothing differs.
        ignored: variables that differ but match the ignored patterns.
        header: the ``run`` facts of each snapshot (job, host, time), under ``"a"`` and ``"b"``.

    Example:
        >>> from seeder.env._capture import SNAPSHOT_FORMAT, SNAPSHOT_VERSION
        >>> snap = {"format": SNAPSHOT_FORMAT, "version": SNAPSHOT_VERSION,
        ...         "environment": {"OMP_NUM_THREADS": "4"}}
        >>> d = diff_environments(snap, dict(snap, environment={"OMP_NUM_THREADS": "8"}))
        >>> d.equal, d.to_dict()["sections"]["environment"][0]["b"]
        (False, '8')
        >>> print(d.format())  # doctest: +NORMALIZE_WHITESPACE
        A: A
        B: B
        <BLANKLINE>
        == environment variables (performance/numerics first): 1 changed
                             A  B
          ~!OMP_NUM_THREADS  4  8
        <BLANKLINE>
        + only in B, - only in A, ~ changed, ! changes performance or numerics
        <BLANKLINE>
    """

    a: str
    b: str
    sections: dict[str, list[Change]] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)
    header: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def equal(self) -> bool:
        """True when no section has a difference (ignored variables do not count)."""
        return not any(self.sections.values())

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view of the diff (``seeder env diff --json`` prints it).

        Returns:
            ``{"equal", "a", "b", "runs", "sections": {name: [change, ...]}, "ignored"}``, with
            only the sections that differ.
        """
        return {
            "equal": self.equal,
            "a": self.a,
            "b": self.b,
            "runs": self.header,
            "sections": {k: [c.to_dict() for c in v] for k, v in self.sections.items() if v},
            "ignored": self.ignored,
        }

    def format(self, width: int = 44) -> str:
        """A readable table of the diff, the settings that change numerics marked ``!``.

        Args:
            width: values longer than this are shortened in the middle; ``0`` never shortens.

        Returns:
            The table, one line per change, ending with a newline.
        """
        out = [
            f"{k.upper()}: {path}"
            + (f"  ({_describe_run(self.header.get(k, {}))})" if self.header.get(k) else "")
            for k, path in (("a", self.a), ("b", self.b))
        ]
        if self.equal:
            out.append(
                "no differences"
                + (f" ({len(self.ignored)} ignored variable(s) differ)" if self.ignored else "")
            )
            return "\n".join(out) + "\n"
        marks = {"added": "+", "removed": "-", "changed": "~"}
        for name in SECTIONS:
            changes = self.sections.get(name) or []
            if not changes:
                continue
            counts = {k: sum(c.kind == k for c in changes) for k in ("added", "removed", "changed")}
            tally = ", ".join(f"{n} {k}" for k, n in counts.items() if n)
            out.append("")
            out.append(f"== {_TITLES[name]}: {tally}")
            key_w = min(max(len(c.key) for c in changes), 36)
            shown = [(_short(_show(c.a), width), _short(_show(c.b), width)) for c in changes]
            a_w = max(len(a) for a, _ in shown + [("A", "")])
            out.append(f"    {'':<{key_w}}  {'A':<{a_w}}  B")
            for c, (a, b) in zip(changes, shown):
                flag = "!" if c.important else " "
                key = _short(c.key, key_w)
                out.append(f"  {marks[c.kind]}{flag}{key:<{key_w}}  {a:<{a_w}}  {b}".rstrip())
        if self.ignored:
            out.append("")
            out.append(
                f"({len(self.ignored)} variable(s) that differ in every run ignored: "
                f"{', '.join(self.ignored)})"
            )
        out.append("")
        out.append("+ only in B, - only in A, ~ changed, ! changes performance or numerics")
        return "\n".join(out) + "\n"


def _describe_run(run: Mapping[str, Any]) -> str:
    bits = [str(run.get(k)) for k in ("hostname", "time") if run.get(k)]
    return ", ".join(bits) or "?"


def _show(value: Any) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


def _short(text: str, width: int) -> str:
    if width <= 0 or len(text) <= width:
        return text
    keep = width - 1
    return text[: (keep + 1) // 2] + "…" + text[len(text) - keep // 2 :]


def _compare_maps(
    a: Mapping[str, Any],
    b: Mapping[str, Any],
    important: Optional[Callable[[str], bool]] = None,
) -> list[Change]:
    changes = []
    for key in sorted(set(a) | set(b)):
        if key not in a:
            kind = "added"
        elif key not in b:
            kind = "removed"
        elif a[key] != b[key]:
            kind = "changed"
        else:
            continue
        changes.append(
            Change(key, a.get(key), b.get(key), kind, bool(important and important(key)))
        )
    return changes


def _read_lines(snapshot: Mapping[str, Any], name: str) -> Optional[list[str]]:
    if name not in snapshot.get("files", {}):
        return None
    try:
        return (Path(snapshot["_dir"]) / name).read_text(encoding="utf-8").splitlines()
    except OSError:
        return None


def _dpkg(snapshot: Mapping[str, Any]) -> Optional[dict[str, str]]:
    lines = _read_lines(snapshot, "apt-packages.txt")
    if lines is None:
        return None
    out = {}
    for line in lines:
        parts = line.split("\t")
        if len(parts) >= 2 and parts[0]:
            out[parts[0] + (f":{parts[2]}" if len(parts) > 2 and parts[2] else "")] = parts[1]
    return out


def _flatten(prefix: str, value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flatten(f"{prefix}.{k}" if prefix else str(k), v))
        return out
    return {prefix: value}


def diff_environments(
    a: Union[PathLike, Mapping[str, Any]],
    b: Union[PathLike, Mapping[str, Any]],
    *,
    ignore: Iterable[str] = DEFAULT_IGNORED_VARIABLES,
) -> EnvDiff:
    """Compare two snapshots (directories, manifest paths, or loaded manifests).

    Environment variables that change performance or numerics (``LD_PRELOAD``,
    ``LD_LIBRARY_PATH``, ``CUDA_*``, ``NCCL_*``, ``OMP_*``, ``CUBLAS_WORKSPACE_CONFIG``,
    ``PYTHONHASHSEED``, ...; see :data:`IMPORTANT_VARIABLES`) come first, marked
    ``important``. Variables matching ``ignore`` (fnmatch patterns; by default those that
    differ in every run, such as ``SLURM_JOB_ID``) are listed in ``ignored`` and do not
    count. Snapshots record the values of some variables only (``seeder.env._recorded``) and
    redact secrets, so a change of a value that was not recorded is not seen; its presence is.
    A repository's uncommitted change is compared by its sha256 and the paths of the files it
    touches; a snapshot that stored the change's text (``git.diff``, from an earlier seeder or
    ``--diff``) is compared the same way, its paths read from the text's ``diff --git`` headers
    and its hash from ``diffsha256``; the text itself is not compared line by line.

    Args:
        a, b: the snapshots: directories, ``manifest.json`` paths or loaded manifests.
        ignore: fnmatch patterns of variables whose differences do not count.

    Returns:
        The differences, section by section.

    Raises:
        TypeError: ``ignore`` is a single string.
        FileNotFoundError, ValueError: ``a`` or ``b`` is not a snapshot (see :func:`load_snapshot`).

    Example:
        >>> from seeder.env._capture import SNAPSHOT_VERSION
        >>> snap = {"format": SNAPSHOT_FORMAT, "version": SNAPSHOT_VERSION,
        ...         "environment": {"OMP_NUM_THREADS": "4"}}
        >>> d = diff_environments(snap, dict(snap, environment={"OMP_NUM_THREADS": "8"}))
        >>> d.equal, d.sections["environment"][0].key
        (False, 'OMP_NUM_THREADS')
    """
    if isinstance(ignore, str):
        raise TypeError(
            "ignore must be an iterable of variable-name patterns, not a single string; wrap it "
            "in a list"
        )
    patterns = list(ignore)
    sa, sb = (_as_snapshot(x) for x in (a, b))
    result = EnvDiff(
        str(sa.get("_dir", "A")),
        str(sb.get("_dir", "B")),
        header={"a": sa.get("run", {}), "b": sb.get("run", {})},
    )
    result.sections["environment"], result.ignored = _environment(sa, sb, patterns)
    result.sections.update(_platform(sa, sb))
    result.sections["packages"] = _compare_maps(sa.get("packages") or {}, sb.get("packages") or {})
    da, db = _dpkg(sa), _dpkg(sb)
    result.sections["system_packages"] = (
        _compare_maps(da, db) if da is not None and db is not None else []
    )
    result.sections["editables"] = _compare_maps(
        _editables(sa), _editables(sb), lambda k: k.endswith((".commit", ".dirty", ".diff_sha256"))
    )
    result.sections["git"] = _compare_maps(
        _git(sa), _git(sb), lambda k: k in ("commit", "dirty", "diff_sha256")
    )
    result.sections["files"] = _files(sa, sb)
    result.sections["tools"] = _compare_maps(
        {k: v.get("status") for k, v in (sa.get("tools") or {}).items()},
        {k: v.get("status") for k, v in (sb.get("tools") or {}).items()},
    )
    return result


def _environment(
    sa: Mapping[str, Any], sb: Mapping[str, Any], patterns: list[str]
) -> tuple[list[Change], list[str]]:
    """The variables' changes (those that change numerics first) and the ignored names that
    differ."""

    def ignored(name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, p) for p in patterns)

    full_a, full_b = sa.get("environment") or {}, sb.get("environment") or {}
    ea = {k: v for k, v in full_a.items() if not ignored(k)}
    eb = {k: v for k, v in full_b.items() if not ignored(k)}
    names = sorted(k for k in set(full_a) | set(full_b) if ignored(k))
    skipped = [k for k in names if full_a.get(k) != full_b.get(k)]
    for k in set(ea) & set(eb):  # a value one snapshot did not record: only presence counts
        if NOT_RECORDED in (ea[k], eb[k]):
            ea[k] = eb[k] = NOT_RECORDED
    changes = _compare_maps(ea, eb, lambda k: important_variable(k) is not None)
    rank = {c.key: important_variable(c.key) for c in changes}
    changes.sort(key=lambda c: (rank[c.key] if c.important else len(IMPORTANT_VARIABLES), c.key))
    return changes, skipped


def _platform(sa: Mapping[str, Any], sb: Mapping[str, Any]) -> dict[str, list[Change]]:
    """torch, GPUs, CPU and OS, Python."""
    ta, tb = dict(sa.get("torch") or {}), dict(sb.get("torch") or {})
    for t in (ta, tb):  # the build configuration itself is compared line by line under "files"
        t.pop("config", None)
        t.pop("config_sha256", None)

    def gpus(s: Mapping[str, Any]) -> dict[str, str]:
        return {
            f"gpu{g.get('index')}": f"{g.get('name')} (driver {g.get('driver')}, {g.get('memory')})"
            for g in s.get("gpus") or []
        }

    def python(s: Mapping[str, Any]) -> dict[str, Any]:
        keep = ("version", "implementation", "virtualenv")
        return {k: v for k, v in (s.get("python") or {}).items() if k in keep}

    return {
        "torch": _compare_maps(
            _flatten("", ta), _flatten("", tb), lambda k: not k.startswith("settings.num")
        ),
        "gpus": _compare_maps(gpus(sa), gpus(sb), lambda k: True),
        "system": _compare_maps(
            sa.get("system") or {},
            sb.get("system") or {},
            lambda k: k in ("cpu_model", "cpu_affinity", "libc"),
        ),
        "python": _compare_maps(python(sa), python(sb), lambda k: k == "version"),
    }


def _change_hash(git: Mapping[str, Any]) -> Any:
    """The sha256 of a repository's redacted change; ``diffsha256`` in snapshots that stored the
    diff's text by default."""
    return git.get("diff_sha256", git.get("diffsha256"))


def _editables(s: Mapping[str, Any]) -> dict[str, Any]:
    out = {}
    for e in s.get("editables") or []:
        g = e.get("git") or {}
        fields = {
            "path": e.get("path"),
            "version": e.get("version"),
            "git": g.get("status"),
            "commit": g.get("commit"),
            "dirty": g.get("dirty"),
            "diff_sha256": _change_hash(g),
        }
        out.update({f"{e['name']}.{k}": v for k, v in fields.items()})
    return out


_GIT_KEYS = ("status", "commit", "branch", "dirty", "untracked", "remotes")


def _git(s: Mapping[str, Any]) -> dict[str, Any]:
    """The working directory's repository: commit, status, the change's hash and its files' paths
    (read from the headers of ``git.diff`` in a snapshot that stored its text)."""
    git = s.get("git") or {}
    view = {k: git.get(k) for k in _GIT_KEYS}
    view["diff_sha256"] = _change_hash(git)
    changed = git.get("changed")
    if changed is not None:
        view["changed"] = sorted(c.split(" ", 1)[-1] for c in changed)
    elif git.get("diff"):
        lines = _read_lines(s, str(git["diff"])) or []
        view["changed"] = sorted(
            m.group("b") for m in (_DIFF_HEADER.match(line) for line in lines) if m
        )
    return view


def _files(sa: Mapping[str, Any], sb: Mapping[str, Any]) -> list[Change]:
    """The captured files compared line by line: modules, conda packages, torch's build."""
    files = []
    for name in ("modules.txt", "conda-list.txt", "torch-config.txt"):
        la, lb = _read_lines(sa, name), _read_lines(sb, name)
        if la is None or lb is None:
            continue
        only_a, only_b = sorted(set(la) - set(lb)), sorted(set(lb) - set(la))
        if only_a or only_b:
            files.append(
                Change(
                    name,
                    "; ".join(x.strip() for x in only_a) or None,
                    "; ".join(x.strip() for x in only_b) or None,
                    "changed",
                    name == "torch-config.txt",
                )
            )
    return files


def _as_snapshot(x: Union[PathLike, Mapping[str, Any]]) -> Mapping[str, Any]:
    if isinstance(x, Mapping):
        if x.get("format") != SNAPSHOT_FORMAT:
            raise ValueError(
                "not a seeder environment snapshot (a manifest dict needs format "
                f"{SNAPSHOT_FORMAT!r}); pass a snapshot directory or load_snapshot()'s result"
            )
        return x
    if isinstance(x, (str, os.PathLike)):
        return load_snapshot(x)
    raise TypeError(
        f"expected a snapshot directory, a manifest path or a loaded manifest, got "
        f"{type(x).__name__}"
    )
