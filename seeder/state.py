"""Seeder state: capture, validate, apply with rollback, and ``fork_rng`` over named snapshots.

Pure functions over explicit inputs (the global RNG adapters, the stateful
participants by key, the run's bookkeeping); :class:`seeder.Seeder`'s
``state_dict``/``check_state_dict``/``load_state_dict``/``fork_rng`` are thin
wrappers. Loading validates the whole state first and changes nothing on error.

Example:
    >>> import seeder
    >>> s = seeder.Seeder(); s.init(1); s.reseed(1, 0)
    >>> st = s.state_dict(); st["format"], st["version"]
    ('seeder', 1)
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import warnings
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Set, Tuple

import torch

from . import derive
from .checks import is_int
from .distributed import process_group_active
from .errors import SeederWarning, StateError
from .participant import GeneratorParticipant, describe, validates_state
from .rngbase import RNGAdapter, put_back_states, save_states

__all__ = ["STATE_FORMAT_VERSION", "GATHERED_FORMAT", "STATE_KEYS", "RunState", "Snapshot", "make_state", "gather",
           "warn_unsaved_generators", "world_change_allowed", "elastic_keys", "move_world", "own_entry", "check_entry",
           "apply_entry", "check", "load", "capture", "restore", "fork_rng", "world_message"]

logger = logging.getLogger("seeder")

#: Version of the layout of :meth:`seeder.Seeder.state_dict`.
STATE_FORMAT_VERSION = 1
#: ``format`` tag of :meth:`seeder.Seeder.gather_state_dict` (every rank's state in one dict).
GATHERED_FORMAT = "seeder-gathered"
#: The keys of one process's state.
STATE_KEYS = frozenset({"format", "version", "derivation_version", "master_seed", "world_size", "rank",
                        "last_reseed", "rngs", "participants"})


@dataclasses.dataclass
class RunState:
    """A seeder's bookkeeping: the master seed, the last reseed, the pending resume, the reseeds seen."""

    master: Optional[int] = None
    last: Optional[Tuple[int, int]] = None
    resume_pending: Optional[Tuple[int, int]] = None
    seen: Set[Tuple[int, int]] = dataclasses.field(default_factory=set)

    def begin(self, key: Tuple[int, int]) -> bool:
        """Whether ``reseed(*key)`` must seed: not when it resumes the loaded ``(task, epoch)``. Warns on a repeat."""
        if self.resume_pending is not None:
            pending, self.resume_pending = self.resume_pending, None
            if key == pending:
                logger.info("reseed%s skipped: resuming inside it from the loaded state", key)
                return False
        if key in self.seen:
            warnings.warn(f"seeder.reseed{key} was already called in this process: its random streams repeat. "
                          "Pass a new epoch (or task id) to get fresh randomness.", SeederWarning, stacklevel=4)
        self.seen.add(key)
        return True

    def copy(self) -> "RunState":
        """An independent copy (the ``seen`` set is copied)."""
        return dataclasses.replace(self, seen=set(self.seen))


class Snapshot(NamedTuple):
    """What :func:`capture` took: global RNG states, participant states, and the run's bookkeeping."""

    rngs: List[Tuple[RNGAdapter, Any]]
    participants: List[Tuple[Any, Any]]
    run: RunState


def make_state(run: RunState, world_size: int, rank: int, adapters: List[RNGAdapter],
               stateful: Dict[str, Any]) -> Dict[str, Any]:
    """One process's state: header, every global RNG, every stateful participant by key."""
    return {
        "format": "seeder",
        "version": STATE_FORMAT_VERSION,
        "derivation_version": derive.DERIVATION_VERSION,
        "master_seed": run.master,
        "world_size": world_size,
        "rank": rank,
        "last_reseed": list(run.last) if run.last is not None else None,
        "rngs": {a.name: a.get_state() for a in adapters},
        "participants": {k: p.state_dict() for k, p in stateful.items()},
    }


