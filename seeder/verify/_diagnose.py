"""Which state diverged first after a resume, read from the runs' traces (:mod:`seeder._run.trace`).

``seeder verify`` sets ``$SEEDER_TRACE`` for its seeded runs; a script whose data
path goes through ``seeder.DataLoader`` or ``seeder.DistributedSampler`` then leaves
one fingerprint line per batch: the position in the epoch and a hash of every random
state seeder knows. When a resumed run (3) differs from the uninterrupted run (1),
:func:`diagnose` lines up the traces of (1), of the stopped run (2) and of (3) by
``(source, epoch, position)`` and names the first state that differs, starting
right after the resume, with what usually causes it and the fix.

Seeder's own per-step records (``steps.jsonl``, :mod:`seeder._run.steps`), which every run
verify starts writes, name causes the trace does not see: a resumed run that resumed
from a checkpoint another run wrote (:func:`foreign_resume`), a resumed epoch whose
batches the loop discarded, and a batch drawn before the checkpoint and drawn again after
the resume (:mod:`seeder.verify._stepcauses`, from the numbers each global RNG gave out
per step). Where nothing is found :func:`diagnose_dirs` returns
``None`` and the report keeps its generic message.

Example:
    >>> def rec(pos, torch="t0", src="sampler"):
    ...     rngs = {"python": "p", "numpy": "n", "torch": torch}
    ...     return {"source": src, "epoch": 1, "position": pos, "rngs": rngs,
    ...             "participants": {}, "positions": {}}
    >>> full = {0: [rec(0), rec(4), rec(8), rec(12)]}
    >>> stopped, resumed = {0: [rec(0), rec(4)]}, {0: [rec(4, torch="t1"), rec(8, torch="t2")]}
    >>> d = diagnose(full, stopped, resumed)
    >>> d.state, d.message.split(":")[0]
    ('torch', "torch's global RNG differs right after the resume, before the first resumed batch")
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

from seeder._run.steps import read_steps
from seeder._run.trace import read_trace
from seeder.verify._contract import Metrics
from seeder.verify._stepcauses import discarded_batches, prefetched

__all__ = [
    "Diagnosis",
    "diagnose",
    "diagnose_dirs",
    "preinit_hints",
    "TRACE_NAME",
    "foreign_resume",
    "foreign_resumes",
    "STEPS_FILE",
    "missing_reseed",
]

#: seeder's per-step records in a run directory (:mod:`seeder._run.steps`).
STEPS_FILE = "steps.jsonl"

#: File prefix of a run's traces inside its run directory.
TRACE_NAME = "trace"

Records = list[dict[str, Any]]
_GLOBAL_ORDER = ("python", "numpy", "torch")
_LABEL = {
    "python": "Python's global random",
    "numpy": "NumPy's global RNG",
    "torch": "torch's global RNG",
}

MSG_BASE_SEED = (
    "torch's global RNG differs right after the resume, before the first resumed batch: something "
    "drew from it between seeder.load_state_dict() and that batch. A torch DataLoader without "
    "generator= does: each iter(loader) draws its workers' base seed from torch's global RNG, so a "
    "run resumed mid-epoch is one draw off the run it continues. Pass "
    "generator=seeder.data.dataloader_generator() to the DataLoader, or use seeder.DataLoader"
)
MSG_NOT_COUNTED = (
    "the {source} position differs: the resumed run restarted epoch {epoch} at its first sample, "
    "although the stopped run had trained {steps} step(s) of it. Its position never moved during "
    "the epoch, so the checkpoint holds position 0: call sampler.advance(len(batch)) after each "
    "training step, or use seeder.DataLoader, which counts its batches itself"
)
MSG_POSITION = (
    "the {source} position differs right after the resume: the resumed run continued at sample "
    "{got} of epoch {got_epoch}, but the stopped run had reached sample {want} of epoch "
    "{want_epoch}. The checkpoint did not restore the position: save seeder.state_dict() with the "
    "checkpoint and call seeder.load_state_dict() on resume before the epoch loop (or the "
    "sampler's own state_dict()), or use seeder.DataLoader"
)
MSG_RESEEDED = (
    "Python's, NumPy's and torch's global RNGs are all back at the start of epoch {epoch} after "
    "the resume: the run reseeded the epoch instead of continuing the checkpoint's streams. Save "
    "seeder.state_dict() with the checkpoint and call seeder.load_state_dict() on resume before "
    "the epoch loop (its next reseed of the same epoch is then skipped)"
)
MSG_NOT_RESTORED = (
    "Python's, NumPy's and torch's global RNGs all differ right after the resume: the checkpoint's "
    "seeder state was not restored. Save seeder.state_dict() with the checkpoint, after the step "
    "it resumes from, and call seeder.load_state_dict() on resume before the epoch loop"
)
MSG_ONE_RNG = (
    "{label} differs right after the resume, before the first resumed batch: something drew from "
    "it between seeder.load_state_dict() and that batch, or seeder.state_dict() was taken at "
    "another moment of the step than the one the run resumes from (take it after the step, with "
    "the model and optimizer)"
)
MSG_GENERATOR = (
    "registered generator {n} differs right after the resume: its state is not in the checkpoint. "
    "A plain callable f(seed) has none to save: register the RNG object itself (random.Random, a "
    "NumPy Generator/RandomState, a torch.Generator), or give the object that owns the callable "
    "state_dict()/load_state_dict()"
)
MSG_PARTICIPANT = (
    "the state of {key} differs right after the resume: the checkpoint did not restore it (save "
    "seeder.state_dict() with the checkpoint, call seeder.load_state_dict() on resume)"
)
MSG_LATER = (
    "every traced state matched for {n} batch(es) after the resume; then at sample {position} of "
    "epoch {epoch} {what} differs first{hint}"
)
MSG_NONE = (
    "every random state seeder traces (global RNGs, registered generators, positions) matches the "
    "uninterrupted run at each of the {n} batch(es) after the resume, so the difference comes from "
    "state the trace does not see: model, optimizer or LR-scheduler state the checkpoint did not "
    "restore, randomness inside DataLoader workers (wrap the dataset in seeder.data.SeededDataset "
    "or use seeder.DataLoader), or a nondeterministic kernel"
)


@dataclass
class Diagnosis:
    """The first state that differs after a resume: ``state`` names it (``torch``, ``position``,
    ``generator.1``, ``rngs``, ``none``, ...), ``message`` explains it, ``epoch``/``position`` say
    where, ``rank`` on which rank."""

    state: str
    message: str
    rank: int = 0
    epoch: Optional[int] = None
    position: Optional[int] = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _key(rec: dict[str, Any]) -> tuple[str, int, int]:
    return rec["source"], rec["epoch"], rec["position"]


def _find(records: Records, key: tuple[str, int, int], start: int) -> Optional[int]:
    for i in range(max(start, 0), len(records)):
        if _key(records[i]) == key:
            return i
    return None


def _differences(want: dict[str, Any], got: dict[str, Any]) -> list[tuple[str, str]]:
    """``(kind, name)`` of each differing state, in the order they are explained: positions, RNGs,
    participants."""
    out: list[tuple[str, str]] = []
    wp, gp = want.get("positions", {}), got.get("positions", {})
    out += [("position", k) for k in sorted(set(wp) | set(gp)) if wp.get(k) != gp.get(k)]
    wr, gr = want.get("rngs", {}), got.get("rngs", {})
    names = [n for n in _GLOBAL_ORDER if n in wr] + [n for n in wr if n not in _GLOBAL_ORDER]
    out += [("rng", n) for n in names if wr.get(n) != gr.get(n)]
    wq, gq = want.get("participants", {}), got.get("participants", {})
    keys = sorted(set(wq) | set(gq), key=lambda k: (not k.startswith("generator."), k))
    out += [("participant", k) for k in keys if k not in wp and wq.get(k) != gq.get(k)]
    return out


def _epoch_start(records: Records, source: str, epoch: int) -> Optional[dict[str, Any]]:
    return next((r for r in records if r["source"] == source and r["epoch"] == epoch), None)


def _explain_first(
    diffs: list[tuple[str, str]], full: Records, rec: dict[str, Any], want: dict[str, Any]
) -> tuple[str, str]:
    """``(state, message)`` for a difference found at the first record after the resume."""
    kind, name = diffs[0]
    if kind == "position":
        g, w = rec["positions"].get(name, {}), want["positions"].get(name, {})
        return "position", MSG_POSITION.format(
            source=name,
            got=g.get("position"),
            got_epoch=g.get("epoch"),
            want=w.get("position"),
            want_epoch=w.get("epoch"),
        )
    rngs = [n for k, n in diffs if k == "rng"]
    if set(_GLOBAL_ORDER) <= set(rngs):
        start = _epoch_start(full, rec["source"], rec["epoch"])
        if start is not None and all(
            start["rngs"].get(n) == rec["rngs"].get(n) for n in _GLOBAL_ORDER
        ):
            return "reseeded", MSG_RESEEDED.format(epoch=rec["epoch"])
        return "rngs", MSG_NOT_RESTORED
    if kind == "rng":
        if rngs == ["torch"]:
            return "torch", MSG_BASE_SEED
        return name, MSG_ONE_RNG.format(label=_LABEL.get(name, f"the {name} RNG"))
    if name.startswith("generator."):
        return name, MSG_GENERATOR.format(n=name.split(".", 1)[1])
    return name, MSG_PARTICIPANT.format(key=name)


def _what(kind: str, name: str) -> str:
    if kind == "rng":
        return _LABEL.get(name, f"the {name} RNG")
    if name.startswith("generator."):
        return f"registered generator {name.split('.', 1)[1]}"
    return f"the position of {name}" if kind == "position" else f"the state of {name}"


def _one_source(
    full: Records, stopped: Records, resumed: Records
) -> tuple[str, Records, Records, Records]:
    """The source compared and the three runs' records of it: the one that recorded the stopped
    run's last step (a loader's batches), so that the records of a sampler iterated inside a
    loader do not get lined up against the loader's."""
    src = (
        stopped[-1]["source"]
        if stopped and any(r["source"] == stopped[-1]["source"] for r in resumed)
        else resumed[0]["source"]
    )
    f, s, r = ([x for x in recs if x["source"] == src] for recs in (full, stopped, resumed))
    return src, f, s, r


