"""Hugging Face Accelerate: a prepared :class:`seeder.DataLoader` keeps seeder's order, position and
state.

``Accelerator.prepare`` rebuilds a torch DataLoader it is given: a new torch
DataLoader around the old one's batch sampler, sharded once more across
processes, whose ``set_epoch`` follows accelerate's own iteration counter. A
:class:`seeder.DataLoader` is already sharded by global rank and counts the
batches it yields: it carries accelerate's mark of a prepared loader, so a plain
``Accelerator`` returns it as it is (no device placement, no epoch end in accelerate's
gradient state, no seeder state in its checkpoints: :func:`save_checkpoint_state` and
:func:`load_checkpoint_state` add it). :class:`SeederAccelerator` (an ``Accelerator``
with the same arguments) does all three: it keeps the loader itself and wraps it in
a :class:`PreparedLoader` that only moves batches to the device and tells
accelerate's gradient state where the epoch ends. Its ``save_state`` writes the
seeder state of every rank into the checkpoint folder
(``seeder_state_<rank>.pt``, loadable with ``torch.load(weights_only=True)``), and
its ``load_state`` validates that file before accelerate changes anything, then,
after accelerate's own load, restores it: the RNGs, the registered generators and
the loader's position. With elastic loaders (``seeder.ElasticDataLoader``) a
checkpoint saved on ``W`` processes loads on ``W'``: every rank reads rank 0's file
(the loaders' state is global), the data continues exactly and each rank's RNG
streams are re-derived (docs/elastic.md).

A custom loop, resumed in the middle of an epoch::

    accelerator = SeederAccelerator(cpu=True)
    seeder.init(master_seed=42)
    seeder.reseed(0, 0)
    model = build_model()
    loader = seeder.DataLoader(dataset, batch_size=8, shuffle=True, num_workers=2)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    accelerator.load_state("ckpt")  # on resume: position, RNGs, weights
    for epoch in range(seeder.default_seeder().last_reseed[1], epochs):
        seeder.reseed(1, epoch)  # skipped for the resumed epoch
        for batch in loader: ...  # only the batches not yet seen

Importing this module imports accelerate; ``import seeder`` does not.
"""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Callable, Iterator, Sized
from typing import Any, Optional, Union, cast

import torch
from accelerate import Accelerator
from accelerate.data_loader import DataLoaderStateMixin
from accelerate.state import GradientState
from accelerate.utils import send_to_device

from seeder._atomic import write_atomic
from seeder._errors import StateError
from seeder._internals import require
from seeder._seeding.core import Seeder
from seeder._seeding.default import resolve_seeder
from seeder._seeding.distributed import process_group_active
from seeder.data._seederloader import SeederLoader

__all__ = [
    "SeederAccelerator",
    "PreparedLoader",
    "save_checkpoint_state",
    "read_checkpoint_state",
    "load_checkpoint_state",
]

logger = logging.getLogger("seeder")

#: Name of one rank's seeder state in a checkpoint folder (``{rank}`` is the global rank).
_STATE_FILE = "seeder_state_{rank}.pt"


def _state_file(directory: Union[str, os.PathLike[str]], rank: int) -> str:
    """Path of rank ``rank``'s seeder state in the checkpoint folder ``directory``.

    >>> _state_file("ckpt/checkpoint-6", 1)
    'ckpt/checkpoint-6/seeder_state_1.pt'
    """
    return os.path.join(os.fspath(directory), _STATE_FILE.format(rank=rank))


