"""Snapshot and diff of the software and system environment (seed 000's recipe). Stands apart from the core.

:func:`capture_environment` writes, into a directory readable by its owner only:

=====================  ==========================================================
``env.txt``            environment variables, sorted, secrets redacted
``requirements.txt``   ``pip freeze`` (``uv pip freeze`` when uv manages the env)
``modules.txt``        ``module list`` (Lmod / Environment Modules), where present
``editable/NAME.diff`` uncommitted changes of each editable install (``direct_url.json``)
``git.txt``/``git.diff`` the current repository: commit, branch, remotes, status, diff
``apt-packages.txt``   ``dpkg-query -W`` where dpkg exists
``conda-list.txt``     ``conda list`` where conda exists
``nvidia-smi*.txt``    ``nvidia-smi``, ``nvidia-smi -q``, ``nvidia-smi topo -m`` where present
``torch-config.txt``   ``torch.__config__.show()`` and ``parallel_info()``
``lscpu.txt``          ``lscpu`` where present
``manifest.json``      the index: every file with its sha256, every tool's status
                       (``ok``/``missing``/``failed``), and the structured view that
                       :func:`diff_environments` compares (variables, packages,
                       torch/CUDA/cuDNN/NCCL, GPUs and driver, CPU, OS, Python, git)
=====================  ==========================================================

A missing tool is recorded as ``missing``, a failing one as ``failed``; neither
stops the snapshot. ``manifest.json`` is written last: a directory without it is
an interrupted snapshot.

Example:
    >>> redact_text("pip install -i https://alice:s3cret@pypi.example/simple x")
    'pip install -i https://<redacted>@pypi.example/simple x'
    >>> is_secret_name("HF_TOKEN"), is_secret_name("OMP_NUM_THREADS")
    (True, False)
"""
from __future__ import annotations

import datetime as _dt
import fnmatch
import getpass
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union
from urllib.parse import unquote, urlparse

__all__ = [
    "SNAPSHOT_FORMAT",
    "SNAPSHOT_VERSION",
    "REDACTED",
    "capture_environment",
    "default_snapshot_dir",
    "load_snapshot",
    "diff_environments",
    "EnvDiff",
    "Change",
    "is_secret_name",
    "redact_text",
    "redact_environ",
    "important_variable",
    "DEFAULT_IGNORED_VARIABLES",
]

logger = logging.getLogger("seeder")

SNAPSHOT_FORMAT = "seeder-environment"
SNAPSHOT_VERSION = 1
#: What replaces a secret in every file of a snapshot.
REDACTED = "<redacted>"
_TOOL_TIMEOUT = 120.0

PathLike = Union[str, "os.PathLike[str]"]

# --------------------------------------------------------------------------- redaction

#: Parts of variable names whose values are secret (matched anywhere in the upper-cased name).
SECRET_NAME_PARTS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "PASS", "KEY", "CREDENTIAL", "CREDS",
                     "AUTH", "COOKIE", "PRIVATE", "SIGNATURE", "DSN", "WEBHOOK", "CONNECTION_STRING", "SAS_")

_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^\s/?#@'\"<>]+)@")
_QUERY_SECRET = re.compile(
    r"(?i)(?P<key>[?&;][^=&\s#]*?(?:token|secret|sig|signature|key|password|passwd|auth|credential)[^=&\s#]*=)"
    r"(?P<value>[^&\s#'\"]+)")
_CONDA_TOKEN = re.compile(r"/t/[A-Za-z0-9_\-]{8,}(?=/)")
_KNOWN_TOKENS = re.compile(
    r"\b(?:hf_[A-Za-z0-9]{30,}|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,}|glpat-[A-Za-z0-9_\-]{20,}"
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}|sk-[A-Za-z0-9_\-]{20,}|xox[abprs]-[A-Za-z0-9\-]{10,}|AIza[0-9A-Za-z_\-]{35})")
_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S)
_AUTH_HEADER = re.compile(r"(?i)(\bauthorization\s*[:=]\s*[\"']?(?:bearer|basic|token)?\s*)[^\s\"']+")
_ASSIGNMENT = re.compile(
    r"(?i)(?P<name>\b[A-Za-z0-9_.\-]*(?:token|secret|passw(?:or)?d|passphrase|api[_\-]?key|access[_\-]?key"
    r"|private[_\-]?key|secret[_\-]?key|credentials?))(?P<sep>[\"']?\s*[:=]\s*)(?P<q>[\"']?)(?P<value>[^\s\"',;)}\]]+)")
_CREDENTIAL_LIKE = re.compile(r"[A-Za-z0-9_\-+/=.]{16,}")


def is_secret_name(name: str) -> bool:
    """Whether an environment variable's value is treated as secret (by its name).

    >>> [is_secret_name(n) for n in ("AWS_SECRET_ACCESS_KEY", "WANDB_API_KEY", "PATH")]
    [True, True, False]
    """
    upper = name.upper()
    return any(part in upper for part in SECRET_NAME_PARTS)