def _never_moved(
    src: str, stopped: Records, first: dict[str, Any], rank: int, metrics: Optional[Metrics]
) -> Optional[Diagnosis]:
    """A resumed epoch restarted at position 0 whose position never moved in the stopped run,
    although it trained steps of it."""
    if metrics is None or not len(metrics) or metrics.epochs[-1] is None:
        return None
    stop_epoch = metrics.epochs[-1]
    steps = sum(1 for e in metrics.epochs if e == stop_epoch)
    moved = any(r["position"] > 0 for r in stopped if r["epoch"] == stop_epoch)
    if first["epoch"] != stop_epoch or first["position"] != 0 or moved or steps <= 0:
        return None
    return Diagnosis(
        "position",
        MSG_NOT_COUNTED.format(source=src, epoch=stop_epoch, steps=steps),
        rank,
        first["epoch"],
        0,
    )


def _not_continued(src: str, stopped: Records, first: dict[str, Any], rank: int) -> Diagnosis:
    """The resumed run's first record is at another position than the stopped run had reached."""
    want = stopped[-1]
    return Diagnosis(
        "position",
        MSG_POSITION.format(
            source=src,
            got=first["position"],
            got_epoch=first["epoch"],
            want=want["position"],
            want_epoch=want["epoch"],
        ),
        rank,
        first["epoch"],
        first["position"],
    )


