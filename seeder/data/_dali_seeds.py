"""DALI seeds and saved checkpoints: what needs no pipeline object (tracking one
is :mod:`seeder.data.dali`).

Seeds come from the master seed in the ``Domain.DALI`` family, per global rank and
pipeline id, folded to the 32 bits DALI uses. Nothing here imports DALI.

Example (no DALI needed to compute seeds):
    >>> import seeder
    >>> s = seeder.Seeder(); s.init(42)
    >>> pipeline_kwargs(1, seeder=s)["seed"] == pipeline_seed(1, seeder=s)
    True
"""

from __future__ import annotations

import importlib
import logging
import sys
from typing import Any, Optional, Union

from seeder._checks import check_bool, is_bool, is_int
from seeder._errors import StateError
from seeder._seeding.core import Seeder
from seeder._seeding.default import resolve_seeder
from seeder._seeding.derive import Domain, check_key, numpy_seed
from seeder._state.format import GATHERED_FORMAT, own_entry

__all__ = [
    "INSTALL_HINT",
    "MAX_DALI_SEED",
    "require_dali",
    "pipeline_seed",
    "pipeline_kwargs",
    "saved_checkpoints",
    "pipeline_class",
    "check_entry",
    "STATE_KEYS",
    "SEEDER_KIND",
]

logger = logging.getLogger("seeder")

#: What to do when DALI is missing.
INSTALL_HINT = (
    "NVIDIA DALI is not installed. Install it with `pip install 'seeder[dali]'` (which installs "
    "nvidia-dali-cuda120), or pick the wheel for your CUDA major version: `pip install "
    "nvidia-dali-cuda120` or `pip install nvidia-dali-cuda130`. CPU-only pipelines "
    "(device_id=None) run without a GPU."
)

#: Largest seed :func:`pipeline_seed` returns. DALI's ``Pipeline(seed=...)`` takes a
#: non-negative int64 but uses only its low 32 bits (``seed=2**32`` gives the same
#: streams as ``seed=0``), so seeds are folded to 32 bits.
MAX_DALI_SEED = 2**32 - 1

#: ``seeder_kind`` of tracked pipelines: their entries are ``participants["dali.<n>"]``.
SEEDER_KIND = "dali"
#: Keys of one pipeline's entry in ``seeder.state_dict()["participants"]``.
STATE_KEYS = frozenset({"pipeline_id", "shared", "seed", "checkpointing", "checkpoints"})


def require_dali() -> Any:
    """Import and return ``nvidia.dali``, or raise ``ImportError`` saying how to install it.

    >>> require_dali().__name__  # doctest: +SKIP
    'nvidia.dali'
    """
    try:
        return importlib.import_module("nvidia.dali")
    except ImportError as exc:
        raise ImportError(f"{INSTALL_HINT} (import nvidia.dali failed: {exc})") from exc


def pipeline_class() -> Optional[type]:
    """DALI's ``Pipeline`` class if DALI is already imported, else ``None`` (never imports DALI)."""
    mod = sys.modules.get("nvidia.dali.pipeline")
    return getattr(mod, "Pipeline", None) if mod is not None else None


def pipeline_seed(
    pipeline_id: int = 0,
    *,
    shared: bool = False,
    task_id: int = 0,
    epoch: int = 0,
    seeder: Optional[Seeder] = None,
) -> int:
    """The seed for ``Pipeline(seed=...)`` / ``@pipeline_def(seed=...)`` of pipeline
    ``pipeline_id``.

    Derived from the master seed in ``Domain.DALI`` with ``stream = pipeline_id``
    and this process's global rank, so ranks get different streams and the same
    master seed gives the same ones. ``shared=True`` uses rank 0's seed on every
    rank (all ranks draw the same augmentation); give a shared and a per-rank
    pipeline different ids. ``task_id``/``epoch`` default to 0, a pipeline built
    once; pass them if you rebuild pipelines per epoch. Folded to 32 bits
    (:data:`MAX_DALI_SEED`) by :func:`seeder._seeding.derive.numpy_seed`, its two halves xor-ed.
    Needs ``seeder.init()`` first, but not DALI.

    >>> import seeder
    >>> s = seeder.Seeder(); s.init(7, rank=1, ngpus=2)
    >>> pipeline_seed(0, seeder=s) != pipeline_seed(0, shared=True, seeder=s)
    True
    """
    s = resolve_seeder(seeder)
    pid = check_key(pipeline_id, "pipeline_id")
    shared = check_bool(shared, "shared")
    if not s.initialized:
        raise RuntimeError(
            "seeder.data._dali_seeds.pipeline_seed() called before seeder.init(); call "
            "seeder.init(master_seed=...) first"
        )
    return numpy_seed(s.derive(Domain.DALI, task_id, epoch, rank=0 if shared else None, stream=pid))