def gather(own: Dict[str, Any], world: int, rank: int, dst: int) -> Optional[Dict[str, Any]]:
    """Every rank's ``own`` state in one dict on rank ``dst`` (``None`` elsewhere); a collective under a process group."""
    if process_group_active():
        gathered: Optional[List[Any]] = [None] * world if rank == dst else None
        torch.distributed.gather_object(own, gathered, dst=dst)
        if rank != dst:
            return None
        ranks = list(gathered)  # type: ignore[arg-type]
    elif world == 1:
        ranks = [own]
    else:
        raise RuntimeError(
            f"gather_state_dict() needs a torch.distributed process group for a world of {world} processes; "
            "call torch.distributed.init_process_group() first, or save seeder.state_dict() in one file per rank")
    return {"format": GATHERED_FORMAT, "version": STATE_FORMAT_VERSION, "world_size": world, "ranks": ranks}


def warn_unsaved_generators(generators: List[GeneratorParticipant]) -> None:
    """Warn once per registered plain callable: its stream cannot be saved, so a mid-epoch resume cannot continue it."""
    for member in generators:
        if member.saves_state or member.warned:
            continue
        member.warned = True
        owner = getattr(member.gen, "__self__", None)
        hint = (f"give {type(owner).__name__} state_dict()/load_state_dict() methods that save its RNG"
                if owner is not None and not isinstance(owner, (torch.nn.Module, torch.optim.Optimizer))
                else "register the RNG object itself (random.Random, numpy Generator/RandomState or torch.Generator)")
        warnings.warn(f"registered generator {describe(member.gen)} is a plain callable with no state to save: a run "
                      f"resumed from a checkpoint taken inside an epoch will not continue its random stream; {hint}",
                      SeederWarning, stacklevel=3)


def world_message(saved: int, now: int) -> str:
    """The error text for a checkpoint of another world size."""
    return (f"the checkpoint was saved by a world of {saved} process(es), this run has {now}; resume with the same "
            f"world size for an exact continuation, or pass allow_world_change=True to load_state_dict to keep the "
            f"master seed and epoch position and continue from the next epoch boundary")


def _unsupported(what: str, version: Any) -> StateError:
    return StateError(f"{what} format {version!r} is not supported by this version (which reads format "
                      f"{STATE_FORMAT_VERSION}); load it with the seeder version that wrote it")


def own_entry(state: Any, world_size: int, rank: int, allow_world_change: bool) -> Tuple[Dict[str, Any], bool]:
    """This rank's single-process state in ``state`` (one process's, or gathered) and whether the world changed."""
    if not isinstance(allow_world_change, bool):
        raise TypeError(f"allow_world_change must be True or False, got {allow_world_change!r}")
    if isinstance(state, dict) and state.get("format") == GATHERED_FORMAT:
        if state.get("version") != STATE_FORMAT_VERSION:
            raise _unsupported("gathered seeder state", state.get("version"))
        if set(state) != {"format", "version", "world_size", "ranks"}:
            raise StateError("gathered seeder state must have exactly the keys format, version, world_size, ranks")
        ranks, world = state["ranks"], state["world_size"]
        if not is_int(world) or world < 1:
            raise StateError(f"gathered state['world_size'] must be a positive int, got {world!r}")
        if not isinstance(ranks, list) or len(ranks) != world:
            raise StateError(f"gathered state['ranks'] must be a list of {world} rank states")
        for i, entry in enumerate(ranks):
            if not isinstance(entry, dict) or entry.get("format") != "seeder" or entry.get("rank") != i \
                    or entry.get("world_size") != world:
                raise StateError(f"gathered state['ranks'][{i}] is not rank {i}'s seeder state in a world of {world}")
            if entry.get("master_seed") != ranks[0].get("master_seed"):
                raise StateError(
                    f"gathered state['ranks'][{i}] has master seed {entry.get('master_seed')!r}, rank 0 has "
                    f"{ranks[0].get('master_seed')!r}; the file mixes states of different runs")
        if world != world_size:
            if allow_world_change:
                return ranks[0], True
            raise StateError(world_message(world, world_size))
        return ranks[rank], False
    if not isinstance(state, dict) or state.get("format") != "seeder":
        raise StateError("not a seeder state: pass the dict returned by seeder.state_dict() or seeder.gather_state_dict()")
    changed = state.get("world_size") != world_size
    return state, bool(changed and allow_world_change)