def _later(src: str, full: Records, resumed: Records, k: int, rank: int) -> Diagnosis:
    """The first state that differs at a resumed record after the first (which matched run (1)'s
    record ``k``), or ``none``."""
    first = resumed[0]
    for count, rec in enumerate(resumed[1:], 1):
        k2 = _find(full, _key(rec), k + 1)
        if k2 is None:
            what, hint, name = (
                f"the {src} position",
                ": the uninterrupted run never reached this position next",
                "position",
            )
        else:
            diffs = _differences(full[k2], rec)
            if not diffs:
                k = k2
                continue
            kind, name = diffs[0]
            what, name = _what(kind, name), name if kind != "position" else "position"
            hint = (
                " (the first batch of a new epoch: is seeder.reseed(1, epoch) called with the same "
                "epoch numbers as in the uninterrupted run?)"
                if rec["position"] == 0 and rec["epoch"] != first["epoch"]
                else ": something the resumed run does differently from the uninterrupted run "
                "draws from it"
            )
        message = MSG_LATER.format(
            n=count, position=rec["position"], epoch=rec["epoch"], what=what, hint=hint
        )
        return Diagnosis(name, message, rank, rec["epoch"], rec["position"])
    return Diagnosis("none", MSG_NONE.format(n=len(resumed)), rank)


