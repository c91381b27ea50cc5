"""One checkpoint load: planned once, then validated, then applied or rolled back.

:func:`plan_load` reads a state against this process and decides everything a load
does: this rank's entry (of one process's state or a gathered one), whether the world
changed, which participants load now, which parts wait for participants not built yet,
and which elastic loaders move to this world. It changes nothing. :func:`validate`
checks every RNG and participant state of the plan; :func:`apply` puts it in place
with rollback and arms the resume check. ``check_state_dict`` is plan + validate
(:func:`check_state`); ``load_state_dict`` is plan + validate + apply (:func:`load_state`).

Example:
    >>> import seeder
    >>> s = seeder.Seeder(); s.init(1); s.reseed(1, 0); saved = s.state_dict()
    >>> plan = plan_load(s, saved, False)
    >>> plan.how, plan.run.last, dict(plan.waits)
    ('exact', (1, 0), {})
    >>> validate(s, plan); apply(s, plan); s.last_reseed
    (1, 0)
"""

from __future__ import annotations

import logging
import warnings
from typing import Any, NamedTuple, Optional, Protocol

from seeder._checks import is_bool
from seeder._errors import SeederWarning, StateError
from seeder._seeding.participant import LoadContext, load_part, validates_state
from seeder._seeding.registry import optional_part, optional_reason
from seeder._state.format import check_entry, check_header, described_run, own_entry
from seeder._state.pending import PendingParts, part_names
from seeder._state.resumecheck import ResumeCheck
from seeder._state.rollback import Saved, restore, saved_state
from seeder._state.run import RunState
from seeder._state.streams import MERGED_FORMAT
from seeder._state.world import (
    WORLD_DOCS,
    Streams,
    check_moved,
    elastic_keys,
    move_world,
    per_rank_keys,
    world_change_allowed,
)

__all__ = [
    "EXACT",
    "MOVE",
    "MOVE_WHEN_BUILT",
    "NEXT_EPOCH",
    "Loading",
    "LoadPlan",
    "plan_load",
    "validate",
    "apply",
    "apply_entry",
    "check_state",
    "load_state",
]

logger = logging.getLogger("seeder")

#: Same world: every RNG and participant continues bit for bit.
EXACT = "exact"
#: Another world, its elastic loaders built: they load their global state, this rank's streams
#: are re-derived.
MOVE = "move"
#: Another world, its elastic loaders not built yet: their parts wait, and this rank's streams are
#: re-derived once they joined.
MOVE_WHEN_BUILT = "move-when-built"
#: Another world, ``allow_world_change=True``: the master seed and last reseed only; the next
#: reseed seeds the rest.
NEXT_EPOCH = "next-epoch"


class Loading(Streams, Protocol):
    """What a load reads and sets of a seeder: its run, its participants, its global RNGs, its
    resume check and the parts that wait for their participants."""

    run: RunState

    @property
    def initialized(self) -> bool: ...

    @property
    def explicit(self) -> bool: ...

    @property
    def resume_check(self) -> ResumeCheck: ...

    @property
    def pending(self) -> PendingParts: ...

    def stateful(self) -> dict[str, Any]: ...


class LoadPlan(NamedTuple):
    """What one load of a seeder state does in this process, decided before anything changes.

    Attributes:
        how: :data:`EXACT`, :data:`MOVE`, :data:`MOVE_WHEN_BUILT` or :data:`NEXT_EPOCH`.
        entry: this rank's single-process state (for :data:`EXACT`, its participants are those
            that exist here).
        run: the master seed and last reseed ``entry`` describes.
        participants: this process's stateful participants by key, as the plan found them.
        loads: the keys of the participants whose saved state is applied now.
        waits: the saved parts, by key, of participants not built yet (each takes its part as it
            joins).
    """

    how: str
    entry: dict[str, Any]
    run: RunState
    participants: dict[str, Any]
    loads: tuple[str, ...]
    waits: dict[str, Any]

    @property
    def load(self) -> LoadContext:
        """The run the state describes, as the participants' ``check_state_dict`` and
        ``load_state_dict`` get it."""
        assert self.run.master is not None  # described_run reads the saved master seed
        return LoadContext(self.run.master, self.run.last)


