"""DALI pipelines in the seeder: seeds at construction, one warning instead of a fake reseed,
resume by checkpoint.

A DALI pipeline takes its seed when it is built and cannot be reseeded after that. So seeder
gives each pipeline its seed at construction (:func:`pipeline_seed`: from the master seed in the
``Domain.DALI`` family, per global rank and pipeline id). At the first
:meth:`~seeder.Seeder.reseed` it warns once per pipeline instead of pretending to reseed it.
:meth:`~seeder.Seeder.state_dict` saves the pipeline's own checkpoint
(``enable_checkpointing=True``), so a resumed run rebuilds the pipeline with ``checkpoint=``
and continues its data and random streams exactly.

* Seeds and saved checkpoints need no pipeline: :func:`pipeline_seed`, :func:`pipeline_kwargs`,
  :func:`saved_checkpoints`.
* Tracking a pipeline: :func:`track` (or ``seeder.register_generator(pipe)``) returns a
  :class:`TrackedPipeline`; :func:`get_tracked` finds it again.

This module imports no DALI until a function that needs a pipeline is called, so
``import seeder`` works without DALI installed (:func:`require_dali` says how to install it).
Importing it adds a participant factory (:func:`seeder._seeding.participant.add_factory`), so
that ``register_generator(pipeline)`` and ``join(pipeline)`` track a pipeline; :mod:`seeder`
imports it together with the core.

Example (no DALI needed to compute seeds):
    >>> import seeder
    >>> from seeder.data.dali import MAX_DALI_SEED, pipeline_seed
    >>> s = seeder.Seeder(); s.init(42)
    >>> pipeline_seed(0, seeder=s) == pipeline_seed(0, seeder=s)  # same master seed, same seed
    True
    >>> pipeline_seed(0, seeder=s) != pipeline_seed(1, seeder=s)  # train, validation: differ
    True
    >>> 0 <= pipeline_seed(0, seeder=s) <= MAX_DALI_SEED
    True
"""

from __future__ import annotations

import importlib
import logging
import sys
import types
import warnings
from typing import TYPE_CHECKING, Any, Optional, Union

from seeder._checks import check_bool
from seeder._errors import SeederWarning, StateError
from seeder._internals import require
from seeder._seeding.core import Seeder
from seeder._seeding.default import resolve_seeder
from seeder._seeding.derive import Domain, check_key, numpy_seed
from seeder._seeding.participant import Participant, Seeds, add_factory
from seeder._state.format import GATHERED_FORMAT, own_entry
from seeder.data._dali_state import (
    SEEDER_KIND,
    check_entry,
    check_iterator,
    checkpointing_enabled,
    pipeline_count,
    pipeline_entry,
)

if TYPE_CHECKING:  # pragma: no cover
    from nvidia.dali import Pipeline

__all__ = [
    "MAX_DALI_SEED",
    "TrackedPipeline",
    "get_tracked",
    "pipeline_kwargs",
    "pipeline_seed",
    "require_dali",
    "saved_checkpoints",
    "track",
]

logger = logging.getLogger("seeder")

#: What to do when DALI is missing.
_INSTALL_HINT = (
    "NVIDIA DALI is not installed. Install it with `pip install 'seeder[dali]'` (which installs "
    "nvidia-dali-cuda120), or pick the wheel for your CUDA major version: `pip install "
    "nvidia-dali-cuda120` or `pip install nvidia-dali-cuda130`. CPU-only pipelines "
    "(device_id=None) run without a GPU."
)

#: Largest seed :func:`pipeline_seed` returns. DALI's ``Pipeline(seed=...)`` takes a
#: non-negative int64 but uses only its low 32 bits (``seed=2**32`` gives the same
#: streams as ``seed=0``), so seeds are folded to 32 bits.
MAX_DALI_SEED = 2**32 - 1


def require_dali() -> types.ModuleType:
    """Import and return ``nvidia.dali``, or raise ``ImportError`` saying how to install it.

    Returns:
        The ``nvidia.dali`` module.

    Raises:
        ImportError: DALI is not installed; the message names the wheels to install.

    Example:
        >>> require_dali().__name__
        'nvidia.dali'
    """
    try:
        return importlib.import_module("nvidia.dali")
    except ImportError as exc:
        raise ImportError(f"{_INSTALL_HINT} (import nvidia.dali failed: {exc})") from exc


