"""Deterministic mode and the process-level seeds: part of the core (``init(deterministic=True)``),
public as ``seeder.env.enforce_determinism`` and ``seeder.env.python_hash_seed``.

:func:`enforce_determinism` switches torch to deterministic algorithms and
checks what only the launcher can set (``PYTHONHASHSEED``,
``CUBLAS_WORKSPACE_CONFIG`` before CUDA starts). :func:`python_hash_seed` is
how ``seeder run`` turns a master seed into ``PYTHONHASHSEED``.

Example:
    >>> seed = enforce_reproducibility(1234)
    >>> seed
    1234
    >>> 0 <= python_hash_seed(1234) <= 4294967295
    True
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import sys
import warnings
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import Optional

from seeder._checks import check_bool
from seeder._errors import SeederWarning
from seeder._seeding.derive import MAX_KEY, Domain, check_master_seed, derive_seed, numpy_seed

__all__ = [
    "enforce_reproducibility",
    "enforce_determinism",
    "DeterminismReport",
    "python_hash_seed",
    "CUBLAS_WORKSPACE_DEFAULT",
    "HASH_SEED_TASK",
]

logger = logging.getLogger("seeder")

#: The value set for ``CUBLAS_WORKSPACE_CONFIG`` when it is missing (PyTorch's
#: recommended setting for deterministic cuBLAS; ``:16:8`` uses less memory).
CUBLAS_WORKSPACE_DEFAULT = ":4096:8"
#: Task id reserved (in the SHARED domain) for the ``PYTHONHASHSEED`` derivation.
HASH_SEED_TASK = MAX_KEY

_CUBLAS_RE = re.compile(r"^(:\d+:\d+)+$")
_HOROVOD_MARKERS = ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK")


def enforce_reproducibility(use_seed: Optional[int] = None) -> int:
    """Seed ``random``, NumPy and torch (CPU and all devices) with one seed and return it.

    The common ``enforce_reproducibility`` recipe. Unlike :func:`seeder.reseed` the seed is used
    as given, not derived.

    Args:
        use_seed: the seed. ``None`` draws one from OS entropy, logs it ("Using seed: N") and
            leaves cuDNN fast; a seed also makes cuDNN deterministic (``deterministic=True``,
            ``benchmark=False``), which can be slower.

    Returns:
        The seed used.

    Raises:
        TypeError, ValueError: ``use_seed`` is not a master seed (an int in ``[0, 2**64)``).

    Example:
        >>> enforce_reproducibility(7)
        7
    """
    import torch  # here, not at import: `seeder run` imports this module and should stay light

    from seeder._seeding.rngs import global_adapters

    seed = (
        check_master_seed(use_seed, "use_seed")
        if use_seed is not None
        else 1 + secrets.randbelow(1_000_000)
    )
    logger.info("Using seed: %d", seed)
    # random, NumPy (the seed folded to 32 bits), torch CPU, every accelerator
    for adapter in global_adapters():
        adapter.seed(seed)
    if use_seed is not None:
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    return seed


def python_hash_seed(master_seed: int) -> int:
    """The ``PYTHONHASHSEED`` that ``seeder run`` sets for a master seed, in ``[0, 2**32 - 1]``.

    Defined as ``numpy_seed(derive_seed(master_seed, Domain.SHARED, task_id=2**32 - 1,
    epoch=0, rank=0, stream=0))``: the shared-domain seed of the reserved task id
    ``2**32 - 1``, its two 32-bit halves xor-ed. Equal on every rank and node.

    Args:
        master_seed: the run's master seed.

    Returns:
        The value for ``PYTHONHASHSEED``.

    Raises:
        TypeError, ValueError: ``master_seed`` is not a master seed (an int in ``[0, 2**64)``).

    Example:
        >>> python_hash_seed(42) == python_hash_seed(42)
        True
    """
    return numpy_seed(
        derive_seed(check_master_seed(master_seed), Domain.SHARED, HASH_SEED_TASK, 0, 0, 0)
    )


@dataclass
class DeterminismReport:
    """What :func:`enforce_determinism` did.

    Attributes:
        applied: settings made (or found already right).
        failed: settings it could not make, each with the reason.
        advice: what to change outside this process (the launcher, the job script).

    Example:
        >>> report = DeterminismReport(applied=["cudnn"], advice=["set PYTHONHASHSEED"])
        >>> report.ok
        False
        >>> print(report)
        deterministic mode:
          set: cudnn
          advice: set PYTHONHASHSEED
    """

    applied: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    advice: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every setting was made and there is no advice."""
        return not self.failed and not self.advice

    def __str__(self) -> str:
        lines = ["deterministic mode:"]
        lines += [f"  set: {a}" for a in self.applied]
        lines += [f"  NOT set: {f}" for f in self.failed]
        lines += [f"  advice: {a}" for a in self.advice]
        return "\n".join(lines)


def _horovod_in_use(environ: MutableMapping[str, str]) -> bool:
    return "horovod" in sys.modules or any(environ.get(name) for name in _HOROVOD_MARKERS)


def _horovod_initialized() -> bool:
    for name in ("horovod.torch", "horovod.tensorflow", "horovod.common.basics"):
        mod = sys.modules.get(name)
        check = getattr(mod, "is_initialized", None)
        if callable(check):
            try:
                if check():
                    return True
            except Exception:  # an unusable horovod build: treat as not initialised
                pass
    return False