def _diagnose_rank(
    full: Records, stopped: Records, resumed: Records, rank: int, stopped_metrics: Optional[Metrics]
) -> Optional[Diagnosis]:
    if not full or not resumed:
        return None
    src, full, stopped, resumed = _one_source(full, stopped, resumed)
    if not full:
        return None
    n = len(stopped)
    if n > len(full) or any(_key(full[i]) != _key(stopped[i]) for i in range(n)):
        return None  # the stopped run already went another way; the loss comparison says so
    first = resumed[0]
    found = _never_moved(src, stopped, first, rank, stopped_metrics)
    if found is not None:
        return found
    # The first resumed record continues the stopped run's last one (same moment, e.g. a sampler's
    # advance() and its resumed iterator start) or the record after it (a loader's next batch).
    candidates = [i for i in (n - 1, n) if 0 <= i < len(full)]
    k = next((i for i in candidates if _key(full[i]) == _key(first)), None)
    if k is None:
        return _not_continued(src, stopped, first, rank) if stopped else None
    diffs = _differences(full[k], first)
    if diffs:
        state, msg = _explain_first(diffs, full, first, full[k])
        return Diagnosis(state, msg, rank, first["epoch"], first["position"])
    return _later(src, full, resumed, k, rank)


def diagnose(
    full: dict[int, Records],
    stopped: dict[int, Records],
    resumed: dict[int, Records],
    stopped_metrics: Optional[Metrics] = None,
) -> Optional[Diagnosis]:
    """The first differing state after the resume, on the lowest rank that shows one; ``None``
    without traces.

    ``full``, ``stopped`` and ``resumed`` map ranks to the trace records of runs (1),
    (2) and (3) (:func:`seeder._run.trace.read_trace`); ``stopped_metrics`` (run 2's losses)
    lets a position that never moved be told apart from one that was not restored.
    """
    found = [
        d
        for d in (
            _diagnose_rank(
                full.get(rank, []), stopped.get(rank, []), resumed[rank], rank, stopped_metrics
            )
            for rank in sorted(resumed)
        )
        if d is not None
    ]
    d = next(
        (d for d in found if d.state != "none"), found[0] if found else None
    )  # a finding beats "all equal"
    if d is not None and len(resumed) > 1:
        d.message = f"on rank {d.rank}, {d.message}"
    return d