def _as_state_error(check: Any, *args: Any) -> None:
    try:
        check(*args)
    except (TypeError, ValueError) as exc:
        raise StateError(str(exc)) from None


def _check_header(entry: Dict[str, Any]) -> None:
    if entry.get("version") != STATE_FORMAT_VERSION:
        raise _unsupported("seeder state", entry.get("version"))
    if entry.get("derivation_version") != derive.DERIVATION_VERSION:
        raise StateError(
            f"the checkpoint used seed derivation v{entry.get('derivation_version')!r}, this seeder derives "
            f"v{derive.DERIVATION_VERSION}; install the seeder version that wrote it to continue the same streams")
    if entry.keys() != STATE_KEYS:
        raise StateError(f"seeder state keys differ: missing {sorted(STATE_KEYS - set(entry))}, "
                         f"unexpected {sorted(set(entry) - STATE_KEYS)}")
    master = entry["master_seed"]
    if not (type(master) is int and 0 <= master <= derive.MAX_MASTER_SEED):  # fast path; the full check words it
        _as_state_error(derive.check_master_seed, master, "state['master_seed']")
    for name in ("world_size", "rank"):
        if not is_int(entry[name]) or entry[name] < 0:
            raise StateError(f"state[{name!r}] must be a non-negative int, got {entry[name]!r}")
    last = entry["last_reseed"]
    if last is not None:
        if not (isinstance(last, list) and len(last) == 2):
            raise StateError("state['last_reseed'] must be None or [task_id, epoch]")
        for i, word in enumerate(last):
            if not (type(word) is int and 0 <= word <= derive.MAX_KEY):
                _as_state_error(derive.check_key, word, f"state['last_reseed'][{i}]")


def check_entry(entry: Dict[str, Any], *, world_size: int, rank: int, adapters: List[RNGAdapter],
                stateful: Dict[str, Any], changed: bool) -> None:
    """Raise :class:`StateError` unless ``entry`` loads into this process; change nothing."""
    _check_header(entry)
    if changed:
        return
    if entry["world_size"] != world_size:
        raise StateError(world_message(entry["world_size"], world_size))
    if entry["rank"] != rank:
        raise StateError(f"this is rank {entry['rank']}'s state but this process is rank {rank}; load each rank's own entry")
    rngs = entry["rngs"]
    if not isinstance(rngs, dict):
        raise StateError("state['rngs'] must be a dict")
    names = [a.name for a in adapters]
    if set(rngs) != set(names):
        raise StateError(f"the checkpoint has RNG states for {sorted(rngs)} but this process has {sorted(names)}; "
                         "resume on the same kind of machine (same accelerators visible)")
    for adapter in adapters:
        adapter.check_state(rngs[adapter.name], f"state['rngs'][{adapter.name!r}]")
    parts = entry["participants"]
    if not isinstance(parts, dict):
        raise StateError("state['participants'] must be a dict")
    if set(parts) != set(stateful):
        raise StateError(
            f"the checkpoint holds state for {sorted(parts)} but this process has {sorted(stateful)} registered; "
            "register the same generators, samplers, loaders and pipelines in the same order before load_state_dict")
    for key, obj in stateful.items():
        if validates_state(obj):
            try:
                obj.check_state_dict(parts[key])
            except StateError as exc:
                raise StateError(f"state['participants'][{key!r}]: {exc}") from None


def capture(adapters: List[RNGAdapter], members: List[Any], run: RunState) -> Snapshot:
    """A :class:`Snapshot` of ``adapters``' RNGs, ``members``' states and the run's bookkeeping."""
    rngs = save_states(adapters)
    if not members:
        return Snapshot(rngs, [], run.copy())
    with warnings.catch_warnings():  # a snapshot is no checkpoint: participants' checkpoint advice does not apply
        warnings.simplefilter("ignore", SeederWarning)
        parts = [(p, p.state_dict() if isinstance(p, GeneratorParticipant) and p.adapter is not None
                  else copy.deepcopy(p.state_dict())) for p in members]
    return Snapshot(rngs, parts, run.copy())