def save_checkpoint_state(
    directory: Union[str, os.PathLike[str]], seeder: Optional[Seeder] = None
) -> str:
    """Write this rank's seeder state into a checkpoint folder.

    Every rank writes its own file, ``seeder_state_<rank>.pt``, with no collective. The
    write is atomic: a temporary file, fsync, rename over the old one, fsync of the folder.
    The file loads with ``torch.load(weights_only=True)``.

    Args:
        directory: the checkpoint folder; it must exist.
        seeder: the :class:`seeder.Seeder` to save; the default one when ``None``.

    Returns:
        The path of the file written.

    Raises:
        TypeError: ``seeder`` is not a :class:`seeder.Seeder`.
        OSError: the file cannot be written (nothing is left half-written).

    Example:
        >>> import os, tempfile, seeder
        >>> s = seeder.Seeder(); s.init(3); s.reseed(1, 0)
        >>> folder = tempfile.mkdtemp()
        >>> os.path.basename(save_checkpoint_state(folder, s))
        'seeder_state_0.pt'
    """
    s = resolve_seeder(seeder)
    state = s.state_dict()
    path = _state_file(directory, s.rank)
    buf = io.BytesIO()
    torch.save(state, buf)
    write_atomic(path, buf.getvalue())
    return path


def _agree(error: Optional[str], world: int) -> list[str]:
    """Every rank's error message (``None`` if fine), so that all ranks raise or none does."""
    if not process_group_active() or world == 1:
        return [error] if error else []
    errors: list[Optional[str]] = [None] * world
    torch.distributed.all_gather_object(errors, error)
    return [f"rank {r}: {e}" for r, e in enumerate(errors) if e]


class _Unusable(Exception):
    """A checkpoint file that is missing or unreadable; the message names it."""


