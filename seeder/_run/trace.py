"""Per-step fingerprints for ``seeder verify``: which random state diverged first after a resume.

When ``$SEEDER_TRACE`` names a path prefix (``seeder verify`` sets it for the runs it
starts), the data path calls :func:`record_step` as it hands out each batch, and one
JSON line per call goes to ``<prefix>.rank<R>.jsonl``: the source, the epoch, the
step, the position (samples of the epoch trained on before the next batch), and a
short hash of every random state the seeder knows: Python ``random``, NumPy's global
RNG, torch's CPU generator, each accelerator, each registered generator, and each
participant (a sampler's epoch and position). Without ``$SEEDER_TRACE`` a call costs
one dictionary lookup. Nothing here changes any RNG: states are only read.

Who calls it: ``seeder.DataLoader`` for each batch it hands out, and
:class:`seeder.DistributedSampler` when its iterator starts (an epoch, or a resumed
epoch) and at each ``advance()`` (the end of a training step). Every record means the
same moment: "just before the batch that starts at sample ``position`` of ``epoch``",
so records of an uninterrupted run and of a resumed run line up by
``(source, epoch, position)``; :mod:`seeder.verify._diagnose` compares them.

Example:
    >>> import seeder, os, tempfile
    >>> s = seeder.Seeder(); s.init(1); s.reseed(1, 0)
    >>> record_step(s, "loader", epoch=0, step=0, position=0)   # no-op: $SEEDER_TRACE unset
    >>> snap = state_fingerprints(s)
    >>> sorted(snap["rngs"])[:3], len(snap["rngs"]["python"])
    (['numpy', 'python', 'torch'], 16)
    >>> prefix = os.path.join(tempfile.mkdtemp(), "trace")
    >>> os.environ[ENV_TRACE] = prefix
    >>> record_step(s, "loader", epoch=0, step=0, position=0); del os.environ[ENV_TRACE]
    >>> [(r["source"], r["epoch"], r["position"]) for r in read_trace(prefix)[0]]
    [('loader', 0, 0)]
"""

from __future__ import annotations

import array
import glob
import hashlib
import json
import os
import re
import warnings
from typing import Any, Optional, Protocol

from seeder._run.variables import ENV_TRACE

__all__ = [
    "Traced",
    "enabled",
    "record_step",
    "state_fingerprints",
    "fingerprint",
    "trace_file",
    "read_trace",
    "PREINIT_SUFFIX",
    "write_preinit",
]

#: Suffix (before ``<rank>.json``) of the file, next to ``$SEEDER_TRACE``'s traces, that records
#: the global RNGs drawn from before ``init`` (:func:`write_preinit`).
PREINIT_SUFFIX = ".preinit.rank"


_fds: dict[str, int] = {}  # trace file -> open descriptor, for this process only
_fd_pid: Optional[int] = None
_counter = 0  # records written by this process (a record's "n")


def enabled() -> bool:
    """Whether ``$SEEDER_TRACE`` asks for per-step fingerprints."""
    return bool(os.environ.get(ENV_TRACE))


def fingerprint(value: Any) -> str:
    """A short, stable hash (16 hex digits, blake2b) of a state: tensors, arrays, dicts, lists,
    plain values.

    >>> fingerprint({"a": [1, 2]}) == fingerprint({"a": [1, 2]}), fingerprint(1) == fingerprint(2)
    (True, False)
    """
    h = hashlib.blake2b(digest_size=8)
    _feed(h, value)
    return h.hexdigest()


def _feed(h: Any, value: Any) -> None:
    if isinstance(value, dict):
        h.update(b"{")
        for key in sorted(value, key=str):
            h.update(repr(key).encode() + b":")
            _feed(h, value[key])
        h.update(b"}")
    elif isinstance(value, (list, tuple)):
        if value and type(value[0]) is int:  # a Mersenne Twister state: one C loop, not 625 calls
            try:
                h.update(b"[" + array.array("q", value).tobytes() + b"]")
                return
            except (TypeError, OverflowError):
                pass
        h.update(b"[")
        for v in value:
            _feed(h, v)
        h.update(b"]")
    elif isinstance(value, (bytes, bytearray, memoryview)):
        h.update(bytes(value))
    elif hasattr(value, "detach") and hasattr(value, "cpu"):
        # a torch.Tensor (no torch import needed)
        _feed(h, value.detach().cpu().contiguous().numpy())
    elif hasattr(value, "tobytes") and hasattr(value, "dtype"):  # a NumPy array
        h.update(f"{value.dtype.str}{value.shape}".encode())
        h.update(value.tobytes())
    else:
        h.update(repr(value).encode())


class Traced(Protocol):
    """What a trace reads of the seeder of its run: its participants, its last reseed, whether it
    is initialised, and its rank."""

    @property
    def initialized(self) -> bool: ...

    @property
    def rank(self) -> int: ...

    @property
    def last_reseed(self) -> Optional[tuple[int, int]]: ...

    def participants(self) -> list[Any]: ...


def _participants(seeder: Traced) -> list[Any]:
    lister = getattr(seeder, "participants", None)
    return list(lister()) if callable(lister) else []