def restore(snapshot: Snapshot) -> List[str]:
    """Put a :func:`capture` back, as much as possible; return what could not be restored."""
    failed = put_back_states(snapshot.rngs)
    for obj, st in snapshot.participants:
        try:
            obj.load_state_dict(st)
        except Exception as exc:
            failed.append(f"{describe(getattr(obj, 'gen', obj))} ({exc})")
    if failed:
        logger.error("seeder could not restore the state of: %s", "; ".join(failed))
    return failed


def apply_entry(entry: Dict[str, Any], adapters: List[RNGAdapter], stateful: Dict[str, Any], run: RunState) -> None:
    """Load a checked ``entry``: participants, then global RNGs; on failure put everything back and raise.

    Participants whose state nothing validated go first, each snapshotted; then the ones that validated
    theirs; then the global RNGs, validated field by field, where nothing can fail any more. Snapshots only
    where needed: one is not free, and a participant's ``state_dict`` may have side effects (DALI).
    """
    unchecked = [k for k, p in stateful.items() if not validates_state(p)]
    snapshot = capture([], [stateful[k] for k in unchecked], run) if unchecked else None
    applied: List[str] = []
    try:
        for key in unchecked + [k for k in stateful if k not in unchecked]:
            stateful[key].load_state_dict(entry["participants"][key])
            applied.append(key)
        for adapter in adapters:
            adapter.set_state(entry["rngs"][adapter.name])
    except Exception as exc:
        stuck = [f"{k} (already loaded)" for k in applied if k not in unchecked]
        stuck += restore(snapshot) if snapshot is not None else []
        kept = "every RNG and participant was put back as it was before load_state_dict"
        if stuck:
            kept += f", except {'; '.join(stuck)}"
        raise StateError(f"loading the seeder state failed ({type(exc).__name__}: {exc}); {kept}") from exc


def check(seeder: Any, state: Any, allow_world_change: bool,
          stateful: Optional[Dict[str, Any]] = None) -> Tuple[Dict[str, Any], bool]:
    """This rank's entry of ``state`` and whether the world changed, after checking it all against ``seeder``."""
    if not seeder.initialized:
        raise RuntimeError("seeder.load_state_dict() called before seeder.init(); call seeder.init(master_seed=...) first")
    stateful = seeder.stateful() if stateful is None else stateful
    moving = elastic_keys(stateful)
    entry, changed = own_entry(state, seeder.world_size, seeder.rank, world_change_allowed(stateful, allow_world_change))
    check_entry(entry, world_size=seeder.world_size, rank=seeder.rank, adapters=seeder.global_adapters(),
                stateful=stateful, changed=changed)
    if changed and moving:
        for key in moving:
            if key not in entry["participants"]:
                raise StateError(f"the checkpoint holds no state for {key!r} (an elastic loader of this process); "
                                 "create the same loaders in the same order before load_state_dict")
            stateful[key].check_state_dict(entry["participants"][key])
    return entry, changed


def load(seeder: Any, state: Any, allow_world_change: bool) -> None:
    """``seeder.load_state_dict``: check everything, then apply (with rollback) and arm the resume."""
    stateful = seeder.stateful()
    entry, changed = check(seeder, state, allow_world_change, stateful)
    saved_master, run = entry["master_seed"], seeder.run
    if seeder.explicit and saved_master != run.master:
        warnings.warn(f"init() got master seed {run.master} but the checkpoint was made with {saved_master}; "
                      "continuing with the checkpoint's seed", SeederWarning, stacklevel=3)
    if saved_master != run.master and seeder.rank == 0:
        logger.info("Using seed: %d (from checkpoint)", saved_master)
    last = tuple(entry["last_reseed"]) if entry["last_reseed"] is not None else None
    moving = elastic_keys(stateful)
    if changed and moving:
        move_world(entry, stateful, moving, seeder)
        seeder.run = RunState(master=saved_master, last=last, resume_pending=last,
                              seen=run.seen | ({last} if last is not None else set()))
        return
    if changed:
        seeder.run = RunState(master=saved_master, last=last, seen=set(run.seen))
        logger.info("seeder state from a world of %d loaded into a world of %d: master seed and last reseed %s "
                    "restored, RNG and participant states left as they are; continue with reseed() of the next "
                    "epoch", entry["world_size"], seeder.world_size, last)
        return
    apply_entry(entry, seeder.global_adapters(), stateful, run)
    seeder.run = RunState(master=saved_master, last=last, resume_pending=last,
                          seen=run.seen | ({last} if last is not None else set()))


