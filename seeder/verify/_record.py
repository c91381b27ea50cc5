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
``$SEEDER_LOCATE_STOP=N`` ends the run right after step N: nothing after the first
differing step is recorded.

Nothing here runs without ``$SEEDER_LOCATE``.

Example:
    >>> import json, os, tempfile, torch
    >>> d = tempfile.mkdtemp(); net = torch.nn.Linear(2, 1); x = torch.ones(2); rec = Recorder(d)
    >>> with rec:
    ...     y = net(x).sum()
    >>> rec.close(); ops = [json.loads(line) for line in open(os.path.join(d, "ops.rank0.jsonl"))]
    >>> [(r["k"], r.get("op"), r.get("mod")) for r in ops]
    [('batch', None, 'net'), ('op', 'aten::view', 'net'), ('op', 'aten::t', 'net'), ('op', 'aten::addmm', 'net'), ('op', 'aten::view', 'net'), ('op', 'aten::sum', '')]
"""
from __future__ import annotations

import atexit
import json
import logging
import os
from typing import Any, Dict, List, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from ..internals import require
from ._fingerprint import default_generator, generator_print, row_prints, tensor_print, value_print
from ._where import user_site, variable_name

__all__ = ["ENV_LOCATE", "ENV_LOCATE_STOP", "Recorder", "start", "ops_path", "RANDOM_OPS"]

logger = logging.getLogger("seeder")

#: The directory a localisation run writes its operation records to (``seeder locate`` sets it).
ENV_LOCATE = "SEEDER_LOCATE"
#: End the localisation run right after this optimizer step.
ENV_LOCATE_STOP = "SEEDER_LOCATE_STOP"
#: Operators that draw random numbers without taking a ``Generator`` argument in their schema.
RANDOM_OPS = frozenset({"aten::native_dropout", "aten::_fused_dropout", "aten::rrelu_with_noise", "aten::dropout",
                        "aten::feature_dropout", "aten::alpha_dropout", "aten::feature_alpha_dropout"})

#: Operators whose outputs are uninitialised memory: their contents are not the run's data.
EMPTY_OPS = frozenset({"aten::empty", "aten::empty_like", "aten::empty_strided", "aten::new_empty",
                       "aten::new_empty_strided", "aten::empty_permuted", "aten::resize_", "aten::resize_as_"})


def _pointer(t: torch.Tensor) -> int:
    try:
        return t.data_ptr()
    except RuntimeError:  # no storage (sparse, a tensor subclass)
        return 0


def ops_path(directory: str, rank: int) -> str:
    """The record file of ``rank`` in ``directory``."""
    return os.path.join(directory, f"ops.rank{rank}.jsonl")


def _flatten(obj: Any) -> List[Any]:
    """The leaves of nested lists, tuples and dicts (an operator's arguments and results), in order."""
    if isinstance(obj, (list, tuple)):
        return [leaf for item in obj for leaf in _flatten(item)]
    if isinstance(obj, dict):
        return [leaf for item in obj.values() for leaf in _flatten(item)]
    return [obj]


def _takes_generator(func: Any) -> bool:
    return any("Generator" in str(a.type) for a in func._schema.arguments)


def _op_info(func: Any) -> "tuple[str, bool, bool]":
    """The operator's name, whether it draws random numbers (some overload of it takes a Generator:
    ``aten::randn.default`` takes none and draws from the default generator) and whether it writes an argument."""
    schema = func._schema
    packet = func.overloadpacket
    random = schema.name in RANDOM_OPS or _takes_generator(func) or any(
        _takes_generator(getattr(packet, o)) for o in packet.overloads())
    writes = any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)
    return schema.name, random, writes


class _Modules:
    """The module path of the running forward, from global module hooks; top-level modules named as the user names them."""

    def __init__(self, write: Any) -> None:
        self.stack: List[str] = []
        self.objects: List[Any] = []
        self.names: Dict[int, str] = {}
        self.roots: Dict[int, str] = {}
        self.write = write
        self.busy = False  # fingerprinting a batch: its own tensor operations are not the run's
        self.handles = [torch.nn.modules.module.register_module_forward_pre_hook(self.pre),
                        torch.nn.modules.module.register_module_forward_hook(self.post, always_call=True)]

    def _root_name(self, module: Any) -> str:
        name = self.roots.get(id(module))
        if name is None:
            name = variable_name(module) or type(module).__name__
            self.roots[id(module)] = name
            self.names.update({id(m): f"{name}.{n}" if n else name for n, m in module.named_modules()})
        return name

    def pre(self, module: Any, args: Any) -> None:
        if not self.stack:
            root = self._root_name(module)
            self.stack.append(root)
            self.objects.append(module)
            self.busy = True
            try:
                self.write(self._batch(root, args))
            finally:
                self.busy = False
            return
        name = self.names.get(id(module))
        if name is None:  # a module built after its root was first seen
            name = f"{self.stack[-1]}.<{type(module).__name__}>"
        self.stack.append(name)
        self.objects.append(module)

    def post(self, module: Any, args: Any, output: Any) -> None:
        if self.objects and self.objects[-1] is module:
            self.stack.pop()
            self.objects.pop()

    @staticmethod
    def _batch(root: str, args: Any) -> Dict[str, Any]:
        tensors = [t for t in _flatten(args) if isinstance(t, torch.Tensor)]
        return {"k": "batch", "mod": root, "at": user_site().line, "in": [tensor_print(t) for t in tensors],
                "rows": [row_prints(t) for t in tensors]}

    def current(self) -> str:
        return self.stack[-1] if self.stack else ""

    def generator_name(self, g: torch.Generator) -> Optional[str]:
        """The attribute of a running module that holds ``g`` (``model.noise.gen``), else the user's variable.

        An operator receives a new Python object for the same generator, so generators are matched by state.
        """
        state = generator_print(g)

        def same(value: Any) -> bool:
            return isinstance(value, torch.Generator) and value.device == g.device and generator_print(value) == state

        for name, module in zip(reversed(self.stack), reversed(self.objects)):
            for attr, value in vars(module).items():
                if same(value):
                    return f"{name}.{attr}"
        return variable_name(same)

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


