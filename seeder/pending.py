"""Loading a checkpoint before its loaders exist: their states wait until each one is built.

A common resume loads the checkpoint first and builds the data loaders after it.
``seeder.load_state_dict`` then restores what exists (the master seed, the global RNGs,
the loaders and generators already there) and keeps each missing part pending: a
``seeder.DataLoader``, ``seeder.DistributedSampler``, DALI pipeline or registered
generator built afterwards receives its own state as it joins (keys follow join order,
as in :meth:`seeder.Seeder.state_dict`). A part nothing claimed by the next ``reseed``
(the training loop starting) or ``state_dict`` is an error naming it.

Example:
    >>> import torch, seeder
    >>> s = seeder.Seeder(); s.init(3); s.reseed(1, 0)
    >>> loader = seeder.DataLoader(torch.arange(8.0), batch_size=2, shuffle=True, seeder=s)
    >>> it = iter(loader); _ = next(it); saved = s.state_dict(); rest = list(it)
    >>> t = seeder.Seeder(); t.init(3); t.load_state_dict(saved)      # no loader yet
    >>> t.pending.names()
    ['seeder.DataLoader loader.0']
    >>> again = seeder.DataLoader(torch.arange(8.0), batch_size=2, shuffle=True, seeder=t)   # claims it
    >>> t.reseed(1, 0); all(torch.equal(a, b) for a, b in zip(again, rest))
    True
"""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Tuple

from . import state as state_mod
from .checks import is_bool
from .errors import StateError
from .participant import validates_state
from .stepwatch import StepCounter
from .world import elastic_keys, per_rank_keys, rederive_streams

__all__ = ["PendingParts", "part_name", "refuse_per_rank"]

logger = logging.getLogger("seeder")

_KINDS = {"loader": "seeder.DataLoader", "sampler": "seeder.DistributedSampler", "dali": "DALI pipeline"}


_COUNTER = f"{StepCounter.seeder_kind}."  # the start of the key of seeder verify's step counter


def part_name(key: str) -> str:
    """How messages name a participant's key: ``seeder.DataLoader loader.0``, ``registered generator 2``.

    >>> part_name("loader.1"), part_name("generator.2")
    ('seeder.DataLoader loader.1', 'registered generator 2')
    """
    kind, _, n = key.partition(".")
    if kind == "generator":
        return f"registered generator {n}"
    return f"{_KINDS.get(kind, kind)} {key}"


def _names(keys: Any) -> str:
    return ", ".join(part_name(k) for k in keys) or "nothing"


def refuse_per_rank(have: Dict[str, Any], state: Any, world_size: int,
                    allow_world_change: Any) -> None:
    """Raise :class:`StateError` naming the participants of ``have`` that cannot move, when
    ``state`` is of another world size than ``world_size`` and ``allow_world_change`` is not
    true: before anything loads.

    >>> refuse_per_rank({}, {"world_size": 2}, 1, False)
    """
    saved = state.get("world_size") if isinstance(state, dict) else None
    if (is_bool(allow_world_change) and allow_world_change) or type(saved) is not int \
            or saved == world_size:
        return
    keys = per_rank_keys(have)
    if keys:
        raise StateError(
            f"the checkpoint was saved by a world of {saved} process(es), this run has "
            f"{world_size}, and {_names(keys)} of this process keep(s) the state of one rank of "
            "one world size (only elastic loaders and registered generators move to another "
            f"world); nothing was loaded. Resume with {saved} processes for an exact continuation; "
            "or pass allow_world_change=True to load_state_dict to keep the master seed and the "
            "epoch and continue from the next epoch boundary; or, to resume inside an epoch on "
            "another world size, train with an elastic loader (seeder.ElasticDataLoader; "
            "elastic=True for SeederTrainer) and build only those: its checkpoint resumes "
            "mid-epoch on any world size, every remaining sample exactly once")