def _assignment(match: "re.Match[str]") -> str:
    name, value = match.group("name").lower(), match.group("value")
    if name.endswith("token") and not (_CREDENTIAL_LIKE.fullmatch(value) and re.search(r"\d", value)):
        return match.group(0)  # eos_token = "</s>" and the like are not secrets
    return f"{match.group('name')}{match.group('sep')}{match.group('q')}{REDACTED}"


class _Redactor:
    """Removes secrets from text: URL credentials, secret query parameters, known token formats,
    ``name = value`` assignments with secret names, and the literal values of secret variables."""

    def __init__(self, environ: Mapping[str, str]):
        literals = set()
        for name, value in environ.items():
            if is_secret_name(name) and len(value) >= 8:
                literals.add(value)
            for m in _URL_USERINFO.finditer(value):
                password = m.group("userinfo").partition(":")[2]
                for candidate in (password, unquote(password)):
                    if len(candidate) >= 8:
                        literals.add(candidate)
        self.literals = sorted(literals, key=len, reverse=True)

    def text(self, text: str, assignments: bool = True) -> str:
        text = _PRIVATE_KEY.sub(REDACTED, text)
        text = _URL_USERINFO.sub(lambda m: m.group("scheme") + REDACTED + "@", text)
        text = _QUERY_SECRET.sub(lambda m: m.group("key") + REDACTED, text)
        text = _CONDA_TOKEN.sub("/t/" + REDACTED, text)
        text = _KNOWN_TOKENS.sub(REDACTED, text)
        text = _AUTH_HEADER.sub(lambda m: m.group(1) + REDACTED, text)
        if assignments:
            text = _ASSIGNMENT.sub(_assignment, text)
        for literal in self.literals:  # last: the patterns above must still see whole URLs
            text = text.replace(literal, REDACTED)
        return text

    def environ(self, environ: Mapping[str, str]) -> Dict[str, str]:
        return {k: (REDACTED if is_secret_name(k) and v else self.text(v, assignments=False))
                for k, v in sorted(environ.items())}


def redact_text(text: str, environ: Optional[Mapping[str, str]] = None) -> str:
    """``text`` with secrets replaced by ``<redacted>``.

    Credentials in URLs, secret query parameters, well-known token formats (``hf_``,
    ``ghp_``, ``AKIA``, ``sk-``, ...), private-key blocks, ``password = ...``-style
    assignments, and any literal value of a secret-named variable of ``environ``
    (``os.environ`` by default) are removed. Pattern-based: review a snapshot before
    publishing it.

    >>> redact_text("git+https://ghp_abcdefghijklmnopqrstuvwxyz0123456789@github.com/o/r")
    'git+https://<redacted>@github.com/o/r'
    """
    return _Redactor(os.environ if environ is None else environ).text(text)