def diagnose_dirs(
    full_dir: Path,
    stopped_dir: Path,
    resumed_dir: Path,
    stopped_metrics: Optional[Metrics] = None,
    full_metrics: Optional[Metrics] = None,
    resumed_metrics: Optional[Metrics] = None,
) -> Optional[Diagnosis]:
    """Why run (3) in ``resumed_dir`` differs from run (1) in ``full_dir``: traces and step records.

    In this order: a checkpoint another run wrote (:func:`foreign_resume`); a loader iterated again
    with no ``seeder.reseed(1, epoch)`` (:func:`missing_reseed`); batches of the resumed
    epoch discarded (from the three runs' metrics); the first traced state that differs
    (:func:`diagnose` on ``<dir>/trace.rank<R>.jsonl``); a batch drawn ahead across the checkpoint
    (from the step records' draws).

    Args:
        full_dir: run (1)'s directory.
        stopped_dir: run (2)'s.
        resumed_dir: run (3)'s.
        stopped_metrics: run (2)'s metrics (tells a position that never moved).
        full_metrics: run (1)'s metrics.
        resumed_metrics: run (3)'s metrics.

    Returns:
        The first cause found, or ``None`` when none of them says anything.
    """
    resumed_dir = Path(resumed_dir)
    foreign = foreign_resume(resumed_dir, [Path(stopped_dir)])
    if foreign is not None:
        return Diagnosis("foreign-checkpoint", foreign)
    repeated = next(
        (e for e in map(missing_reseed, (full_dir, stopped_dir, resumed_dir)) if e is not None),
        None,
    )
    if repeated is not None:
        loader, epoch = repeated
        return Diagnosis("reseed", MSG_NO_RESEED.format(loader=loader, epoch=epoch), epoch=epoch)
    if full_metrics is not None and stopped_metrics is not None and resumed_metrics is not None:
        found = discarded_batches(
            full_metrics, stopped_metrics, resumed_metrics, _log_line(resumed_dir, "discarded")
        )
        if found is not None:
            return Diagnosis("discarded", found, epoch=stopped_metrics.epochs[-1])
    traces: Sequence[dict[int, Records]] = [
        read_trace(str(Path(d) / TRACE_NAME)) for d in (full_dir, stopped_dir, resumed_dir)
    ]
    traced = diagnose(traces[0], traces[1], traces[2], stopped_metrics) if traces[2] else None
    if traced is not None and traced.state != "none":
        return traced
    ahead = prefetched(
        read_steps(Path(full_dir) / STEPS_FILE), read_steps(resumed_dir / STEPS_FILE)
    )
    return Diagnosis(*ahead) if ahead is not None else traced


MSG_FOREIGN = (
    "run {run} resumed from a checkpoint that {writer} wrote{at}, not from one of its own: the "
    "script finds its checkpoint outside its run's directory ({where}, its working directory "
    "under seeder verify), where other runs write theirs (a path such as ../outputs, or an "
    "absolute one). Save and resume checkpoints under the working directory (a relative path "
    "inside it), or pass the directory with the script's flag "
    '(--arg ckpt_dir="--save-dir {{ckpt_dir}}")'
)


def foreign_resume(run_dir: Path, own: Sequence[Path] = ()) -> Optional[str]:
    """Why the run in ``run_dir`` continued a checkpoint that neither it nor a run of ``own`` wrote.

    A run loads seeder's state, whose step counter names the run that saved it
    (:mod:`seeder._run.steps`); a run not asked to resume (``own`` empty) that marks a resume
    anyway found a checkpoint written outside verify.

    Args:
        run_dir: the run's directory (``OUT/runs/<name>``, with its ``steps.jsonl``).
        own: the directories of the runs whose checkpoints it may continue.

    Returns:
        The message naming the run that wrote the checkpoint and the fix, or ``None``.

    >>> import tempfile; from pathlib import Path
    >>> run = Path(tempfile.mkdtemp()) / "full-1"; run.mkdir()
    >>> _ = (run / STEPS_FILE).write_text('{"seeder_verify": "loaded", "at_step": 9, "from": "'
    ...                                    + str(run.parent / "half-0" / STEPS_FILE) + '"}')
    >>> foreign_resume(run).split(",")[0]
    'run full-1 resumed from a checkpoint that run half-0 wrote (at step 9)'
    """
    run_dir = Path(run_dir)
    records = read_steps(run_dir / STEPS_FILE)
    mine = {str(Path(d) / STEPS_FILE) for d in (run_dir, *own)}
    loads = [r for r in records if r.get("seeder_verify") == "loaded"]
    for rec in loads:
        writer = rec.get("from")
        if isinstance(writer, str) and writer and writer not in mine:
            at = f" (at step {rec['at_step']})" if isinstance(rec.get("at_step"), int) else ""
            name = Path(writer).parent.name
            same = Path(writer).parent.parent == run_dir.parent  # a run of this session
            who = f"run {name}" if same else f"another process ({writer})"
            return MSG_FOREIGN.format(run=run_dir.name, writer=who, at=at, where=run_dir)
    resumed = next((r for r in records if r.get("seeder_verify") == "resumed"), None)
    if not own and resumed is not None and not any(r.get("from") in mine for r in loads):
        at = f" (at step {resumed['at_step']})" if isinstance(resumed.get("at_step"), int) else ""
        why = MSG_FOREIGN.format(run=run_dir.name, writer="an earlier run", at=at, where=run_dir)
        return why.replace(
            "resumed from a checkpoint", "was not asked to resume, yet resumed from a checkpoint"
        )
    return None