class Recorder(TorchDispatchMode):
    """A dispatch mode that writes one record per tensor operation (see the module docstring).

    Args:
        directory: where ``ops.rank<R>.jsonl`` goes.
        rank: the process's global rank (its file name).
        stop_after: end the process right after this optimizer step (``None``: never).
    """

    def __init__(self, directory: str, rank: int = 0, stop_after: Optional[int] = None) -> None:
        super().__init__()
        self.file = open(ops_path(directory, rank), "w", encoding="utf-8", buffering=1 << 20)
        self.stop_after, self.steps, self.closed = stop_after, 0, False
        self.infos: Dict[Any, "tuple[str, bool, bool]"] = {}
        self.modules = _Modules(self.write)
        self.pending: List[torch.Tensor] = []  # the last forward operation's outputs, to label their autograd nodes
        self.node = torch._C._current_autograd_node if require("torch:_C._current_autograd_node") else None
        self.last_forward = ("", "")
        self.optimizer = ""  # the class of the optimizer whose step is running
        self.uninit: set = set()  # data pointers of tensors an EMPTY_OPS operator made and nothing wrote since
        self.step_hooks = [register_optimizer_step_pre_hook(self.before_step),
                           register_optimizer_step_post_hook(self.after_step)]

    def write(self, record: Dict[str, Any]) -> None:
        if not self.closed:
            self.file.write(json.dumps(record, separators=(",", ":")) + "\n")

    def before_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.optimizer = f"optimizer ({type(optimizer).__name__}.step)"

    def after_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.optimizer = ""
        self.steps += 1
        self.write({"k": "step", "n": self.steps})
        if self.stop_after is not None and self.steps >= self.stop_after:
            self.close()
            logger.info("seeder locate: stopped after step %d", self.steps)
            raise SystemExit(0)  # a localisation run ends at the step asked for; nothing after it is needed

    def _label(self) -> None:
        """Give the autograd nodes the last forward operation made its module and line (read back in backward)."""
        for t in self.pending:
            gf = t.grad_fn
            if gf is not None and "seeder_locate" not in gf.metadata:
                gf.metadata["seeder_locate"] = self.last_forward
        self.pending.clear()

    def _generator(self, func: Any, args: Any, kwargs: Dict[str, Any], flat: List[Any]) -> Dict[str, Any]:
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
        if self.closed or self.modules.busy:
            return func(*args, **kwargs)
        if self.pending:
            self._label()
        info = self.infos.get(func)
        if info is None:
            info = self.infos[func] = _op_info(func)
        name, random, writes = info
        if name.startswith("profiler::"):  # record_function markers: no data
            return func(*args, **kwargs)
        flat = _flatten((args, kwargs))
        record: Dict[str, Any] = {"k": "op", "op": name,
                                  "in": [self._print(a) for a in flat if isinstance(a, torch.Tensor)],
                                  "args": "|".join(value_print(a) for a in flat if not isinstance(a, torch.Tensor))}
        if random:
            record.update(self._generator(func, args, kwargs, flat))
        node = self.node() if self.node else None
        if node is not None:
            mod, at = node.metadata.get("seeder_locate", ("", ""))
            record.update(ph="b", mod=mod, at=at, node=node.name())
        else:
            site = user_site()
            record.update(ph="o" if self.optimizer else "f", mod=self.optimizer or self.modules.current(), at=site.line)
            if site.in_data:
                record.update(data=site.dataset or True)
        out = func(*args, **kwargs)
        outs = [t for t in _flatten(out) if isinstance(t, torch.Tensor)]
        if name in EMPTY_OPS:
            self.uninit.update(_pointer(t) for t in outs)
        elif self.uninit:  # written, or new memory where an uninitialised tensor was: data now (a view is not)
            views = set() if writes else {_pointer(a) for a in flat if isinstance(a, torch.Tensor)}
            self.uninit.difference_update(p for p in map(_pointer, outs) if p not in views)
        record["out"] = [self._print(t) for t in outs]
        if node is None:
            self.last_forward = (record["mod"], record["at"])
            self.pending = outs
        self.write(record)
        return out

    def _print(self, t: torch.Tensor) -> str:
        if self.uninit and _pointer(t) in self.uninit:
            return f"empty{t.dtype}{tuple(t.shape)}"  # uninitialised memory differs between runs: not data
        return tensor_print(t)

    def close(self) -> None:
        """Stop recording and flush the file (the hooks are removed; the mode stays entered, passing through)."""
        if self.closed:
            return
        self.closed = True
        self.file.close()
        self.modules.remove()
        for h in self.step_hooks:
            h.remove()


_active: Optional[Recorder] = None


def start(seeder: Any) -> None:
    """Start recording in this process when ``$SEEDER_LOCATE`` is set (``seeder.init`` calls it; once per process)."""
    global _active
    directory = os.environ.get(ENV_LOCATE)
    if not directory or _active is not None:
        return
    require("torch:utils._python_dispatch.TorchDispatchMode")
    require("torch:OpOverload._schema")
    stop = os.environ.get(ENV_LOCATE_STOP)
    rank = seeder.rank if getattr(seeder, "initialized", False) else int(os.environ.get("RANK", "0"))
    _active = Recorder(directory, rank, int(stop) if stop else None)
    _active.__enter__()  # active until the process ends: operations anywhere in the run are recorded
    atexit.register(_active.close)
