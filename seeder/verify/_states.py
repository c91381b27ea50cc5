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
    >>> a = write("a", [(1, {"ema": "nn.Module Linear:1.1"}), (2, {"ema": "nn.Module Linear:2.1"})])
    >>> b = write("b", [(2, {"ema": "nn.Module Linear:2.3"})])
    >>> first_difference(read_states(a), read_states(b))
    (2, 'ema', 'nn.Module Linear: its buffers')
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


def _order(name: str, value: str) -> tuple[bool, bool, str]:
    """Generators first (a difference there is a cause, in a module an effect), then the loop's
    own variables, then the checkpoint's parts (which hold them)."""
    return not value.startswith("torch.Generator:"), name.startswith("checkpoint "), name


def _kind(value: str) -> str:
    return value.rpartition(":")[0] or value


def first_difference(ref: States, other: States) -> Optional[tuple[int, str, str]]:
    """The first step both runs recorded at which an object differs: ``(step, name, kind)``, or
    ``None``. An object one run holds and the other does not differs too; one whose state
    could not be hashed (``kind:?``) is not compared."""
    for step in sorted(set(ref) & set(other)):
        a, b = ref[step], other[step]
        for name in sorted(set(a) | set(b), key=lambda n: _order(n, a.get(n) or b.get(n) or "")):
            x, y = a.get(name), b.get(name)
            if x is not None and y is not None and (x.endswith(":?") or y.endswith(":?")):
                continue
            if x != y:
                kind = _kind(x or y or "")
                return step, name, kind + _which(x, y) if kind.startswith("nn.Module") else kind
    return None


def _which(x: Optional[str], y: Optional[str]) -> str:
    """Which part of a module differs: ``": its buffers"``, ``": its parameters"`` or both."""
    if x is None or y is None:
        return ": held by one run only"
    a, b = x.rpartition(":")[2].split("."), y.rpartition(":")[2].split(".")
    if len(a) != 2 or len(b) != 2:
        return ": parameters and buffers"
    parts = [w for w, i in (("parameters", 0), ("buffers", 1)) if a[i] != b[i]]
    return ": its " + " and ".join(parts)


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
    if kind.startswith("nn.Module") and ":" not in kind:
        kind += ": parameters and buffers"
    if kind == "torch.Generator":
        kind += ", one seeder does not seed: register it (seeder.register_generator) or seed it "
        kind += "from seeder.get_seed"
    return f"{name!r} ({kind})"
