"""What seeder does inside a run that ``seeder verify`` started: per-step records and the stops.

``seeder verify`` sets ``$SEEDER_STEPS`` (a file in the run's directory) for every run
it starts. When the module-level seeder is initialised in such a run:

* a counter of optimizer steps joins the seeder (its count travels in
  ``seeder.state_dict()``, so a resumed run goes on counting from the checkpoint);
* torch's global optimizer step hook writes one JSON line per ``optimizer.step()`` on
  rank 0: the global step, the epoch (of the last ``seeder.reseed``) and, as its
  per-step value, the sum of squares of the optimizer's parameters in float64 (equal
  bit for bit exactly when the runs are); at exit a ``{"digest": ...}`` line of the
  parameters and the optimizer state. A script need not write metrics of its own.
* ``$SEEDER_STOP_AFTER_STEP=S`` asks for a stop after global step ``S``. What saves the
  framework's own checkpoint and stops is :class:`seeder.Checkpoint` (a plain loop),
  ``SeederCallback`` (Lightning) or ``SeederTrainer`` (transformers); each calls
  :func:`should_stop` after a step and :func:`mark` ``("stopped", S)`` when it stopped.
* ``$SEEDER_RESUME=1`` asks the same helpers to resume from the run's own checkpoint
  (they :func:`mark` ``("resumed", S)``). A run that asked for a stop or a resume and has
  no such mark had nothing that could do it: verify says so instead of failing.
* Each step's record also says how many numbers each global Mersenne-Twister RNG (torch's
  CPU generator, NumPy's global ``RandomState``, Python's ``random``) gave out since the
  previous record, or since the load of a resumed run (``"draws"``, ``None`` across a
  reseed), and a fingerprint of each (``"rngs"``): a resumed run whose first step draws
  more than the uninterrupted run's did drew something before the checkpoint and again
  after it (:mod:`seeder.verify._diagnose`). Counting reads the three states and searches
  the stream (medians on a 2-core CPU, ``benchmarks/bench_draws.py``: 0.06 ms a step that
  draws nothing, 0.3 ms for 1,000 numbers, 4 ms for 100,000, 8 ms after a reseed, where
  no count is found within a million).
* The step counter's state names the run that wrote it (its ``$SEEDER_STEPS``), and a
  load writes a ``{"seeder_verify": "loaded", "from": ...}`` line: a run that resumed
  from another run's checkpoint is told apart from one that resumed its own.

* Where the script makes a :class:`seeder.Checkpoint`, its ``step()`` is the step: one per
  training step whatever number of torch optimizers the loop steps (two in a GAN, none in a
  hand-written update), counted, recorded and stopped there (:func:`checkpoint_step`). Its
  record also holds a digest of each object in reach of the loop (``"state"``,
  :mod:`seeder._run.objects`). The optimizer steps before the first ``step()`` are held back,
  and written at exit only if ``step()`` is never called.
* Under a Lightning or Hugging Face ``Trainer`` (no ``seeder.Checkpoint``), each optimizer
  step's record holds a digest of the trainer's model, optimizers and LR schedulers
  (``"state"``).
* ``{"seeder_run": "init"}`` and ``{"seeder_run": "checkpoint"}`` lines say that the run
  initialised seeder and made a ``seeder.Checkpoint``: verify says what is missing when a run
  records no step.

Nothing here runs without ``$SEEDER_STEPS``. The callbacks ``on_*``, :func:`resume_asked` and
:func:`stop_dir` answer the core's events (:mod:`seeder._hooks`); :mod:`seeder._run.bootstrap`
adds them in the runs verify starts.

Example:
    >>> import os, tempfile, json, torch, seeder
    >>> from seeder._run.bootstrap import install
    >>> path = os.path.join(tempfile.mkdtemp(), "steps.jsonl"); os.environ[ENV_STEPS] = path
    >>> install()
    ['SEEDER_STEPS']
    >>> seeder.init(master_seed=1); seeder.reseed(1, 0)
    >>> net = torch.nn.Linear(2, 1); opt = torch.optim.SGD(net.parameters(), lr=0.1)
    >>> net(torch.ones(2)).sum().backward(); opt.step()
    >>> [(r["step"], r["epoch"]) for r in map(json.loads, open(path)) if "step" in r]
    [(1, 0)]
    >>> from seeder._run.bootstrap import uninstall
    >>> steps_done(), del_env(), uninstall()
    (1, None, None)
    >>> seeder.default_seeder().reset()
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import weakref
from typing import Any, Callable, Optional, Protocol

from seeder._run.draws import drawn, fingerprint, mt_states, states_from_tensor, states_tensor
from seeder._run.variables import ENV_STEPS
from seeder._seeding.participant import Seeds
from seeder._seeding.registry import add_optional_kind

__all__ = [
    "Joins",
    "ENV_STOP",
    "ENV_RESUME",
    "ENV_CKPT_DIR",
    "STOP_CKPT",
    "StepCounter",
    "watch",
    "steps_done",
    "stop_step",
    "should_stop",
    "resume_requested",
    "ckpt_dir",
    "mark",
    "read_marks",
    "read_loads",
    "read_steps",
    "del_env",
    "checkpoint_counts",
    "checkpoint_step",
    "on_init",
    "on_checkpoint",
    "on_step",
    "on_resumed",
    "on_stopped",
    "resume_asked",
    "stop_file",
]

logger = logging.getLogger("seeder")

#: Stop after this global optimizer step (with the framework's own checkpoint).
ENV_STOP = "SEEDER_STOP_AFTER_STEP"
#: ``1``: resume from the run's own checkpoint.
ENV_RESUME = "SEEDER_RESUME"
#: The file name of the checkpoint ``SeederCallback`` writes when it stops a Lightning run.
STOP_CKPT = "seeder-stop.ckpt"
#: Where an integration writes the checkpoint of a stop (a Lightning ``.ckpt``), when the script
#: names none.
ENV_CKPT_DIR = "SEEDER_CKPT_DIR"


class StepCounter:
    """The optimizer steps of the run so far: a participant, so that a checkpoint carries the
    count, the run that wrote it (its ``$SEEDER_STEPS`` file) and the global RNGs' states."""

    seeder_kind = "verify_steps"

    def __init__(self) -> None:
        self.step = 0

    def seeder_reseed(self, seeder: Seeds, task_id: int, epoch: int) -> None:
        """Nothing to reseed."""

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "step": self.step,
            "run": os.environ.get(ENV_STEPS, ""),
            "tool": "seeder verify",  # a process without the tool leaves the part out
        }
        try:  # the global RNGs as this state saves them: a resumed run counts its draws from there
            state["rngs"] = states_tensor(mt_states())
        except Exception:  # an RNG that is no Mersenne Twister: no counts after a resume, only that
            pass
        return state

    def check_state_dict(self, state: Any) -> None:
        from seeder._errors import StateError

        run = state.get("run", "") if isinstance(state, dict) else None
        if (
            not isinstance(state, dict)
            or not {"step"} <= set(state) <= {"step", "run", "rngs", "tool"}
            or state.get("tool", "seeder verify") != "seeder verify"
            or type(state["step"]) is not int
            or state["step"] < 0
            or not isinstance(run, str)
            or len(run) > 4096
        ):
            raise StateError(
                "the verify step counter's state must be {'step': int >= 0, 'run': "
                "path of at most 4096 characters, 'rngs': Mersenne-Twister states, 'tool': "
                "'seeder verify'}"
            )
        if "rngs" in state:
            states_from_tensor(state["rngs"])

    def load_state_dict(self, state: dict[str, Any]) -> None:
        global _previous
        self.step = int(state["step"])
        if self is not _counter:
            return
        # What the load puts the global RNGs back to (saved with them): counts start there.
        _previous = states_from_tensor(state["rngs"]) if "rngs" in state else {}
        record = {"seeder_verify": "loaded", "at_step": self.step, "from": state.get("run", "")}
        if _previous:
            record["rngs"] = {name: fingerprint(mt) for name, mt in _previous.items()}
        _write(record)  # whose checkpoint this run continues, and the RNGs it continues from


