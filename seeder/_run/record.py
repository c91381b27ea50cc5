"""The recorder of ``seeder locate``: a fingerprint of every tensor operation of a localisation run.

``seeder locate`` (and ``seeder verify --locate``) set ``$SEEDER_LOCATE`` to a directory
for the two runs it compares. When the module-level seeder is initialised in such a run,
:func:`start` activates a ``TorchDispatchMode`` that writes one JSON line per operation
to ``<dir>/ops.rank<R>.jsonl``: the operator, the fingerprints of its inputs (before it
ran: in-place operations change them) and outputs, the state of the generator a random
operation draws from, the module it ran in (forward: module hooks; backward: the module
whose forward made the autograd node), the user's file and line, and whether it ran while
a batch was fetched. Each call of a top-level module writes a ``batch`` line (its inputs,
with one fingerprint per sample), and each ``optimizer.step()`` a ``step`` line.

A batch from a DataLoader worker process arrives when that worker is done, in an order that
varies from run to run, and the loader hands the batches out in order: the operations that
rebuild it in this process are written where it is first used (by an operation or a top-level
module), so that both runs' records keep the training loop's order.
``$SEEDER_LOCATE_STOP=N`` ends the run right after step N: nothing after the first
differing step is recorded.

Nothing here runs without ``$SEEDER_LOCATE``.

Example:
    >>> import json, os, tempfile, torch
    >>> d = tempfile.mkdtemp(); net = torch.nn.Linear(2, 1); x = torch.ones(2); rec = Recorder(d)
    >>> with rec:
    ...     y = net(x).sum()
    >>> rec.close(); ops = [json.loads(line) for line in open(os.path.join(d, "ops.rank0.jsonl"))]
    >>> [(r["k"], r.get("op"), r.get("mod")) for r in ops][2:]  # doctest: +NORMALIZE_WHITESPACE
    [('op', 'aten::t', 'net'), ('op', 'aten::addmm', 'net'), ('op', 'aten::view', 'net'),
     ('op', 'aten::sum', '')]
    >>> ops[0]["k"], ops[0]["mod"]
    ('batch', 'net')
"""

from __future__ import annotations

import atexit
import json
import logging
import os
from typing import Any, Optional, Protocol, cast

import torch
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)
from torch.utils._python_dispatch import TorchDispatchMode

from seeder._internals import require
from seeder._run.fingerprint import (
    default_generator,
    generator_print,
    storage_print,
    tensor_print,
    value_print,
)
from seeder._run.modules import ModuleStack, flatten
from seeder._run.variables import ENV_LOCATE
from seeder._run.where import user_site

__all__ = [
    "ENV_LOCATE_STOP",
    "Recorder",
    "Ranked",
    "start",
    "ops_path",
    "RANDOM_OPS",
]

logger = logging.getLogger("seeder")

#: End the localisation run right after this optimizer step.
ENV_LOCATE_STOP = "SEEDER_LOCATE_STOP"
#: Operators that draw random numbers without taking a ``Generator`` argument in their schema.
RANDOM_OPS = frozenset(
    {
        "aten::native_dropout",
        "aten::_fused_dropout",
        "aten::rrelu_with_noise",
        "aten::dropout",
        "aten::feature_dropout",
        "aten::alpha_dropout",
        "aten::feature_alpha_dropout",
    }
)

#: Bytes of records buffered before they are written.
_FLUSH_AT = 1 << 20
#: Set by the process that records: a process it starts (a spawned DataLoader worker calling
#: seeder.init) records nothing.
ENV_OWNER = "SEEDER_LOCATE_OWNER"
#: Operators whose outputs are uninitialised memory: their contents are not the run's data.
EMPTY_OPS = frozenset(
    {
        "aten::empty",
        "aten::empty_like",
        "aten::empty_strided",
        "aten::new_empty",
        "aten::new_empty_strided",
        "aten::empty_permuted",
        "aten::resize_",
        "aten::resize_as_",
    }
)


#: Arguments fingerprinted as data (the rest by value).
_DATA = (torch.Tensor, torch.UntypedStorage, torch.TypedStorage)


def _pointer(t: torch.Tensor) -> int:
    try:
        return t.data_ptr()
    except RuntimeError:  # no storage (sparse, a tensor subclass)
        return 0


def ops_path(directory: str, rank: int) -> str:
    """The record file of ``rank`` in ``directory``."""
    return os.path.join(directory, f"ops.rank{rank}.jsonl")


def _storage(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):  # no storage (sparse, a tensor subclass)
        return 0


def _metadata(node: Any) -> dict[str, Any]:
    """An autograd node's metadata dict, where seeder labels the node with its module and line."""
    # torch's Node declares metadata() a method; the nodes autograd makes hold a dict attribute
    return cast("dict[str, Any]", node.metadata)


def _takes_generator(func: Any) -> bool:
    return any("Generator" in str(a.type) for a in func._schema.arguments)


