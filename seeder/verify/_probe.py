"""Run a training script only up to its argument parser, and say which options the parser takes.

``seeder verify`` learns a command's flags and their arity without training:

    python _probe.py REPORT SCRIPT ARGS...        (or: python _probe.py REPORT -m MODULE ARGS...)

runs SCRIPT as ``__main__`` (``sys.argv`` as ``python SCRIPT ARGS`` gives it) with two exits
installed first, and writes one JSON object to REPORT at the first one reached:

* the script's parser (an ``argparse.ArgumentParser``, or a subclass such as jsonargparse's or
  ``HfArgumentParser``) is asked to parse the command line: ``{"reached": "parser", "actions":
  [...]}``, each action's option strings, ``nargs``, metavar, whether it is required and its
  default, with those of the subcommand named on the command line (LightningCLI's ``fit``);
* a torch optimizer steps, or a ``seeder.Checkpoint.step()`` is called, before any parser:
  ``{"reached": "optimizer step", "seeder_init": true}``
  (whether ``seeder.init`` ran before it).

``seeder.init`` does not end the probe: a LightningCLI script initialises seeder before the CLI
builds its parser.

It then ends its own process at once (SIGKILL: no ``finally`` of the script, no ``atexit``), so
nothing trains and nothing is saved. A script that reaches none of them ends as it ends; REPORT
then holds nothing and verify drives the script through seeder's environment variables only.

This file runs as a script in the training command's interpreter; it imports nothing of seeder,
so that modules beside it never shadow the script's imports.

Example (the verify side, :func:`seeder.verify._flags.probe_parser`, runs it)::

    >>> import json, subprocess, sys, tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> script = ["import argparse", "p = argparse.ArgumentParser()",
    ...           "p.add_argument('--resume', metavar='PATH')", "p.parse_args()",
    ...           "open('trained', 'w')"]
    >>> _ = (d / "t.py").write_text("\\n".join(script) + "\\n")
    >>> cmd = [sys.executable, __file__, str(d / "r.json"), str(d / "t.py")]
    >>> _ = subprocess.run(cmd, cwd=d)
    >>> actions = json.loads((d / "r.json").read_text())["actions"]
    >>> [(a["options"], a["nargs"], a["metavar"]) for a in actions][1]
    (['--resume'], None, 'PATH')
    >>> (d / "trained").exists()
    False
"""

from __future__ import annotations

import argparse
import importlib.abc
import json
import os
import runpy
import signal
import sys
from typing import Any, Callable, Optional

__all__ = ["main", "describe_action"]

#: Names of the methods that parse a command line, on ``argparse.ArgumentParser`` and its
#: subclasses.
PARSE_METHODS = (
    "parse_args",
    "parse_known_args",
    "parse_intermixed_args",
    "parse_known_intermixed_args",
)


def describe_action(action: argparse.Action) -> dict[str, Any]:
    """What verify needs of one parser action, from its public attributes, as JSON values.

    >>> p = argparse.ArgumentParser(); a = p.add_argument("--seed", type=int, default=7)
    >>> describe_action(a)["options"], describe_action(a)["default"], describe_action(a)["nargs"]
    (['--seed'], 7, None)
    """
    default = action.default
    if not isinstance(default, (bool, int, float, type(None))):
        # Strings only, short ones: a path such as "../outputs" helps name a shared folder; other
        # values are not kept.
        default = (
            default
            if isinstance(default, str) and len(default) <= 200
            else f"<{type(default).__name__}>"
        )
    nargs = action.nargs if isinstance(action.nargs, (int, type(None))) else str(action.nargs)
    metavar = (
        action.metavar
        if isinstance(action.metavar, (str, type(None)))
        else " ".join(map(str, action.metavar))
    )
    return {
        "options": list(action.option_strings),
        "dest": str(action.dest),
        "nargs": nargs,
        "metavar": metavar,
        "required": bool(action.required),
        "default": default,
    }


def _parser_actions(self: argparse.ArgumentParser, argv: list[str]) -> list[dict[str, Any]]:
    """The actions of parser ``self``, and of the subcommand ``argv`` names (installed as the
    parser method ``seeder_probe_actions`` by :meth:`_Probe.install`)."""
    out = []
    # argparse has no public list of a parser's actions: `_actions` is the one every version keeps.
    for action in self._actions:
        out.append(describe_action(action))
        choices = action.choices if isinstance(action.choices, dict) else {}
        subs = {name: p for name, p in choices.items() if isinstance(p, argparse.ArgumentParser)}
        chosen = next((w for w in argv if w in subs), None)
        if chosen is not None:
            sub = subs[chosen]
            # Installed by _Probe.install: typeshed's ArgumentParser has no such method.
            actions = sub.seeder_probe_actions(argv)  # type: ignore[attr-defined]
            out += [dict(a, subcommand=chosen) for a in actions]
    return out