# A checkpoint saved under seeder verify carries the counter; a run without verify has none.
add_optional_kind(
    StepCounter.seeder_kind,
    "it was not saved by a run of this seeder verify session. Each run starts in its own folder, "
    "which mirrors the folder verify was started in, so a checkpoint already there (an earlier "
    "run's) is found by every run: run seeder verify from a folder without it, or give the "
    "script a checkpoint path of its own (--arg)",
)


_counter: Optional[StepCounter] = None
_seeder: Optional[weakref.ReferenceType[Any]] = None
#: The optimizer of the last step, held (under ``seeder verify`` only) so that the digest at exit
#: sees it even when the script kept it in a function that has returned.
_optimizer: Optional[Any] = None
#: Every optimizer stepped in the run (a GAN's two): a Checkpoint step's value is over their
#: parameters.
_stepped: dict[int, Any] = {}
_hooked = False
_stopped = False
#: A ``seeder.Checkpoint`` exists in this run: its ``step()`` calls are the steps (one per
#: training step, whatever number of optimizers, or none, the loop steps).
_ckpt_counts = False
#: Whether that checkpoint's ``step()`` was called; until then the optimizer steps' records are
#: held back (written at exit if it never is: a script that saves with ``save()`` only).
_ckpt_stepped = False
_held: list[dict[str, Any]] = []
#: The global RNGs' states before the first held record (the first step's draws count from there).
_held_from: dict[str, tuple[Any, int]] = {}
#: Each global Mersenne-Twister RNG's ``(key, position)`` at the previous record (or at the load).
_previous: dict[str, tuple[Any, int]] = {}