@contextlib.contextmanager
def fork_rng(seeder: Any) -> Iterator[None]:
    """Run a block with every RNG ``seeder`` knows isolated; restore them all afterwards (see ``Seeder.fork_rng``)."""
    members = [p for p in seeder.stateful().values() if isinstance(p, GeneratorParticipant)]
    snapshot = capture(seeder.global_adapters(), members, seeder.run)
    try:
        yield
    finally:
        reseeded = seeder.run.last != snapshot.run.last or seeder.run.seen != snapshot.run.seen
        failed = restore(snapshot)
        seeder.run = snapshot.run
        if failed:
            warnings.warn(f"fork_rng() could not restore: {'; '.join(failed)}", SeederWarning, stacklevel=3)
        if reseeded:
            for member in seeder.generators():
                if not member.saves_state:
                    warnings.warn(
                        f"fork_rng(): the block reseeded, and registered generator {describe(member.gen)} is a plain "
                        "callable whose state cannot be restored; register the RNG object itself or give its owner "
                        "state_dict()/load_state_dict()", SeederWarning, stacklevel=3)


def world_change_allowed(stateful: Dict[str, Any], allow_world_change: Any) -> Any:
    """``allow_world_change`` as loading takes it: ``True`` as well when the state is elastic (:func:`elastic_keys`)."""
    return True if allow_world_change is False and elastic_keys(stateful) else allow_world_change


def elastic_keys(stateful: Dict[str, Any]) -> List[str]:
    """Keys of the elastic participants (global state), if they and registered generators are all there is; else ``[]``."""
    keys = [k for k, p in stateful.items() if getattr(p, "seeder_elastic", False) is True]
    rest = [k for k, p in stateful.items() if k not in keys and not isinstance(p, GeneratorParticipant)]
    return keys if keys and not rest else []


def move_world(entry: Dict[str, Any], stateful: Dict[str, Any], moving: List[str], seeder: Any) -> None:
    """Load a checked ``entry`` of another world size: the elastic participants' global states (rolled back on failure),
    then this rank's global RNGs and registered generators seeded from ``derive(ELASTIC_RANK, task, epoch, rank,
    stream=global step)`` (shared generators: rank ``2**32 - 1``)."""
    snapshot = capture([], [stateful[k] for k in moving], seeder.run)
    try:
        for key in moving:
            stateful[key].load_state_dict(entry["participants"][key])
    except BaseException as exc:
        restore(snapshot)
        raise StateError(f"loading the elastic loader state failed ({type(exc).__name__}: {exc}); put back as it was") from exc
    step = stateful[moving[0]].elastic_step(entry["participants"][moving[0]])
    task, epoch = entry["last_reseed"] if entry["last_reseed"] is not None else (0, 0)
    gens = seeder.generators()
    words = 1 + max((g.stream for g in gens), default=0)
    master, rank, domain = entry["master_seed"], seeder.rank, int(derive.Domain.ELASTIC_RANK)
    own, shared = (derive.stream_seeds(master, domain, task, epoch, r, words).seed(step) for r in (rank, derive.MAX_KEY))
    for adapter in seeder.global_adapters():
        adapter.seed(own[0])
    for gen in gens:
        gen.seed((shared if gen.shared else own)[gen.stream])
    logger.info("seeder state from a world of %d loaded into a world of %d: elastic loader(s) %s continue at global "
                "step %d of (task, epoch) %s; this rank's RNG streams re-derived from (master, task, epoch, rank %d, "
                "step)", entry["world_size"], seeder.world_size, ", ".join(moving), step, (task, epoch), rank)