def plan_load(seeder: Loading, state: Any, allow_world_change: Any) -> LoadPlan:
    """Read ``state`` against ``seeder``'s process: header, world, what loads now, what waits.

    Args:
        seeder: an initialised :class:`seeder.Seeder`.
        state: one process's ``state_dict()`` or a ``gather_state_dict()``.
        allow_world_change: ``load_state_dict``'s argument (a bool).

    Returns:
        The :class:`LoadPlan`; nothing of ``seeder`` is changed.

    Raises:
        RuntimeError: ``seeder.init`` was not called.
        StateError: not a seeder state, a format this version does not read, another world
            this process cannot take, or a participant here the state holds nothing for.
        TypeError: ``allow_world_change`` is not a bool.

    >>> import seeder
    >>> s = seeder.Seeder(); s.init(1); plan_load(s, s.state_dict(), False).loads
    ()
    """
    if not seeder.initialized:
        raise RuntimeError(
            "seeder.load_state_dict() called before seeder.init(); "
            "call seeder.init(master_seed=...) first"
        )
    have = seeder.stateful()
    world, rank = seeder.world_size, seeder.rank
    _refuse_per_rank(have, state, world, allow_world_change)
    waiting = _moves_when_built(state, have, world, rank)
    if waiting is not None:
        _refuse_unmoved(have, waiting)
        check_header(waiting)
        later = {
            k: v for k, v in waiting["participants"].items() if not str(k).startswith("generator.")
        }  # generators exist: they are re-derived
        return LoadPlan(MOVE_WHEN_BUILT, waiting, described_run(waiting), have, (), later)
    allow = world_change_allowed(have, allow_world_change)  # elastic loaders move on their own
    entry, changed = own_entry(state, world, rank, allow)
    entry, later = (entry, {}) if changed else _split(entry, have)
    check_header(entry)
    run = described_run(entry)
    if not changed:
        return LoadPlan(EXACT, entry, run, have, tuple(have), later)
    moving = tuple(elastic_keys(have))
    return LoadPlan(MOVE if moving else NEXT_EPOCH, entry, run, have, moving, {})


def _warn_dropped_skips(entry: dict[str, Any]) -> None:
    """Warn when a state of another world names skipped batches (``loader.skip``) of per-rank
    loaders: a batch's samples depend on the world size, so those skips are not carried over."""
    dropped = {
        str(key): sorted({int(r[0]) for r in part["skips"]})
        for key, part in entry.get("participants", {}).items()
        if isinstance(part, dict) and isinstance(part.get("skips"), list) and part["skips"]
    }
    if dropped:
        named = "; ".join(f"{k} (epochs {', '.join(map(str, e))})" for k, e in dropped.items())
        warnings.warn(
            f"the checkpoint of a world of {entry['world_size']} skips batches of {named}, which "
            f"are not carried to this world (a batch's samples depend on the world size). Call "
            f"loader.skip(epoch, batches) again for this world's batches (see {WORLD_DOCS})",
            SeederWarning,
            stacklevel=5,
        )


def validate(seeder: Loading, plan: LoadPlan) -> None:
    """Check every RNG and participant state the plan applies; change nothing.

    Participants check their parts against the run the state describes (``load=``
    :attr:`LoadPlan.load`): a sampler's shuffle key must be the one that master seed and epoch
    derive.

    Args:
        seeder: the seeder ``plan`` was made for.
        plan: the result of :func:`plan_load`.

    Raises:
        StateError: a state does not fit this process (another rank, other RNGs, other
            participants) or a participant refuses its part.
    """
    if plan.how == MOVE_WHEN_BUILT:  # its loaders are not built: each checks its part as it joins
        return
    if plan.how == EXACT:
        check_entry(
            plan.entry,
            world_size=seeder.world_size,
            rank=seeder.rank,
            adapters=seeder.global_adapters(),
            stateful=plan.participants,
            load=plan.load,
        )
    else:
        check_moved(plan.entry, plan.participants, plan.load)


