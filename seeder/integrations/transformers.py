"""Hugging Face ``transformers.Trainer``: exact mid-epoch resume with :class:`seeder.DataLoader`.

A ``TrainerCallback`` cannot replace the Trainer's sampler, so the integration is
a subclass: :class:`SeederTrainer` takes the same arguments as ``Trainer`` (plus
``seeder=``) and changes only the training data path and the checkpoint:

* The training loader is a :class:`seeder.DataLoader` built from the Trainer's
  own settings (batch size, collator, workers, pin memory, persistent workers,
  prefetch, drop last). It is sharded by global rank by seeder's sampler and is
  not re-wrapped by accelerate (which would shard it a second time). Worker
  randomness is a pure function of (master seed, epoch, position).
* Each epoch starts with ``seeder.reseed(1, epoch)`` (the Trainer's
  ``set_epoch`` call): per-rank derived seeds for ``random``, NumPy, torch and
  registered generators, and the epoch's shuffle.
* Every checkpoint folder gets ``seeder_state_<rank>.pt`` (loads with
  ``torch.load(weights_only=True)``). ``train(resume_from_checkpoint=...)`` reads and
  validates it on every rank before the Trainer loads anything, and restores it
  when the training loader is created: the loader continues at its saved batch
  without replaying the ones before it (the Trainer's ``skip_first_batches`` is
  answered by the loader itself, in O(1)). Its RNG states win over the Trainer's
  ``rng_state_<rank>.pth``: when the Trainer loads that file (``_load_rng_state``),
  the global RNGs go back to the states the seeder state set.
* ``SeederTrainer(..., elastic=True)`` builds ``seeder.ElasticDataLoader``
  (``per_device_train_batch_size`` per rank, one global order): a checkpoint saved on
  ``W`` processes resumes on ``W'`` with the same global batch size
  (``per_device_train_batch_size * W'`` equal to the saved one). Every rank reads rank
  0's seeder file; the data continue exactly and each rank's RNG streams are re-derived
  (docs/elastic.md).

Weight initialisation stays the Trainer's: with ``model_init`` it seeds
``args.seed`` on every rank before building the model (identical weights); a
model built by you is identical on all ranks once DDP broadcasts rank 0's weights
(``accelerator.prepare`` of the model). See docs/huggingface.md.

Example::

    seeder.init(master_seed=42)
    trainer = SeederTrainer(model=model, args=args, train_dataset=train_set)
    trainer.train()                                # or train(resume_from_checkpoint=True)

Importing this module imports transformers and accelerate; ``import seeder`` does not.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Iterator
from typing import Any, Optional, Union, cast

import torch.utils.data
import transformers.trainer as _hf_trainer_module
from transformers import Trainer, TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, TrainOutput, get_last_checkpoint

from seeder import _hooks as hooks
from seeder._checks import check_bool, check_state_header, is_int
from seeder._errors import SeederWarning, StateError
from seeder._internals import require
from seeder._seeding.core import Seeder
from seeder._seeding.default import resolve_seeder
from seeder._seeding.derive import TRAIN_TASK
from seeder._seeding.foreign import expected
from seeder._seeding.rngbase import RNGAdapter, put_back_states, save_states
from seeder.data._elastic_loader import ElasticDataLoader
from seeder.data._iterable import IterableDataLoader
from seeder.data._loader import DataLoader
from seeder.data._seederloader import SeederLoader
from seeder.integrations.accelerate import read_checkpoint_state, save_checkpoint_state

__all__ = ["SeederTrainer"]

logger = logging.getLogger("seeder")


_STREAM_KEYS = frozenset({"format", "version", "earlier"})


class _StreamEpochs:
    """Participant of a :class:`SeederTrainer` over a stream: the batches of the stream's epochs
    before this one.

    The Trainer counts a stream with no length as one epoch of ``max_steps`` when it resumes
    (it skips ``global_step`` batches of its epoch 0), while the stream has epochs of its own:
    a resume checks that count against these batches plus the stream's position.

    >>> _StreamEpochs().state_dict()
    {'format': 'seeder.trainer_stream', 'version': 1, 'earlier': 0}
    """

    seeder_kind = "trainer_stream"

    def __init__(self) -> None:
        self.earlier = 0

    def seeder_reseed(self, seeder: Seeder, task_id: int, epoch: int) -> None:
        """Nothing: the Trainer's ``set_epoch`` (through the training loader) moves the count."""

    def state_dict(self) -> dict[str, Any]:
        """The batches of the stream's earlier epochs, as a participant state."""
        return {"format": "seeder.trainer_stream", "version": 1, "earlier": self.earlier}

    def check_state_dict(self, state: Any) -> None:
        """Raise :class:`seeder.StateError` unless ``state`` is one :meth:`state_dict` made."""
        check_state_header(
            state, "seeder.trainer_stream", 1, _STREAM_KEYS, "SeederTrainer stream", "SeederTrainer"
        )
        if not (is_int(state["earlier"]) and state["earlier"] >= 0):
            raise StateError(
                f"SeederTrainer stream state['earlier'] must be a non-negative int, got "
                f"{state['earlier']!r}"
            )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Take the count of a state :meth:`check_state_dict` accepted."""
        self.earlier = int(state["earlier"])


class _TrainLoader:
    """The training loader as the Trainer sees it: ``set_epoch`` reseeds, everything else is the
    loader's.

    Over a stream, the Trainer's epoch after a resume is not the stream's: ``offset`` maps one on
    the other.
    """

    def __init__(self, loader: SeederLoader, seeder: Seeder) -> None:
        self.loader = loader
        self.seeder = seeder
        self.iterated = False
        self.stream: Optional[_StreamEpochs] = None
        self.offset = 0  # stream epoch - Trainer epoch
        self.resumed = False  # a loaded state: the next set_epoch sets the offset
        if loader.num_batches is None:  # no length: the Trainer counts it as one long epoch
            self.stream = _StreamEpochs()
            seeder.join(self.stream)

    def __getattr__(self, name: str) -> Any:
        if name == "loader":
            raise AttributeError(name)
        return getattr(self.loader, name)

    def __len__(self) -> int:
        return len(self.loader)

    def set_epoch(self, epoch: int) -> None:
        # The Trainer calls this right before iterating epoch `epoch`; after a resume inside that
        # epoch the seeder skips the reseed (the loaded state continues it).
        if self.stream is not None:
            if self.resumed:
                self.offset, self.resumed = self.loader.epoch - epoch, False
            elif epoch + self.offset != self.loader.epoch:  # the stream's next epoch
                self.stream.earlier += self.loader.batches_done
            epoch += self.offset
        self.seeder.reseed(TRAIN_TASK, epoch)

    def __iter__(self) -> Iterator[Any]:
        self.iterated = True
        return iter(self.loader)


class _SeederCheckpointCallback(TrainerCallback):
    """Writes every rank's seeder state into each checkpoint folder the Trainer saves (added
    by :class:`SeederTrainer`)."""

    def __init__(self, trainer: SeederTrainer) -> None:
        self.trainer = trainer
        self.stopping = False  # seeder verify asked for a stop at this step

    def on_save(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        """Write this rank's seeder state into the checkpoint folder the Trainer just saved."""
        # TrainingArguments fills in output_dir when it is not given
        output_dir = cast(str, args.output_dir)
        folder = os.path.join(output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
        if not os.path.isdir(folder):
            raise StateError(
                f"the Trainer saved no folder {folder}; SeederTrainer supports checkpoints in "
                "args.output_dir only (no hyperparameter search)"
            )
        train_loader = self.trainer.seeder_train_loader
        if train_loader is None or not train_loader.iterated:
            raise StateError(
                "the Trainer did not train from the seeder.DataLoader SeederTrainer built (was "
                "get_train_dataloader or the training loop replaced?); its position would not "
                "be saved"
            )
        save_checkpoint_state(folder, self.trainer.seeder)
        if self.stopping:
            hooks.emit(hooks.STOPPED, step=None)

    def on_step_end(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        """Under ``seeder verify``: at the step it asks for, save the Trainer's checkpoint and stop
        training."""
        if not self.stopping:
            hooks.emit(
                hooks.STEP,
                seeder=self.trainer.seeder,
                checkpoint=None,
                save=None,
                end=lambda: self._stop(control),
            )

    def _stop(self, control: TrainerControl) -> None:
        """Save the Trainer's checkpoint and end the training (a tool's stop at this step)."""
        self.stopping = True
        control.should_save = True
        control.should_training_stop = True


class SeederTrainer(Trainer):
    """A ``transformers.Trainer`` whose training data come from a :class:`seeder.DataLoader`.

    It takes the same arguments as ``Trainer``, and changes only the training data path and
    the checkpoint (see the module docstring). If the seeder is not initialised yet, it is
    initialised with ``args.seed`` as master seed.

    With ``elastic=True`` it trains from a ``seeder.ElasticDataLoader``: the same samples and
    augmentations on any number of processes. A checkpoint then resumes on another number
    of processes with the same global batch size (``per_device_train_batch_size`` times the
    number of processes).

    Args:
        *args: ``Trainer``'s arguments.
        seeder: the :class:`seeder.Seeder` to use; the default one when ``None``.
        elastic: train from an elastic loader (map-style datasets only).
        **kwargs: ``Trainer``'s keyword arguments.

    Raises:
        ValueError: a setting seeder cannot keep exact: ``ignore_data_skip=True`` (the
            loader resumes at its batch at no cost), ``auto_find_batch_size=True``, or a
            ``train_sampling_strategy`` other than ``"random"``.
        TypeError: ``elastic=True`` with an ``IterableDataset``, or ``seeder`` is not a
            :class:`seeder.Seeder`.

    Example:
        >>> import tempfile, torch, seeder
        >>> from transformers import TrainingArguments
        >>> class Net(torch.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.layer = torch.nn.Linear(2, 1)
        ...     def forward(self, x, labels):
        ...         return {"loss": ((self.layer(x).squeeze(-1) - labels) ** 2).mean()}
        >>> data = [{"x": torch.randn(2), "labels": torch.tensor(1.0)} for _ in range(8)]
        >>> args = TrainingArguments(
        ...     tempfile.mkdtemp(), max_steps=4, per_device_train_batch_size=2, save_steps=2,
        ...     report_to=[], use_cpu=True, disable_tqdm=True, logging_strategy="no")
        >>> full = SeederTrainer(model=Net(), args=args, train_dataset=data, seeder=seeder.Seeder())
        >>> _ = full.train()  # the Trainer prints its metrics  # doctest: +ELLIPSIS
        {'train_runtime': ...}
        >>> again = SeederTrainer(
        ...     model=Net(), args=args, train_dataset=data, seeder=seeder.Seeder())
        >>> _ = again.train(resume_from_checkpoint=f"{args.output_dir}/checkpoint-2")
        ... # doctest: +ELLIPSIS
        {'train_runtime': ...}
        >>> torch.equal(again.model.layer.weight, full.model.layer.weight)  # resumed mid-epoch
        True
    """

    def __init__(
        self, *args: Any, seeder: Optional[Seeder] = None, elastic: bool = False, **kwargs: Any
    ) -> None:
        seeder = resolve_seeder(
            seeder
        )  # before the Trainer's __init__: fail fast on a bad argument
        elastic = check_bool(elastic, "elastic")
        with expected(
            "the Trainer's set_seed(args.seed)"
        ):  # routed through the seeder, as every framework's
            super().__init__(*args, **kwargs)
        bad = []
        if self.args.ignore_data_skip:
            bad.append(
                "ignore_data_skip=True (the seeder.DataLoader resumes at its saved batch without "
                "replay; leave it False)"
            )
        if self.args.auto_find_batch_size:
            bad.append(
                "auto_find_batch_size=True (a changed batch size changes what a saved "
                "position means)"
            )
        if self.args.train_sampling_strategy != "random":
            bad.append(
                f"train_sampling_strategy={self.args.train_sampling_strategy!r} (seeder's sampler "
                f"shuffles; use 'random')"
            )
        if bad:
            raise ValueError("SeederTrainer does not support " + "; ".join(bad))
        if elastic and isinstance(self.train_dataset, torch.utils.data.IterableDataset):
            raise TypeError(
                f"SeederTrainer(elastic=True) needs a map-style train_dataset (with __getitem__ "
                f"and __len__), got the IterableDataset {type(self.train_dataset).__name__}; drop "
                f"elastic=True for a stream"
            )
        if self.args.data_seed is not None:
            warnings.warn(
                f"SeederTrainer ignores data_seed={self.args.data_seed}: the data order derives "
                f"from the seeder's master seed",
                SeederWarning,
                stacklevel=2,
            )
        self.seeder = seeder
        self.elastic = elastic
        if not seeder.initialized:
            seeder.init(master_seed=self.args.seed)
        self.seeder_train_loader: Optional[_TrainLoader] = None
        self._pending_state: Optional[dict[str, Any]] = None
        # the global RNG states the loaded seeder state set
        self._loaded_rngs: Optional[list[tuple[RNGAdapter, Any]]] = None
        self.add_callback(_SeederCheckpointCallback(self))

    # ------------------------------------------------------------------ data
    def _build_train_loader(self) -> SeederLoader:
        """The training loader from the Trainer's own settings (see the module docstring)."""
        if self.train_dataset is None:
            raise ValueError("Trainer: training requires a train_dataset.")
        dataset, collator = self.train_dataset, self.data_collator
        try:
            import datasets

            if isinstance(dataset, datasets.Dataset):
                dataset = self._remove_unused_columns(dataset, description="training")
            else:
                collator = self._get_collator_with_removed_columns(collator, description="training")
        except ImportError:
            collator = self._get_collator_with_removed_columns(collator, description="training")
        a = self.args
        workers = a.dataloader_num_workers
        extra: dict[str, Any] = {}  # DataLoader options torch accepts only with workers
        if workers > 0:
            extra = {
                "persistent_workers": a.dataloader_persistent_workers,
                "prefetch_factor": a.dataloader_prefetch_factor,
                "multiprocessing_context": a.dataloader_multiprocessing_context,
            }
        stream = isinstance(
            dataset, torch.utils.data.IterableDataset
        )  # a stream's order is its own (docs/dataloader.md)
        if stream:  # elastic=True over a stream was refused by __init__
            return IterableDataLoader(
                dataset,
                batch_size=self._train_batch_size,
                collate_fn=collator,
                num_workers=workers,
                pin_memory=a.dataloader_pin_memory,
                drop_last=a.dataloader_drop_last,
                seeder=self.seeder,
                **extra,
            )
        # elastic: batch_size per rank; the global batch is batch_size * world size
        kind = ElasticDataLoader if self.elastic else DataLoader
        return kind(
            dataset,
            batch_size=self._train_batch_size,
            shuffle=True,
            collate_fn=collator,
            num_workers=workers,
            pin_memory=a.dataloader_pin_memory,
            drop_last=a.dataloader_drop_last,
            seeder=self.seeder,
            **extra,
        )

    # The Trainer only sets the epoch of, iterates and measures what this returns: a _TrainLoader
    # around seeder's loader, not a torch DataLoader as the base class declares.
    def get_train_dataloader(self) -> _TrainLoader:  # type: ignore[override]
        """The training loader, built once per trainer, with a resumed seeder state applied.

        The Trainer calls it when training starts. A state read by :meth:`train` from
        ``resume_from_checkpoint`` loads here, once the loader exists.

        Returns:
            The seeder loader, seen by the Trainer through a thin wrapper whose
            ``set_epoch`` calls ``seeder.reseed(1, epoch)``.

        Example:
            >>> import tempfile, torch, seeder
            >>> from transformers import TrainingArguments
            >>> args = TrainingArguments(tempfile.mkdtemp(), per_device_train_batch_size=2,
            ...                          report_to=[], use_cpu=True)
            >>> trainer = SeederTrainer(model=torch.nn.Linear(2, 1), args=args,
            ...                         train_dataset=list(range(8)), seeder=seeder.Seeder())
            >>> loader = trainer.get_train_dataloader()
            >>> type(loader.loader).__name__, len(loader)
            ('DataLoader', 4)
        """
        if self.seeder_train_loader is None:
            self.seeder_train_loader = _TrainLoader(self._build_train_loader(), self.seeder)
        if self._pending_state is not None:
            state, self._pending_state = self._pending_state, None
            self.seeder.load_state_dict(state)
            self._loaded_rngs = save_states(self.seeder.global_adapters())
            self.seeder_train_loader.resumed = True
            logger.info(
                "seeder state restored: epoch %s, batch %d",
                self.seeder.last_reseed,
                self.seeder_train_loader.loader.batches_done,
            )
        return self.seeder_train_loader

    def _load_rng_state(self, checkpoint: Optional[str]) -> None:
        """The Trainer's ``rng_state_<rank>.pth``, then the global RNG states the seeder state set
        (they win).

        On the number of processes that saved the checkpoint both are the same states; on another,
        the Trainer's file is another rank's (or missing) and the seeder's are this rank's
        re-derived streams.
        """
        super()._load_rng_state(checkpoint)
        if checkpoint is not None and self._loaded_rngs is not None:
            put_back_states(self._loaded_rngs, strict=True)

    # ----------------------------------------------------------------- train
    def train(
        self,
        resume_from_checkpoint: Union[str, bool, None] = None,
        trial: object = None,
        ignore_keys_for_eval: Optional[list[str]] = None,
        **kwargs: Any,
    ) -> TrainOutput:
        """``Trainer.train``, resuming the seeder state from the checkpoint folder too.

        The folder's seeder state is validated on every rank before the Trainer loads
        anything. Under ``seeder verify``'s resumed run, with no checkpoint given, the last
        checkpoint of ``args.output_dir`` resumes.

        Args:
            resume_from_checkpoint: a checkpoint folder, ``True`` for the last one in
                ``args.output_dir``, or ``None``/``False`` for a fresh run.
            trial: refused: hyperparameter search is not supported.
            ignore_keys_for_eval: as for ``Trainer.train``.
            **kwargs: passed to ``Trainer.train``.

        Returns:
            ``Trainer.train``'s ``TrainOutput``.

        Raises:
            ValueError: ``trial`` is given, or ``True`` finds no checkpoint.
            seeder.StateError: the checkpoint's seeder state is missing or does not fit
                this run; nothing was changed.

        Example:
            >>> import tempfile, torch, seeder
            >>> from transformers import TrainingArguments
            >>> args = TrainingArguments(tempfile.mkdtemp(), report_to=[], use_cpu=True)
            >>> trainer = SeederTrainer(model=torch.nn.Linear(2, 1), args=args,
            ...                         train_dataset=list(range(8)), seeder=seeder.Seeder())
            >>> trainer.train(resume_from_checkpoint=True)  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            ...
            ValueError: No valid checkpoint found in output directory (...)
        """
        if trial is not None:
            raise ValueError(
                "SeederTrainer does not support hyperparameter search (trial=...): use Trainer"
            )
        checkpoint: Optional[str]
        if resume_from_checkpoint is True:
            checkpoint = get_last_checkpoint(self.args.output_dir)
            if checkpoint is None:
                raise ValueError(
                    f"No valid checkpoint found in output directory ({self.args.output_dir})"
                )
        elif resume_from_checkpoint is False:
            checkpoint = None
        else:
            checkpoint = resume_from_checkpoint
        if checkpoint is None and hooks.ask(hooks.RESUME):  # a tool's resumed run (seeder verify)
            output_dir = self.args.output_dir
            checkpoint = (
                get_last_checkpoint(output_dir)
                if output_dir is not None and os.path.isdir(output_dir)
                else None
            )
        if self.seeder_train_loader is None:
            self.seeder_train_loader = _TrainLoader(self._build_train_loader(), self.seeder)
        self.seeder_train_loader.iterated = False
        self._loaded_rngs = None
        if checkpoint is not None:
            self._pending_state = read_checkpoint_state(checkpoint, self.seeder)
            hooks.emit(
                hooks.RESUMED,
                step=int(str(checkpoint).rstrip("/").rsplit("-", 1)[-1] or 0)
                if str(checkpoint).rsplit("-", 1)[-1].isdigit()
                else None,
            )
        with self._answer_skip(), expected("the Trainer's set_seed(args.seed) before model_init"):
            return super().train(
                resume_from_checkpoint=checkpoint,
                trial=None,
                ignore_keys_for_eval=ignore_keys_for_eval,
                **kwargs,
            )

    @contextlib.contextmanager
    def _answer_skip(self) -> Iterator[None]:
        """While training, the Trainer's ``skip_first_batches`` returns our loader, which already
        stands at that batch."""
        require("transformers:trainer.skip_first_batches")
        require("transformers:Trainer._load_rng_state")
        original = _hf_trainer_module.skip_first_batches
        ours = self.seeder_train_loader
        if ours is None:  # train() builds the loader before it enters this context
            raise RuntimeError("SeederTrainer: no training loader to resume")

        def skip_first_batches(dataloader: object, num_batches: int = 0) -> object:
            if dataloader is not ours:
                return original(dataloader, num_batches)
            state = ours.loader.state_dict()
            position = ours.loader.batches_done
            if ours.stream is not None and ours.stream.earlier + position != num_batches:
                raise StateError(
                    f"the Trainer resumes after {num_batches} batches, but the stream stands at "
                    f"batch {position} of its epoch {state['epoch']} after {ours.stream.earlier} "
                    f"batches of its earlier epochs. Resume from a checkpoint folder written by "
                    f"one SeederTrainer save (see docs/huggingface.md#a-stream-as-train_dataset)"
                )
            if ours.stream is not None:
                # the batches of the stream's earlier epochs count in the Trainer's epoch
                position = num_batches
            if position != num_batches:
                raise StateError(
                    f"the Trainer resumes after batch {num_batches} of the epoch but the seeder "
                    f"state stands at batch {position}: the checkpoint's trainer_state.json and "
                    f"seeder_state files come from different moments; resume from a checkpoint "
                    f"folder written by one SeederTrainer save"
                )
            logger.info("resuming at batch %d of the epoch without replay", position)
            return dataloader

        _hf_trainer_module.skip_first_batches = skip_first_batches
        try:
            yield
        finally:
            _hf_trainer_module.skip_first_batches = original
