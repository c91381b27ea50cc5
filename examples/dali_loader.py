"""A DALI CPU input pipeline for the example training script, seeded and resumable through seeder.

Synthetic labelled images come from an ``external_source`` callback that is a
pure function of DALI's sample info (epoch, index in epoch), so DALI's
checkpoints capture its position; random crop and flip run in DALI with the
pipeline seed from :func:`seeder.data.dali.pipeline_seed`. Works without a GPU
(``device_id=None``).

Wiring into a training script (``--loader dali``)::

    from dali_loader import DaliLoader
    loader = DaliLoader(batch_size=32, dataset_size=1024)  # after seeder.init
    ckpt = seeder.Checkpoint("ckpt/last.pt", model=model, optimizer=optimizer)
    start = ckpt.resume(resuming)  # seeder.load_state_dict inside
    loader.restore()  # rebuild from the DALI checkpoint it loaded
    for epoch in range(start, epochs):
        seeder.reseed(1, epoch)
        for images, labels in loader:  # float32 NCHW, int64 N
            ...
            ckpt.step()  # the seeder state holds the DALI checkpoint

``DaliLoader(..., state=saved_seeder_state)`` builds the pipeline at the saved position
instead, for a script that reads its checkpoint before building the loader.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Optional

import numpy as np

import seeder
from seeder.data.dali import pipeline_kwargs, pipeline_seed, require_dali, track

__all__ = ["SyntheticSource", "DaliLoader"]


class SyntheticSource:
    """``external_source`` callback: sample info -> (HWC uint8 image, int64 label).

    Sample ``i`` of the data set is a fixed function of ``i`` (its class sets its
    brightness, so a model can learn it). Each epoch visits the data set in an
    order drawn from ``order_seed`` and the epoch (the same on every rank), and
    rank ``r`` of ``world_size`` takes every ``world_size``-th sample of it. The
    epoch ends after ``samples_per_rank`` samples (a multiple of the batch size).
    """

    def __init__(
        self,
        dataset_size: int,
        samples_per_rank: int,
        *,
        image_size: int,
        channels: int,
        num_classes: int,
        rank: int,
        world_size: int,
        order_seed: int,
    ):
        self.dataset_size = dataset_size
        self.samples_per_rank = samples_per_rank
        self.image_size = image_size
        self.channels = channels
        self.num_classes = num_classes
        self.rank = rank
        self.world_size = world_size
        self.order_seed = order_seed
        self._order: tuple[int, Optional[np.ndarray]] = (-1, None)

    def order(self, epoch: int) -> np.ndarray:
        """The data-set order of ``epoch`` (cached for the current epoch)."""
        if self._order[0] != epoch:
            rng = np.random.default_rng([self.order_seed, epoch])
            self._order = (epoch, rng.permutation(self.dataset_size))
        return self._order[1]  # type: ignore[return-value]

    def sample(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """Sample ``index`` of the data set."""
        label = index % self.num_classes
        rng = np.random.default_rng([0x5EED, index])
        level = 40 + 170 * label / max(1, self.num_classes - 1)
        image = rng.normal(level, 25, size=(self.image_size, self.image_size, self.channels))
        return np.clip(image, 0, 255).astype(np.uint8), np.array(label, dtype=np.int64)

    def __call__(self, info: Any) -> tuple[np.ndarray, np.ndarray]:
        if info.idx_in_epoch >= self.samples_per_rank:
            raise StopIteration
        index = int(self.order(info.epoch_idx)[info.idx_in_epoch * self.world_size + self.rank])
        return self.sample(index)


def _define(source: SyntheticSource, crop: int, **pipeline_args: Any) -> Any:
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def
    def graph() -> Any:
        images, labels = fn.external_source(
            source=source, num_outputs=2, batch=False, dtype=[types.UINT8, types.INT64]
        )
        images = fn.crop_mirror_normalize(
            images,
            crop=(crop, crop),
            crop_pos_x=fn.random.uniform(range=(0.0, 1.0)),
            crop_pos_y=fn.random.uniform(range=(0.0, 1.0)),
            mirror=fn.random.coin_flip(),
            mean=[127.5] * source.channels,
            std=[64.0] * source.channels,
            dtype=types.FLOAT,
            output_layout="CHW",
        )
        return images, labels

    return graph(**pipeline_args)


class DaliLoader:
    """Batches ``(images float32 [N, C, crop, crop], labels int64 [N])`` from a DALI CPU pipeline.

    The pipeline's seed is ``pipeline_seed(pipeline_id)`` (different per
    rank), checkpointing is on, and the pipeline and its PyTorch iterator are tracked
    by the seeder, so ``seeder.state_dict()`` holds their checkpoint. Pass ``state``
    (a saved ``seeder.state_dict()``) to rebuild at the saved position, then call
    ``seeder.load_state_dict(state)``; or build it without, load the state, and call
    :meth:`restore`. Call after ``seeder.init``. ``len(loader)`` is
    the number of batches in a full epoch; a loader restored mid-epoch first
    finishes that epoch.
    """

    def __init__(
        self,
        *,
        batch_size: int,
        dataset_size: int,
        image_size: int = 16,
        crop: int = 12,
        channels: int = 3,
        num_classes: int = 10,
        pipeline_id: int = 0,
        state: Optional[dict[str, Any]] = None,
        num_threads: int = 1,
        seeder_obj: Optional[seeder.Seeder] = None,
    ):
        require_dali()
        s = seeder_obj if seeder_obj is not None else seeder.default_seeder()
        if not 0 < crop <= image_size:
            raise ValueError(f"crop must be in [1, image_size={image_size}], got {crop}")
        per_rank = dataset_size // s.world_size // batch_size * batch_size
        if per_rank == 0:
            raise ValueError(
                f"dataset_size={dataset_size} gives no full batch of {batch_size} on each of "
                f"{s.world_size} rank(s); use a larger data set or a smaller batch"
            )
        self.batch_size = batch_size
        self.batches_per_epoch = per_rank // batch_size
        self.source = SyntheticSource(
            dataset_size,
            per_rank,
            image_size=image_size,
            channels=channels,
            num_classes=num_classes,
            rank=s.rank,
            world_size=s.world_size,
            # the data order is shared by all ranks (a different task id from the pipeline seed)
            order_seed=pipeline_seed(pipeline_id, shared=True, task_id=1, seeder=s),
        )
        self._build_args = dict(crop=crop, batch_size=batch_size, num_threads=num_threads)
        self.pipeline_id, self._seeder = pipeline_id, s
        self.pipeline, self.iterator = self._build(
            pipeline_kwargs(pipeline_id, state=state, seeder=s)
        )
        self.tracked = track(self.pipeline, pipeline_id, iterator=self.iterator, seeder=s)
        self.position = 0  # batches of the current epoch yielded so far
        s.join(self)  # a participant: the position travels in seeder.state_dict()

    # A DALI iterator restored from a checkpoint taken after an epoch's last batch runs on into the
    # next epoch, so the loader keeps its own position: restored at an epoch's end, it yields
    # nothing until the next epoch.
    seeder_kind = "dali_loader_position"

    def seeder_reseed(self, seeder_obj: Any, task_id: int, epoch: int) -> None:
        """An epoch starts."""
        self.position = 0

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position}

    def check_state_dict(self, state: Any) -> None:
        if (
            not isinstance(state, dict)
            or set(state) != {"position"}
            or type(state["position"]) is not int
        ):
            raise seeder.StateError("a DaliLoader position must be {'position': int}")

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.position = state["position"]

    def _build(self, kwargs: dict[str, Any]) -> tuple[Any, Any]:
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        a = self._build_args
        pipeline = _define(
            self.source,
            a["crop"],
            batch_size=a["batch_size"],
            num_threads=a["num_threads"],
            device_id=None,
            **kwargs,
        )
        iterator = DALIGenericIterator(
            pipeline, ["image", "label"], auto_reset=True, last_batch_policy=LastBatchPolicy.DROP
        )
        return pipeline, iterator

    def restore(self) -> None:
        """After ``seeder.load_state_dict`` (``seeder.Checkpoint.resume``), rebuild the pipeline
        from the DALI checkpoint it loaded, so that it continues the saved run; nothing when none
        was loaded."""
        checkpoint = self.tracked.checkpoint
        if checkpoint is None:
            return
        kwargs = {
            **pipeline_kwargs(self.pipeline_id, seeder=self._seeder),
            "checkpoint": checkpoint,
        }
        self.pipeline, self.iterator = self._build(kwargs)
        self.tracked.replace(self.pipeline, self.iterator)

    def __len__(self) -> int:
        return self.batches_per_epoch

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        if self.position >= self.batches_per_epoch:  # restored after the epoch's last batch
            self.position = 0
            return
        for batch in self.iterator:
            self.position += 1
            yield batch[0]["image"], batch[0]["label"]
        self.position = 0

    def close(self) -> None:
        """Stop tracking the pipeline (e.g. before building a new loader with the same id in this
        process)."""
        self._seeder.unregister_generator(self.pipeline)
        self._seeder.leave(self)