def apply(seeder: Loading, plan: LoadPlan) -> None:
    """Put a validated plan in place: states, the run's bookkeeping, the parts that wait.

    Whatever stops it half way (an error, Ctrl-C, ``SystemExit``) puts back every state
    replaced so far before it propagates; the run and the waiting parts are installed only
    once the states have loaded.

    Args:
        seeder: the seeder ``plan`` was made for.
        plan: the result of :func:`plan_load`, accepted by :func:`validate`.

    Raises:
        StateError: a participant or RNG failed to load (the message names what was put back).
    """
    run = _continued_run(seeder, plan)
    waits = dict(plan.waits) if plan.waits else {}  # claims empty it; the plan keeps its own
    moved: Optional[dict[str, Any]] = plan.entry if plan.how == MOVE_WHEN_BUILT else None
    if plan.how == EXACT:
        apply_entry(seeder, plan)
        run.unseeded_resume = run.last is None and seeder.resume_check.pending()
    elif plan.how == MOVE:
        move_world(plan.entry, {k: plan.participants[k] for k in plan.loads}, seeder, plan.load)
    elif plan.how == NEXT_EPOCH:
        _warn_dropped_skips(plan.entry)
        logger.info(
            "seeder state from a world of %d loaded into a world of %d: master seed and "
            "last reseed %s restored; the saved RNG and participant states belong to the "
            "other world and are not loaded (the next reseed() seeds them)",
            plan.entry["world_size"],
            seeder.world_size,
            run.last,
        )
    # Plain stores, no call: no interrupt can fall between the applied states and these.
    seeder.run = run
    seeder.pending.parts, seeder.pending.moved = waits, moved
    if plan.how == MOVE_WHEN_BUILT:
        logger.info(
            "seeder state from a world of %d loaded into a world of %d: master seed and "
            "last reseed %s restored; waiting for %s, whose position is global, to be "
            "built (this rank's RNG streams are re-derived then)",
            plan.entry["world_size"],
            seeder.world_size,
            run.last,
            part_names(waits),
        )
    elif waits:
        logger.info("seeder state loaded; waiting for %s to be built", part_names(waits))


def apply_entry(seeder: Loading, plan: LoadPlan) -> None:
    """Load an :data:`EXACT` plan's entry: participants, then global RNGs, with rollback.

    Participants whose state nothing validated go first. Each state is saved right before it
    is replaced, so that whatever stops the load is followed by putting back everything
    replaced so far. Once all is loaded, the resume check keeps the global RNGs for the
    participants that resume inside an epoch.

    Args:
        seeder: the seeder ``plan`` was made for.
        plan: a validated :data:`EXACT` plan.

    Raises:
        StateError: from an ``Exception`` while loading, naming what was put back. Ctrl-C and
            ``SystemExit`` propagate as they are, after the restore.
    """
    entry, stateful, adapters = plan.entry, plan.participants, seeder.global_adapters()
    undo, load = Saved([], []), plan.load  # participants check their part against the saved run
    try:
        unchecked = [k for k in plan.loads if not validates_state(stateful[k])]
        for key in unchecked + [k for k in plan.loads if k not in unchecked]:
            member = stateful[key]
            undo.participants.append((member, saved_state(member)))
            load_part(member, entry["participants"][key], load)
        rngs, kept = entry["rngs"], undo.rngs
        for adapter in adapters:
            kept.append((adapter, adapter.copy_state()))
            adapter.set_state(rngs[adapter.name])
        if seeder.resume_check.wanted:  # a participant resumes inside an epoch
            seeder.resume_check.arm(adapters)
    except BaseException as exc:
        stuck = restore(undo)  # the states put back are checked against the seeder's own run
        if not isinstance(exc, Exception):
            raise
        names = [a.name for a, _ in undo.rngs]
        names += [k for k in plan.loads if any(p is stateful[k] for p, _ in undo.participants)]
        outcome = "every RNG and participant is as it was before load_state_dict"
        if stuck:
            outcome = f"NOT restored: {'; '.join(stuck)}; the rest is as before load_state_dict"
        elif names:
            outcome = f"{outcome} (put back: {', '.join(names)})"
        raise StateError(
            f"loading the seeder state failed ({type(exc).__name__}: {exc}); {outcome}"
        ) from exc