def saved_checkpoints(
    state: dict[str, Any], pipeline_id: int = 0, *, seeder: Optional[Seeder] = None
) -> Optional[list[Union[bytes, str]]]:
    """The DALI checkpoints of pipeline ``pipeline_id`` in a saved ``seeder.state_dict()``, without
    loading it.

    ``state`` may also be the many-rank form of ``seeder.gather_state_dict()``: this
    rank's entry (rank of ``seeder``, default the module-level one) is used.

    Use it to build the pipeline with ``checkpoint=`` *before* ``seeder.load_state_dict``
    (which needs the pipeline tracked). A list with one checkpoint per pipeline of
    the iterator (one for a plain pipeline), or ``None`` if the pipeline was saved
    without checkpointing. Raises :class:`StateError` if the state holds no such pipeline.

    >>> saved_checkpoints({"format": "seeder", "participants": {}}, 0)
    Traceback (most recent call last):
    ...
    seeder._errors.StateError: the seeder state holds no DALI pipeline 0 (it has: none); track the pipeline with seeder.data.dali.track(pipe, 0) before saving
    """
    pid = check_key(pipeline_id, "pipeline_id")
    if isinstance(state, dict) and state.get("format") == GATHERED_FORMAT:
        s = resolve_seeder(seeder)
        state = own_entry(state, s.world_size, s.rank, False)[0]
    if (
        not isinstance(state, dict)
        or state.get("format") != "seeder"
        or not isinstance(state.get("participants"), dict)
    ):
        raise StateError(
            "not a seeder state: pass the dict returned by seeder.state_dict() (e.g. "
            "checkpoint['seeder'])"
        )
    found = []
    for key, entry in state["participants"].items():
        if isinstance(key, str) and key.startswith(SEEDER_KIND + "."):
            check_entry(entry, f"state['participants'][{key!r}]")
            found.append(entry["pipeline_id"])
            if entry["pipeline_id"] == pid:
                return None if entry["checkpoints"] is None else list(entry["checkpoints"])
    have = ", ".join(str(i) for i in found) or "none"
    raise StateError(
        f"the seeder state holds no DALI pipeline {pid} (it has: {have}); "
        f"track the pipeline with seeder.data.dali.track(pipe, {pid}) before saving"
    )


def pipeline_kwargs(
    pipeline_id: int = 0,
    *,
    shared: bool = False,
    state: Optional[dict[str, Any]] = None,
    seeder: Optional[Seeder] = None,
) -> dict[str, Any]:
    """Keyword arguments for a pipeline that the seeder seeds and can resume.

    ``seed`` from :func:`pipeline_seed`, ``enable_checkpointing=True`` and, when
    ``state`` (a saved ``seeder.state_dict()``) is given, ``checkpoint=`` this
    pipeline's saved checkpoint. Pass them to ``@pipeline_def`` functions or ``Pipeline``.

    >>> import seeder
    >>> s = seeder.Seeder(); s.init(3)
    >>> sorted(pipeline_kwargs(0, seeder=s))
    ['checkpoint', 'enable_checkpointing', 'seed']
    """
    seed = pipeline_seed(pipeline_id, shared=shared, seeder=seeder)
    checkpoint = None
    if state is not None:
        saved = saved_checkpoints(state, pipeline_id, seeder=seeder)
        if saved is not None:
            if len(saved) != 1:
                raise ValueError(
                    f"DALI pipeline {pipeline_id} was saved through an iterator over {len(saved)} "
                    f"pipelines; take checkpoint i from "
                    f"seeder.data._dali_seeds.saved_checkpoints(state, {pipeline_id})[i] for each"
                )
            checkpoint = saved[0]
    return {"seed": seed, "enable_checkpointing": True, "checkpoint": checkpoint}


def check_entry(state: Any, where: str) -> None:
    """Raise :class:`StateError` unless ``state`` is one well-formed pipeline entry."""
    if not isinstance(state, dict) or set(state) != STATE_KEYS:
        have = sorted(state) if isinstance(state, dict) else type(state).__name__
        raise StateError(
            f"{where} is not a DALI pipeline state (expected keys {sorted(STATE_KEYS)}, got {have})"
        )
    try:
        check_key(state["pipeline_id"], f"{where}['pipeline_id']")
    except (TypeError, ValueError) as exc:
        raise StateError(str(exc)) from None
    for name in ("shared", "checkpointing"):
        if not is_bool(state[name]):
            raise StateError(f"{where}[{name!r}] must be True or False")
    seed = state["seed"]
    if seed is not None and (not is_int(seed) or seed < 0):
        raise StateError(f"{where}['seed'] must be None or a non-negative int")
    cks = state["checkpoints"]
    if cks is not None:
        if not (
            isinstance(cks, list)
            and cks
            and all(isinstance(c, (bytes, str)) and len(c) > 0 for c in cks)
        ):
            raise StateError(
                f"{where}['checkpoints'] must be None or a non-empty list of DALI "
                f"checkpoints (bytes)"
            )
        if not state["checkpointing"]:
            raise StateError(f"{where} has checkpoints but says checkpointing was off")
