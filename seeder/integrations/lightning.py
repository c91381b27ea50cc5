"""Lightning: :class:`SeederCallback` makes ``Trainer.fit`` reproducible and its resume bit for bit.

The user's code, and nothing else::

    seeder.init(master_seed=args.seed, ngpus=world_size)
    seeder.reseed(0, 0)         # before the LightningModule is built
    model = MyModule()          # train_dataloader() returns seeder.DataLoader(...)
    every_100 = ModelCheckpoint(every_n_train_steps=100)
    trainer = Trainer(callbacks=[SeederCallback(), every_100])
    # the user's checkpoint, or the one seeder verify resumes
    trainer.fit(model, ckpt_path=resume_path(args.ckpt_path))

:func:`resume_path` returns the checkpoint to resume from: the one given, else the one
``seeder verify`` asks the run to resume from, else ``None``; with it a plain Lightning
script is verified without a resume flag of its own.

What the callback does:

* ``reseed(1, epoch)`` at every train epoch start. Lightning's fit loop calls
  ``on_train_epoch_start`` before it creates the epoch's loader iterator (from epoch 1
  on; epoch 0's iterator is created earlier, and a fresh loader starts at epoch 0), so
  the loader's epoch follows the reseed.
* Puts every rank's seeder state (``seeder.gather_state_dict()``) in Lightning's
  checkpoint, **without** the positions of ``seeder.DataLoader``\\ s: those travel once,
  through Lightning's support for stateful dataloaders (the fit loop restores them
  right before it creates the resumed iterator, which nothing else can do). On
  ``fit(ckpt_path=...)`` the state is validated as soon as Lightning reads it (another
  master seed, or another world size without elastic train loaders:
  :class:`seeder.StateError`, before anything changes) and
  applied at ``on_train_start``, after the sanity check and ``train_dataloader()``, so
  that nothing draws from the restored RNGs before the first resumed step. A checkpoint
  taken at the end of an epoch resumes at the next epoch's start: the callback then
  reseeds that epoch before the loader is built, since Lightning calls no epoch-start hook.
* A stream (``seeder.IterableDataLoader``) has no length, so Lightning
  fetches a batch ahead of it; the callback saves the stream's position as of the batches
  trained (``on_save_checkpoint``), not as of the one fetched ahead.
* Refuses or warns where the run cannot be exact: a train loader that is not a
  ``seeder.DataLoader`` (:class:`seeder.SeederWarning`), a ``seeder.DataLoader`` whose
  sampler is not seeder's or is not sharded for this trainer's ranks, a seeder whose
  rank/world or master seed disagree with the trainer's processes (errors naming the fix).

* Elastic train loaders (``seeder.ElasticDataLoader(...)``, other participants only
  registered generators): a checkpoint of another world size resumes. Lightning restores the
  loaders' global state; the callback loads the master seed and last reseed and re-derives
  each rank's RNG streams from the loaders' global step, as ``seeder.load_state_dict`` does.

Under ``strategy="ddp"`` Lightning leaves ``seeder.DataLoader`` alone: its sampler is a
``torch.utils.data.DistributedSampler`` (seeder's subclass), already sharded by global
rank, so ``use_distributed_sampler`` has nothing to replace.

Example:
    >>> import seeder
    >>> from seeder.integrations.lightning import SeederCallback
    >>> seeder.init(5); SeederCallback().state_key
    'SeederCallback'
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Iterator
from typing import Any, Optional, Union

import torch

try:
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import Callback
    from lightning.pytorch.utilities.types import STEP_OUTPUT
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "seeder.integrations.lightning needs Lightning >= 2.3: pip install 'seeder[lightning]'"
    ) from exc

from seeder import _hooks as hooks
from seeder._errors import SeederWarning, StateError
from seeder._internals import require
from seeder._seeding.core import Seeder
from seeder._seeding.default import resolve_seeder
from seeder._seeding.derive import TRAIN_TASK
from seeder._seeding.distributed import process_group_active
from seeder._state.world import rederive_streams
from seeder.data._seederloader import SeederLoader
from seeder.integrations._lightning_state import CALLBACK_STATE_VERSION, check_callback_state

__all__ = ["SeederCallback", "resume_path"]

logger = logging.getLogger("seeder")

#: The ``format`` of those loaders' states, as Lightning's loop state holds them.
_LOADER_FORMATS = ("seeder.loader", "seeder.elastic_loader", "seeder.stream_loader")


def _trained(trainer: pl.Trainer) -> int:
    """Batches of this epoch the fit loop has taken from its data fetcher (those it fetched ahead
    are not counted)."""
    return int(trainer.fit_loop.epoch_loop.batch_progress.current.ready)


def _loader_state(loader: SeederLoader, trainer: pl.Trainer) -> dict[str, Any]:
    """The state of ``loader`` as of what the fit loop trained: Lightning fetches a batch ahead of a
    loader with no length (a stream)."""
    if loader.num_batches is None:
        return loader.state_dict_at(_trained(trainer))
    return loader.state_dict()


def _position(loader: SeederLoader, trainer: pl.Trainer) -> list[Union[int, str, None]]:
    """``[epoch, batches trained, batches in the epoch]`` of a seeder loader; a stream's length is
    ``None``; an elastic loader's ``[epoch, samples of the global order done, "global"]`` (the same
    on any world size)."""
    total = loader.num_batches
    if total is None:
        return [loader.epoch, _trained(trainer), None]
    if loader.seeder_elastic:
        return [loader.epoch, loader.state_dict()["position"], "global"]
    return [loader.epoch, loader.batches_done, total]


def _epoch_done(loader: SeederLoader, trainer: pl.Trainer) -> bool:
    """Whether the fit loop has trained ``loader``'s whole epoch (a stream: it has seen the end, and
    trained all)."""
    total = loader.num_batches
    if total is None:
        return bool(_loader_state(loader, trainer)["complete"])
    return loader.batches_done >= total


def _flatten(obj: Any) -> Iterator[Any]:
    """The loaders in what ``trainer.train_dataloader`` returns (a loader, or lists/tuples/dicts of
    them)."""
    if isinstance(obj, dict):
        for value in obj.values():
            yield from _flatten(value)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            yield from _flatten(value)
    elif obj is not None:
        yield obj


def _stop_checkpoint(root: Optional[str]) -> str:
    """Where :class:`SeederCallback` saves a ``seeder verify`` stop: the run's checkpoint directory,
    else ``root``."""
    return str(hooks.ask(hooks.STOP_FILE, root=root))


def resume_path(ckpt_path: Optional[str] = None) -> Optional[str]:
    """The checkpoint for ``Trainer.fit(ckpt_path=...)``.

    ``seeder verify`` asks a run to resume with ``$SEEDER_RESUME=1``. The checkpoint is then
    the ``seeder-stop.ckpt`` that :class:`SeederCallback` saved when it stopped the run. It
    lies in ``$SEEDER_CKPT_DIR`` (verify sets it), else in the working directory (the
    Trainer's default ``default_root_dir``). Outside ``seeder verify``, and in its runs that
    do not resume, the result is ``None``: a fresh run.

    Args:
        ckpt_path: the user's own checkpoint, if any. It always wins.

    Returns:
        ``ckpt_path`` when given; else the checkpoint ``seeder verify`` resumes; else ``None``.
        A resume asked for with no such file warns with :class:`seeder.SeederWarning` and
        returns ``None`` (the stopped run had no ``SeederCallback``); verify then reports
        that the resume was not tested.

    Example:
        >>> resume_path("ckpt/last.ckpt")  # the user's own checkpoint wins
        'ckpt/last.ckpt'
        >>> resume_path() is None  # not resumed by seeder verify: a fresh run
        True
    """
    if ckpt_path is not None or not hooks.ask(hooks.RESUME):
        return ckpt_path
    path = _stop_checkpoint(None)
    if not os.path.isfile(path):
        warnings.warn(
            f"seeder verify asks this run to resume, but there is no {path}: the run it continues "
            f"did not stop through SeederCallback; put SeederCallback() in the Trainer's callbacks",
            SeederWarning,
            stacklevel=2,
        )
        return None
    return path


def _same_place(trainer: pl.Trainer, what: str, rank: int, world: int, fix: str) -> None:
    """Raise ``RuntimeError`` naming ``fix`` unless ``(rank, world)`` is this Trainer process's."""
    if (rank, world) != (trainer.global_rank, trainer.world_size):
        raise RuntimeError(
            f"SeederCallback: {what} rank {rank} of {world} but this Trainer process is rank "
            f"{trainer.global_rank} of {trainer.world_size}; {fix}"
        )


def _check_train_loaders(trainer: pl.Trainer) -> None:
    """Warn about or refuse train loaders that cannot resume exactly under ``trainer``."""
    for ld in _flatten(trainer.train_dataloader):
        if not isinstance(ld, SeederLoader):
            warnings.warn(
                f"SeederCallback: the train loader is a "
                f"{type(ld).__module__}.{type(ld).__name__}, not a seeder.DataLoader: its "
                f"order, worker randomness and position are not seeder's, so a resumed run "
                f"will not continue exactly; return seeder.DataLoader(dataset, ...) from "
                f"train_dataloader()",
                SeederWarning,
                stacklevel=2,
            )
            continue
        _same_place(
            trainer,
            f"the seeder.{type(ld).__name__} is sharded as",
            ld.rank,
            ld.world_size,
            "build the loader inside train_dataloader() (after Lightning starts the process "
            "group), not before Trainer.fit",
        )


def _apply(s: Seeder, gathered: dict[str, Any], step: Optional[int] = None) -> None:
    """Load ``gathered`` into ``s``, less the seeder's loaders: Lightning restores those.

    From another world size (elastic loaders, ``_lightning_state.movable``), the master seed
    and last reseed load. Inside an epoch (``step``: the elastic loaders' global step, as Lightning
    restored them), this rank's RNG streams are re-derived, as ``seeder.load_state_dict``
    does for elastic loaders (:func:`seeder._state.world.rederive_streams`). At an epoch's
    end the next ``reseed`` seeds them.
    """
    moved = gathered["world_size"] != s.world_size
    loaders = [p for p in s.participants() if isinstance(p, SeederLoader)]
    for ld in loaders:
        s.leave(ld)
    try:
        s.load_state_dict(gathered, allow_world_change=moved)
    finally:
        # rejoin in the same order: their keys (loader.<n>) stay as they were
        for ld in loaders:
            s.join(ld)
    if moved and step is not None:
        rederive_streams(gathered["ranks"][0], s, step)
        logger.info(
            "SeederCallback: checkpoint of %d process(es) resumed on %d: the elastic loaders "
            "continue at global step %d (restored by Lightning); rank %d's RNG streams "
            "re-derived from (master, task, epoch, rank, step)",
            gathered["world_size"],
            s.world_size,
            step,
            s.rank,
        )


class SeederCallback(Callback):
    """Reseed every train epoch, keep the seeder state in Lightning's checkpoints.

    It also refuses, or warns about, what cannot resume exactly. The module docstring says
    what it does and when. Lightning calls its hooks; user code only adds it to the
    Trainer's callbacks.

    Args:
        seeder: the :class:`seeder.Seeder` of the run; the default one when ``None``.

    Raises:
        TypeError: ``seeder`` is not a :class:`seeder.Seeder`.

    Example:
        >>> import torch, lightning.pytorch as pl, seeder
        >>> class Model(pl.LightningModule):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.layer = torch.nn.Linear(2, 1)
        ...     def training_step(self, batch, index):
        ...         return self.layer(batch).sum()
        ...     def configure_optimizers(self):
        ...         return torch.optim.SGD(self.parameters(), lr=0.1)
        ...     def train_dataloader(self):
        ...         return seeder.DataLoader(torch.randn(8, 2), batch_size=4, shuffle=True)
        >>> seeder.init(master_seed=7); seeder.reseed(0, 0)
        >>> model = Model()
        >>> trainer = pl.Trainer(
        ...     max_epochs=2, callbacks=[SeederCallback()], logger=False,
        ...     enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
        >>> trainer.fit(model)
        >>> seeder.default_seeder().last_reseed  # (task 1, epoch 1): the last epoch trained
        (1, 1)
    """

    def __init__(self, seeder: Optional[Seeder] = None) -> None:
        self.seeder = resolve_seeder(seeder)
        self._trainer: Optional[pl.Trainer] = None
        # the loaded callback state, applied at on_train_start
        self._pending: Optional[dict[str, Any]] = None
        self._applied_early = False

    # ----------------------------------------------------------------- setup
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Check that the seeder matches the trainer's processes: rank, world, one master seed.

        Args:
            trainer: the Trainer that runs the fit.
            pl_module: the LightningModule it trains.
            stage: Lightning's stage; only ``"fit"`` is checked.

        Raises:
            RuntimeError: the seeder is not initialised, its rank or world size is not the
                Trainer's, the ranks' master seeds differ, or ``overfit_batches`` is set.

        Example:
            >>> import lightning.pytorch as pl, seeder
            >>> trainer = pl.Trainer(logger=False, enable_progress_bar=False)
            >>> SeederCallback(seeder.Seeder()).setup(trainer, pl.LightningModule(), "fit")
            Traceback (most recent call last):
            ...
            RuntimeError: SeederCallback: seeder.init(master_seed=...) was not called; ...
        """
        if stage != "fit":
            return
        self._trainer = trainer
        s = self.seeder
        if not s.initialized:
            raise RuntimeError(
                "SeederCallback: seeder.init(master_seed=...) was not called; call it, then "
                "seeder.reseed(0, 0), before building the LightningModule"
            )
        _same_place(
            trainer,
            "the seeder has",
            s.rank,
            s.world_size,
            "call seeder.init(master_seed, ngpus=<devices x nodes>) in every process (Lightning's "
            "launcher sets LOCAL_RANK and WORLD_SIZE, which seeder reads)",
        )
        if trainer.world_size > 1 and process_group_active():
            seeds: list[Optional[int]] = [None] * trainer.world_size
            torch.distributed.all_gather_object(seeds, s.get_master_seed())
            if len(set(seeds)) > 1:
                raise RuntimeError(
                    f"SeederCallback: the ranks use different master seeds {seeds}: each process "
                    f"drew its own. Pass the same master_seed to seeder.init on every rank (or set "
                    f"SEEDER_SEED before launching)"
                )
        # set on the Trainer by Lightning's _init_debugging_flags, not declared on the class
        if trainer.overfit_batches:  # type: ignore[attr-defined]
            raise RuntimeError(
                "SeederCallback: overfit_batches replaces the train loader's sampler, so the run "
                "is not seeder's any more; set overfit_batches=0 (or drop SeederCallback for "
                "debugging runs)"
            )

    # ------------------------------------------------------------------ epochs
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """``reseed(1, epoch)``, before Lightning creates this epoch's loader iterator.

        Args:
            trainer: the Trainer that runs the fit.
            pl_module: the LightningModule it trains.

        Example:
            >>> import lightning.pytorch as pl, seeder
            >>> trainer = pl.Trainer(logger=False, enable_progress_bar=False)
            >>> s = seeder.Seeder(); s.init(3)
            >>> SeederCallback(s).on_train_epoch_start(trainer, pl.LightningModule())
            >>> s.last_reseed
            (1, 0)
        """
        self.seeder.reseed(TRAIN_TASK, trainer.current_epoch)

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Apply a checkpoint taken at the end of an epoch, and reseed the next epoch.

        This happens before the loader exists. Other checkpoints wait for
        :meth:`on_train_start`; without a checkpoint nothing happens.

        Args:
            trainer: the Trainer that runs the fit.
            pl_module: the LightningModule it trains.

        Example:
            >>> import lightning.pytorch as pl, seeder
            >>> trainer = pl.Trainer(logger=False, enable_progress_bar=False)
            >>> s = seeder.Seeder(); s.init(3); s.reseed(1, 4)
            >>> SeederCallback(s).on_fit_start(trainer, pl.LightningModule())  # no checkpoint
            >>> s.last_reseed
            (1, 4)
        """
        self._applied_early = False
        if self._pending is None or not self._pending["epoch_complete"]:
            return
        _apply(self.seeder, self._pending["seeder"])
        last = self.seeder.last_reseed
        next_epoch = (last[1] + 1) if last is not None and last[0] == TRAIN_TASK else 0
        self.seeder.reseed(TRAIN_TASK, next_epoch)
        self._applied_early = True

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Check the train loaders; apply a checkpoint taken inside an epoch.

        Lightning has restored the loaders' positions by now, and nothing has drawn from the
        RNGs the checkpoint restores.

        Args:
            trainer: the Trainer that runs the fit.
            pl_module: the LightningModule it trains.

        Raises:
            RuntimeError: a seeder loader is sharded for other ranks, or its sampler was
                replaced.
            seeder.StateError: the checkpoint's loop state and seeder state do not belong
                together.

        Example:
            >>> import lightning.pytorch as pl, seeder
            >>> trainer = pl.Trainer(logger=False, enable_progress_bar=False)
            >>> s = seeder.Seeder(); s.init(3)
            >>> SeederCallback(s).on_train_start(trainer, pl.LightningModule())  # no loaders yet
        """
        _check_train_loaders(trainer)
        pending, self._pending = self._pending, None
        if pending is None:
            return
        if not self._applied_early:
            self._check_positions(trainer, pending["loaders"])
            elastic = [ld for ld in self._train_loaders() if ld.seeder_elastic]
            step = elastic[0].elastic_step(elastic[0].state_dict()) if elastic else None
            _apply(self.seeder, pending["seeder"], step)
        last = self.seeder.last_reseed
        if last is None or last[0] != TRAIN_TASK or last[1] != trainer.current_epoch:
            raise StateError(
                f"SeederCallback: Lightning resumes epoch {trainer.current_epoch} but the seeder "
                f"state continues {last}; the checkpoint's loop and seeder states do not belong "
                f"together (save both with the same Trainer.save_checkpoint)"
            )
        # for seeder verify: this run continues a checkpoint (nothing outside verify)
        hooks.emit(hooks.RESUMED, step=None)

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: STEP_OUTPUT,
        batch: Any,
        batch_idx: int,
    ) -> None:
        """Tell the tools of the run that a step ended (:data:`seeder._hooks.STEP`): at the stop
        ``seeder verify`` asks for, its hook saves a checkpoint and ends the run (status 0).

        In a plain run it does nothing.

        Args:
            trainer: the Trainer that runs the fit.
            pl_module: the LightningModule it trains.
            outputs: what ``training_step`` returned.
            batch: the batch trained.
            batch_idx: its index in the epoch.

        Example:
            >>> import lightning.pytorch as pl, seeder
            >>> trainer = pl.Trainer(logger=False, enable_progress_bar=False)
            >>> cb = SeederCallback(seeder.Seeder())
            >>> cb.on_train_batch_end(trainer, pl.LightningModule(), None, None, 0)  # a plain run
        """
        hooks.emit(
            hooks.STEP,
            seeder=self.seeder,
            checkpoint=None,
            save=lambda: trainer.save_checkpoint(_stop_checkpoint(trainer.default_root_dir)),
            end=None,
        )

    # ------------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """Every rank's seeder state, without the loaders' positions (Lightning saves those).

        It is a collective: Lightning calls it on every rank.

        Returns:
            On rank 0, the callback's state for Lightning's checkpoint; ``{}`` elsewhere.

        Example:
            >>> import seeder
            >>> s = seeder.Seeder(); s.init(3); s.reseed(1, 0)
            >>> sorted(SeederCallback(s).state_dict())
            ['epoch_complete', 'loaders', 'seeder', 'version']
        """
        gathered = self.seeder.gather_state_dict()
        if gathered is None:  # not rank 0: only rank 0 writes the checkpoint
            return {}
        loader_keys = {
            key for key, p in self.seeder.stateful().items() if isinstance(p, SeederLoader)
        }
        for entry in gathered["ranks"]:  # every rank has the same participants, so the same keys
            entry["participants"] = {
                k: v for k, v in entry["participants"].items() if k not in loader_keys
            }
        trainer = self._trainer
        loaders = self._train_loaders() if trainer is not None else []
        return {
            "version": CALLBACK_STATE_VERSION,
            "seeder": gathered,
            "loaders": [_position(ld, trainer) for ld in loaders] if trainer is not None else [],
            "epoch_complete": trainer is not None
            and bool(loaders)
            and all(_epoch_done(ld, trainer) for ld in loaders),
        }

    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        """Put a stream's position in Lightning's loop state as of the batches trained.

        Lightning saved it as of the batch it fetched ahead. Without a stream nothing changes.

        Args:
            trainer: the Trainer that runs the fit.
            pl_module: the LightningModule it trains.
            checkpoint: the checkpoint Lightning is about to write.

        Raises:
            seeder.StateError: the checkpoint does not hold one state per
                ``seeder.IterableDataLoader`` (a wrapped loader).

        Example:
            >>> import lightning.pytorch as pl, seeder
            >>> trainer = pl.Trainer(logger=False, enable_progress_bar=False)
            >>> checkpoint = {}
            >>> SeederCallback(seeder.Seeder()).on_save_checkpoint(
            ...     trainer, pl.LightningModule(), checkpoint)  # no stream
            >>> checkpoint
            {}
        """
        streams = [ld for ld in self._train_loaders() if ld.num_batches is None]
        if not streams:
            return
        require("lightning:checkpoint loops.fit_loop.state_dict.combined_loader", checkpoint)
        saved = checkpoint["loops"]["fit_loop"]["state_dict"].get("combined_loader") or []
        mine = [
            i
            for i, st in enumerate(saved)
            if isinstance(st, dict) and st.get("format") == "seeder.stream_loader"
        ]
        if len(mine) != len(streams):
            raise StateError(
                f"SeederCallback: Lightning's checkpoint holds {len(mine)} stream loader state(s) "
                f"for {len(streams)} seeder.IterableDataLoader stream(s); return the train loaders "
                f"from train_dataloader() as seeder.DataLoader objects, not wrapped"
            )
        for i, loader in zip(mine, streams):
            saved[i] = _loader_state(loader, trainer)

    def on_load_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        """Validate the saved state against this run as soon as Lightning reads it.

        A checkpoint from the end of an epoch has its loader positions ("epoch done") dropped
        from Lightning's loop state. The loaders then start the next epoch, which
        :meth:`on_fit_start` reseeds. A checkpoint with no seeder state warns with
        :class:`seeder.SeederWarning`.

        Args:
            trainer: the Trainer that runs the fit.
            pl_module: the LightningModule it trains.
            checkpoint: the checkpoint Lightning read.

        Raises:
            seeder.StateError: the state is not one this version wrote, or it was saved with
                another master seed or world size; nothing was changed.

        Example:
            >>> import lightning.pytorch as pl, seeder
            >>> trainer = pl.Trainer(logger=False, enable_progress_bar=False)
            >>> other = seeder.Seeder(); other.init(4); other.reseed(1, 0)
            >>> checkpoint = {"callbacks": {"SeederCallback": SeederCallback(other).state_dict()}}
            >>> mine = SeederCallback(seeder.Seeder()); mine.seeder.init(3)
            >>> try:
            ...     mine.on_load_checkpoint(trainer, pl.LightningModule(), checkpoint)
            ... except seeder.StateError as exc:
            ...     print(exc)  # doctest: +ELLIPSIS
            SeederCallback: the checkpoint was made with master seed 4, this run was given 3; ...
        """
        state = (checkpoint.get("callbacks") or {}).get(self.state_key)
        if not state:
            warnings.warn(
                "SeederCallback: the checkpoint holds no seeder state (saved without "
                "SeederCallback?): the resumed run's random streams are not the interrupted run's; "
                "resume from a checkpoint saved with SeederCallback",
                SeederWarning,
                stacklevel=2,
            )
            return
        check_callback_state(state, checkpoint, self.seeder)
        if state["epoch_complete"]:
            require("lightning:checkpoint loops.fit_loop.state_dict.combined_loader", checkpoint)
            fit_loop = checkpoint["loops"]["fit_loop"]["state_dict"]
            loader_states = fit_loop.get("combined_loader", [])
            if all(
                isinstance(st, dict) and st.get("format") in _LOADER_FORMATS for st in loader_states
            ):
                fit_loop["combined_loader"] = []
        self._pending = state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Nothing: :meth:`on_load_checkpoint` took the state, with the whole checkpoint.

        Lightning calls it just after :meth:`on_load_checkpoint`.

        Args:
            state_dict: the callback's state in the checkpoint.

        Example:
            >>> import seeder
            >>> s = seeder.Seeder(); s.init(3); s.reseed(1, 0)
            >>> SeederCallback(s).load_state_dict({}); s.last_reseed
            (1, 0)
        """

    # ---------------------------------------------------------------- helpers
    def _train_loaders(self) -> list[SeederLoader]:
        trainer = self._trainer
        if trainer is None:
            return []
        try:
            loaders = trainer.train_dataloader
        except Exception:  # no fit loop data yet
            return []
        return [ld for ld in _flatten(loaders) if isinstance(ld, SeederLoader)]

    def _check_positions(self, trainer: pl.Trainer, saved: list[list[int]]) -> None:
        now = [_position(ld, trainer) for ld in self._train_loaders()]
        if now != saved:
            raise StateError(
                f"SeederCallback: Lightning restored the train loader(s) to (epoch, batch, "
                f"batches) {now}, but the seeder state was saved at {saved}; the checkpoint's loop "
                f"state does not match its seeder state (train loaders changed between save and "
                f"resume?)"
            )