def _rank0() -> bool:
    s = _seeder() if _seeder is not None else None
    return s is None or not s.initialized or s.rank == 0


def _write(record: dict[str, Any]) -> None:
    path = os.environ.get(ENV_STEPS)
    if path and _rank0():  # one write per line, never through a symbolic link
        fd = os.open(
            path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0), 0o644
        )
        try:
            os.write(fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())
        finally:
            os.close(fd)


def _after_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    import torch

    global _optimizer
    if _counter is None:
        return
    _optimizer = optimizer
    _stepped.setdefault(id(optimizer), optimizer)
    if _ckpt_counts and _ckpt_stepped:  # seeder.Checkpoint.step() counts and records the steps
        return
    _counter.step += 1
    if _ckpt_counts and not _held:
        _held_from.clear()
        _held_from.update(_previous)
    with torch.no_grad():
        value = sum(
            float(p.detach().double().pow(2).sum())
            for g in optimizer.param_groups
            for p in g["params"]
        )
    s = _seeder() if _seeder is not None else None
    last = s.last_reseed if s is not None and s.initialized else None
    draws, prints = _draws_since_previous()
    record = {
        "step": _counter.step,
        "epoch": last[1] if last else None,
        "loss": value,
        "value": "sum of squared parameters",
        "draws": draws,
        "rngs": prints,
    }
    _add_framework_state(record)
    if _ckpt_counts:  # held until seeder.Checkpoint.step() shows whether it counts the steps
        _held.append(record)
    else:
        _write(record)


def _add_framework_state(record: dict[str, Any]) -> None:
    """Under a Lightning or Hugging Face ``Trainer``, a digest of its model, optimizers and LR
    schedulers goes in the step's record (``"state"``,
    :func:`seeder._run.objects.framework_objects`)."""
    from seeder._run.objects import digests, framework_objects

    try:
        objects = framework_objects()
        if objects:
            record["state"] = digests(objects)
    except Exception:  # a record must not fail the step
        pass


def checkpoint_counts() -> bool:
    """Under ``seeder verify``, make ``seeder.Checkpoint.step()`` the step: one per training step
    whatever number of optimizers (or none) the loop steps (``Checkpoint`` calls it when made).

    Returns:
        Whether a run of ``seeder verify`` records the steps (``$SEEDER_STEPS``).
    """
    global _ckpt_counts
    if _counter is None or not os.environ.get(ENV_STEPS):
        return False
    if not _ckpt_counts:
        _write({"seeder_run": "checkpoint"})  # verify can say a step() was never called
    _ckpt_counts = True
    return True


def checkpoint_step(objects: dict[str, Any]) -> None:
    """Count one step of a ``seeder.Checkpoint`` loop and record it, with a digest of each of
    ``objects`` (:mod:`seeder._run.objects`).

    The step's value is the sum of squared parameters of every optimizer stepped so far (each
    parameter once), or of the modules among ``objects`` in a loop that steps no torch optimizer.
    """
    global _ckpt_stepped, _previous
    if _counter is None or not os.environ.get(ENV_STEPS):
        return
    import torch

    from seeder._run.objects import digests, parameter_square_sum

    if not _ckpt_stepped:  # the optimizer steps before the first call were this step's
        if _held:
            _counter.step -= len(_held)
            _previous = dict(_held_from)
        _held.clear()
        _ckpt_stepped = True
    _counter.step += 1
    if _stepped:  # what the optimizers train (an EMA or a buffer is compared as an object)
        params = {id(p): p for o in _stepped.values() for g in o.param_groups for p in g["params"]}
        with torch.no_grad():
            value = sum(float(p.detach().double().pow(2).sum()) for p in params.values())
    else:  # a hand-written update: every module's parameters
        value = parameter_square_sum(objects)
    s = _seeder() if _seeder is not None else None
    last = s.last_reseed if s is not None and s.initialized else None
    draws, prints = _draws_since_previous()
    _write(
        {
            "step": _counter.step,
            "epoch": last[1] if last else None,
            "loss": value,
            "value": "sum of squared parameters",
            "draws": draws,
            "rngs": prints,
            "state": digests(objects),
        }
    )


