"""Validation for :class:`seeder.DistributedSampler`: its arguments and the states it loads.

Each check raises before anything changes, naming what was wrong and what to pass.

Example:
    >>> check_sampler_args(range(5), 2, 1, True, None, False, "feistel", 1, 0, None)
    (5, 2, 1, True, None, False, 1, 0, None)
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch.distributed

from seeder._checks import check_bool, check_state_header, is_int
from seeder._errors import StateError
from seeder._seeding.derive import MAX_KEY, MAX_MASTER_SEED, check_key, shuffle_seed
from seeder._seeding.distributed import MAX_WORLD_SIZE, process_group_active
from seeder.data._order import M64, MODES, shuffle_key

__all__ = [
    "SAMPLER_STATE_VERSION",
    "SAMPLER_STATE_KEYS",
    "check_sampler_args",
    "check_sampler_state",
    "run_constraints",
    "check_advance",
]

#: Version of the layout of :meth:`DistributedSampler.state_dict`.
SAMPLER_STATE_VERSION = 1
#: The keys of :meth:`DistributedSampler.state_dict`.
SAMPLER_STATE_KEYS = frozenset(
    {
        "format",
        "version",
        "mode",
        "epoch",
        "position",
        "key",
        "dataset_len",
        "num_replicas",
        "shuffle",
        "drop_last",
        "task",
        "stream",
    }
)
_WHAT = {
    "mode": "mode=",
    "dataset_len": "a dataset of length",
    "num_replicas": "num_replicas=",
    "shuffle": "shuffle=",
    "drop_last": "drop_last=",
    "task": "task=",
    "stream": "stream=",
}


def check_sampler_args(
    dataset: Any,
    num_replicas: Any,
    rank: Any,
    shuffle: Any,
    seed: Any,
    drop_last: Any,
    mode: Any,
    task: Any,
    stream: Any,
    with_epoch: Any,
) -> tuple[int, int, int, bool, Optional[int], bool, int, int, Optional[bool]]:
    """The sampler's arguments in plain types.

    Returns ``(len(dataset), num_replicas, rank, shuffle, seed, drop_last, task, stream,
    with_epoch)``; ``num_replicas``/``rank`` ``None`` take the process group's (one replica without
    one).

    >>> check_sampler_args(range(5), 2, 2, True, None, False, "feistel", 1, 0, None)
    Traceback (most recent call last):
    ...
    ValueError: Invalid rank 2: rank must be in [0, 1] for num_replicas=2
    """
    try:
        n = len(dataset)
    except TypeError:
        raise TypeError(
            f"DistributedSampler needs a dataset with __len__, got {type(dataset).__name__}"
        ) from None
    except OverflowError:
        raise ValueError(
            f"the dataset's __len__ returned more than Python's len() can hold (sys.maxsize = "
            f"2**63 - 1); seeder.DistributedSampler takes datasets of up to 2**63 - 1 items: split "
            f"{type(dataset).__name__} into several datasets"
        ) from None
    if num_replicas is None:
        num_replicas = torch.distributed.get_world_size() if process_group_active() else 1
    if rank is None:
        rank = torch.distributed.get_rank() if process_group_active() else 0
    if not is_int(num_replicas):
        raise TypeError(
            f"num_replicas must be an int (the number of ranks), got {type(num_replicas).__name__} "
            f"{num_replicas!r}"
        )
    if not 1 <= num_replicas <= MAX_WORLD_SIZE:
        raise ValueError(
            f"num_replicas must be in [1, 2**32] (the number of ranks; a rank is one 32-bit word "
            f"of the batch seeds' key), got {num_replicas}"
        )
    if not is_int(rank):
        raise TypeError(f"rank must be an int, got {type(rank).__name__} {rank!r}")
    if not 0 <= rank < num_replicas:
        raise ValueError(
            f"Invalid rank {rank}: rank must be in [0, {num_replicas - 1}] for "
            f"num_replicas={num_replicas}"
        )
    shuffle = check_bool(shuffle, "shuffle")
    drop_last = check_bool(drop_last, "drop_last")
    if seed is not None:
        if not is_int(seed):
            raise TypeError(
                f"seed must be None (use the seeder's master seed) or an int, got "
                f"{type(seed).__name__} {seed!r}"
            )
        if not 0 <= seed <= MAX_MASTER_SEED:
            raise ValueError(
                f"seed must be None (use the seeder's master seed) or an int in [0, 2**63 - 1], "
                f"got {seed!r}"
            )
        seed = int(seed)
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    task, stream = check_key(task, "task"), check_key(stream, "stream")
    if with_epoch is not None:
        with_epoch = check_bool(with_epoch, "with_epoch")
    return int(n), int(num_replicas), int(rank), shuffle, seed, drop_last, task, stream, with_epoch


def check_sampler_state(
    state: Any,
    layout: dict[str, Any],
    num_samples: int,
    derived_key: Optional[Callable[[int], Optional[int]]] = None,
    run_epoch: Optional[int] = None,
) -> None:
    """Raise :class:`seeder.StateError` unless ``state`` is a sampler state saved with ``layout``;
    change nothing.

    ``layout`` holds the sampler's ``mode``, ``dataset_len``, ``num_replicas``, ``shuffle``,
    ``drop_last``, ``task`` and ``stream``; ``num_samples`` bounds the position.
    ``derived_key(epoch)`` is the shuffle key the master seed derives for an epoch (``None``:
    not known); ``run_epoch`` the epoch the seeder's last reseed puts this sampler in (``None``:
    no such constraint). A state that disagrees with either came from another run.

    >>> check_sampler_state({"format": "x"}, {}, 4)
    Traceback (most recent call last):
    ...
    seeder._errors.StateError: not a sampler state: pass the dict returned by DistributedSampler.state_dict()
    """
    check_state_header(
        state,
        "seeder.sampler",
        SAMPLER_STATE_VERSION,
        SAMPLER_STATE_KEYS,
        "sampler",
        "DistributedSampler",
    )
    for name, have in layout.items():
        if state[name] != have or type(state[name]) is not type(have):
            raise StateError(
                f"the sampler state was saved with {_WHAT[name]} {state[name]!r}, this sampler has "
                f"{have!r}; resume with the same dataset, world size and sampler arguments"
            )
    for name, hi in (("epoch", MAX_KEY), ("key", M64)):
        if not is_int(state[name]) or not 0 <= state[name] <= hi:
            raise StateError(
                f"sampler state[{name!r}] must be an int in [0, {hi}], got {state[name]!r}"
            )
    pos = state["position"]
    if not is_int(pos) or not 0 <= pos <= num_samples:
        raise StateError(
            f"sampler state['position'] must be an int in [0, {num_samples}], got {pos!r}"
        )
    if run_epoch is not None and state["epoch"] != run_epoch:
        raise StateError(
            f"the sampler state is in epoch {state['epoch']} but the seeder state's last reseed is "
            f"epoch {run_epoch} of the sampler's task; the two states come from different points "
            f"of a run (save both at the same step)"
        )
    want = derived_key(int(state["epoch"])) if derived_key is not None else None
    if want is not None and state["key"] != want:
        raise StateError(
            f"sampler state['key'] {state['key']} is not the shuffle key of epoch {state['epoch']} "
            f"({want}) for this master seed and sampler; the state comes from another run or seed: "
            "load the seeder state it was saved with (seeder.load_state_dict) or init with that "
            "master seed"
        )


def run_constraints(
    seeder: Any, seed: Optional[int], mode: str, task: int, stream: int, shuffle: bool, manual: bool
) -> tuple[Callable[[int], Optional[int]], Optional[int]]:
    """What a sampler state must agree with in the run it is loaded into: ``(key of an epoch, epoch
    or None)``.

    The run is the one a seeder state describes while ``seeder.load_state_dict`` checks it
    (``seeder.loading``), else the seeder's own. The key of an epoch is ``None`` when no master
    seed is known yet. During a ``seeder.load_state_dict``, unless the epoch is set by hand
    (``manual``), the epoch is the last reseed's when that reseed was of the sampler's ``task``,
    and 0 when the state has no reseed at all.

    >>> from seeder import Seeder
    >>> s = Seeder(); s.init(3); key_of, epoch = run_constraints(s, None, "feistel", 1, 0, True, False)
    >>> key_of(0) == s.derive(3, 1, 0, rank=0), epoch
    (True, None)
    """
    loading = seeder.loading
    run = loading or seeder.run

    def key_of(epoch: int) -> Optional[int]:
        if not shuffle:
            return 0
        if seed is not None:
            return shuffle_key(seeder, seed, mode, task, epoch, stream)
        return None if run.master is None else shuffle_seed(run.master, task, epoch, stream)

    if loading is None or manual:
        return key_of, None
    last = loading.last
    if (
        last is None
    ):  # no reseed yet in that run: a sampler that follows reseed is still in its first epoch
        return key_of, 0
    return key_of, (last[1] if last[0] == task else None)


def check_advance(n: Any, consumed: int, handed: int, num_samples: int, epoch: int) -> int:
    """``n`` as an int if ``consumed + n`` samples stay within the ``handed`` ones, else
    ``ValueError`` naming the fix.

    >>> check_advance(3, 0, 4, 8, 0)
    3
    """
    if not is_int(n) or n < 0:
        raise ValueError(f"advance() takes the number of samples consumed (an int >= 0), got {n!r}")
    if consumed + n > handed:
        raise ValueError(
            f"advance({n}) would count {consumed + n} samples consumed in epoch {epoch}, more than "
            f"the {handed} (of {num_samples}) this sampler has handed out; pass the size of the "
            f"batch actually trained on (e.g. len(labels)), once per batch"
        )
    return int(n)