def _pipeline_class() -> Optional[type[Pipeline]]:
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
    """The seed of pipeline ``pipeline_id``, for ``Pipeline(seed=...)`` or ``@pipeline_def``.

    Derived from the master seed in ``Domain.DALI`` with ``stream = pipeline_id`` and this
    process's global rank: ranks get different streams, and the same master seed gives the same
    ones. Folded to the 32 bits DALI uses (:data:`MAX_DALI_SEED`). Needs ``seeder.init()``
    first, but not DALI.

    Args:
        pipeline_id: the pipeline's id, unique per process (e.g. 0 for training, 1 for
            validation).
        shared: use rank 0's seed on every rank, so all ranks draw the same augmentation; give a
            shared and a per-rank pipeline different ids.
        task_id: the task of the derivation; 0 for a pipeline built once.
        epoch: the epoch of the derivation; pass it if you rebuild pipelines per epoch.
        seeder: the :class:`seeder.Seeder` to derive from; the default one if ``None``.

    Returns:
        An int in ``[0, MAX_DALI_SEED]``.

    Raises:
        RuntimeError: the seeder has no master seed yet (call ``seeder.init`` first).
        TypeError, ValueError: ``pipeline_id`` is not an int in ``[0, 2**32)``, or ``shared`` is
            not a bool.

    Example:
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
            "seeder.data.dali.pipeline_seed() called before seeder.init(); call "
            "seeder.init(master_seed=...) first"
        )
    return numpy_seed(s.derive(Domain.DALI, task_id, epoch, rank=0 if shared else None, stream=pid))


def saved_checkpoints(
    state: dict[str, Any], pipeline_id: int = 0, *, seeder: Optional[Seeder] = None
) -> Optional[list[Union[bytes, str]]]:
    """The DALI checkpoints of pipeline ``pipeline_id`` in a saved ``seeder.state_dict()``, without
    loading it.

    Use it to build the pipeline with ``checkpoint=`` *before* ``seeder.load_state_dict`` (which
    needs the pipeline tracked).

    Args:
        state: a saved ``seeder.state_dict()``, or the many-rank form of
            ``seeder.gather_state_dict()`` (then this rank's entry is read).
        pipeline_id: the id the pipeline was tracked with.
        seeder: gives this rank for a many-rank state; the default one if ``None``.

    Returns:
        One checkpoint per pipeline of the iterator (one for a plain pipeline), or ``None`` if the
        pipeline was saved without checkpointing.

    Raises:
        StateError: ``state`` is not a seeder state, holds no such pipeline, or its entry is
            malformed.

    Example:
        >>> saved_checkpoints({"format": "seeder", "participants": {}}, 0)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        seeder.StateError: the seeder state holds no DALI pipeline 0 (it has: none); ...
    """
    pid = check_key(pipeline_id, "pipeline_id")
    if isinstance(state, dict) and state.get("format") == GATHERED_FORMAT:
        s = resolve_seeder(seeder)
        state = own_entry(state, s.world_size, s.rank, False)[0]
    entry = pipeline_entry(state, pid)
    return None if entry["checkpoints"] is None else list(entry["checkpoints"])


def pipeline_kwargs(
    pipeline_id: int = 0,
    *,
    shared: bool = False,
    state: Optional[dict[str, Any]] = None,
    seeder: Optional[Seeder] = None,
) -> dict[str, Any]:
    """Keyword arguments for a pipeline that the seeder seeds and can resume.

    Pass them to a ``@pipeline_def`` function or to ``Pipeline``.

    Args:
        pipeline_id: the pipeline's id (see :func:`pipeline_seed`).
        shared: the same seed on every rank (see :func:`pipeline_seed`).
        state: a saved ``seeder.state_dict()`` to resume from; ``None`` starts fresh.
        seeder: the :class:`seeder.Seeder` to derive from; the default one if ``None``.

    Returns:
        ``{"seed": pipeline_seed(...), "enable_checkpointing": True, "checkpoint": ...}``, the
        checkpoint being the pipeline's saved one in ``state`` (``None`` without a state).

    Raises:
        ValueError: the pipeline was saved through an iterator over several pipelines (take each
            checkpoint from :func:`saved_checkpoints`).
        StateError: ``state`` holds no such pipeline (see :func:`saved_checkpoints`).
        RuntimeError: the seeder has no master seed yet.

    Example:
        >>> import seeder
        >>> s = seeder.Seeder(); s.init(3)
        >>> kwargs = pipeline_kwargs(0, seeder=s)
        >>> kwargs["seed"] == pipeline_seed(0, seeder=s), kwargs["enable_checkpointing"]
        (True, True)
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
                    f"seeder.data.dali.saved_checkpoints(state, {pipeline_id})[i] for each"
                )
            checkpoint = saved[0]
    return {"seed": seed, "enable_checkpointing": True, "checkpoint": checkpoint}