def _draws_since_previous() -> tuple[dict[str, Optional[int]], dict[str, str]]:
    """Numbers each global RNG gave out since the previous record, and their fingerprints now."""
    global _previous
    try:
        now = mt_states()
    except Exception:  # a record must not fail the step (an RNG that is no Mersenne Twister)
        _previous = {}
        return {}, {}
    draws = {
        name: drawn(_previous[name], state) if name in _previous else None
        for name, state in now.items()
    }
    _previous = now
    return draws, {name: fingerprint(state) for name, state in now.items()}


def _digest_at_exit() -> None:
    for record in _held:  # a Checkpoint whose step() was never called: the optimizer steps count
        _write(record)
    _held.clear()
    opt = _optimizer
    if opt is None or not os.environ.get(ENV_STEPS):
        return
    from seeder._digest import digest

    try:
        _write({"digest": digest([p for g in opt.param_groups for p in g["params"]], opt)})
    except Exception:  # an exit must not fail on the record
        pass


class Joins(Protocol):
    """What counting the steps reads of the seeder of the run: it joins and leaves it."""

    def join(self, participant: Any, *, weak: bool = True) -> None: ...

    def leave(self, participant: Any) -> None: ...


def watch(seeder: Joins) -> None:
    """Under ``seeder verify`` (``$SEEDER_STEPS``), count and record the optimizer steps of
    ``seeder``'s run (``init`` of the module-level seeder calls this)."""
    global _counter, _seeder, _hooked, _stopped, _ckpt_counts, _ckpt_stepped
    if not os.environ.get(ENV_STEPS):
        return
    from torch.optim.optimizer import register_optimizer_step_post_hook

    if not _hooked:
        register_optimizer_step_post_hook(_after_step)
        atexit.register(_digest_at_exit)
        _hooked = True
    if _counter is not None:
        seeder.leave(_counter)  # a new run counts from 0
    _counter, _seeder, _stopped = StepCounter(), weakref.ref(seeder), False
    _ckpt_counts = _ckpt_stepped = False
    _held.clear()
    _stepped.clear()
    _previous.clear()
    seeder.join(_counter, weak=False)
    _write({"seeder_run": "init"})  # verify can tell a run that never initialised seeder


def steps_done() -> Optional[int]:
    """Optimizer steps so far (restored ones included), or ``None`` outside ``seeder verify``."""
    return _counter.step if _counter is not None else None


def stop_step() -> Optional[int]:
    """The global step after which ``$SEEDER_STOP_AFTER_STEP`` asks to stop, or ``None``."""
    raw = os.environ.get(ENV_STOP, "")
    return int(raw) if raw.isdigit() and _counter is not None else None


def should_stop() -> bool:
    """Whether the run must save its checkpoint and stop now (the stop step is reached, not yet
    stopped)."""
    stop = stop_step()
    return stop is not None and not _stopped and _counter is not None and _counter.step >= stop


def resume_requested() -> bool:
    """Whether ``seeder verify`` asks this run to resume from its own checkpoint."""
    return os.environ.get(ENV_RESUME) == "1"


def ckpt_dir() -> Optional[str]:
    """The directory for a stop's checkpoint that ``seeder verify`` gave, or ``None``."""
    return os.environ.get(ENV_CKPT_DIR) or None


def mark(kind: str, step: Optional[int] = None) -> None:
    """Record that this run ``stopped`` or ``resumed`` (at global step ``step``) for verify.

    (The load itself writes a ``loaded`` line: the run that saved the state, and the fingerprints
    of the global RNGs it puts back, from which the next step's record counts the numbers drawn.)
    """
    global _stopped
    if kind == "stopped":
        _stopped = True
    _write({"seeder_verify": kind, "at_step": steps_done() if step is None else step})


def read_marks(path: Any) -> dict[str, Optional[int]]:
    """The marks in a steps file: ``{"stopped": S, "resumed": S}`` as far as present.

    >>> read_marks("/nonexistent")
    {}
    """
    return {
        r["seeder_verify"]: r.get("at_step")
        for r in read_steps(path)
        if r.get("seeder_verify") in ("stopped", "resumed")
    }


