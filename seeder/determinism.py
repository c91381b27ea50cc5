"""Determinism helpers. Stands apart from the seeder core.

Example:
    >>> seed = enforce_reproducibility(1234)
    >>> seed
    1234
"""
from __future__ import annotations

import logging
import random
import secrets
from typing import Optional

import numpy as np
import torch

from .derive import check_master_seed, numpy_seed

__all__ = ["enforce_reproducibility"]

logger = logging.getLogger("seeder")


def enforce_reproducibility(use_seed: Optional[int] = None) -> int:
    """Seed ``random``, NumPy and torch (CPU and all devices) with one seed and return it.

    Seed 000's helper: with ``use_seed=None`` a seed is drawn from OS entropy, logged
    ("Using seed: N") and returned, and cuDNN is left fast; with a seed, cuDNN is
    also made deterministic (``deterministic=True``, ``benchmark=False``), which can
    be slower. Unlike :func:`seeder.reseed` the seed is used as given, not derived.

    >>> enforce_reproducibility(7)
    7
    """
    seed = check_master_seed(use_seed, "use_seed") if use_seed is not None else 1 + secrets.randbelow(1_000_000)
    logger.info("Using seed: %d", seed)
    random.seed(seed)
    np.random.seed(numpy_seed(seed))
    torch.manual_seed(seed)  # CPU and every device type
    if use_seed is not None:
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    return seed