def _load_file(path: str) -> Any:
    """``torch.load`` of one rank's file (``weights_only``); ``_Unusable`` naming it if it fails."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch.load raises many types (pickle's included): name the file
        raise _Unusable(f"{path}: {type(exc).__name__}: {exc}") from exc


def _saved_world(state: Any) -> Any:
    """The world size a loaded (not yet validated) state says it was saved by."""
    return state.get("world_size") if isinstance(state, dict) else None


def _choose(directory: Union[str, os.PathLike[str]], s: Seeder) -> tuple[str, Any, bool]:
    """``(path, state, moved)`` this rank loads: its own file when it was saved by a world of this
    size, else rank 0's.

    Raises ``_Unusable`` (with the message to show) when the file to load is missing or unreadable.
    """
    own = _state_file(directory, s.rank)
    state: Any = None
    if os.path.isfile(own):
        state = _load_file(own)
        if _saved_world(state) == s.world_size:
            return own, state, False
    first = _state_file(directory, 0)
    if not os.path.isfile(first):
        found = (
            sorted(f for f in os.listdir(directory) if f.startswith("seeder_state_"))
            if os.path.isdir(directory)
            else []
        )
        raise _Unusable(
            f"no seeder state in {os.fspath(directory)} ({os.path.basename(first)} missing; found "
            f"{found or 'none'}): resume from a checkpoint folder written by "
            f"SeederTrainer/SeederAccelerator"
        )
    first_state = state if first == own else _load_file(first)
    if _saved_world(first_state) != s.world_size:
        return first, first_state, True  # another world: rank 0's file (an elastic state is global)
    if state is None:
        raise _Unusable(
            f"{own} missing: the checkpoint was saved by {s.world_size} process(es) but has no "
            f"file for rank {s.rank}"
        )
    return own, state, False


def read_checkpoint_state(
    directory: Union[str, os.PathLike[str]], seeder: Optional[Seeder] = None
) -> dict[str, Any]:
    """Read and validate the seeder state this rank resumes from; change nothing.

    On the number of processes that saved it, each rank reads its own file. On another
    number, every rank reads rank 0's file. It loads when every participant of the run is
    an elastic ``seeder.ElasticDataLoader`` or a registered generator: their state is
    global, and ``seeder.load_state_dict`` re-derives this rank's RNG streams. Any other
    state is refused. The run's loaders and generators must already exist: they are part
    of the state. Under a process group every rank must call it.

    Args:
        directory: the checkpoint folder (``seeder_state_<rank>.pt`` files).
        seeder: the :class:`seeder.Seeder` to resume; the default one when ``None``.

    Returns:
        The validated state, for :meth:`seeder.Seeder.load_state_dict`.

    Raises:
        seeder.StateError: a rank's file is missing, unreadable or does not fit this run.
            Every rank raises, and the message names each rank's problem.
        TypeError: ``seeder`` is not a :class:`seeder.Seeder`.

    Example:
        >>> import tempfile, seeder
        >>> s = seeder.Seeder(); s.init(3); s.reseed(1, 0)
        >>> empty = tempfile.mkdtemp()
        >>> try:
        ...     read_checkpoint_state(empty, s)
        ... except seeder.StateError as exc:
        ...     print("seeder_state_0.pt missing" in str(exc))
        True
        >>> folder = tempfile.mkdtemp(); _ = save_checkpoint_state(folder, s)
        >>> read_checkpoint_state(folder, s)["master_seed"]
        3
    """
    s = resolve_seeder(seeder)
    state: Any = None
    error: Optional[str] = None
    path, moved = _state_file(directory, s.rank), False
    try:
        path, state, moved = _choose(directory, s)
        s.check_state_dict(state)
    except _Unusable as exc:
        error = str(exc)
    except (StateError, TypeError, RuntimeError, OSError, EOFError) as exc:
        error = f"{path}: {exc}"
        if moved:
            error += (
                "; a SeederAccelerator/SeederTrainer checkpoint loads on another number of "
                "processes only when every seeder participant is an elastic "
                "seeder.ElasticDataLoader or a registered generator"
            )
    errors = _agree(error, s.world_size)
    if errors:
        raise StateError(
            "cannot resume the seeder state, nothing was changed: " + "; ".join(errors)
        )
    if moved:
        logger.info(
            "seeder checkpoint %s was saved by %s process(es), this run has %d: rank %d reads rank "
            "0's file (the elastic loaders' state is global; this rank's RNG streams are "
            "re-derived)",
            os.fspath(directory),
            _saved_world(state),
            s.world_size,
            s.rank,
        )
    return state


def load_checkpoint_state(
    directory: Union[str, os.PathLike[str]], seeder: Optional[Seeder] = None
) -> None:
    """Resume the seeder from a checkpoint folder: RNGs, generators, loader positions.

    This is :func:`read_checkpoint_state`, then :meth:`seeder.Seeder.load_state_dict`.

    Args:
        directory: the checkpoint folder written by :func:`save_checkpoint_state`.
        seeder: the :class:`seeder.Seeder` to resume; the default one when ``None``.

    Raises:
        seeder.StateError: as :func:`read_checkpoint_state`; nothing was changed.
        TypeError: ``seeder`` is not a :class:`seeder.Seeder`.

    Example:
        >>> import random, tempfile, seeder
        >>> s = seeder.Seeder(); s.init(3); s.reseed(1, 0)
        >>> folder = tempfile.mkdtemp(); _ = save_checkpoint_state(folder, s)
        >>> first = random.random()
        >>> load_checkpoint_state(folder, s)
        >>> random.random() == first
        True
    """
    s = resolve_seeder(seeder)
    s.load_state_dict(read_checkpoint_state(directory, s))


class PreparedLoader(DataLoaderStateMixin):
    """A :class:`seeder.DataLoader` or :class:`seeder.IterableDataLoader`, prepared.

    Iterating it iterates the loader itself (same order, same position, so the
    position counts exactly the batches your loop received), moves each batch to
    ``device`` and marks the last batch of the epoch in accelerate's gradient state
    (``accelerator.accumulate``, ``gather_for_metrics``). A stream has no length: its
    last batch is found by looking one batch ahead, as accelerate does, without moving
    the position (the batch looked at is not in the state). Other attributes are the
    loader's (``dataset``, ``batch_size``, ``sampler``, ``state_dict`` ...).

    :meth:`SeederAccelerator.prepare` builds it; there is no need to build one yourself.

    Args:
        loader: the seeder loader to iterate.
        device: where each batch goes; ``None`` leaves batches where they are.
        non_blocking: passed to the copy to ``device``.

    Example:
        >>> import torch, seeder
        >>> s = seeder.Seeder(); s.init(0); s.reseed(1, 0)
        >>> accelerator = SeederAccelerator(cpu=True, seeder=s)
        >>> data = torch.arange(6.0)
        >>> loader = accelerator.prepare(seeder.DataLoader(data, batch_size=2, seeder=s))
        >>> type(loader).__name__, len(loader), [b.tolist() for b in loader]
        ('PreparedLoader', 3, [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]])
    """

    def __init__(
        self,
        loader: SeederLoader,
        device: Optional[torch.device] = None,
        non_blocking: bool = False,
    ) -> None:
        self.loader = loader
        self.device = device
        self.non_blocking = non_blocking
        self.gradient_state = GradientState()
        require("accelerate:DataLoaderStateMixin._drop_last")
        self._drop_last = loader.drop_last  # read by DataLoaderStateMixin.begin

    def __getattr__(self, name: str) -> Any:
        if name == "loader":  # not set yet (unpickling): do not recurse
            raise AttributeError(name)
        return getattr(self.loader, name)

    def __len__(self) -> int:
        return len(self.loader)

    @property
    def total_batch_size(self) -> int:
        """Samples per step over all processes (read by accelerate's gradient state).

        Example:
            >>> import seeder
            >>> s = seeder.Seeder(); s.init(0); s.reseed(1, 0)
            >>> loader = PreparedLoader(seeder.DataLoader(range(8), batch_size=4, seeder=s))
            >>> loader.total_batch_size
            4
        """
        return self.loader.global_batch_size

    @property
    def total_dataset_length(self) -> int:
        """Length of the whole dataset (read by accelerate's gradient state).

        Example:
            >>> import seeder
            >>> s = seeder.Seeder(); s.init(0); s.reseed(1, 0)
            >>> loader = PreparedLoader(seeder.DataLoader(range(8), batch_size=4, seeder=s))
            >>> loader.total_dataset_length
            8
        """
        # accelerate asks only where the dataset has a length (not of a stream)
        return len(cast(Sized, self.loader.dataset))

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch`` for the next pass: the loader's ``set_epoch``.

        ``seeder.reseed(1, epoch)`` does it too; accelerate's training helpers call this one.

        Args:
            epoch: the epoch of the next pass.

        Example:
            >>> import seeder
            >>> s = seeder.Seeder(); s.init(0); s.reseed(1, 0)
            >>> loader = PreparedLoader(seeder.DataLoader(range(8), batch_size=4, seeder=s))
            >>> loader.set_epoch(2); loader.epoch
            2
        """
        self.loader.set_epoch(epoch)

    def _last_flags(self, it: Any) -> Iterator[tuple[Any, bool]]:
        """``(batch, is the epoch's last)`` for each batch of ``it``."""
        total = self.loader.num_batches
        if total is None:  # no length: look ahead; the position stays at those handed out
            for batch in it:
                yield batch, it.exhausted()
            return
        remaining = total - self.loader.batches_done  # the batch this pass starts at
        for i, batch in enumerate(it):
            yield batch, i + 1 >= remaining

    def __iter__(self) -> Iterator[Any]:
        it = iter(self.loader)
        self.begin()
        try:
            for batch, last in self._last_flags(it):
                if last:
                    self.end_of_dataloader = True
                if self.device is not None:
                    batch = send_to_device(batch, self.device, non_blocking=self.non_blocking)
                yield batch
        finally:
            self.end()


class SeederAccelerator(Accelerator):
    """An ``Accelerator`` (same arguments, plus ``seeder=``) that keeps seeder's loaders as is.

    * ``prepare(loader)`` of a :class:`seeder.DataLoader` (elastic or not) or a
      :class:`seeder.IterableDataLoader` returns a :class:`PreparedLoader` around the same
      loader: no second sharding, no accelerate sampler or dispatcher, position kept.
      (Accelerate would rebuild a stream's loader as a ``DataLoaderDispatcher`` over the
      bare dataset: rank 0 would read every rank's data, without seeder's per-batch seeds,
      worker collation or position.)
    * ``save_state(dir)`` also writes ``dir/seeder_state_<rank>.pt`` on every rank.
    * ``load_state(dir)`` first validates that file (on every rank, before any
      model or optimizer is touched), lets accelerate load, then restores it (its
      RNG states last, over accelerate's). On another number of processes every rank
      reads ``seeder_state_0.pt``: with elastic loaders (``seeder.ElasticDataLoader``) the data
      continues exactly and each rank's RNG streams are re-derived; anything else is
      refused (:func:`read_checkpoint_state`).
    * ``skip_first_batches(loader, n)`` returns the prepared loader itself when it
      already stands at batch ``n`` of its epoch (after ``load_state``); anything
      else is an error, because the position comes from the checkpoint.

    Other DataLoaders are prepared by accelerate as usual.

    Args:
        *args: ``Accelerator``'s arguments.
        seeder: the :class:`seeder.Seeder` whose state the checkpoints hold; the default one
            when ``None``.
        **kwargs: ``Accelerator``'s keyword arguments.

    Raises:
        TypeError: ``seeder`` is not a :class:`seeder.Seeder`.

    Example:
        >>> import os, tempfile, torch, seeder
        >>> s = seeder.Seeder(); s.init(0); s.reseed(1, 0)
        >>> accelerator = SeederAccelerator(cpu=True, seeder=s)
        >>> loader = accelerator.prepare(seeder.DataLoader(range(6), batch_size=2, seeder=s))
        >>> first = next(iter(loader)).tolist()
        >>> folder = tempfile.mkdtemp(); _ = accelerator.save_state(folder)
        >>> sorted(os.listdir(folder))
        ['random_states_0.pkl', 'seeder_state_0.pt']
        >>> accelerator.load_state(folder)  # the seeder state too: the loader's position
        >>> [b.tolist() for b in loader]  # the rest of the epoch
        [[2, 3], [4, 5]]
    """

    def __init__(self, *args: Any, seeder: Optional[Seeder] = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seeder = resolve_seeder(seeder)
        self.register_save_state_pre_hook(self._save_seeder)
        self.register_load_state_pre_hook(self._read_seeder)
        # validated by the pre-hook, loaded after accelerate
        self._read_state: Optional[dict[str, Any]] = None

    def _save_seeder(
        self, models: list[torch.nn.Module], weights: list[dict[str, Any]], output_dir: str
    ) -> None:
        """accelerate's save pre-hook: this rank's seeder state into ``output_dir``."""
        path = save_checkpoint_state(output_dir, self.seeder)
        logger.info("seeder state saved to %s", path)

    def _read_seeder(self, models: list[torch.nn.Module], input_dir: str) -> None:
        """accelerate's load pre-hook: read and validate the seeder state before anything loads."""
        self._read_state = read_checkpoint_state(input_dir, self.seeder)

    def load_state(
        self,
        input_dir: Optional[str] = None,
        load_kwargs: Optional[dict[str, Any]] = None,
        **load_model_func_kwargs: Any,
    ) -> None:
        """Accelerate's ``load_state``, then the seeder state: RNGs, generators, positions.

        The seeder state is validated on every rank before accelerate loads anything. It
        loads last, so that its RNG states win over accelerate's ``random_states_<rank>.pkl``:
        the same streams on the same number of processes, the re-derived ones on another.

        Args:
            input_dir: the checkpoint folder, as for ``Accelerator.load_state``.
            load_kwargs: passed to accelerate.
            **load_model_func_kwargs: passed to accelerate.

        Raises:
            seeder.StateError: the folder's seeder state is missing or does not fit this
                run (:func:`read_checkpoint_state`); nothing was loaded.

        Example:
            >>> import tempfile, seeder
            >>> s = seeder.Seeder(); s.init(0); s.reseed(1, 0)
            >>> accelerator = SeederAccelerator(cpu=True, seeder=s)
            >>> loader = accelerator.prepare(seeder.DataLoader(range(6), batch_size=2, seeder=s))
            >>> it = iter(loader); _ = next(it)
            >>> folder = tempfile.mkdtemp(); _ = accelerator.save_state(folder)
            >>> rest = [b.tolist() for b in it]
            >>> accelerator.load_state(folder)  # back to batch 1 of the epoch
            >>> [b.tolist() for b in loader] == rest
            True
        """
        self._read_state = None
        try:
            super().load_state(input_dir, load_kwargs, **load_model_func_kwargs)
            if self._read_state is None:
                raise StateError(
                    "accelerate loaded the checkpoint without calling SeederAccelerator's "
                    "load_state pre-hook; the seeder state was not loaded"
                )
            self.seeder.load_state_dict(self._read_state)
        finally:
            self._read_state = None

    def prepare_data_loader(
        self,
        data_loader: torch.utils.data.DataLoader,
        device_placement: Optional[bool] = None,
        slice_fn_for_dispatch: Optional[Callable[..., Any]] = None,
    ) -> Any:
        """Wrap a seeder loader in a :class:`PreparedLoader`; other loaders as accelerate does.

        ``Accelerator.prepare`` calls it for each DataLoader it is given.

        Args:
            data_loader: the loader to prepare.
            device_placement: move batches to the accelerator's device; the
                Accelerator's setting when ``None``.
            slice_fn_for_dispatch: passed to accelerate for other loaders.

        Returns:
            A :class:`PreparedLoader` around a seeder loader; accelerate's loader otherwise.

        Raises:
            ValueError: a seeder loader under ``dispatch_batches`` or ``split_batches``.

        Example:
            >>> import seeder
            >>> s = seeder.Seeder(); s.init(0); s.reseed(1, 0)
            >>> loader = seeder.DataLoader(range(6), batch_size=2, seeder=s)
            >>> prepared = SeederAccelerator(cpu=True).prepare_data_loader(loader)
            >>> prepared.loader is loader
            True
        """
        if isinstance(data_loader, PreparedLoader):
            return data_loader
        if not isinstance(data_loader, SeederLoader):
            return super().prepare_data_loader(data_loader, device_placement, slice_fn_for_dispatch)
        if self.dispatch_batches or self.split_batches:
            raise ValueError(
                f"a {type(data_loader).__name__} is sharded by rank itself: create "
                "the Accelerator without dispatch_batches/split_batches "
                "(DataLoaderConfiguration defaults)"
            )
        if device_placement is None:
            device_placement = self.device_placement
        return PreparedLoader(
            data_loader, self.device if device_placement else None, self.non_blocking
        )

    def skip_first_batches(
        self, dataloader: Union[PreparedLoader, torch.utils.data.DataLoader], num_batches: int = 0
    ) -> Any:
        """Skip the first ``num_batches`` batches of an epoch, as ``Accelerator`` does.

        A prepared seeder loader already stands where the checkpoint left it: it is
        returned as is, in O(1). Other loaders go to accelerate.

        Args:
            dataloader: a loader returned by :meth:`prepare`.
            num_batches: the batches of the epoch already trained.

        Returns:
            ``dataloader`` itself for a :class:`PreparedLoader`; accelerate's loader otherwise.

        Raises:
            ValueError: the seeder loader stands at another batch than ``num_batches``.

        Example:
            >>> import seeder
            >>> s = seeder.Seeder(); s.init(0); s.reseed(1, 0)
            >>> accelerator = SeederAccelerator(cpu=True, seeder=s)
            >>> loader = accelerator.prepare(seeder.DataLoader(range(6), batch_size=2, seeder=s))
            >>> accelerator.skip_first_batches(loader, 0) is loader
            True
        """
        if not isinstance(dataloader, PreparedLoader):
            return super().skip_first_batches(dataloader, num_batches)
        position = dataloader.loader.batches_done
        if position != num_batches:
            raise ValueError(
                f"the seeder.DataLoader stands at batch {position} of its epoch, not "
                f"{num_batches}: its position comes from the checkpoint (accelerator.load_state); "
                f"iterate it directly instead of skip_first_batches"
            )
        return dataloader
