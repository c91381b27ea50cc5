"""The state of a ``seeder.IterableDataLoader`` of one stream per worker: its keys, and the checks
that it is a position the loader can continue from, in the run it is loaded into.

The loader hands batches out in a fixed round robin over its workers (worker ``0, 1, ..., 0, 1,
...``, an exhausted worker skipped): a state is a position of that round robin
(:func:`check_stream_state`), in the epoch the run stands in (:func:`run_epoch`).

Example:
    >>> check_stream_state({"format": "x"}, {}, None, lambda w, s: None)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    seeder.StateError: not a seeder.IterableDataLoader state: pass the dict returned by ...
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional

from seeder._checks import check_state_header, is_int
from seeder._errors import StateError
from seeder._seeding.derive import MAX_KEY
from seeder._seeding.participant import LoadContext

if TYPE_CHECKING:
    from seeder._seeding.core import Seeder

__all__ = [
    "STREAM_STATE_VERSION",
    "STREAM_STATE_KEYS",
    "WORKER_KEYS",
    "check_stream_state",
    "run_epoch",
]

#: Version of the layout of :meth:`seeder.IterableDataLoader.state_dict`.
STREAM_STATE_VERSION = 1
#: The keys of that state.
STREAM_STATE_KEYS = frozenset(
    {
        "format",
        "version",
        "epoch",
        "batch",
        "next_worker",
        "complete",
        "workers",
        "num_workers",
        "batch_size",
        "drop_last",
        "world_size",
    }
)
#: The keys of one worker's record in it.
WORKER_KEYS = frozenset({"produced", "state", "done"})

_CORRUPT = "the state is corrupt: load the state the loader saved"
_NAME = "seeder.IterableDataLoader"


def run_epoch(seeder: Seeder, task: int, load: Optional[LoadContext] = None) -> Optional[int]:
    """The epoch a loader of ``task`` stands in, in the run a state is loaded into (``None``: any).

    Inside ``seeder.load_state_dict`` the run is ``load``, the one the state being loaded
    describes: a loader that follows ``reseed(task, epoch)`` is in the epoch of its last reseed
    when that reseed was of the loader's task, and in epoch 0 when the state has no reseed. A
    direct ``loader.load_state_dict`` (``load`` is ``None``) is checked against the seeder's last
    reseed when that was of the loader's task (before any reseed: no constraint).

    Args:
        seeder: the loader's :class:`seeder.Seeder`.
        task: the task whose epochs the loader follows.
        load: the run of a seeder load, else ``None``.

    Returns:
        The epoch a state must be in, or ``None``.

    >>> import seeder; s = seeder.Seeder(); s.init(0)
    >>> run_epoch(s, 1) is None
    True
    >>> s.reseed(1, 3); run_epoch(s, 1), run_epoch(s, 2)
    (3, None)
    """
    if load is not None:
        last = load.last
        if last is None:
            return 0
    else:
        last = seeder.last_reseed
        if last is None:
            return None
    return last[1] if last[0] == task else None


def _check_records(workers: Any, count: int) -> list[dict[str, Any]]:
    if not isinstance(workers, list) or len(workers) != count:
        size = len(workers) if isinstance(workers, list) else type(workers).__name__
        raise StateError(
            f"{_NAME} state['workers'] must list one record per worker ({count}), "
            f"got {size}; {_CORRUPT}"
        )
    for w, r in enumerate(workers):
        if not (isinstance(r, dict) and set(r) == WORKER_KEYS):
            raise StateError(
                f"{_NAME} state: worker {w}'s record {r!r:.200} is not a dict of "
                f"{sorted(WORKER_KEYS)}; {_CORRUPT}"
            )
        produced = r["produced"]
        if not (is_int(produced) and 0 <= produced and produced * count <= MAX_KEY):
            raise StateError(
                f"{_NAME} state: worker {w}'s 'produced' must be an int in "
                f"[0, {MAX_KEY // count}] (the batches it produced in the epoch), got "
                f"{produced!r}; {_CORRUPT}"
            )
        if not isinstance(r["done"], bool):
            raise StateError(
                f"{_NAME} state: worker {w}'s 'done' must be True or False, got "
                f"{r['done']!r}; {_CORRUPT}"
            )
    return workers


def _check_round_robin(workers: list[dict[str, Any]], nxt: int) -> None:
    """Refuse per-worker progress that no round robin over the workers reaches (module docs)."""
    produced = [int(r["produced"]) for r in workers]
    exhausted = [w for w, r in enumerate(workers) if r["done"]]
    # Visits of worker w after `rounds` full rounds: rounds, one more before next_worker.
    running = {produced[w] - (w < nxt) for w in range(len(workers)) if w not in exhausted}
    if not running:
        return
    rounds = min(running)
    ahead = [w for w in exhausted if produced[w] >= rounds + (w < nxt)]  # its end was a visit too
    if len(running) == 1 and rounds >= 0 and not ahead:
        return
    raise StateError(
        f"{_NAME} state: the batches produced per worker {produced} (exhausted: "
        f"{exhausted}) with next_worker={nxt} are no position of the round robin over "
        f"the workers (worker 0, 1, ..., an exhausted worker skipped); {_CORRUPT}"
    )


def _check_position(state: dict[str, Any], workers: list[dict[str, Any]], count: int) -> None:
    """Raise :class:`seeder.StateError` unless the epoch, ``next_worker``, ``batch`` and
    ``complete`` of ``state`` are in range and agree with its checked ``workers`` records."""
    e, nxt, batch = state["epoch"], state["next_worker"], state["batch"]
    complete = state["complete"]
    if not (is_int(e) and 0 <= e <= MAX_KEY):
        raise StateError(
            f"{_NAME} state['epoch'] must be an int in [0, {MAX_KEY}], got {e!r}; {_CORRUPT}"
        )
    if not (is_int(nxt) and 0 <= nxt < count):
        raise StateError(
            f"{_NAME} state['next_worker'] must be an int in [0, {count - 1}], got "
            f"{nxt!r}; {_CORRUPT}"
        )
    if not isinstance(complete, bool):
        raise StateError(
            f"{_NAME} state['complete'] must be True or False, got {complete!r}; {_CORRUPT}"
        )
    total = sum(int(r["produced"]) for r in workers)
    if not is_int(batch) or batch != total:
        raise StateError(
            f"{_NAME} state['batch'] is {batch!r}, but its workers produced {total} "
            f"batch(es) (per worker {[r['produced'] for r in workers]}); {_CORRUPT}"
        )
    exhausted = all(r["done"] for r in workers)
    if complete != exhausted:
        raise StateError(
            f"{_NAME} state['complete'] is {complete}, but "
            f"{'every' if exhausted else 'not every'} worker is exhausted (done: "
            f"{[r['done'] for r in workers]}); {_CORRUPT}"
        )


def check_stream_state(
    state: Any,
    layout: dict[str, Any],
    epoch: Optional[int],
    check_dataset: Callable[[int, Any], None],
    fmt: str = "seeder.stream_loader",
    keys: frozenset[str] = STREAM_STATE_KEYS,
) -> None:
    """Raise :class:`seeder.StateError` unless ``state`` is a position the loader can continue from.

    A position of the round robin over the workers (worker ``0, 1, ..., 0, 1, ...``, an exhausted
    worker skipped): after ``c`` full rounds and the workers before ``next_worker`` of the next
    one, a worker still running has produced exactly as many batches as it was visited, an
    exhausted one fewer (its end was one visit); ``batch`` is the sum of the batches produced and
    ``complete`` says that every worker is exhausted. A state that is no such position, that was
    saved by another loader layout, or that is in another epoch than the run, is refused. Changes
    nothing.

    Args:
        state: what :meth:`seeder.IterableDataLoader.state_dict` returned.
        layout: the loader's ``num_workers``, ``batch_size``, ``drop_last`` and ``world_size``.
        epoch: the epoch the run stands in (:func:`run_epoch`); ``None``: any.
        check_dataset: ``check_dataset(worker, dataset_state)`` raises ``StateError`` for a
            per-worker dataset state that does not load into the loader's dataset.
        fmt, keys: the state's format and keys (a sharded stream's state has its own).

    Raises:
        StateError: what is wrong with the state, and what to do.

    >>> check_stream_state({"format": "x"}, {}, None, lambda w, s: None)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    seeder.StateError: not a seeder.IterableDataLoader state: pass the dict returned by ...
    """
    check_state_header(state, fmt, STREAM_STATE_VERSION, keys, _NAME)
    for name, have in layout.items():
        if state[name] != have or type(state[name]) is not type(have):
            raise StateError(
                f"the {_NAME} state was saved with {name}={state[name]!r}, this "
                f"loader has {have!r}: each worker's stream is its own shard of the "
                "data, so resume with the same num_workers, batch_size, drop_last and "
                "world size"
            )
    count = max(layout["num_workers"], 1)
    workers = _check_records(state["workers"], count)
    _check_position(state, workers, count)
    _check_round_robin(workers, int(state["next_worker"]))
    e = state["epoch"]
    if epoch is not None and e != epoch:
        raise StateError(
            f"the {_NAME} state is in epoch {e} but the run's last reseed is epoch "
            f"{epoch} of the loader's task: the two come from different points of a "
            "run (save both at the same step, with seeder.state_dict(), and load "
            "that)"
        )
    for w, r in enumerate(workers):
        if r["state"] is not None:
            check_dataset(w, r["state"])