def _op_info(func: Any) -> tuple[str, bool, bool]:
    """The operator's name, whether it draws random numbers, and whether it writes an argument.

    An operator draws random numbers when some overload of it takes a Generator:
    ``aten::randn.default`` takes none and draws from the default generator.
    """
    schema = func._schema
    packet = func.overloadpacket
    random = (
        schema.name in RANDOM_OPS
        or _takes_generator(func)
        or any(_takes_generator(getattr(packet, o)) for o in packet.overloads())
    )
    writes = any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)
    return schema.name, random, writes


class Recorder(TorchDispatchMode):
    """A dispatch mode that writes one record per tensor operation (see the module docstring).

    Args:
        directory: where ``ops.rank<R>.jsonl`` goes.
        rank: the process's global rank (its file name).
        stop_after: end the process right after this optimizer step (``None``: never).
    """

    def __init__(self, directory: str, rank: int = 0, stop_after: Optional[int] = None) -> None:
        super().__init__()
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
        self.fd = os.open(ops_path(directory, rank), flags, 0o644)
        # Records are written with os.write from this process only: a forked DataLoader worker
        # inherits the mode and a copy of the buffer, and must neither record nor flush that copy.
        self.pid, self.buffered = os.getpid(), 0
        self.buffer: list[str] = []
        self.stop_after, self.steps, self.closed = stop_after, 0, False
        self.infos: dict[Any, tuple[str, bool, bool]] = {}
        self.modules = ModuleStack(self.write, self.deliver)
        # records of tensors from worker processes, by storage, until first used (``deliver``)
        self.arrivals: dict[int, list[dict[str, Any]]] = {}
        self.arriving: list[dict[str, Any]] = []  # of a tensor whose storage is not there yet
        # the last forward operation's outputs, to label their autograd nodes
        self.pending: list[torch.Tensor] = []
        self.node = (
            torch._C._current_autograd_node if require("torch:_C._current_autograd_node") else None
        )
        self.last_forward = ("", "")
        self.optimizer = ""  # the class of the optimizer whose step is running
        # data pointers of tensors an EMPTY_OPS operator made and nothing wrote since
        self.uninit: set = set()
        self.step_hooks = [
            register_optimizer_step_pre_hook(self.before_step),
            register_optimizer_step_post_hook(self.after_step),
        ]

    def write(self, record: dict[str, Any]) -> None:
        if self.closed or os.getpid() != self.pid:
            return
        line = json.dumps(record, separators=(",", ":")) + "\n"
        self.buffer.append(line)
        self.buffered += len(line)
        if self.buffered > _FLUSH_AT:
            self.flush()

    def flush(self) -> None:
        """Write the buffered records (this process's only)."""
        if self.buffer and os.getpid() == self.pid:
            data = "".join(self.buffer).encode()
            while data:
                data = data[os.write(self.fd, data) :]
        self.buffer, self.buffered = [], 0

    def deliver(self, tensors: list[Any]) -> None:
        """Write the records that made these tensors in this process from a worker's batch."""
        if not self.arrivals:
            return
        for t in tensors:
            if isinstance(t, torch.Tensor):
                for record in self.arrivals.pop(_storage(t), ()):
                    self.write(record)

    def before_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.optimizer = f"optimizer ({type(optimizer).__name__}.step)"

    def after_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.optimizer = ""
        self.steps += 1
        self.write({"k": "step", "n": self.steps})
        if self.stop_after is not None and self.steps >= self.stop_after:
            self.close()
            logger.info("seeder locate: stopped after step %d", self.steps)
            # a localisation run ends at the step asked for; nothing after it is needed
            raise SystemExit(0)

    def _label(self) -> None:
        """Label the autograd nodes the last forward operation made with its module and line."""
        for t in self.pending:
            gf = t.grad_fn
            if gf is None:
                continue
            metadata = _metadata(gf)
            if "seeder_locate" not in metadata:
                metadata["seeder_locate"] = self.last_forward
        self.pending.clear()

    def _generator(
        self, func: Any, args: Any, kwargs: dict[str, Any], flat: list[Any]
    ) -> dict[str, Any]:
        g = kwargs.get("generator")
        if g is None:
            g = next((a for a in flat if isinstance(a, torch.Generator)), None)
        if g is None:
            dev = kwargs.get("device")
            if dev is None:
                dev = next((a.device for a in flat if isinstance(a, torch.Tensor)), None)
            g = default_generator(torch.device(dev) if dev is not None else None)
            name = f"torch's default {g.device.type} generator"
        else:
            name = self.modules.generator_name(g) or "a torch.Generator"
        return {"gen": generator_print(g), "gname": name}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if self.closed or self.modules.busy or os.getpid() != self.pid:
            return func(*args, **kwargs)
        if self.pending:
            self._label()
        name, random, writes = self._info(func)
        if name.startswith("profiler::"):  # record_function markers: no data
            return func(*args, **kwargs)
        flat = flatten((args, kwargs))
        record: dict[str, Any] = {
            "k": "op",
            "op": name,
            # a storage is data too: ``set_`` makes a tensor of one (a batch from a worker process)
            "in": [
                self._print(a) if isinstance(a, torch.Tensor) else storage_print(a)
                for a in flat
                if isinstance(a, _DATA)
            ],
            "args": "|".join(value_print(a) for a in flat if not isinstance(a, _DATA)),
        }
        if random:
            record.update(self._generator(func, args, kwargs, flat))
        site = self._place(record)
        out = func(*args, **kwargs)
        outs = [t for t in flatten(out) if isinstance(t, torch.Tensor)]
        self._track_uninit(name, writes, flat, outs)
        record["out"] = [self._print(t) for t in outs]
        if site is not None and self._held(record, outs, site):
            return out
        self.deliver(flat)
        self.write(record)
        return out

    def _info(self, func: Any) -> Any:
        """``(name, random, writes)`` of an operator, worked out once."""
        info = self.infos.get(func)
        if info is None:
            info = self.infos[func] = _op_info(func)
        return info

    def _place(self, record: dict[str, Any]) -> Any:
        """Add where an operation runs to its record: the compiled graph's node, or the module,
        line and phase of the user's code (then its site is returned; ``None`` for a node)."""
        node = self.node() if self.node else None
        if node is not None:
            mod, at = _metadata(node).get("seeder_locate", ("", ""))
            record.update(ph="b", mod=mod, at=at, node=node.name())
            return None
        site = user_site()
        record.update(
            ph="o" if self.optimizer else "f",
            mod=self.optimizer or self.modules.current(),
            at=site.line,
        )
        if site.in_data:
            record.update(data=site.dataset or True)
        return site

    def _track_uninit(
        self, name: str, writes: Any, flat: list[Any], outs: list[torch.Tensor]
    ) -> None:
        """Follow the tensors whose memory no operation wrote yet (``empty`` and its kin)."""
        if name in EMPTY_OPS:
            self.uninit.update(_pointer(t) for t in outs)
        elif self.uninit:
            # written, or new memory where an uninitialised tensor was: data now (a view is not)
            views = set() if writes else {_pointer(a) for a in flat if isinstance(a, torch.Tensor)}
            self.uninit.difference_update(p for p in map(_pointer, outs) if p not in views)

    def _held(self, record: dict[str, Any], outs: list[torch.Tensor], site: Any) -> bool:
        """An operation of the user's code is the last forward; one written where the batch is
        first used is held back with the batch's arrival (then ``True``: not written now)."""
        self.last_forward = (record["mod"], record["at"])
        self.pending = outs
        if not site.arriving:
            return False
        self.arriving.append(record)
        key = next((p for p in map(_storage, outs) if p), 0)
        if key:  # a group still there under this storage was never used: dropped
            self.arrivals[key], self.arriving = self.arriving, []
        return True

    def _print(self, t: torch.Tensor) -> str:
        if self.uninit and _pointer(t) in self.uninit:
            # uninitialised memory differs between runs: it is not data
            return f"empty{t.dtype}{tuple(t.shape)}"
        try:
            return tensor_print(t)
        except (RuntimeError, TypeError, ValueError, NotImplementedError):
            # a tensor subclass without bytes to read
            return f"?{type(t).__name__}{t.dtype}{tuple(t.shape)}"

    def close(self) -> None:
        """Stop recording and write what is buffered (hooks removed; the mode passes through)."""
        if self.closed:
            return
        self.flush()
        self.closed = True
        if os.getpid() == self.pid:
            os.close(self.fd)
        self.modules.remove()
        for h in self.step_hooks:
            h.remove()


_active: Optional[Recorder] = None


class Ranked(Protocol):
    """What a record reads of the seeder of its run: whether it is initialised, and its rank."""

    @property
    def initialized(self) -> bool: ...

    @property
    def rank(self) -> int: ...


def start(seeder: Ranked) -> None:
    """Record this process when ``$SEEDER_LOCATE`` is set (``seeder.init`` calls it).

    Args:
        seeder: the module-level seeder (its rank names the record file).
    """
    global _active
    directory = os.environ.get(ENV_LOCATE)
    owner = os.environ.get(ENV_OWNER)
    if not directory or _active is not None or (owner and owner != str(os.getpid())):
        return
    os.environ[ENV_OWNER] = str(os.getpid())
    require("torch:utils._python_dispatch.TorchDispatchMode")
    require("torch:OpOverload._schema")
    stop = os.environ.get(ENV_LOCATE_STOP)
    rank = (
        seeder.rank if getattr(seeder, "initialized", False) else int(os.environ.get("RANK", "0"))
    )
    _active = Recorder(directory, rank, int(stop) if stop else None)
    # active until the process ends: operations anywhere in the run are recorded
    _active.__enter__()
    atexit.register(_active.close)
