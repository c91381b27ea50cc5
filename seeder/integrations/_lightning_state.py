"""The state :class:`seeder.integrations.lightning.SeederCallback` keeps in a Lightning checkpoint:
its layout's version, and the checks a resume makes of it before anything loads.

The callback's state is ``{"version", "seeder", "loaders", "epoch_complete"}``: every rank's seeder
state gathered on rank 0 (less the loaders, which Lightning's fit loop saves), each train loader's
position and whether the epoch was trained whole.

Example:
    >>> import seeder
    >>> s = seeder.Seeder(); s.init(3)
    >>> check_callback_state({"version": 0}, {}, s)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    seeder.StateError: SeederCallback: the checkpoint's callback state is not one this version ...
"""

from __future__ import annotations

from typing import Any

from seeder._errors import StateError
from seeder._seeding.core import Seeder
from seeder._state.format import GATHERED_FORMAT

__all__ = ["CALLBACK_STATE_VERSION", "movable", "check_callback_state"]

#: Version of the layout of ``SeederCallback.state_dict()``.
CALLBACK_STATE_VERSION = 1


def movable(gathered: dict[str, Any], checkpoint: dict[str, Any]) -> bool:
    """Whether a checkpoint loads on another world size: its train loaders are all elastic and the
    rest of its seeder state is registered generators (``generator.<n>``), whose streams are
    re-derived.

    Args:
        gathered: the gathered seeder state of the callback's state.
        checkpoint: the Lightning checkpoint (its fit loop holds the loaders' states).

    Returns:
        ``True`` when the checkpoint may resume on another number of processes.

    Example:
        >>> loops = {"loops": {"fit_loop": {"state_dict": {"combined_loader": [
        ...     {"format": "seeder.elastic_loader"}]}}}}
        >>> movable({"ranks": [{"participants": {"generator.1": {}}}]}, loops)
        True
        >>> movable({"ranks": [{"participants": {"loader.0": {}}}]}, loops)
        False
    """
    fit_loop = ((checkpoint.get("loops") or {}).get("fit_loop") or {}).get("state_dict") or {}
    loaders = fit_loop.get("combined_loader") or []
    parts = gathered["ranks"][0].get("participants")
    return (
        bool(loaders)
        and all(
            isinstance(st, dict) and st.get("format") == "seeder.elastic_loader" for st in loaders
        )
        and isinstance(parts, dict)
        and all(str(k).startswith("generator.") for k in parts)
    )


def check_callback_state(state: Any, checkpoint: dict[str, Any], s: Seeder) -> None:
    """Raise :class:`seeder.StateError` unless ``state`` is a callback state that ``s`` resumes.

    Args:
        state: the callback's state as the checkpoint holds it.
        checkpoint: the Lightning checkpoint it came from.
        s: the seeder of the resumed run.

    Raises:
        StateError: another layout version, no gathered seeder state, another world size (unless
            :func:`movable`) or another master seed.

    Example:
        >>> import seeder
        >>> s = seeder.Seeder(); s.init(3)
        >>> state = {"version": 1, "seeder": {}, "loaders": [], "epoch_complete": False}
        >>> check_callback_state(state, {}, s)
        Traceback (most recent call last):
        ...
        seeder.StateError: SeederCallback: the checkpoint holds no gathered seeder state
    """
    if (
        not isinstance(state, dict)
        or state.get("version") != CALLBACK_STATE_VERSION
        or set(state) != {"version", "seeder", "loaders", "epoch_complete"}
    ):
        raise StateError(
            f"SeederCallback: the checkpoint's callback state is not one this version wrote "
            f"(version {CALLBACK_STATE_VERSION}); resume with the seeder version that wrote it"
        )
    gathered = state["seeder"]
    if (
        not isinstance(gathered, dict)
        or gathered.get("format") != GATHERED_FORMAT
        or not gathered.get("ranks")
    ):
        raise StateError("SeederCallback: the checkpoint holds no gathered seeder state")
    if gathered.get("world_size") != s.world_size and not movable(gathered, checkpoint):
        raise StateError(
            f"SeederCallback: the checkpoint was saved by {gathered.get('world_size')} "
            f"process(es), this run has {s.world_size}. Resume with the same devices x nodes, or "
            f"make the train loaders elastic "
            f"(see docs/lightning.md#another-number-of-devices-elastic-loaders)"
        )
    saved = gathered["ranks"][0].get("master_seed")
    if saved != s.get_master_seed():
        raise StateError(
            f"SeederCallback: the checkpoint was made with master seed {saved}, this run was "
            f"given {s.get_master_seed()}; pass master_seed={saved} to seeder.init to resume it"
        )
