"""The module path of the running forward for ``seeder locate``'s recorder, and its batches.

Global module hooks keep a stack of the modules whose forward is running; a top-level
module is named as the user's code names it (``model``) and its submodules by their
qualified names (``model.encoder.layers.3.attn``). Each call of a top-level module writes a
``batch`` record: the fingerprints of its tensor inputs, and of each of their rows.

Example:
    >>> import torch
    >>> records = []; net = torch.nn.Sequential(torch.nn.Linear(2, 2))
    >>> stack = ModuleStack(records.append)
    >>> _ = net(torch.ones(1, 2)); stack.remove()
    >>> records[0]["k"], records[0]["mod"], len(records[0]["rows"][0])
    ('batch', 'net', 1)
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from seeder._run.fingerprint import generator_print, row_prints, tensor_print
from seeder._run.where import user_site, variable_name

__all__ = ["ModuleStack", "flatten"]


def flatten(obj: Any) -> list[Any]:
    """The leaves of nested lists, tuples and dicts (an operator's arguments or results)."""
    if isinstance(obj, (list, tuple)):
        return [leaf for item in obj for leaf in flatten(item)]
    if isinstance(obj, dict):
        return [leaf for item in obj.values() for leaf in flatten(item)]
    return [obj]


class ModuleStack:
    """The module path of the running forward, from global module hooks.

    A top-level module is named as the user's code names it (``model``), else by its class.
    """

    def __init__(
        self,
        write: Callable[[dict[str, Any]], None],
        deliver: Optional[Callable[[list[Any]], None]] = None,
    ) -> None:
        self.stack: list[str] = []
        self.objects: list[Any] = []
        self.names: dict[int, str] = {}
        self.roots: dict[int, str] = {}
        self.write, self.deliver = write, deliver
        self.busy = False  # fingerprinting a batch: its own tensor operations are not the run's
        self.handles = [
            torch.nn.modules.module.register_module_forward_pre_hook(self.pre),
            torch.nn.modules.module.register_module_forward_hook(self.post, always_call=True),
        ]

    def _root_name(self, module: Any) -> str:
        name = self.roots.get(id(module))
        if name is None:
            name = variable_name(module) or type(module).__name__
            self.roots[id(module)] = name
            self.names.update(
                {id(m): f"{name}.{n}" if n else name for n, m in module.named_modules()}
            )
        return name

    def pre(self, module: Any, args: Any) -> None:
        if not self.stack:
            root = self._root_name(module)
            self.stack.append(root)
            self.objects.append(module)
            if self.deliver is not None:  # how a worker's batch arrived, before the batch
                self.deliver(flatten(args))
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
    def _batch(root: str, args: Any) -> dict[str, Any]:
        tensors = [t for t in flatten(args) if isinstance(t, torch.Tensor)]
        return {
            "k": "batch",
            "mod": root,
            "at": user_site().line,
            "in": [tensor_print(t) for t in tensors],
            "rows": [row_prints(t) for t in tensors],
        }

    def current(self) -> str:
        return self.stack[-1] if self.stack else ""

    def generator_name(self, g: torch.Generator) -> Optional[str]:
        """The running module's attribute holding ``g`` (``model.noise.gen``), else a variable.

        An operator gets a new Python object for the same generator: generators match by state.
        """
        state = generator_print(g)

        def same(value: Any) -> bool:
            return (
                isinstance(value, torch.Generator)
                and value.device == g.device
                and generator_print(value) == state
            )

        for name, module in zip(reversed(self.stack), reversed(self.objects)):
            for attr, value in vars(module).items():
                if same(value):
                    return f"{name}.{attr}"
        return variable_name(same)

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