class _Probe:
    """The exits and the one report."""

    def __init__(self, report: str):
        self.report = report
        self.depth = 0
        self.init_seen = False

    def done(self, record: dict[str, Any]) -> None:
        with open(self.report, "w", encoding="utf-8") as fh:
            json.dump(record, fh)
        sys.stdout.flush()
        sys.stderr.flush()
        # Nothing more of the script may run: no `finally`, no `except SystemExit` that goes on
        # training, no atexit.
        os.kill(os.getpid(), signal.SIGKILL)

    def wrap_parse(self, original: Callable[..., Any]) -> Callable[..., Any]:
        probe = self

        def parse(self: argparse.ArgumentParser, args: Any = None, *rest: Any, **kw: Any) -> Any:
            reads_argv = args is None or (
                isinstance(args, (list, tuple)) and list(args) == sys.argv[1:]
            )
            if probe.depth == 0 and reads_argv:
                # seeder_probe_actions: installed by install() below (typeshed does not know it).
                actions = self.seeder_probe_actions(sys.argv[1:])  # type: ignore[attr-defined]
                probe.done({"reached": "parser", "prog": str(self.prog), "actions": actions})
            probe.depth += 1
            try:
                return original(self, args, *rest, **kw)
            finally:
                probe.depth -= 1

        # A mark on the function, so a class wrapped twice keeps one wrapper; mypy types functions
        # without attributes.
        parse.seeder_probe = True  # type: ignore[attr-defined]
        return parse

    def wrap_class(self, cls: type[argparse.ArgumentParser]) -> None:
        for name in PARSE_METHODS:
            method = vars(cls).get(name)
            if callable(method) and not getattr(method, "seeder_probe", False):
                setattr(cls, name, self.wrap_parse(method))
        for sub in cls.__subclasses__():
            self.wrap_class(sub)

    def install(self) -> None:
        # A method of the parser reads the parser's own list of actions; typeshed's ArgumentParser
        # has no such attribute.
        argparse.ArgumentParser.seeder_probe_actions = _parser_actions  # type: ignore[attr-defined]
        self.wrap_class(argparse.ArgumentParser)
        probe = self

        # Parsers defined later (jsonargparse, transformers) are wrapped as their class is made.
        def init_subclass(cls: type[argparse.ArgumentParser], **kw: Any) -> None:
            probe.wrap_class(cls)

        # typeshed types `__init_subclass__` as a plain method; a classmethod is what Python calls.
        hook = classmethod(init_subclass)
        argparse.ArgumentParser.__init_subclass__ = hook  # type: ignore[assignment]
        _after_import("seeder._seeding.core", self.watch_init)
        _after_import("torch.optim.optimizer", self.stop_at_step)
        _after_import("seeder._checkpoint", self.stop_at_checkpoint_step)

    def watch_init(self, module: Any) -> None:
        original, probe = module.Seeder.init, self

        def init(self: Any, *args: Any, **kw: Any) -> Any:
            probe.init_seen = True
            return original(self, *args, **kw)

        module.Seeder.init = init

    def stop_at_step(self, module: Any) -> None:
        module.register_optimizer_step_pre_hook(
            lambda *a: self.done({"reached": "optimizer step", "seeder_init": self.init_seen})
        )

    def stop_at_checkpoint_step(self, module: Any) -> None:
        """A loop without a torch optimizer (a hand-written update) stops at its first
        ``seeder.Checkpoint.step()``."""
        original, probe = module.Checkpoint.step, self

        def step(ckpt: Any) -> None:
            probe.done({"reached": "optimizer step", "seeder_init": probe.init_seen})
            original(ckpt)

        module.Checkpoint.step = step


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``hooks[name](module)`` right after module ``name`` is executed (or now, if it was
    imported)."""

    def __init__(self) -> None:
        self.hooks: dict[str, Callable[[Any], None]] = {}

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Optional[Any]:
        hook = self.hooks.pop(name, None)
        if hook is None:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if finder is not self and find is not None else None
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                # This module's loader only: other modules keep their own `exec_module`.
                spec.loader.exec_module = _then(spec.loader.exec_module, hook)
                return spec
        return None


def _then(run: Callable[[Any], None], hook: Callable[[Any], None]) -> Callable[[Any], None]:
    """``run(module)``, then ``hook(module)``."""

    def exec_module(module: Any) -> None:
        run(module)
        hook(module)

    return exec_module


_FINDER = _AfterImport()


def _after_import(name: str, hook: Callable[[Any], None]) -> None:
    if name in sys.modules:  # imported already (a process forked from one that imported it)
        hook(sys.modules[name])
        return
    _FINDER.hooks[name] = hook
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def main(argv: list[str]) -> None:
    """``argv``: REPORT SCRIPT ARGS... or REPORT -m MODULE ARGS...; runs the script up to its first
    exit."""
    if len(argv) < 2 or (argv[1] == "-m" and len(argv) < 3):
        sys.exit("usage: _probe.py REPORT SCRIPT [ARGS...] | REPORT -m MODULE [ARGS...]")
    _Probe(argv[0]).install()
    # sys.path[0] is this file's folder (run as a script): it becomes the script's, so that modules
    # beside this file never shadow the script's imports. The entries after it (PYTHONPATH) stay.
    if argv[1] == "-m":
        sys.argv = [argv[2]] + argv[3:]
        sys.path[0] = os.getcwd()  # as `python -m` puts it
        runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
    else:
        sys.argv = argv[1:]
        sys.path[0] = os.path.dirname(os.path.abspath(argv[1]))  # as `python SCRIPT` puts it
        runpy.run_path(argv[1], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