def redact_environ(environ: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """A sorted copy of ``environ`` (``os.environ`` by default) with secret values redacted.

    >>> redact_environ({"HF_TOKEN": "hf_x", "PIP_INDEX_URL": "https://u:p@h/simple", "A": "1"})
    {'A': '1', 'HF_TOKEN': '<redacted>', 'PIP_INDEX_URL': 'https://<redacted>@h/simple'}
    """
    env = os.environ if environ is None else environ
    return _Redactor(env).environ(env)


# --------------------------------------------------------------------------- capture helpers


def default_snapshot_dir(base: Optional[PathLike] = None) -> Path:
    """Seed 000's directory: ``<base>/repro/$SLURM_JOB_ID`` (``base`` defaults to the working directory).

    A requeued SLURM job (``SLURM_RESTART_COUNT`` > 0) gets ``<job>-restart<N>``; outside
    SLURM the name is ``local-<UTC time>-<pid>``.

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


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class _ToolResult:
    status: str  # ok | missing | failed
    stdout: str = ""
    stderr: str = ""
    returncode: Optional[int] = None
    error: str = ""


def _run(argv: Sequence[str], cwd: Optional[PathLike] = None, timeout: float = _TOOL_TIMEOUT,
         env: Optional[Mapping[str, str]] = None) -> _ToolResult:
    exe = argv[0]
    if os.sep not in exe and shutil.which(exe) is None:
        return _ToolResult("missing", error=f"{exe} not found on PATH")
    child_env = dict(os.environ if env is None else env)
    child_env.update({"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1", "GIT_OPTIONAL_LOCKS": "0",
                      "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"})
    try:
        proc = subprocess.run(list(argv), cwd=None if cwd is None else str(cwd), env=child_env, capture_output=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        return _ToolResult("missing", error=f"{exe} not found")
    except subprocess.TimeoutExpired:
        return _ToolResult("failed", error=f"timed out after {timeout:.0f} s")
    except OSError as exc:
        return _ToolResult("failed", error=str(exc))
    out = proc.stdout.decode("utf-8", "replace")
    err = proc.stderr.decode("utf-8", "replace")
    if proc.returncode != 0:
        return _ToolResult("failed", out, err, proc.returncode, err.strip()[-500:] or f"exit code {proc.returncode}")
    return _ToolResult("ok", out, err, 0)


class _Writer:
    """Writes redacted files (mode 0o600) into a 0o700 directory and indexes them."""

    def __init__(self, root: Path, redactor: _Redactor):
        self.root = root
        self.redactor = redactor
        self.files: Dict[str, Dict[str, Any]] = {}
        self.tools: Dict[str, Dict[str, Any]] = {}

    def write(self, name: str, text: str, source: str, assignments: bool = True) -> str:
        data = self.redactor.text(text, assignments=assignments).encode("utf-8")
        path = self.root / name
        if path.parent != self.root:
            _make_private_dir(path.parent)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(path, 0o600)
        self.files[name] = {"source": source, "sha256": _sha256(data), "bytes": len(data)}
        return name

    def tool(self, label: str, argv: Sequence[str], result: _ToolResult, file: Optional[str] = None) -> None:
        entry: Dict[str, Any] = {"status": result.status, "command": [self.redactor.text(a) for a in argv]}
        if file:
            entry["file"] = file
        if result.error:
            entry["error"] = self.redactor.text(result.error)
        self.tools[label] = entry

    def run_to_file(self, label: str, argv: Sequence[str], name: str, stream: str = "stdout",
                    assignments: bool = False, **kw: Any) -> _ToolResult:
        result = _run(argv, **kw)
        file = None
        if result.status == "ok":
            text = result.stderr if stream == "stderr" else result.stdout
            file = self.write(name, text, " ".join(argv), assignments=assignments)
        self.tool(label, argv, result, file)
        return result


def _make_private_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)  # mkdir's mode is filtered by the umask; an existing directory keeps its own


# --------------------------------------------------------------------------- the pieces


def _python_info() -> Dict[str, Any]:
    return {
        "version": platform.python_version(),
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
        "prefix": sys.prefix,
        "base_prefix": sys.base_prefix,
        "virtualenv": sys.prefix != sys.base_prefix,
    }


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


def _system_info() -> Dict[str, Any]:
    os_release = dict(re.findall(r'^([A-Z_]+)="?(.*?)"?$', _read("/etc/os-release"), re.M))
    cpu_model = ""
    for line in _read("/proc/cpuinfo").splitlines():
        if line.lower().startswith(("model name", "hardware", "cpu model")):
            cpu_model = line.split(":", 1)[1].strip()
            break
    mem = re.search(r"^MemTotal:\s+(\d+) kB", _read("/proc/meminfo"), re.M)
    try:
        affinity: Optional[int] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    uname = platform.uname()
    return {
        "os": os_release.get("PRETTY_NAME") or f"{uname.system} {uname.release}",
        "kernel": f"{uname.system} {uname.release} {uname.version}",
        "machine": uname.machine,
        "libc": " ".join(platform.libc_ver()).strip(),
        "cpu_model": cpu_model or platform.processor(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": affinity,
        "memory_total_kib": int(mem.group(1)) if mem else None,
    }


def _torch_info() -> Tuple[Optional[Dict[str, Any]], str]:
    if importlib.util.find_spec("torch") is None:
        return None, ""
    import torch  # noqa: PLC0415 - optional, and slow to import

    info: Dict[str, Any] = {
        "version": torch.__version__,
        "git_version": getattr(torch.version, "git_version", None),
        "debug": bool(getattr(torch.version, "debug", False)),
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "cudnn": None,
        "nccl": None,
        "cuda_available": False,
        "device_count": 0,
        "devices": [],
    }
    try:
        info["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except Exception:  # noqa: BLE001 - a broken cuDNN install is recorded as none
        pass
    try:
        nccl = torch.cuda.nccl.version()
        info["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    except Exception:  # noqa: BLE001 - CPU builds have no NCCL
        pass
    try:
        # device_count() asks NVML and leaves CUDA alone; is_available() would cuInit and poison fork()
        info["device_count"] = torch.cuda.device_count()
        info["cuda_available"] = info["device_count"] > 0
        if torch.cuda.is_initialized():  # names only where CUDA runs already: a snapshot must not start it
            info["devices"] = [torch.cuda.get_device_name(i) for i in range(info["device_count"])]
    except Exception:  # noqa: BLE001
        pass
    info["settings"] = {
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "cuda_matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "num_threads": torch.get_num_threads(),
        "num_interop_threads": torch.get_num_interop_threads(),
    }
    config = torch.__config__.show() + "\n" + torch.__config__.parallel_info()
    return info, config


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _distributions() -> Tuple[Dict[str, str], List[Dict[str, Any]]]:
    """(name -> version [@ url], editable installs) of this interpreter, first on sys.path wins (as imports do)."""
    packages: Dict[str, str] = {}
    editables: List[Dict[str, Any]] = []
    for dist in importlib.metadata.distributions():
        meta = dist.metadata
        name = meta["Name"]
        if not name:
            continue
        key = _normalize(name)
        if key in packages:
            continue
        version = meta["Version"]
        raw = dist.read_text("direct_url.json")
        if raw:
            try:
                direct = json.loads(raw)
            except ValueError:
                direct = {}
            url = direct.get("url", "")
            vcs = direct.get("vcs_info") or {}
            editable = bool((direct.get("dir_info") or {}).get("editable"))
            suffix = f" @ {url}" + (f"@{vcs['commit_id']}" if vcs.get("commit_id") else "")
            packages[key] = f"{version}{suffix}{' (editable)' if editable else ''}"
            if editable and url.startswith("file://"):
                editables.append({"name": key, "version": version, "url": url,
                                  "path": unquote(urlparse(url).path)})
        else:
            packages[key] = version
    return dict(sorted(packages.items())), editables


def _git_state(path: PathLike, writer: _Writer, label: str, diff_name: str) -> Dict[str, Any]:
    """Commit, branch, status and uncommitted diff (against HEAD, staged included) of the repo holding ``path``."""
    top = _run(["git", "-C", str(path), "rev-parse", "--show-toplevel"])
    if top.status != "ok":
        status = "missing" if top.status == "missing" else "not a git repository"
        return {"status": status, "error": writer.redactor.text(top.error)}
    root = top.stdout.strip()
    state: Dict[str, Any] = {"status": "ok", "root": root}
    head = _run(["git", "-C", root, "rev-parse", "HEAD"])
    state["commit"] = head.stdout.strip() if head.status == "ok" else None
    branch = _run(["git", "-C", root, "rev-parse", "--abbrev-ref", "HEAD"])
    state["branch"] = branch.stdout.strip() if branch.status == "ok" else None
    status = _run(["git", "-C", root, "status", "--porcelain=v1", "--untracked-files=normal"])
    lines = status.stdout.splitlines() if status.status == "ok" else []
    state["untracked"] = [writer.redactor.text(line[3:]) for line in lines if line.startswith("??")]
    remotes = _run(["git", "-C", root, "remote", "-v"])
    state["remotes"] = sorted({writer.redactor.text(line.rsplit(" ", 1)[0]) for line in remotes.stdout.splitlines()}) \
        if remotes.status == "ok" else []
    diff_argv = ["git", "-C", root, "diff", "HEAD", "--no-color", "--no-ext-diff"] if state["commit"] else \
        ["git", "-C", root, "diff", "--cached", "--no-color", "--no-ext-diff"]
    diff = _run(diff_argv)
    if diff.status == "ok":
        state["dirty"] = bool(diff.stdout) or bool(state["untracked"])
        if diff.stdout:
            state["diff"] = writer.write(diff_name, diff.stdout, label)
            state["diff_sha256"] = writer.files[diff_name]["sha256"]
        else:
            state["diff_sha256"] = None
    else:
        state["dirty"] = None
        state["error"] = writer.redactor.text(diff.error)
    return state


def _gpus() -> Tuple[List[Dict[str, str]], _ToolResult]:
    query = ["nvidia-smi", "--query-gpu=index,name,uuid,driver_version,memory.total,pci.bus_id", "--format=csv,noheader"]
    result = _run(query, timeout=60)
    gpus = []
    if result.status == "ok":
        for line in result.stdout.splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) == 6:
                gpus.append(dict(zip(("index", "name", "uuid", "driver", "memory", "pci_bus_id"), parts)))
    return gpus, result


def _modules(writer: _Writer) -> None:
    label = "module list"
    for var in ("LMOD_CMD", "MODULES_CMD"):
        cmd = os.environ.get(var)
        if cmd:  # `module list` is a shell function around these; the list goes to stderr
            writer.run_to_file(label, [cmd, "bash", "list"], "modules.txt", stream="stderr")
            return
    loaded = os.environ.get("LOADEDMODULES")
    if loaded:
        text = "\n".join(loaded.split(":")) + "\n"
        writer.tool(label, ["$LOADEDMODULES"], _ToolResult("ok"), writer.write("modules.txt", text, "$LOADEDMODULES"))
    else:
        writer.tool(label, ["module", "list"],
                    _ToolResult("missing", error="no environment modules (LMOD_CMD, MODULES_CMD, LOADEDMODULES unset)"))


def _freeze(writer: _Writer) -> None:
    cfg = _read(os.path.join(sys.prefix, "pyvenv.cfg"))
    uv_env = re.search(r"^\s*uv\s*=", cfg, re.M) is not None
    has_pip = importlib.util.find_spec("pip") is not None
    if shutil.which("uv") and (uv_env or not has_pip):
        argv = ["uv", "pip", "freeze", "--python", sys.executable]
        label = "uv pip freeze"
    else:
        argv = [sys.executable, "-m", "pip", "freeze"]
        label = "pip freeze"
        if not has_pip:
            writer.tool(label, argv, _ToolResult("missing", error="neither pip nor uv is available"))
            return
    writer.run_to_file(label, argv, "requirements.txt")


def _conda(writer: _Writer) -> None:
    exe = os.environ.get("CONDA_EXE") or shutil.which("conda") or "conda"
    argv = [exe, "list"]
    if os.path.isdir(os.path.join(sys.prefix, "conda-meta")):
        argv += ["--prefix", sys.prefix]
    writer.run_to_file("conda list", argv, "conda-list.txt")


def capture_environment(directory: Optional[PathLike] = None, *, overwrite: bool = False,
                        extra: Optional[Mapping[str, Any]] = None) -> Path:
    """Write a snapshot of this process's software and system environment into ``directory``; return it.

    ``directory=None`` uses :func:`default_snapshot_dir` (``./repro/$SLURM_JOB_ID``). The
    directory is made mode 0o700 and its files 0o600; secrets are redacted in every
    file. An existing snapshot there (a ``manifest.json``) raises ``FileExistsError``
    unless ``overwrite=True``. ``extra`` (JSON-serialisable) is stored under
    ``manifest["run"]["extra"]``. Tools run with this interpreter (``sys.executable -m pip``).

    >>> import tempfile, json
    >>> d = capture_environment(tempfile.mkdtemp() + "/snap")
    >>> json.load(open(d / "manifest.json"))["tools"]["pip freeze"]["status"]
    'ok'
    """
    if not isinstance(overwrite, bool):
        raise TypeError(f"overwrite must be True or False, got {type(overwrite).__name__} {overwrite!r}")
    if directory is not None and not isinstance(directory, (str, os.PathLike)):
        raise TypeError(f"directory must be a path (str or os.PathLike) or None, got {type(directory).__name__}")
    if extra is not None:
        json.dumps(dict(extra))  # raises TypeError now, before anything is written
    target = Path(directory) if directory is not None else default_snapshot_dir()
    if target.exists() and not target.is_dir():
        raise NotADirectoryError(f"{target} exists and is not a directory; pass a directory for the snapshot")
    if (target / "manifest.json").exists() and not overwrite:
        raise FileExistsError(f"{target} already holds a snapshot; pass overwrite=True (--force) or another directory")
    environ = dict(os.environ)
    redactor = _Redactor(environ)
    _make_private_dir(target)
    _remove_previous(target)
    writer = _Writer(target, redactor)
    started = _dt.datetime.now(_dt.timezone.utc)

    env = redactor.environ(environ)
    writer.write("env.txt", "".join(f"{k}={_one_line(v)}\n" for k, v in env.items()), "os.environ", assignments=False)
    writer.tool("printenv", ["os.environ"], _ToolResult("ok"), "env.txt")

    _freeze(writer)
    packages, editables = _distributions()
    for entry in editables:
        entry["git"] = _git_state(entry["path"], writer, f"git diff ({entry['name']})", f"editable/{_safe(entry['name'])}.diff") \
            if os.path.isdir(entry["path"]) else {"status": "source missing"}
        entry["url"], entry["path"] = redactor.text(entry["url"]), redactor.text(entry["path"])
    _modules(writer)

    git = _git_state(os.getcwd(), writer, "git diff (working directory)", "git.diff")
    if git["status"] == "ok":
        summary = [f"root: {git['root']}", f"commit: {git['commit']}", f"branch: {git['branch']}",
                   f"dirty: {git['dirty']}", "remotes:"] + [f"  {r}" for r in git["remotes"]] + \
                  ["untracked:"] + [f"  {u}" for u in git["untracked"]]
        git["summary"] = writer.write("git.txt", "\n".join(summary) + "\n", "git rev-parse/status/remote")
    writer.tools["git"] = {"status": git["status"], "command": ["git", "-C", redactor.text(os.getcwd())],
                           **({"error": git["error"]} if "error" in git else {})}

    writer.run_to_file("dpkg-query", ["dpkg-query", "-W", "-f=${Package}\\t${Version}\\t${Architecture}\\n"],
                       "apt-packages.txt")
    _conda(writer)
    gpus, query = _gpus()
    if query.status == "ok":
        writer.run_to_file("nvidia-smi", ["nvidia-smi"], "nvidia-smi.txt", timeout=60)
        writer.run_to_file("nvidia-smi -q", ["nvidia-smi", "-q"], "nvidia-smi-q.txt", timeout=60)
        writer.run_to_file("nvidia-smi topo", ["nvidia-smi", "topo", "-m"], "nvidia-smi-topo.txt", timeout=60)
    else:
        writer.tool("nvidia-smi", ["nvidia-smi"], query)
    writer.run_to_file("lscpu", ["lscpu"], "lscpu.txt")

    torch_info, torch_config = _torch_info()
    if torch_info is not None:
        torch_info["config"] = writer.write("torch-config.txt", torch_config, "torch.__config__", assignments=False)
        torch_info["config_sha256"] = writer.files["torch-config.txt"]["sha256"]
        writer.tool("torch", ["torch.__config__.show()"], _ToolResult("ok"), "torch-config.txt")
    else:
        writer.tool("torch", ["import torch"], _ToolResult("missing", error="torch is not installed"))

    manifest = {
        "format": SNAPSHOT_FORMAT,
        "version": SNAPSHOT_VERSION,
        "run": {
            "time": started.isoformat(timespec="seconds"),
            "hostname": socket.gethostname(),
            "user": _user(),
            "pid": os.getpid(),
            "cwd": redactor.text(os.getcwd()),
            "argv": [redactor.text(a) for a in sys.argv],
            "extra": json.loads(redactor.text(json.dumps(dict(extra or {})), assignments=False)),
        },
        "python": _python_info(),
        "system": _system_info(),
        "torch": torch_info,
        "gpus": gpus,
        "environment": env,
        "packages": packages,
        "editables": editables,
        "git": git,
        "tools": writer.tools,
        "files": writer.files,
    }
    text = json.dumps(manifest, indent=2, sort_keys=False) + "\n"
    data = redactor.text(text, assignments=False)
    fd = os.open(target / "manifest.json", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(data)
    missing = sorted(k for k, v in writer.tools.items() if v["status"] != "ok")
    logger.info("environment snapshot written to %s (%d files; not captured: %s)", target, len(writer.files) + 1,
                ", ".join(missing) or "none")
    return target


def _remove_previous(target: Path) -> None:
    """Before overwriting a snapshot, delete the files its manifest lists (so none is left stale)."""
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


# --------------------------------------------------------------------------- loading and diff


def load_snapshot(path: PathLike) -> Dict[str, Any]:
    """Read a snapshot's ``manifest.json`` (``path`` is the snapshot directory or the manifest itself).

    Raises ``FileNotFoundError`` or ``ValueError`` with what to do when it is not a snapshot.
    """
    p = Path(path)
    manifest = p / "manifest.json" if p.is_dir() else p
    if not manifest.exists():
        hint = " (it looks like an interrupted snapshot)" if p.is_dir() and (p / "env.txt").exists() else ""
        raise FileNotFoundError(f"no manifest.json in {p}{hint}; pass a directory written by `seeder env snapshot`")
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ValueError(f"{manifest} is not valid JSON ({exc}); take the snapshot again") from None
    if not isinstance(data, dict) or data.get("format") != SNAPSHOT_FORMAT:
        raise ValueError(f"{manifest} is not a seeder environment snapshot")
    if data.get("version") != SNAPSHOT_VERSION:
        raise ValueError(f"{manifest} has snapshot version {data.get('version')!r}; this seeder reads version "
                         f"{SNAPSHOT_VERSION}")
    data["_dir"] = str(manifest.parent)
    return data


#: Variables that change performance or numerics, listed first in a diff (``*`` matches any suffix).
IMPORTANT_VARIABLES = (
    "LD_PRELOAD", "LD_LIBRARY_PATH", "CUDA_*", "NCCL_*", "OMP_*", "CUBLAS_WORKSPACE_CONFIG", "CUBLASLT_*",
    "CUDNN_*", "PYTHONHASHSEED", "SEEDER_*", "NVIDIA_TF32_OVERRIDE", "TORCH_*", "PYTORCH_*", "MKL_*",
    "OPENBLAS_*", "KMP_*", "GOMP_*", "BLIS_*", "NUMEXPR_*", "HOROVOD_*", "XLA_FLAGS", "TF_*", "UCX_*",
    "FI_*", "NVSHMEM_*", "HIP_*", "HSA_*", "ROCR_*", "MIOPEN_*", "MALLOC_*", "LD_BIND_NOW", "PYTHONPATH",
    "PATH", "VIRTUAL_ENV", "CONDA_PREFIX",
)
#: Variables that differ between any two runs and say nothing about the environment.
DEFAULT_IGNORED_VARIABLES = (
    "_", "OLDPWD", "SHLVL", "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_TASK_PID", "SLURM_STEP_ID", "SLURM_STEPID",
    "SLURM_JOB_START_TIME", "SLURM_JOB_END_TIME", "SLURM_SUBMIT_DIR", "SLURM_RESTART_COUNT", "SSH_CLIENT",
    "SSH_CONNECTION", "SSH_TTY", "TMUX_PANE", "WINDOWID", "XDG_SESSION_ID", "TERM_SESSION_ID",
    "SEEDER_SNAPSHOT_DIR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
)


def important_variable(name: str) -> Optional[int]:
    """The rank of ``name`` in :data:`IMPORTANT_VARIABLES` (lower = listed earlier), or ``None``.

    >>> important_variable("LD_PRELOAD"), important_variable("NCCL_DEBUG"), important_variable("HOME")
    (0, 3, None)
    """
    for i, pattern in enumerate(IMPORTANT_VARIABLES):
        if fnmatch.fnmatchcase(name, pattern):
            return i
    return None


@dataclass
class Change:
    """One difference: ``kind`` is ``added`` (only in B), ``removed`` (only in A) or ``changed``."""

    key: str
    a: Any
    b: Any
    kind: str
    important: bool = False

    def to_dict(self) -> Dict[str, Any]:
        return {"key": self.key, "a": self.a, "b": self.b, "kind": self.kind, "important": self.important}


#: Sections of a diff, in the order they are shown.
SECTIONS = ("environment", "torch", "gpus", "system", "python", "packages", "system_packages", "editables", "git",
            "files", "tools")
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
    """What differs between two snapshots, section by section (see :data:`SECTIONS`)."""

    a: str
    b: str
    sections: Dict[str, List[Change]] = field(default_factory=dict)
    ignored: List[str] = field(default_factory=list)
    header: Dict[str, Dict[str, Any]] = field(default_factory=dict)

    @property
    def equal(self) -> bool:
        """True when no section has a difference (ignored variables do not count)."""
        return not any(self.sections.values())

    def to_dict(self) -> Dict[str, Any]:
        """A JSON-ready view: ``{"equal", "a", "b", "sections": {name: [change, ...]}, "ignored"}``."""
        return {"equal": self.equal, "a": self.a, "b": self.b, "runs": self.header,
                "sections": {k: [c.to_dict() for c in v] for k, v in self.sections.items() if v},
                "ignored": self.ignored}

    def format(self, width: int = 44) -> str:
        """A readable table; values longer than ``width`` are shortened in the middle (``width=0``: never)."""
        out = [f"{k.upper()}: {path}" + (f"  ({_describe_run(self.header.get(k, {}))})" if self.header.get(k) else "")
               for k, path in (("a", self.a), ("b", self.b))]
        if self.equal:
            out.append("no differences" + (f" ({len(self.ignored)} ignored variable(s) differ)" if self.ignored else ""))
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
                out.append(f"  {marks[c.kind]}{flag}{_short(c.key, key_w):<{key_w}}  {a:<{a_w}}  {b}".rstrip())
        if self.ignored:
            out.append("")
            out.append(f"({len(self.ignored)} variable(s) that differ in every run ignored: {', '.join(self.ignored)})")
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
    return text[: (keep + 1) // 2] + "…" + text[len(text) - keep // 2:]


def _compare_maps(a: Mapping[str, Any], b: Mapping[str, Any], important: Any = None) -> List[Change]:
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
        changes.append(Change(key, a.get(key), b.get(key), kind, bool(important and important(key))))
    return changes


def _read_lines(snapshot: Mapping[str, Any], name: str) -> Optional[List[str]]:
    if name not in snapshot.get("files", {}):
        return None
    try:
        return (Path(snapshot["_dir"]) / name).read_text(encoding="utf-8").splitlines()
    except OSError:
        return None


def _dpkg(snapshot: Mapping[str, Any]) -> Optional[Dict[str, str]]:
    lines = _read_lines(snapshot, "apt-packages.txt")
    if lines is None:
        return None
    out = {}
    for line in lines:
        parts = line.split("\t")
        if len(parts) >= 2 and parts[0]:
            out[parts[0] + (f":{parts[2]}" if len(parts) > 2 and parts[2] else "")] = parts[1]
    return out


def _flatten(prefix: str, value: Any) -> Dict[str, Any]:
    if isinstance(value, dict):
        out: Dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flatten(f"{prefix}.{k}" if prefix else str(k), v))
        return out
    return {prefix: value}


def diff_environments(a: Union[PathLike, Mapping[str, Any]], b: Union[PathLike, Mapping[str, Any]], *,
                      ignore: Iterable[str] = DEFAULT_IGNORED_VARIABLES) -> EnvDiff:
    """Compare two snapshots (directories, manifest paths, or loaded manifests).

    Environment variables that change performance or numerics (``LD_PRELOAD``,
    ``LD_LIBRARY_PATH``, ``CUDA_*``, ``NCCL_*``, ``OMP_*``, ``CUBLAS_WORKSPACE_CONFIG``,
    ``PYTHONHASHSEED``, ...; see :data:`IMPORTANT_VARIABLES`) come first, marked
    ``important``. Variables matching ``ignore`` (fnmatch patterns; by default those that
    differ in every run, such as ``SLURM_JOB_ID``) are listed in ``ignored`` and do not
    count. Secret values are redacted in snapshots, so a changed secret is not seen.

    >>> snap = {"format": SNAPSHOT_FORMAT, "version": SNAPSHOT_VERSION, "environment": {"OMP_NUM_THREADS": "4"}}
    >>> d = diff_environments(snap, dict(snap, environment={"OMP_NUM_THREADS": "8"}))
    >>> d.equal, d.sections["environment"][0].key
    (False, 'OMP_NUM_THREADS')
    """
    if isinstance(ignore, str):
        raise TypeError("ignore must be an iterable of variable-name patterns, not a single string; wrap it in a list")
    patterns = list(ignore)
    sa, sb = (_as_snapshot(x) for x in (a, b))
    result = EnvDiff(str(sa.get("_dir", "A")), str(sb.get("_dir", "B")),
                     header={"a": sa.get("run", {}), "b": sb.get("run", {})})

    def ignored(name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, p) for p in patterns)

    ea = {k: v for k, v in (sa.get("environment") or {}).items() if not ignored(k)}
    eb = {k: v for k, v in (sb.get("environment") or {}).items() if not ignored(k)}
    result.ignored = sorted(k for k in set(sa.get("environment") or {}) | set(sb.get("environment") or {})
                            if ignored(k) and (sa.get("environment") or {}).get(k) != (sb.get("environment") or {}).get(k))
    env_changes = _compare_maps(ea, eb, lambda k: important_variable(k) is not None)
    env_changes.sort(key=lambda c: (important_variable(c.key) if c.important else len(IMPORTANT_VARIABLES), c.key))
    result.sections["environment"] = env_changes

    ta, tb = dict(sa.get("torch") or {}), dict(sb.get("torch") or {})
    for t in (ta, tb):  # the build configuration itself is compared line by line under "files"
        t.pop("config", None)
        t.pop("config_sha256", None)
    result.sections["torch"] = _compare_maps(_flatten("", ta), _flatten("", tb),
                                             lambda k: not k.startswith("settings.num"))
    ga = {f"gpu{g.get('index')}": f"{g.get('name')} (driver {g.get('driver')}, {g.get('memory')})" for g in sa.get("gpus") or []}
    gb = {f"gpu{g.get('index')}": f"{g.get('name')} (driver {g.get('driver')}, {g.get('memory')})" for g in sb.get("gpus") or []}
    result.sections["gpus"] = _compare_maps(ga, gb, lambda k: True)
    result.sections["system"] = _compare_maps(sa.get("system") or {}, sb.get("system") or {},
                                              lambda k: k in ("cpu_model", "cpu_affinity", "libc"))
    pa = {k: v for k, v in (sa.get("python") or {}).items() if k in ("version", "implementation", "virtualenv")}
    pb = {k: v for k, v in (sb.get("python") or {}).items() if k in ("version", "implementation", "virtualenv")}
    result.sections["python"] = _compare_maps(pa, pb, lambda k: k == "version")
    result.sections["packages"] = _compare_maps(sa.get("packages") or {}, sb.get("packages") or {})
    da, db = _dpkg(sa), _dpkg(sb)
    result.sections["system_packages"] = _compare_maps(da, db) if da is not None and db is not None else []

    def editable_view(s: Mapping[str, Any]) -> Dict[str, Any]:
        out = {}
        for e in s.get("editables") or []:
            g = e.get("git") or {}
            fields = {"path": e.get("path"), "version": e.get("version"), "git": g.get("status"),
                      "commit": g.get("commit"), "dirty": g.get("dirty"), "diff_sha256": g.get("diff_sha256")}
            out.update({f"{e['name']}.{k}": v for k, v in fields.items()})
        return out

    result.sections["editables"] = _compare_maps(editable_view(sa), editable_view(sb),
                                                 lambda k: k.endswith((".commit", ".dirty", ".diff_sha256")))
    git_keys = ("status", "commit", "branch", "dirty", "diff_sha256", "untracked", "remotes")
    result.sections["git"] = _compare_maps({k: (sa.get("git") or {}).get(k) for k in git_keys},
                                           {k: (sb.get("git") or {}).get(k) for k in git_keys},
                                           lambda k: k in ("commit", "dirty", "diff_sha256"))
    files = []
    for name in ("modules.txt", "conda-list.txt", "torch-config.txt"):
        la, lb = _read_lines(sa, name), _read_lines(sb, name)
        if la is None or lb is None:
            continue
        only_a, only_b = sorted(set(la) - set(lb)), sorted(set(lb) - set(la))
        if only_a or only_b:
            files.append(Change(name, "; ".join(s.strip() for s in only_a) or None,
                                "; ".join(s.strip() for s in only_b) or None, "changed", name == "torch-config.txt"))
    result.sections["files"] = files
    result.sections["tools"] = _compare_maps({k: v.get("status") for k, v in (sa.get("tools") or {}).items()},
                                             {k: v.get("status") for k, v in (sb.get("tools") or {}).items()})
    return result


def _as_snapshot(x: Union[PathLike, Mapping[str, Any]]) -> Mapping[str, Any]:
    if isinstance(x, Mapping):
        if x.get("format") != SNAPSHOT_FORMAT:
            raise ValueError("not a seeder environment snapshot (a manifest dict needs format "
                             f"{SNAPSHOT_FORMAT!r}); pass a snapshot directory or load_snapshot()'s result")
        return x
    if isinstance(x, (str, os.PathLike)):
        return load_snapshot(x)
    raise TypeError(f"expected a snapshot directory, a manifest path or a loaded manifest, got {type(x).__name__}")
