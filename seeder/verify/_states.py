"""The objects a run holds after each step, compared between runs: the first object and step that
differ.

Each ``seeder.Checkpoint.step()`` of a run records a digest of every object in reach of the
training loop (:mod:`seeder._run.objects`): its modules' parameters and buffers, its
optimizers and schedulers, an EMA, a grad scaler, the checkpoint's parts. Two runs that
should agree (a seeded run and the first one; a stopped or resumed run and its uninterrupted
run) are compared at every step both recorded: :func:`first_difference` gives the first step
at which an object differs, or is held by one run and not by the other.

Example:
    >>> import json, pathlib, tempfile
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> def write(name, states):
    ...     lines = [json.dumps({"step": s, "state": st}) for s, st in states]
    ...     (d / name).write_text("\\n".join(lines) + "\\n")
    ...     return d / name
    >>> a = write("a", [(1, {"ema": "nn.Module Linear:1"}), (2, {"ema": "nn.Module Linear:2"})])
    >>> b = write("b", [(2, {"ema": "nn.Module Linear:3"})])
    >>> first_difference(read_states(a), read_states(b))
    (2, 'ema', 'nn.Module Linear')
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from seeder._run.steps import read_steps

__all__ = ["read_states", "first_difference", "compared_names", "state_words"]

States = dict[int, dict[str, str]]


def read_states(steps_file: Path) -> States:
    """``{step: {name: "kind:digest"}}`` from a run's step records (steps without a ``state``
    left out).

    >>> read_states(Path("/nonexistent"))
    {}
    """
    out: States = {}
    for rec in read_steps(steps_file):
        step, state = rec.get("step"), rec.get("state")
        if type(step) is int and isinstance(state, dict):
            out[step] = {str(k): str(v) for k, v in state.items()}
    return out


def _kind(value: str) -> str:
    return value.rpartition(":")[0] or value


def first_difference(ref: States, other: States) -> Optional[tuple[int, str, str]]:
    """The first step both runs recorded at which an object differs: ``(step, name, kind)``, or
    ``None``. An object one run holds and the other does not differs too; one whose state
    could not be hashed (``kind:?``) is not compared."""
    for step in sorted(set(ref) & set(other)):
        a, b = ref[step], other[step]
        for name in sorted(set(a) | set(b)):
            x, y = a.get(name), b.get(name)
            if x is not None and y is not None and (x.endswith(":?") or y.endswith(":?")):
                continue
            if x != y:
                return step, name, _kind(x or y or "")
    return None


def compared_names(states: States) -> dict[str, str]:
    """``{name: kind}`` of every object compared in ``states`` (not those that could not be
    hashed)."""
    names: dict[str, str] = {}
    for state in states.values():
        for name, value in state.items():
            if not value.endswith(":?"):
                names.setdefault(name, _kind(value))
    return names


def state_words(name: str, kind: str) -> str:
    """How a verdict names an object: ``ema (nn.Module AveragedModel: parameters and buffers)``.

    >>> state_words("opt", "optimizer SGD")
    "'opt' (optimizer SGD)"
    """
    what = f"{kind}: parameters and buffers" if kind.startswith("nn.Module") else kind
    return f"{name!r} ({what})"
