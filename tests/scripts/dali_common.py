"""Real DALI CPU pipelines shared by the DALI tests and their torchrun scripts (needs
nvidia.dali)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import numpy as np
from nvidia.dali import fn, pipeline_def, types

BATCH = 4


class IndexSource:
    """external_source callback fed by sample index: a generated image and the index.

    A pure function of the sample info, so DALI checkpoints capture its position.
    With ``epoch_size`` the epoch ends after that many samples (StopIteration).
    """

    def __init__(self, epoch_size: Optional[int] = None):
        self.epoch_size = epoch_size

    def __call__(self, info: Any) -> tuple[np.ndarray, np.ndarray]:
        if self.epoch_size is not None and info.idx_in_epoch >= self.epoch_size:
            raise StopIteration
        rng = np.random.default_rng(info.idx_in_epoch)
        image = rng.integers(0, 256, size=(12, 12, 3), dtype=np.uint8)
        return image, np.array(info.idx_in_epoch, dtype=np.int64)


@pipeline_def(batch_size=BATCH, num_threads=1, device_id=None)
def augment_pipeline(epoch_size: Optional[int] = None):
    """Generated images with random flips and a random crop, the sample index, and uniform noise."""
    image, index = fn.external_source(
        source=IndexSource(epoch_size), num_outputs=2, batch=False, dtype=[types.UINT8, types.INT64]
    )
    image = fn.flip(
        image, horizontal=fn.random.coin_flip(), vertical=fn.random.coin_flip(probability=0.3)
    )
    image = fn.crop(
        image,
        crop=(8, 8),
        crop_pos_x=fn.random.uniform(range=(0.0, 1.0)),
        crop_pos_y=fn.random.uniform(range=(0.0, 1.0)),
    )
    noise = fn.random.uniform(range=(-1.0, 1.0), shape=[3])
    return image, index, noise


def run(pipe: Any, n: int) -> list[tuple[np.ndarray, ...]]:
    """``n`` batches of ``pipe`` as numpy arrays (copied)."""
    return [tuple(np.array(out.as_tensor()).copy() for out in pipe.run()) for _ in range(n)]


def same(a: Sequence[Sequence[np.ndarray]], b: Sequence[Sequence[np.ndarray]]) -> bool:
    """Whether two runs produced exactly the same batches."""
    return len(a) == len(b) and all(
        len(x) == len(y) and all(np.array_equal(u, v) for u, v in zip(x, y)) for x, y in zip(a, b)
    )


def digest(batches: Sequence[Sequence[Any]]) -> str:
    """A short hash of a run's batches (numpy arrays or torch tensors)."""
    import hashlib

    h = hashlib.sha256()
    for batch in batches:
        for arr in batch:
            h.update(np.ascontiguousarray(np.asarray(arr)).tobytes())
    return h.hexdigest()[:16]
