"""What this process runs on: Python, OS and CPU, torch and its GPUs, installed packages.

Reads only: nothing is written and no device is started. :mod:`seeder.env._capture`
stores these facts in a snapshot's ``manifest.json``.

Example:
    >>> python_info()["version"] == platform.python_version()
    True
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import sys
from typing import Any, Optional
from urllib.parse import unquote, urlparse

__all__ = ["python_info", "system_info", "torch_info", "installed_distributions"]


def python_info() -> dict[str, Any]:
    """This interpreter: version, implementation, executable, prefixes, and whether it runs in a
    virtualenv.

    >>> python_info()["implementation"] in ("CPython", "PyPy")
    True
    """
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


def system_info() -> dict[str, Any]:
    """The OS, kernel, libc, CPU model and count, the CPUs this process may use, and total memory.

    >>> system_info()["cpu_count"] == os.cpu_count()
    True
    """
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


def torch_info() -> tuple[Optional[dict[str, Any]], str]:
    """``(facts, build configuration text)`` of the installed torch, or ``(None, "")`` without
    torch.

    The facts are versions (torch, CUDA, HIP, cuDNN, NCCL), the number of GPUs (asked of NVML,
    which does not start CUDA; device names only when CUDA runs already) and the settings that
    change numerics (deterministic algorithms, cuDNN, TF32, threads).

    >>> info, config = torch_info()
    >>> info["version"] == __import__("torch").__version__ and "PyTorch built with" in config
    True
    """
    if importlib.util.find_spec("torch") is None:
        return None, ""
    import torch  # noqa: PLC0415 - optional, and slow to import

    info: dict[str, Any] = {
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
        info["cudnn"] = (
            torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        )
    except Exception:  # noqa: BLE001 - a broken cuDNN install is recorded as none
        pass
    try:
        nccl = torch.cuda.nccl.version()
        info["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    except Exception:  # noqa: BLE001 - CPU builds have no NCCL
        pass
    try:
        # device_count() asks NVML and leaves CUDA alone; is_available() would cuInit and poison
        # fork()
        info["device_count"] = torch.cuda.device_count()
        info["cuda_available"] = info["device_count"] > 0
        if (
            torch.cuda.is_initialized()
        ):  # names only where CUDA runs already: a snapshot must not start it
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


def installed_distributions() -> tuple[dict[str, str], list[dict[str, Any]]]:
    """``(name -> version [@ url], editable installs)`` of this interpreter; the first on
    ``sys.path`` wins, as in imports.

    Names are normalised (PEP 503). An editable install (``direct_url.json`` with
    ``dir_info.editable``) is listed with its ``path``, so its source can be diffed.

    >>> packages, editables = installed_distributions()
    >>> packages["numpy"] == __import__("numpy").__version__
    True
    """
    packages: dict[str, str] = {}
    editables: list[dict[str, Any]] = []
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
                editables.append(
                    {
                        "name": key,
                        "version": version,
                        "url": url,
                        "path": unquote(urlparse(url).path),
                    }
                )
        else:
            packages[key] = version
    return dict(sorted(packages.items())), editables