def foreign_resumes(out: Path, names: Sequence[str]) -> list[str]:
    """:func:`foreign_resume` for each run of a session.

    Args:
        out: the session's output directory (runs in ``OUT/runs/<name>``).
        names: the runs to look at: ``resume-R`` and ``resume-mid-R`` may continue the checkpoint
            of ``half-R`` and ``mid-R``, every other run none.

    Returns:
        One message per run that continued another run's checkpoint.
    """
    parent = {"resume": "half", "resume-mid": "mid"}
    found = []
    for name in names:
        kind, _, repeat = name.rpartition("-")
        own = [Path(out) / "runs" / f"{parent[kind]}-{repeat}"] if kind in parent else []
        why = foreign_resume(Path(out) / "runs" / name, own)
        if why is not None:
            found.append(why)
    return found


MSG_NO_RESEED = (
    "a seeder.{loader} was iterated again in epoch {epoch} with no seeder.reseed(1, epoch) since "
    "its last pass (the runs' log.txt has seeder's warning): every pass repeats the first one's "
    "order, the runs count no epochs, and a resumed run cannot tell which pass it continues. Call "
    "seeder.reseed(1, epoch) at the start of each epoch, before iterating the loader"
)
#: What seeder's warning of a loader iterated again with no reseed says (seeder.data._loader).
_REPEATED = re.compile(
    r"seeder\.(\w+) iterated again in epoch (-?\d+), with no seeder\.reseed\(1, epoch\)"
)


def missing_reseed(run_dir: Path) -> Optional[tuple[str, int]]:
    """The loader (its class) and the epoch in which a run's seeder loader was iterated again with
    no ``seeder.reseed(1, epoch)`` since its last pass (seeder's warning in the run's ``log.txt``),
    or ``None``.

    Args:
        run_dir: the run's directory.

    Returns:
        ``(class name, epoch)`` as the warning names them, or ``None`` when the log has no such
        warning.

    >>> import tempfile; from pathlib import Path
    >>> run = Path(tempfile.mkdtemp())
    >>> _ = (run / "log.txt").write_text("seeder.DataLoader iterated again in epoch 0, with no "
    ...                                  "seeder.reseed(1, epoch) (or ...)")
    >>> missing_reseed(run), missing_reseed(run.parent / "nonexistent")
    (('DataLoader', 0), None)
    """
    line = _log_line(run_dir, "iterated again in epoch")
    found = _REPEATED.search(line) if line is not None else None
    return (found.group(1), int(found.group(2))) if found is not None else None


def _log_line(run_dir: Path, word: str) -> Optional[str]:
    """The first line of the run's log that contains ``word``, or ``None``."""
    try:
        with open(Path(run_dir) / "log.txt", encoding="utf-8", errors="replace") as fh:
            return next((line for line in fh if word in line), None)
    except OSError:
        return None


def preinit_hints(run_dirs: Sequence[Path]) -> list[str]:
    """What the seeded runs drew from a global RNG before ``seeder.init``
    (:func:`seeder._seeding.foreign.global_draws`).

    Each traced run writes ``trace.preinit.rank<R>.json`` at ``seeder.init``; a global RNG
    drawn from before it (a dataset split with NumPy's, say) makes whatever it made differ
    between runs, from the first step on.
    """
    import glob
    import json

    found: dict[str, str] = {}
    for d in run_dirs:
        for path in sorted(
            glob.glob(glob.escape(str(Path(d) / TRACE_NAME)) + ".preinit.rank*.json")
        ):
            try:
                with open(path, encoding="utf-8") as fh:
                    rec = json.load(fh)
                for name in rec.get("drawn_before_init", []):
                    found.setdefault(str(name), str(rec.get("init_site")))
            except (OSError, ValueError, AttributeError):
                continue
    return [
        f"{_LABEL.get(name, name)} was drawn from before seeder.init (at {site}): what it made (a "
        f"dataset split, a shuffled list, random initial values) differs between runs; call "
        f"seeder.init and seeder.reseed(0, 0) before preparing the data"
        for name, site in found.items()
    ]
