"""A :class:`seeder.DistributedSampler`'s state: its keys, and the checks that a state fits the
sampler and the run it is loaded into (the shuffle key its master seed derives, the epoch of the
run's last reseed). Each raises :class:`seeder.StateError` before anything changes.

Example:
    >>> SAMPLER_STATE_VERSION, "position" in SAMPLER_STATE_KEYS
    (1, True)
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from seeder._checks import check_state_header, is_int
from seeder._errors import StateError
from seeder._seeding.core import Seeder
from seeder._seeding.derive import MAX_KEY, shuffle_seed
from seeder._seeding.participant import LoadContext
from seeder.data._order import M64, shuffle_key

__all__ = ["SAMPLER_STATE_VERSION", "SAMPLER_STATE_KEYS", "check_sampler_state", "run_constraints"]

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

    >>> check_sampler_state({"format": "x"}, {}, 4)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    seeder.StateError: not a sampler state: pass the dict returned by ...
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
    seeder: Seeder,
    seed: Optional[int],
    mode: str,
    task: int,
    stream: int,
    shuffle: bool,
    manual: bool,
    load: Optional[LoadContext] = None,
) -> tuple[Callable[[int], Optional[int]], Optional[int]]:
    """What a sampler state must agree with in the run it is loaded into: ``(key of an epoch, epoch
    or None)``.

    The run is ``load``, the one a seeder state describes while ``seeder.load_state_dict`` loads
    it, else (``None``) the seeder's own. The key of an epoch is ``None`` when no master seed is
    known yet. During a ``seeder.load_state_dict``, unless the epoch is set by hand (``manual``),
    the epoch is the last reseed's when that reseed was of the sampler's ``task``, and 0 when the
    state has no reseed at all.

    >>> from seeder import Seeder
    >>> s = Seeder(); s.init(3)
    >>> key_of, epoch = run_constraints(s, None, "feistel", 1, 0, True, False)
    >>> key_of(0) == s.derive(3, 1, 0, rank=0), epoch
    (True, None)
    """
    master = seeder.run.master if load is None else load.master

    def key_of(epoch: int) -> Optional[int]:
        if not shuffle:
            return 0
        if seed is not None:
            return shuffle_key(seeder, seed, mode, task, epoch, stream)
        return None if master is None else shuffle_seed(master, task, epoch, stream)

    if load is None or manual:
        return key_of, None
    last = load.last
    if last is None:  # no reseed in that run: a sampler that follows reseed is in its first epoch
        return key_of, 0
    return key_of, (last[1] if last[0] == task else None)