def state_fingerprints(seeder: Traced) -> dict[str, Any]:
    """Fingerprints of every random state ``seeder`` knows, without changing any of them.

    ``rngs`` maps each global RNG (``python``, ``numpy``, ``torch``, then accelerators) to
    its hash; ``participants`` maps each participant, named as in the state
    (:func:`seeder._seeding.participant.participant_keys`: ``generator.<stream>``, ``<kind>.<n>``),
    to a hash of its state; ``positions`` holds the plain ``{"epoch", "position"}`` of participants
    that count samples. A state that cannot be read is ``None``.
    """
    from seeder._seeding.participant import (
        participant_keys,  # torch is imported by the caller's data path anyway
    )
    from seeder._seeding.rngs import global_adapters

    rngs: dict[str, Optional[str]] = {}
    for adapter in global_adapters():
        try:
            rngs[adapter.name] = fingerprint(adapter.get_state())
        except Exception:  # an accelerator that cannot report its state: recorded as unknown
            rngs[adapter.name] = None
    participants: dict[str, Optional[str]] = {}
    positions: dict[str, dict[str, int]] = {}
    for key, p in participant_keys(_participants(seeder)).items():
        state = _participant_state(p)
        participants[key] = None if state is None else fingerprint(state)
        if (
            isinstance(state, dict)
            and isinstance(state.get("epoch"), int)
            and isinstance(state.get("position"), int)
        ):
            positions[key] = {"epoch": state["epoch"], "position": state["position"]}
    last = getattr(seeder, "last_reseed", None)
    return {
        "rngs": rngs,
        "participants": participants,
        "positions": positions,
        "last_reseed": list(last) if last is not None else None,
    }


def _participant_state(p: Any) -> Any:
    """A participant's state read without side effects, or ``None`` where that is not possible.

    Samplers and loaders are :class:`~seeder._seeding.participant.Positioned`: their
    ``seeder_position()`` (their ``state_dict()`` may warn once about a missing ``advance()``, which
    a trace must not
    use up). Registered generators' ``state_dict()`` is an RNG state (``None`` for a plain
    callable). Other participants (a DALI pipeline checkpoints itself in ``state_dict()``) are not
    read.
    """
    from seeder._seeding.participant import GeneratorParticipant, Positioned

    if isinstance(p, Positioned):
        return p.seeder_position()
    if isinstance(p, GeneratorParticipant):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return p.state_dict()
    return None


def trace_file(prefix: str, rank: int) -> str:
    """The trace file of ``rank`` for ``prefix``: ``<prefix>.rank<rank>.jsonl``."""
    return f"{prefix}.rank{rank}.jsonl"


def _rank(seeder: Traced) -> int:
    if getattr(seeder, "initialized", False):
        return int(seeder.rank)
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def _write(path: str, line: bytes) -> None:
    global _fd_pid
    if _fd_pid != os.getpid():  # a forked child must not share (or close) its parent's descriptors
        _fds.clear()
        _fd_pid = os.getpid()
    fd = _fds.get(path)
    if fd is None:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        _fds[path] = fd
    os.write(fd, line)  # one write per line: a killed run leaves whole lines


def record_step(
    seeder: Traced, source: str, *, epoch: int, step: Optional[int], position: int
) -> None:
    """Append one fingerprint line for the batch ``step`` of ``epoch`` that ``source`` is handing
    out.

    ``position`` is the number of samples of the epoch trained on before this batch;
    ``step`` is the batch's index in the epoch, or ``None`` where the caller does not
    count batches (a sampler). A no-op unless :func:`enabled`.
    """
    prefix = os.environ.get(ENV_TRACE)
    if not prefix:
        return
    global _counter
    record = {
        "source": str(source),
        "epoch": int(epoch),
        "step": None if step is None else int(step),
        "position": int(position),
        "n": _counter,
        "pid": os.getpid(),
        **state_fingerprints(seeder),
    }
    _counter += 1
    _write(
        trace_file(prefix, _rank(seeder)),
        (json.dumps(record, separators=(",", ":")) + "\n").encode(),
    )


def read_trace(prefix: str) -> dict[int, list[dict[str, Any]]]:
    """The records of every rank's trace file for ``prefix``, by rank; ``{}`` when there is none.

    A line cut short by a kill is skipped.
    """
    out: dict[int, list[dict[str, Any]]] = {}
    for path in glob.glob(glob.escape(prefix) + ".rank*.jsonl"):
        m = re.search(r"\.rank(\d+)\.jsonl$", path)
        if m is None:
            continue
        records = []
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if isinstance(rec, dict) and {"source", "epoch", "position", "rngs"} <= set(rec):
                    records.append(rec)
        out[int(m.group(1))] = records
    return out


def write_preinit(seeder: Traced) -> None:
    """At ``init`` of the module-level seeder (:data:`seeder._hooks.INIT`), with ``$SEEDER_TRACE``:
    write where ``init`` was called and which global RNGs were drawn from before it
    (``<prefix>.preinit.rank<R>.json``); ``seeder verify`` reads it when a seeded run differs.

    Args:
        seeder: the module-level seeder, just initialised.
    """
    prefix = os.environ.get(ENV_TRACE)
    if not prefix:
        return
    from seeder._safefile import write_file
    from seeder._seeding.foreign import global_draws, init_site

    path = f"{prefix}{PREINIT_SUFFIX}{seeder.rank}.json"
    drawn = sorted(name for name, used in global_draws().items() if used)
    record = {"init_site": init_site(), "drawn_before_init": drawn}
    write_file(
        os.path.dirname(os.path.abspath(path)),
        os.path.basename(path),
        json.dumps(record).encode(),
        0o644,
    )
