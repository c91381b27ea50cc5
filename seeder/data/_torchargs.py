"""torch's ``DataLoader`` arguments, for seeder's loaders: defined, checked and passed on in one
place.

Each of seeder's loaders takes torch's arguments as torch does (the same names, order, defaults,
positions) plus keyword-only arguments of its own. :class:`TorchArgs` defines them once, with
torch's defaults; :meth:`TorchArgs.bind` reads them from a call, as Python would bind torch's
signature; :meth:`TorchArgs.check` refuses a value of the wrong type before anything is built;
:meth:`TorchArgs.passed` gives torch the arguments the caller gave (so an argument an older torch
lacks reaches it only when given, and is refused there as torch refuses it). :func:`torch_signature`
makes a loader's ``__init__`` show torch's signature and its own keywords (``help()``,
``inspect.signature``).

Example:
    >>> args = TorchArgs.bind("seeder.DataLoader", (4, True), {"num_workers": 2})
    >>> args.batch_size, args.shuffle, args.num_workers, args.passed(batch_size=None)
    (4, True, 2, {'batch_size': None, 'shuffle': True, 'num_workers': 2})
"""

from __future__ import annotations

import dataclasses
import inspect
import numbers
from typing import Any, Callable, Optional, TypeVar

import torch

from seeder._checks import check_bool, check_int, is_bool

__all__ = ["TorchArgs", "torch_signature", "TORCH_POSITIONAL"]

#: The arguments ``torch.utils.data.DataLoader`` takes by position after ``dataset``, in order; the
#: others are keyword-only.
TORCH_POSITIONAL = (
    "batch_size",
    "shuffle",
    "sampler",
    "batch_sampler",
    "num_workers",
    "collate_fn",
    "pin_memory",
    "drop_last",
    "timeout",
    "worker_init_fn",
    "multiprocessing_context",
    "generator",
)