class TrackedPipeline(Participant):
    """A DALI pipeline (and optionally the DALI iterator over it) known to a seeder.

    Made by :func:`track` or by ``seeder.register_generator(pipe)``. At the first reseed after it
    becomes a participant it warns once (DALI cannot be reseeded after build); ``state_dict()``
    holds its DALI checkpoint(s); after ``seeder.load_state_dict``, :attr:`checkpoint` and
    :attr:`restored_checkpoints` hold the loaded ones for rebuilding with ``checkpoint=`` (then
    :meth:`replace` the old pipeline).

    Args:
        pipeline: the ``nvidia.dali.Pipeline``.
        pipeline_id: the id its seed came from (:func:`pipeline_seed`).
        iterator: the DALI framework iterator that runs it, or ``None``.
        shared: the pipeline has the seed shared by all ranks.

    Example:
        >>> import seeder
        >>> from nvidia.dali import pipeline_def, fn
        >>> @pipeline_def(batch_size=2, num_threads=1, device_id=None)
        ... def noise(): return fn.random.uniform(range=(0, 1))
        >>> seeder.init(42)
        >>> tracked = track(noise(**pipeline_kwargs(0)), 0)
        >>> state = seeder.state_dict()
        >>> seeder.load_state_dict(state)
        >>> pipe = noise(**pipeline_kwargs(0, state=state))
        >>> tracked.replace(pipe)
        >>> tracked.pipeline is pipe
        True
    """

    seeder_kind = SEEDER_KIND

    def __init__(
        self, pipeline: Pipeline, pipeline_id: int, *, iterator: Any = None, shared: bool = False
    ):
        self.pipeline_id = pipeline_id
        self.shared = shared
        self.restored_checkpoints: Optional[list[Union[bytes, str]]] = None
        self._pending_restore = (
            False  # a checkpoint was loaded; check that the pipeline was built from it
        )
        self._set(pipeline, iterator)

    def _set(self, pipeline: Any, iterator: Any) -> None:
        self.pipeline = pipeline
        self.iterator = iterator
        self.seeder_target = (
            pipeline  # lets seeder.unregister_generator(pipeline) find this participant
        )
        self._warned_reseed = False
        self._warned_no_checkpointing = False

    @property
    def checkpointing(self) -> bool:
        """Whether the pipeline was built with ``enable_checkpointing=True``.

        Example:
            >>> get_tracked(0).checkpointing
            True
        """
        return checkpointing_enabled(self.pipeline)

    @property
    def checkpoint(self) -> Optional[Union[bytes, str]]:
        """The checkpoint loaded by ``seeder.load_state_dict`` (for ``checkpoint=``), or ``None``.

        Raises:
            ValueError: the pipeline was saved through an iterator over several pipelines (read
                :attr:`restored_checkpoints` instead).

        Example:
            >>> seeder.load_state_dict(state)
            >>> loaded = get_tracked(0).checkpoint  # pipeline_kwargs(0, state=state) passes it
            >>> pipe = noise(**{**pipeline_kwargs(0), "checkpoint": loaded})
        """
        cks = self.restored_checkpoints
        if cks is None:
            return None
        if len(cks) != 1:
            raise ValueError(
                f"DALI pipeline {self.pipeline_id} was saved through an iterator over {len(cks)} "
                "pipelines; use restored_checkpoints[i] for pipeline i"
            )
        return cks[0]

    def replace(self, pipeline: Pipeline, iterator: Any = None) -> None:
        """Track ``pipeline`` (rebuilt with ``checkpoint=``) in the old one's place.

        Args:
            pipeline: the rebuilt ``nvidia.dali.Pipeline``.
            iterator: the DALI framework iterator that runs it, or ``None``.

        Raises:
            TypeError: ``pipeline`` is not a DALI pipeline, or ``iterator`` not a DALI iterator.

        Example:
            >>> seeder.load_state_dict(state)
            >>> tracked = get_tracked(0)
            >>> tracked.replace(noise(**pipeline_kwargs(0, state=state)))
        """
        _check_pipeline(pipeline)
        check_iterator(iterator)
        self._set(pipeline, iterator)

    # --------------------------------------------------------------- protocol
    def seeder_reseed(self, seeder: Seeds, task_id: int, epoch: int) -> None:
        """Participant hook of ``seeder.reseed``: warns once that a built pipeline is not reseeded.

        Also warns once if a loaded checkpoint was not used to build the pipeline.

        Args:
            seeder: the seeder that reseeds.
            task_id: the reseed's task.
            epoch: the reseed's epoch.

        Example:
            >>> seeder.reseed(1, 0)
            ... # SeederWarning: DALI pipeline 0 (seed ...) cannot be reseeded after it is built
        """
        self._check_restored()
        if self._warned_reseed:
            return
        self._warned_reseed = True
        if self.checkpointing:
            how = (
                f"rebuild it with checkpoint=seeder.data.dali.saved_checkpoints(state, "
                f"{self.pipeline_id})[0]"
            )
        else:
            how = "build it with enable_checkpointing=True (seeder.data.dali.pipeline_kwargs())"
        warnings.warn(
            f"DALI pipeline {self.pipeline_id} (seed {self.pipeline.seed}) cannot be reseeded "
            f"after it is built: seeder.reseed({task_id}, {epoch}) leaves its random operators and "
            f"readers running on from their own state. To resume it exactly, {how} "
            f"(see docs/dali.md#the-reseed-warning)",
            SeederWarning,
            stacklevel=3,
        )

    def state_dict(self) -> dict[str, Any]:
        """This pipeline's entry in ``seeder.state_dict()["participants"]``.

        Warns once if the pipeline saves no checkpoints (built without ``enable_checkpointing``).

        Returns:
            ``{"pipeline_id", "shared", "seed", "checkpointing", "checkpoints"}``;
            ``checkpoints`` is one DALI checkpoint per pipeline of the iterator, or ``None``.

        Example:
            >>> sorted(get_tracked(0).state_dict())
            ['checkpointing', 'checkpoints', 'pipeline_id', 'seed', 'shared']
        """
        self._check_restored()
        checkpoints = None
        if self.checkpointing:
            raw = (
                self.iterator.checkpoints()
                if self.iterator is not None
                else [self.pipeline.checkpoint()]
            )
            checkpoints = list(raw)
        elif not self._warned_no_checkpointing:
            self._warned_no_checkpointing = True
            warnings.warn(
                f"DALI pipeline {self.pipeline_id} was built without enable_checkpointing=True: "
                f"seeder.state_dict() cannot save its position, and a resumed run restarts its "
                f"data and random streams from the start instead of continuing them. Build it with "
                f"enable_checkpointing=True (seeder.data.dali.pipeline_kwargs()).",
                SeederWarning,
                stacklevel=3,
            )
        seed = self.pipeline.seed
        return {
            "pipeline_id": self.pipeline_id,
            "shared": self.shared,
            "seed": None if seed is None else int(seed),
            "checkpointing": checkpoints is not None,
            "checkpoints": checkpoints,
        }

    def check_state_dict(self, state: Any) -> None:
        """Raise :class:`seeder.StateError` if ``state`` does not fit this pipeline; change nothing.

        Args:
            state: an entry that :meth:`state_dict` returned.

        Raises:
            StateError: the entry is malformed, or has another id, ``shared`` or number of
                pipelines.

        Example:
            >>> get_tracked(0).check_state_dict({})
            Traceback (most recent call last):
            ...
            seeder.StateError: the state of DALI pipeline 0 is not a DALI pipeline state ...
        """
        where = f"the state of DALI pipeline {self.pipeline_id}"
        check_entry(state, where)
        if state["pipeline_id"] != self.pipeline_id:
            raise StateError(
                f"the checkpoint has DALI pipeline {state['pipeline_id']} where this process "
                f"tracks pipeline {self.pipeline_id}; track the same pipelines with the same ids "
                f"in the same order before load_state_dict"
            )
        if state["shared"] != self.shared:
            raise StateError(
                f"DALI pipeline {self.pipeline_id} was saved with shared={state['shared']} but is "
                f"tracked with shared={self.shared}; track it as it was saved"
            )
        cks = state["checkpoints"]
        n = pipeline_count(self.iterator)
        if cks is not None and len(cks) != n:
            raise StateError(
                f"DALI pipeline {self.pipeline_id} was saved with {len(cks)} checkpoint(s) but is "
                f"tracked with {n} pipeline(s); track it with the same iterator layout"
            )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Keep the loaded checkpoints for rebuilding the pipeline (DALI restores only at build).

        Args:
            state: an entry that :meth:`check_state_dict` accepted.

        Example:
            >>> seeder.load_state_dict(state)
            >>> get_tracked(0).checkpoint is not None
            True
        """
        self.restored_checkpoints = (
            None if state["checkpoints"] is None else list(state["checkpoints"])
        )
        self._pending_restore = self.restored_checkpoints is not None
        if self._pending_restore:
            logger.info(
                "DALI pipeline %d: checkpoint loaded; the pipeline must be built with checkpoint= "
                "to continue",
                self.pipeline_id,
            )

    def _check_restored(self) -> None:
        """Warn once if a loaded checkpoint was not used to build the tracked pipeline."""
        if not self._pending_restore:
            return
        self._pending_restore = False
        pipe = self.pipeline
        pipe.build()  # idempotent; the restore happens at build
        if pipe.is_restored_from_checkpoint and not require(
            "nvidia-dali:Pipeline._checkpoint", pipe
        ):
            return  # restored, from which checkpoint seeder cannot tell: require() warned
        restored = self.restored_checkpoints or []  # set whenever a restore is pending
        if pipe.is_restored_from_checkpoint and pipe._checkpoint in restored:
            return
        what = (
            "from a different checkpoint"
            if pipe.is_restored_from_checkpoint
            else "without the checkpoint"
        )
        warnings.warn(
            f"DALI pipeline {self.pipeline_id} was built {what} loaded by "
            f"seeder.load_state_dict(), so it does not continue the saved run. Build it with "
            f"checkpoint=seeder.data.dali.saved_checkpoints(state, {self.pipeline_id})[0], or "
            f"with checkpoint=tracked.checkpoint and then call tracked.replace(new_pipeline) "
            f"(see docs/dali.md#a-pipeline-not-rebuilt-from-the-loaded-checkpoint)",
            SeederWarning,
            stacklevel=4,
        )

    def __repr__(self) -> str:
        return (
            f"TrackedPipeline(id={self.pipeline_id}, seed={self.pipeline.seed}, "
            f"shared={self.shared}, checkpointing={self.checkpointing}, "
            f"iterator={self.iterator is not None})"
        )


def _check_pipeline(pipeline: Any) -> None:
    dali = require_dali()
    if not isinstance(pipeline, dali.Pipeline):
        raise TypeError(
            f"expected an nvidia.dali.Pipeline (what a @pipeline_def function returns), "
            f"got {type(pipeline).__name__}"
        )
    require("nvidia-dali:Pipeline._enable_checkpointing", pipeline)


def _tracked(s: Seeder) -> list[TrackedPipeline]:
    return [p for p in s.participants() if isinstance(p, TrackedPipeline)]


def get_tracked(pipeline_id: int = 0, *, seeder: Optional[Seeder] = None) -> TrackedPipeline:
    """The :class:`TrackedPipeline` with this id, e.g. to read its loaded checkpoint.

    Args:
        pipeline_id: the id the pipeline was tracked with.
        seeder: the :class:`seeder.Seeder` it was tracked by; the default one if ``None``.

    Returns:
        The tracked pipeline.

    Raises:
        ValueError: no pipeline with this id is tracked.

    Example:
        >>> import seeder
        >>> get_tracked(0, seeder=seeder.Seeder())  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: no DALI pipeline 0 is tracked (tracked: none); call ...
    """
    s = resolve_seeder(seeder)
    pid = check_key(pipeline_id, "pipeline_id")
    tracked = _tracked(s)
    for t in tracked:
        if t.pipeline_id == pid:
            return t
    have = ", ".join(str(t.pipeline_id) for t in tracked) or "none"
    raise ValueError(
        f"no DALI pipeline {pid} is tracked (tracked: {have}); call seeder.data.dali.track(pipe, "
        f"{pid}) first"
    )


def _warn_foreign_seed(s: Seeder, pipeline: Any, pid: int, shared: bool, stacklevel: int) -> None:
    if not s.initialized:
        return
    want = pipeline_seed(pid, shared=shared, seeder=s)
    if pipeline.seed is None:
        msg = "without a seed, so DALI draws one and every run differs"
    elif pipeline.seed != want:
        msg = f"with seed {pipeline.seed}, so its randomness does not follow the master seed"
    else:
        return
    warnings.warn(
        f"DALI pipeline {pid} was built {msg}; build it with "
        f"seed=seeder.data.dali.pipeline_seed({pid}{', shared=True' if shared else ''}) (= "
        f"{want}).",
        SeederWarning,
        stacklevel=stacklevel,
    )


def track(
    pipeline: Pipeline,
    pipeline_id: int = 0,
    *,
    iterator: Any = None,
    shared: bool = False,
    seeder: Optional[Seeder] = None,
) -> TrackedPipeline:
    """Make ``pipeline`` known to the seeder: one warning at the first reseed, its checkpoint in
    ``state_dict()``.

    Warns (:class:`seeder.SeederWarning`) if the pipeline's seed is not the one the seeder
    derives. ``seeder.unregister_generator(pipeline)`` removes it again.

    Args:
        pipeline: a built or unbuilt ``nvidia.dali.Pipeline``.
        pipeline_id: the id its seed came from (:func:`pipeline_seed`); unique per process.
        iterator: the DALI PyTorch iterator that runs it, if any, so that the saved checkpoint
            holds the iterator's position (``iterator.checkpoints()``).
        shared: the pipeline was built with the shared seed (``pipeline_seed(..., shared=True)``).
        seeder: the :class:`seeder.Seeder` to join; the default one if ``None``.

    Returns:
        The :class:`TrackedPipeline` participant.

    Raises:
        ImportError: DALI is not installed.
        TypeError: ``pipeline`` is not a DALI pipeline, or ``iterator`` not a DALI iterator.
        ValueError: the pipeline, or its id, is already tracked.

    Example:
        >>> import seeder
        >>> from nvidia.dali import pipeline_def, fn
        >>> @pipeline_def(batch_size=2, num_threads=1, device_id=None)
        ... def noise(): return fn.random.uniform(range=(0, 1))
        >>> seeder.init(42)
        >>> pipe = noise(**pipeline_kwargs(0))
        >>> track(pipe, 0)
        TrackedPipeline(id=0, seed=787803391, shared=False, checkpointing=True, iterator=False)
    """
    _check_pipeline(pipeline)
    check_iterator(iterator)
    s = resolve_seeder(seeder)
    pid = check_key(pipeline_id, "pipeline_id")
    shared = check_bool(shared, "shared")
    for t in _tracked(s):
        if t.pipeline is pipeline:
            raise ValueError(
                f"this pipeline is already tracked as DALI pipeline {t.pipeline_id}; track it once"
            )
        if t.pipeline_id == pid:
            raise ValueError(
                f"DALI pipeline id {pid} is already tracked; give each pipeline of a process its "
                f"own id (e.g. 0 for training, 1 for validation), or call "
                f"get_tracked({pid}).replace(new_pipeline) for a pipeline rebuilt from a checkpoint"
            )
    _warn_foreign_seed(s, pipeline, pid, shared, stacklevel=4)
    participant = TrackedPipeline(pipeline, pid, iterator=iterator, shared=shared)
    s.join(participant, weak=False)
    return participant


def _participant_for(obj: Any, seeder: Seeder, shared: bool = False) -> Optional[TrackedPipeline]:
    """Turn a DALI pipeline handed to ``seeder.register_generator`` into a :class:`TrackedPipeline`.

    The id is the one whose :func:`pipeline_seed` the pipeline was built with, else the smallest
    free id.
    """
    cls = _pipeline_class()
    if cls is None or not isinstance(obj, cls):
        return None
    used = {t.pipeline_id for t in _tracked(seeder)}
    pid = None
    if seeder.initialized and obj.seed is not None:
        for candidate in range(64):
            if (
                candidate not in used
                and pipeline_seed(candidate, shared=shared, seeder=seeder) == obj.seed
            ):
                pid = candidate
                break
    if pid is None:
        pid = next(i for i in range(len(used) + 1) if i not in used)
    _warn_foreign_seed(seeder, obj, pid, shared, stacklevel=6)
    return TrackedPipeline(obj, pid, shared=shared)


add_factory(
    _participant_for
)  # a DALI pipeline handed to register_generator or join becomes a TrackedPipeline