def check_state(seeder: Loading, state: Any, allow_world_change: Any) -> LoadPlan:
    """``seeder.check_state_dict``: plan and validate; change nothing.

    Args:
        seeder: the seeder to check against.
        state: one process's ``state_dict()`` or a ``gather_state_dict()``.
        allow_world_change: ``check_state_dict``'s argument.

    Returns:
        The validated :class:`LoadPlan`.

    Raises:
        RuntimeError, StateError, TypeError: as :func:`plan_load` and :func:`validate`.

    >>> import seeder
    >>> s = seeder.Seeder(); s.init(1); check_state(s, s.state_dict(), False).how
    'exact'
    """
    plan = plan_load(seeder, state, allow_world_change)
    validate(seeder, plan)
    return plan


def load_state(seeder: Loading, state: Any, allow_world_change: Any) -> LoadPlan:
    """``seeder.load_state_dict``: plan, validate, apply.

    On failure the seeder is as before, and the resume check forgets its requests.

    Args:
        seeder: the seeder to load into.
        state: one process's ``state_dict()`` or a ``gather_state_dict()``.
        allow_world_change: ``load_state_dict``'s argument.

    Returns:
        The applied :class:`LoadPlan`.

    Raises:
        RuntimeError, StateError, TypeError: as :func:`plan_load`, :func:`validate` and
            :func:`apply`.

    >>> import seeder
    >>> s = seeder.Seeder(); s.init(1); s.reseed(1, 2); saved = s.state_dict()
    >>> load_state(s, saved, False).run.last
    (1, 2)
    """
    try:
        plan = plan_load(seeder, state, allow_world_change)
        validate(seeder, plan)
        apply(seeder, plan)
    except BaseException:
        seeder.resume_check.drop()
        raise
    return plan


def _refuse_per_rank(
    have: dict[str, Any], state: Any, world_size: int, allow_world_change: Any
) -> None:
    """Raise :class:`StateError` naming the participants of ``have`` that cannot move, when
    ``state`` is of another world size and ``allow_world_change`` is not true."""
    saved = state.get("world_size") if isinstance(state, dict) else None
    if (
        (is_bool(allow_world_change) and allow_world_change)
        or type(saved) is not int
        or saved == world_size
    ):
        return
    keys = per_rank_keys(have)
    if keys:
        raise StateError(
            f"the checkpoint was saved by a world of {saved} process(es), this run has "
            f"{world_size}, and {part_names(keys)} keep(s) one rank's state; nothing was loaded. "
            f"Resume with {saved} processes, or pass allow_world_change=True to continue from "
            f"the next epoch boundary (see {WORLD_DOCS})"
        )


