"""The core's hook point: the events the core emits, and the callbacks the tools add to them.

The core (seeding, state, data, checkpoint, integrations) tells whoever listens what happens in
a run; it never imports who listens. The tools (``seeder verify``, ``seeder locate``) add their
callbacks in the runs they start (:mod:`seeder._run.bootstrap`). With no callback an event costs
one dictionary lookup.

Events (:func:`emit`, keyword fields):

* :data:`INIT` ``seeder``: ``init`` of the module-level seeder finished.
* :data:`CHECKPOINT` ``checkpoint``: a :class:`seeder.Checkpoint` was made.
* :data:`STEP` ``seeder``, ``checkpoint`` (or ``None``), ``save``, ``end``: a training step
  ended where a run can stop (``Checkpoint.step()``, Lightning's ``SeederCallback``,
  ``SeederTrainer``). ``save()`` (or ``None``) writes a checkpoint to resume from; ``end()``
  (or ``None``) asks the framework to save and end the training. A callback may end the run
  (``SystemExit``) after ``save()``.
* :data:`BATCH` ``seeder``, ``source``, ``epoch``, ``step``, ``position``: a loader hands out a
  batch, or a sampler starts or advances an epoch.
* :data:`RESUMED`, :data:`STOPPED` ``step`` (or ``None``): the run continued from a checkpoint;
  the framework saved the checkpoint of a stop that ``end()`` asked for.

Questions (:func:`ask`, the first answer that is not ``None``):

* :data:`RESUME`: whether a tool asks this run to resume from its own checkpoint
  (``Checkpoint.resume(None)``, ``lightning.resume_path``, ``SeederTrainer.train``).
* :data:`STOP_FILE` ``root``: the file of a stop's checkpoint that a framework writes
  (Lightning's ``SeederCallback``), given the framework's own directory (or ``None``).

Example:
    >>> seen = []
    >>> def on_step(**fields):
    ...     seen.append(sorted(fields))
    >>> add(STEP, on_step); emit(STEP, seeder=None, checkpoint=None, save=None, end=None)
    >>> remove(STEP, on_step); emit(STEP, seeder=None, checkpoint=None, save=None, end=None)
    >>> seen, listening(STEP), ask(RESUME)
    ([['checkpoint', 'end', 'save', 'seeder']], False, None)
"""

from __future__ import annotations

from typing import Any, Callable, Optional

__all__ = [
    "INIT",
    "CHECKPOINT",
    "STEP",
    "BATCH",
    "RESUMED",
    "STOPPED",
    "RESUME",
    "STOP_FILE",
    "EVENTS",
    "add",
    "remove",
    "emit",
    "ask",
    "listening",
    "batch",
]

INIT = "init"
CHECKPOINT = "checkpoint"
STEP = "step"
BATCH = "batch"
RESUMED = "resumed"
STOPPED = "stopped"
RESUME = "resume?"
STOP_FILE = "stop_file?"
#: Every event and question.
EVENTS = frozenset({INIT, CHECKPOINT, STEP, BATCH, RESUMED, STOPPED, RESUME, STOP_FILE})

_callbacks: dict[str, list[Callable[..., Any]]] = {}


def add(event: str, callback: Callable[..., Any]) -> None:
    """Call ``callback(**fields)`` at each ``event`` (after the callbacks added before it).

    Args:
        event: one of :data:`EVENTS`.
        callback: takes the event's fields as keywords.

    Raises:
        ValueError: ``event`` is not one of :data:`EVENTS`.

    >>> add("tick", print)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: no event 'tick'; the events are batch, checkpoint, init, ...
    """
    if event not in EVENTS:
        raise ValueError(f"no event {event!r}; the events are {', '.join(sorted(EVENTS))}")
    _callbacks.setdefault(event, []).append(callback)


def remove(event: str, callback: Callable[..., Any]) -> None:
    """Stop calling ``callback`` at ``event`` (nothing if it was not added).

    >>> remove(INIT, print)
    """
    found = _callbacks.get(event, [])
    if callback in found:
        found.remove(callback)
        if not found:
            del _callbacks[event]


def listening(event: str) -> bool:
    """Whether any callback waits for ``event``.

    >>> listening(BATCH)
    False
    """
    return event in _callbacks


def emit(event: str, **fields: Any) -> None:
    """Call every callback of ``event`` with ``fields``, in the order they were added.

    >>> emit(INIT, seeder=None)  # nobody listens: nothing happens
    """
    for callback in tuple(_callbacks.get(event, ())):
        callback(**fields)


def ask(question: str, **fields: Any) -> Any:
    """The first answer to ``question`` that is not ``None`` (``None`` when none answers).

    >>> ask(STOP_FILE, root=None) is None
    True
    """
    for callback in tuple(_callbacks.get(question, ())):
        answer = callback(**fields)
        if answer is not None:
            return answer
    return None


def batch(seeder: Any, source: str, *, epoch: int, step: Optional[int], position: int) -> None:
    """Emit :data:`BATCH`: ``source`` (``"loader"``, ``"sampler"``) of ``seeder`` is about to hand
    out the batch that starts at sample ``position`` of ``epoch`` (``step``: its index, if known).

    >>> batch(None, "loader", epoch=0, step=0, position=0)  # nobody listens: one lookup
    """
    if BATCH in _callbacks:
        emit(BATCH, seeder=seeder, source=source, epoch=epoch, step=step, position=position)