@dataclasses.dataclass
class TorchArgs:
    """The arguments of ``torch.utils.data.DataLoader`` after ``dataset``, with torch's defaults.

    ``given`` names those the caller passed.

    Example:
        >>> TorchArgs(batch_size=8).batch_size, TorchArgs().in_order
        (8, True)
    """

    batch_size: Optional[int] = 1
    shuffle: Optional[bool] = None
    sampler: Any = None
    batch_sampler: Any = None
    num_workers: int = 0
    collate_fn: Optional[Callable[..., Any]] = None
    pin_memory: bool = False
    drop_last: bool = False
    timeout: float = 0
    worker_init_fn: Optional[Callable[[int], Any]] = None
    multiprocessing_context: Any = None
    generator: Optional[torch.Generator] = None
    prefetch_factor: Optional[int] = None
    persistent_workers: bool = False
    pin_memory_device: str = ""
    in_order: bool = True
    given: frozenset[str] = dataclasses.field(default=frozenset(), repr=False)

    @classmethod
    def bind(cls, what: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> TorchArgs:
        """The arguments of a call ``what(dataset, *args, **kwargs)``, bound as torch's signature
        binds them.

        Args:
            what: the loader's name, for the errors.
            args: the positional arguments after ``dataset``.
            kwargs: the keyword arguments that are not the loader's own.

        Returns:
            The bound arguments.

        Raises:
            TypeError: too many positional arguments, one given twice, or a name torch does not
                take (as Python says it of a call).

        Example:
            >>> TorchArgs.bind("seeder.DataLoader", (), {"batch_szie": 4})
            Traceback (most recent call last):
            ...
            TypeError: seeder.DataLoader() got an unexpected keyword argument 'batch_szie'
        """
        if len(args) > len(TORCH_POSITIONAL):
            raise TypeError(
                f"{what}() takes at most {len(TORCH_POSITIONAL) + 1} positional arguments "
                f"(dataset, {', '.join(TORCH_POSITIONAL)}), got {len(args) + 1}"
            )
        values = dict(zip(TORCH_POSITIONAL, args))
        names = {f.name for f in dataclasses.fields(cls)} - {"given"}
        for name, value in kwargs.items():
            if name not in names:
                raise TypeError(f"{what}() got an unexpected keyword argument {name!r}")
            if name in values:
                raise TypeError(f"{what}() got multiple values for argument {name!r}")
            values[name] = value
        return cls(**values, given=frozenset(values))

    def check(self) -> Optional[bool]:
        """``shuffle`` as ``None`` or a bool if every argument has a type torch takes, else an error
        naming it; changes nothing.

        Returns:
            ``shuffle``, ``None`` or a bool.

        Raises:
            TypeError, ValueError: the first argument of the wrong type or out of range.

        Example:
            >>> TorchArgs(shuffle="no").check()
            Traceback (most recent call last):
            ...
            TypeError: shuffle must be True or False, got str 'no'
        """
        shuffle = None if self.shuffle is None else check_bool(self.shuffle, "shuffle")
        check_int(self.num_workers, "num_workers", low=0)
        for name in ("drop_last", "pin_memory", "persistent_workers", "in_order"):
            check_bool(getattr(self, name), name)
        timeout = self.timeout
        # timeout != timeout: NaN, which no comparison refuses
        if is_bool(timeout) or not isinstance(timeout, numbers.Real) or not timeout >= 0:
            raise ValueError(
                f"timeout must be a number of seconds >= 0 (0: wait forever), got {timeout!r}"
            )
        for name in ("worker_init_fn", "collate_fn"):
            fn = getattr(self, name)
            if fn is not None and not callable(fn):
                raise TypeError(
                    f"{name} must be None or a callable, got {type(fn).__name__} {fn!r}"
                )
        if self.generator is not None and not isinstance(self.generator, torch.Generator):
            raise TypeError(
                f"generator must be None (seeder gives the loader its own) or a torch.Generator, "
                f"got {type(self.generator).__name__} {self.generator!r}"
            )
        if self.prefetch_factor is not None:
            check_int(self.prefetch_factor, "prefetch_factor", low=1)
        return shuffle

    def passed(self, **override: Any) -> dict[str, Any]:
        """The keyword arguments for torch's ``__init__``: those given, then ``override``.

        Args:
            override: what the loader gives torch in place of the caller's (its batch sampler,
                its generator, ...).

        Returns:
            Keyword arguments for ``torch.utils.data.DataLoader.__init__``, in torch's order.

        Example:
            >>> TorchArgs.bind("seeder.DataLoader", (), {"timeout": 5}).passed(collate_fn=None)
            {'collate_fn': None, 'timeout': 5}
        """
        chosen = {**{name: getattr(self, name) for name in self.given}, **override}
        return {f.name: chosen[f.name] for f in dataclasses.fields(self) if f.name in chosen}


_Init = TypeVar("_Init", bound=Callable[..., None])


def torch_signature(init: _Init) -> _Init:
    """Show ``init(self, dataset, *args, <own keywords>, **kwargs)`` as torch's signature plus the
    loader's own keyword-only arguments.

    Args:
        init: a loader's ``__init__``, whose ``*args`` and ``**kwargs`` are torch's arguments.

    Returns:
        ``init``, with ``__signature__`` set.

    Example:
        >>> @torch_signature
        ... def __init__(self, dataset, *args, seeder=None, **kwargs): ...
        >>> list(inspect.signature(__init__).parameters)[:3], "seeder" in str(
        ...     inspect.signature(__init__))
        (['self', 'dataset', 'batch_size'], True)
    """
    own = inspect.signature(init)
    head = [p for p in own.parameters.values() if p.kind is p.POSITIONAL_OR_KEYWORD]
    extra = [p for p in own.parameters.values() if p.kind is p.KEYWORD_ONLY]
    torch_params = [
        inspect.Parameter(
            f.name,
            inspect.Parameter.POSITIONAL_OR_KEYWORD
            if f.name in TORCH_POSITIONAL
            else inspect.Parameter.KEYWORD_ONLY,
            default=f.default,
            annotation=f.type,
        )
        for f in dataclasses.fields(TorchArgs)
        if f.name != "given"
    ]
    init.__signature__ = own.replace(parameters=[*head, *torch_params, *extra])  # type: ignore[attr-defined]
    return init