def _refuse_unmoved(have: dict[str, Any], entry: dict[str, Any]) -> None:
    """Raise :class:`StateError` when a state of another world that holds elastic loaders' parts
    only meets participants here that keep one rank's state (a sampler, a default-mode loader):
    the checkpoint holds nothing for them, and they cannot take an elastic loader's part."""
    keys = per_rank_keys(have)
    if not keys:
        return
    parts = [k for k in entry["participants"] if not str(k).startswith("generator.")]
    raise StateError(
        f"the checkpoint of a world of {entry.get('world_size')} process(es) holds the state of "
        f"elastic loaders only ({', '.join(parts)}), none for {part_names(keys)}; nothing was "
        "loaded. Build only the elastic loaders and registered generators of the saved run, in "
        f"the same order (see {WORLD_DOCS})"
    )


def _moves_when_built(state: Any, have: dict[str, Any], world: int, rank: int) -> Any:
    """The entry of a state of another world size whose participants are elastic loaders not
    built yet (and registered generators), else ``None``."""
    if isinstance(state, dict) and state.get("world_size") == world or elastic_keys(have):
        return None  # a state of this world (the common load: nothing more to read), or loaders
    entry, changed = own_entry(state, world, rank, True)
    parts = entry.get("participants")
    if not changed or not isinstance(parts, dict):
        return None
    loaders = [
        k
        for k, v in parts.items()
        if isinstance(v, dict)
        and v.get("format") in ("seeder.elastic_loader", "seeder.mix", MERGED_FORMAT)
    ]
    if not loaders or any(k not in loaders and not str(k).startswith("generator.") for k in parts):
        return None
    return entry


def _split(entry: dict[str, Any], have: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(entry restricted to the participants there are, the parts that wait)``, same world.

    A part of an optional kind (:func:`seeder._seeding.registry.optional_part`) that this process
    has none of is left out. Raises :class:`StateError` when this process has a participant the
    entry holds no state for.
    """
    parts = entry.get("participants")
    if not isinstance(parts, dict) or parts.keys() == have.keys():
        return entry, {}  # all is there, or check_entry says what is wrong
    dropped = [k for k in parts if optional_part(k, parts[k]) and k not in have]
    if dropped and not any(optional_part(k) for k in have):
        parts = {k: v for k, v in parts.items() if k not in dropped}
        logger.debug(
            "seeder state: %s left out (a tool's participant this process does not have)",
            part_names(dropped),
        )
        entry = dict(entry, participants=parts)
    extra = [k for k in have if k not in parts]
    reasons = sorted({optional_reason(k) for k in extra} - {""})
    if extra and reasons and all(optional_part(k) for k in extra):
        raise StateError(
            f"this process has {part_names(extra)} but the checkpoint holds no state "
            f"for it: {' '.join(reasons)}"
        )
    if extra:
        raise StateError(
            f"this process has {part_names(extra)} but the checkpoint holds no state "
            f"for it (it holds {part_names(parts)}): build the same loaders and "
            "register the same generators, in the same order, as the run that saved "
            "it"
        )
    later = {k: v for k, v in parts.items() if k not in have}
    if not later:
        return entry, {}
    return dict(entry, participants={k: parts[k] for k in have}), later


def _continued_run(seeder: Loading, plan: LoadPlan) -> RunState:
    """The bookkeeping the plan continues: its master seed and last reseed, the seeder's reseeds
    seen so far and, unless it continues at the next epoch, the next reseed of the saved
    ``(task, epoch)`` skipped. Warns when the checkpoint overrides an ``init`` seed."""
    saved, run = RunState(master=plan.run.master, last=plan.run.last), seeder.run
    if seeder.explicit and saved.master != run.master:
        # the caller of load_state_dict
        warnings.warn(
            f"init() got master seed {run.master} but the checkpoint was made with "
            f"{saved.master}; continuing with the checkpoint's seed",
            SeederWarning,
            stacklevel=5,
        )
    if saved.master != run.master and seeder.rank == 0:
        logger.info("Using seed: %d (from checkpoint)", saved.master)
    saved.seen = set(run.seen)
    if plan.how != NEXT_EPOCH:
        saved.resume_pending = saved.last
        if saved.last is not None:
            saved.seen.add(saved.last)
    return saved