def enforce_determinism(
    warn_only: bool = False, *, horovod: Optional[bool] = None
) -> DeterminismReport:
    """Make this process use deterministic algorithms, and report what could not be made so.

    Sets ``torch.use_deterministic_algorithms(True, warn_only=warn_only)`` (an op
    without a deterministic implementation then raises, or only warns with
    ``warn_only=True``), cuDNN ``deterministic=True`` and ``benchmark=False``, and
    ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` when it is missing. cuBLAS reads that variable
    once: if CUDA is already initialised it may be too late, which warns
    (:class:`SeederWarning`) and lands in ``report.failed``. ``PYTHONHASHSEED`` only
    works when set before the interpreter starts, so it is checked, never set:
    unset or ``random`` gives advice (use ``seeder run``). With Horovod
    (``horovod=None`` detects it from ``sys.modules`` and ``HOROVOD_RANK``/``HOROVOD_SIZE``),
    ``HOROVOD_FUSION_THRESHOLD=0`` is set, which must happen before ``hvd.init()``.

    The report is also logged (logger ``"seeder"``). Undo with
    ``torch.use_deterministic_algorithms(False)``.

    Args:
        warn_only: an op without a deterministic implementation only warns instead of raising.
        horovod: set Horovod's fusion threshold; ``None`` detects Horovod.

    Returns:
        What was set, what could not be, and advice for the launcher.

    Raises:
        TypeError: ``warn_only`` or ``horovod`` is not a bool.

    Example:
        >>> import torch
        >>> report = enforce_determinism()
        >>> torch.are_deterministic_algorithms_enabled()
        True
        >>> torch.use_deterministic_algorithms(False)
    """
    import torch

    check_bool(warn_only, "warn_only")
    if horovod is not None:
        check_bool(horovod, "horovod (or None: detect)")
    env = os.environ
    report = DeterminismReport()

    torch.use_deterministic_algorithms(True, warn_only=warn_only)
    report.applied.append(f"torch.use_deterministic_algorithms(True, warn_only={warn_only})")
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    report.applied.append("torch.backends.cudnn.deterministic=True, benchmark=False")

    _check_cublas(env, report)
    _check_hash_seed(env, report)
    if horovod if horovod is not None else _horovod_in_use(env):
        _set_horovod(env, report)

    _log(report)
    return report


def _check_cublas(env: MutableMapping[str, str], report: DeterminismReport) -> None:
    import torch

    name = "CUBLAS_WORKSPACE_CONFIG"
    current = env.get(name, "")
    cuda_started = torch.cuda.is_initialized()  # not is_available(): that would probe the driver
    if current:
        if _CUBLAS_RE.match(current):
            report.applied.append(f"{name}={current} (already set)")
        else:
            report.advice.append(
                f"{name}={current!r} is not a workspace configuration cuBLAS can use "
                f"deterministically; set {name}={CUBLAS_WORKSPACE_DEFAULT} (or :16:8) before "
                f"starting Python"
            )
        return
    env[name] = CUBLAS_WORKSPACE_DEFAULT
    if cuda_started:
        msg = (
            f"{name}={CUBLAS_WORKSPACE_DEFAULT} was set, but CUDA is already initialised in this "
            f"process and cuBLAS may have read its workspace configuration already, so it may have "
            f"no effect here; set it before starting Python (`seeder run -- ...` does) or call "
            f"enforce_determinism() before any CUDA use"
        )
        report.failed.append(msg)
        report.advice.append(
            f"export {name}={CUBLAS_WORKSPACE_DEFAULT} in the job script, or launch with "
            f"`seeder run`"
        )
    else:
        report.applied.append(f"{name}={CUBLAS_WORKSPACE_DEFAULT} (was unset)")


def _check_hash_seed(env: MutableMapping[str, str], report: DeterminismReport) -> None:
    value = env.get("PYTHONHASHSEED")
    how = (
        "start the process with `seeder run --seed N -- ...` (which sets it from the master seed) "
        "or `PYTHONHASHSEED=<0..4294967295> python ...`; setting it inside a running interpreter "
        "has no effect"
    )
    if value is None or value == "":
        report.advice.append(
            f"PYTHONHASHSEED is unset: hash() of str/bytes, and so set iteration order, differ "
            f"between runs; {how}"
        )
    elif value == "random":
        report.advice.append(
            f"PYTHONHASHSEED=random: hash() of str/bytes differs between runs; {how}"
        )
    elif not (value.isdigit() and int(value) <= 4294967295):
        report.advice.append(
            f"PYTHONHASHSEED={value!r} is not an integer in [0, 4294967295]; {how}"
        )
    else:
        report.applied.append(
            f"PYTHONHASHSEED={value} (checked; it takes effect only at interpreter start)"
        )


def _set_horovod(env: MutableMapping[str, str], report: DeterminismReport) -> None:
    name = "HOROVOD_FUSION_THRESHOLD"
    if env.get(name) == "0":
        report.applied.append(f"{name}=0 (already set)")
        return
    env[name] = "0"
    if _horovod_initialized():
        report.failed.append(
            f"{name}=0 was set after hvd.init(), so Horovod still fuses tensors in this process; "
            "set it in the job script or call enforce_determinism() before hvd.init()"
        )
    else:
        report.applied.append(f"{name}=0 (Horovod tensor fusion off)")


def _log(report: DeterminismReport) -> None:
    for item in report.applied:
        logger.info("deterministic mode: set %s", item)
    for item in report.failed:
        warnings.warn(f"deterministic mode: {item}", SeederWarning, stacklevel=3)
    for item in report.advice:
        logger.warning("deterministic mode: %s", item)
