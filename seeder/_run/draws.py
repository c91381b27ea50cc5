"""How many numbers the global Mersenne-Twister RNGs gave out between two moments.

torch's CPU generator, NumPy's global ``RandomState`` and Python's ``random`` are each a
Mersenne Twister: 624 words and a position. The state of one after ``n`` draws is that of
the other advanced ``n`` numbers, so the count between two states is found by generating the
stream of the first (NumPy's ``MT19937``) until the next numbers of the second appear.
:mod:`seeder._run.steps` records the count per optimizer step under ``seeder verify``; a
resumed run that draws more in its first step than the uninterrupted run did drew something
before its checkpoint and again after it.

Example:
    >>> import torch
    >>> _ = torch.manual_seed(1); before = mt_states()["torch"]
    >>> _ = torch.randint(100, (12,))
    >>> drawn(before, mt_states()["torch"])
    12
"""

from __future__ import annotations

import hashlib
import random
from typing import Any, Optional

from seeder._internals import require

__all__ = [
    "RNG_NAMES",
    "DRAW_LIMIT",
    "mt_states",
    "drawn",
    "fingerprint",
    "states_tensor",
    "states_from_tensor",
]

#: The global RNGs whose draws are counted, in the order of :func:`states_tensor`'s rows.
RNG_NAMES = ("torch", "numpy", "python")
#: Numbers searched for one RNG state after another before the answer is "unknown" (a reseed).
DRAW_LIMIT = 1 << 20


def mt_states() -> dict[str, tuple[Any, int]]:
    """The Mersenne-Twister states of the global RNGs, read without changing them.

    Returns:
        ``{name: (key, position)}`` for :data:`RNG_NAMES` (torch's CPU generator, NumPy's global
        ``RandomState``, Python's ``random``), as NumPy's ``MT19937`` takes them: 624 ``uint32``
        words and a position from 0 to 624 (624: the key is used up). torch's is read from its
        state's layout (``torch:CPUGeneratorImplState`` in :mod:`seeder._internals`), left out
        when that changed.

    >>> import random
    >>> random.seed(3); before = mt_states()["python"]; _ = random.getrandbits(32)
    >>> drawn(before, mt_states()["python"])
    1
    """
    import numpy as np
    import torch

    from seeder._seeding.rngs import mt_state

    out: dict[str, tuple[Any, int]] = {}  # in the order of RNG_NAMES
    if require("torch:CPUGeneratorImplState"):  # a changed layout warns once; then no torch counts
        # CPUGeneratorImplState: left i32 at byte 8, next u64 at 16, the 624 words (u64) from 24
        raw = torch.get_rng_state().numpy()
        left, nxt = int(raw[8:12].view("<i4")[0]), int(raw[16:24].view("<u8")[0])
        words = raw[24 : 24 + 624 * 8].view("<u8").astype(np.uint32)
        out["torch"] = (words, 624 if left == 1 else nxt)
    _, key, pos = mt_state()[:3]
    out["numpy"] = (np.asarray(key, dtype=np.uint32), int(pos))
    internal = random.getstate()[1]  # 624 words, then the position
    out["python"] = (np.asarray(internal[:624], dtype=np.uint32), int(internal[624]))
    return out


def states_tensor(states: dict[str, tuple[Any, int]]) -> Any:
    """``mt_states()`` as one int64 tensor, a row per RNG (:data:`RNG_NAMES`): key, position."""
    import numpy as np
    import torch

    rows = [np.append(states[name][0].astype(np.int64), states[name][1]) for name in RNG_NAMES]
    return torch.from_numpy(np.stack(rows))


def states_from_tensor(value: Any) -> dict[str, tuple[Any, int]]:
    """The states :func:`states_tensor` made, checked: a ``StateError`` for what no Mersenne Twister
    is in."""
    import numpy as np
    import torch

    from seeder._errors import StateError

    if (
        not isinstance(value, torch.Tensor)
        or value.dtype != torch.int64
        or tuple(value.shape) != (len(RNG_NAMES), 625)
    ):
        raise StateError(
            "the verify step counter's 'rngs' must be an int64 tensor of shape (3, 625)"
        )
    rows = value.numpy()
    keys, positions = rows[:, :624], rows[:, 624]
    if (
        rows.min() < 0
        or keys.max() >= 1 << 32
        or positions.max() > 624
        or not keys.any(axis=1).all()
    ):
        raise StateError(
            "the verify step counter's 'rngs' holds no Mersenne-Twister state (words "
            "of 32 bits, not all 0, a position up to 624); the checkpoint is corrupt"
        )
    return {
        name: (keys[i].astype(np.uint32), int(positions[i])) for i, name in enumerate(RNG_NAMES)
    }


def fingerprint(state: tuple[Any, int]) -> str:
    """A short hash (16 hex digits) of a ``(key, position)`` state, equal when the states are."""
    raw = state[0].tobytes() + state[1].to_bytes(2, "little")
    return hashlib.blake2b(raw, digest_size=8).hexdigest()


def drawn(
    before: tuple[Any, int], after: tuple[Any, int], limit: int = DRAW_LIMIT
) -> Optional[int]:
    """How many 32-bit numbers a Mersenne Twister gave out to go from one state to another.

    Args:
        before: ``(key, position)``, as :func:`mt_states` gives them.
        after: a later state of the same generator.
        limit: the most numbers searched.

    Returns:
        The count, or ``None`` when ``after`` is not within ``limit`` numbers of ``before`` (a
        reseed, a ``set_state``, a bigger draw).

    >>> import numpy as np
    >>> rs = np.random.RandomState(3); a = rs.get_state()[1:3]
    >>> _ = rs.random_sample(5); b = rs.get_state()[1:3]
    >>> drawn(a, b), drawn(b, a, limit=5000)
    (10, None)
    """
    import numpy as np

    if before[1] == after[1] and np.array_equal(before[0], after[0]):
        return 0
    target = _stream(after, 3)
    gen, base, chunk, tail = _generator(before), 0, 4096, np.zeros(0, dtype=np.uint64)
    while base < limit:
        out = np.concatenate([tail, gen.random_raw(chunk)])
        for at in np.flatnonzero(out[:-2] == target[0]):
            if out[at + 1] == target[1] and out[at + 2] == target[2]:
                return base - len(tail) + int(at)
        base += chunk
        tail, chunk = out[-2:], min(chunk * 4, max(limit - base, 1))
    return None


def _generator(state: tuple[Any, int]) -> Any:
    import numpy as np

    gen = np.random.MT19937()
    gen.state = {"bit_generator": "MT19937", "state": {"key": state[0], "pos": state[1]}}
    return gen


def _stream(state: tuple[Any, int], n: int) -> Any:
    return _generator(state).random_raw(n)