class PendingParts:
    """The parts of a loaded state whose owners were not built yet, by key (``<kind>.<n>``, ``generator.<n>``)."""

    def __init__(self) -> None:
        self.parts: Dict[str, Any] = {}
        self.moved: Optional[Dict[str, Any]] = None  # the entry of another world whose elastic loaders are pending

    def names(self) -> List[str]:
        """The pending parts, named as messages name them."""
        return [part_name(k) for k in self.parts]

    def split(self, seeder: Any, state: Any, allow_world_change: bool,
              have: Optional[Dict[str, Any]] = None) -> Tuple[Any, Dict[str, Any]]:
        """``(what loads now, what waits)``: the state restricted to the participants there are (``have``:
        ``seeder.stateful()``), and the rest.

        Raises :class:`StateError` when this process has a participant the checkpoint holds no state for.
        """
        now, later, _ = self._split(seeder, state, allow_world_change, have)
        return now, later

    def _split(self, seeder: Any, state: Any, allow_world_change: bool,
               have: Optional[Dict[str, Any]]) -> Tuple[Any, Dict[str, Any], Optional[Tuple[Dict[str, Any], bool]]]:
        """:meth:`split`, and this rank's entry of what loads now with whether the world changed (``None`` before
        ``init``)."""
        if not seeder.initialized:
            return state, {}, None
        have = seeder.stateful() if have is None else have
        allow = state_mod.world_change_allowed(have, allow_world_change)  # elastic loaders move
        entry, changed = state_mod.own_entry(state, seeder.world_size, seeder.rank, allow)
        parts = entry.get("participants")
        if changed or not isinstance(parts, dict) or parts.keys() == have.keys():
            return state, {}, (entry, changed)  # the full check says what is wrong, the world changed, or all is there
        counter = _COUNTER  # seeder verify's step counter: it exists only under verify
        if any(k.startswith(counter) for k in parts) and not any(k.startswith(counter) for k in have):
            parts = {k: v for k, v in parts.items() if not k.startswith(counter)}
            logger.debug("seeder state: the seeder verify step counter it holds is not used outside seeder verify")
            entry = dict(entry, participants=parts)
            state = entry
        extra = [k for k in have if k not in parts]
        if extra:
            raise StateError(f"this process has {_names(extra)} but the checkpoint holds no state for it (it holds "
                             f"{_names(parts)}): build the same loaders and register the same generators, in the "
                             "same order, as the run that saved it")
        later = {k: v for k, v in parts.items() if k not in have}
        if not later:
            return state, {}, (entry, changed)
        now = dict(entry, participants={k: parts[k] for k in have})
        return now, later, (now, changed)

    def check(self, seeder: Any, state: Any, allow_world_change: bool) -> None:
        """``seeder.check_state_dict``: everything that can be checked now; parts for loaders not built yet wait."""
        have = seeder.stateful() if seeder.initialized else None
        if have is not None:
            refuse_per_rank(have, state, seeder.world_size, allow_world_change)
            moved = self._moving(seeder, state, have)
            if moved is not None:  # its loaders are not built: load_state_dict reads the header
                state_mod.check_header(moved)
                return
        now, _, own = self._split(seeder, state, allow_world_change, have)
        state_mod.check(seeder, now, allow_world_change, have, own)

    def _moving(self, seeder: Any, state: Any, have: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        """The entry of a state saved on another world size whose participants are elastic loaders not built yet
        (and registered generators), else ``None``: its loaders' parts wait, and this rank's streams are re-derived
        once they joined."""
        if isinstance(state, dict) and state.get("world_size") == seeder.world_size or elastic_keys(have):
            return None  # a state of this world (the common load: nothing more to read), or the loaders exist
        entry, changed = state_mod.own_entry(state, seeder.world_size, seeder.rank, True)
        parts = entry.get("participants")
        if not changed or not isinstance(parts, dict):
            return None
        loaders = [k for k, v in parts.items() if isinstance(v, dict) and v.get("format") == "seeder.elastic_loader"]
        if not loaders or any(k not in loaders and not str(k).startswith("generator.") for k in parts):
            return None
        return entry

    def load(self, seeder: Any, state: Any, allow_world_change: bool) -> None:
        """``seeder.load_state_dict``: load what exists, keep the rest for the loaders and generators to come."""
        have = seeder.stateful() if seeder.initialized else None
        if have is not None:
            refuse_per_rank(have, state, seeder.world_size, allow_world_change)
        moved = self._moving(seeder, state, have) if have is not None else None
        if moved is not None:
            state_mod.check_header(moved)
            run = state_mod.adopt_run(seeder, moved, resume=True)
            self.parts = {k: v for k, v in moved["participants"].items() if not str(k).startswith("generator.")}
            self.moved = moved
            seeder.run = run
            logger.info("seeder state from a world of %d loaded into a world of %d: master seed and last reseed %s "
                        "restored; waiting for %s, whose position is global, to be built (this rank's RNG streams "
                        "are re-derived then)", moved["world_size"], seeder.world_size, run.last, _names(self.parts))
            return
        now, later, own = self._split(seeder, state, allow_world_change, have)
        state_mod.load(seeder, now, allow_world_change, have, own)
        self.parts = later
        if later:
            logger.info("seeder state loaded; waiting for %s to be built", _names(later))

    def claim(self, seeder: Any) -> None:
        """Give each participant that joined its pending part (checked first)."""
        if not self.parts:
            return
        stateful = seeder.stateful()
        for key in [k for k in self.parts if k in stateful]:
            obj, part = stateful[key], self.parts[key]
            try:
                if validates_state(obj):
                    obj.check_state_dict(part)
                obj.load_state_dict(part)
            except (StateError, TypeError, ValueError, KeyError) as exc:
                raise StateError(f"the checkpoint's state for {part_name(key)} does not fit the one just built: "
                                 f"{exc}; build it with the same dataset, batch size and options as the run that "
                                 "saved it") from None
            del self.parts[key]
            logger.info("%s resumed from the loaded seeder state", part_name(key))
        if self.moved is not None and not self.parts:  # every elastic loader of another world's state joined
            entry, self.moved = self.moved, None
            first = next(k for k in entry["participants"] if not str(k).startswith("generator."))
            rederive_streams(entry, seeder, stateful[first].elastic_step(entry["participants"][first]))

    def require_claimed(self, call: str, args: Tuple[int, ...]) -> None:
        """Raise :class:`StateError` if a loaded part is still waiting for its loader or generator (at ``call(*args)``)."""
        if self.parts:
            raise StateError(
                f"{call}{args}: the loaded checkpoint holds the state of {_names(self.parts)}, which this process has not "
                "built; build every seeder.DataLoader (and register every generator) of the saved run before the "
                "training loop starts, in the same order")