def read_loads(path: Any) -> list[dict[str, Any]]:
    """The ``loaded`` lines of a steps file, one per load of a seeder state.

    Args:
        path: a run's steps file (``$SEEDER_STEPS``).

    Returns:
        ``[{"seeder_verify": "loaded", "at_step": S, "from": F, "rngs": {...}}, ...]``: ``F`` is
        the steps file of the run that saved the state (``""`` when unknown), ``rngs`` the
        fingerprints of the global RNGs it put back.

    >>> read_loads("/nonexistent")
    []
    """
    return [r for r in read_steps(path) if r.get("seeder_verify") == "loaded"]


def read_steps(path: Any) -> list[dict[str, Any]]:
    """Every record of a steps file, in order.

    Args:
        path: a run's steps file (``$SEEDER_STEPS``).

    Returns:
        The JSON objects of its lines (a line cut short by a kill is left out); ``[]`` when the
        file cannot be read.

    >>> read_steps("/nonexistent")
    []
    """
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return [r for r in map(_record, fh) if r is not None]
    except OSError:
        return []


def _record(line: str) -> Optional[dict[str, Any]]:
    """One JSON object of a steps file, or ``None`` (a line cut short by a kill, say)."""
    try:
        rec = json.loads(line)
    except ValueError:
        return None
    return rec if isinstance(rec, dict) else None


def del_env() -> None:
    """Forget ``$SEEDER_STEPS`` (tests and doctests; ``seeder._run.bootstrap.uninstall`` takes the
    callbacks out)."""
    global _counter
    os.environ.pop(ENV_STEPS, None)
    _counter = None


# ------------------------------------------------------------------ the core's events
def on_init(seeder: Joins) -> None:
    """:data:`seeder._hooks.INIT`: count and record the steps of the run (:func:`watch`)."""
    watch(seeder)


def on_checkpoint(checkpoint: Any) -> None:
    """:data:`seeder._hooks.CHECKPOINT`: a ``seeder.Checkpoint``'s ``step()`` is the step."""
    checkpoint_counts()


def on_step(
    seeder: Any,
    checkpoint: Any,
    save: Optional[Callable[[], Any]],
    end: Optional[Callable[[], Any]],
) -> None:
    """:data:`seeder._hooks.STEP`: record a ``seeder.Checkpoint`` step; at the step verify asks to
    stop at, ``save()`` and end the run (status 0), or have the framework save and end it
    (``end()``).

    Raises:
        SystemExit: the stop, after the step is recorded and the checkpoint written.
    """
    if checkpoint is not None and steps_done() is not None:
        from seeder._run.where import caller_variables

        checkpoint_step(_in_reach(checkpoint, caller_variables()))
    if not should_stop():
        return
    if save is not None:
        save()
        mark("stopped")
        logger.info("stopped after step %s for seeder verify", steps_done())
        raise SystemExit(0)
    if end is not None:
        end()


def on_resumed(step: Optional[int] = None) -> None:
    """:data:`seeder._hooks.RESUMED`: the run continued from a checkpoint (at ``step``)."""
    mark("resumed", step)


def on_stopped(step: Optional[int] = None) -> None:
    """:data:`seeder._hooks.STOPPED`: the framework saved the checkpoint of a stop."""
    mark("stopped", step)


def resume_asked() -> Optional[bool]:
    """:data:`seeder._hooks.RESUME`: ``True`` when verify asks this run to resume, else ``None``."""
    return True if resume_requested() else None


def stop_file(root: Optional[str]) -> str:
    """:data:`seeder._hooks.STOP_FILE`: a framework's stop checkpoint: :data:`STOP_CKPT` in the
    directory verify gives (``$SEEDER_CKPT_DIR``), else in ``root``, else in the working
    directory."""
    return os.path.join(ckpt_dir() or root or os.getcwd(), STOP_CKPT)


def _in_reach(ckpt: Any, names: dict[str, Any]) -> dict[str, Any]:
    """What ``seeder verify`` compares after a step: the objects of the caller's variables, the
    checkpoint's named objects and its tensor and number values (:mod:`seeder._run.objects`)."""
    import torch

    from seeder._run.objects import objects_in

    own = {f"checkpoint {name}": obj for name, obj in ckpt.objects.items()}
    values = {
        f"checkpoint values[{k!r}]": v
        for k, v in ckpt.values.items()
        if isinstance(v, (torch.Tensor, int, float))
    }
    return {**objects_in({**names, **own}), **values}
