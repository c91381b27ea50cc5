"""Installs seeder's tool hooks at interpreter start (``seeder._run.bootstrap``), then runs the
next ``sitecustomize`` on ``sys.path``, as Python would have without this one.

The tools (``seeder verify``, ``seeder compare``, ``seeder locate``) put this directory first on
``PYTHONPATH`` for the runs they start; nothing else does.
"""

import importlib.machinery
import importlib.util
import os
import sys


def _install() -> None:
    try:
        from seeder._run.bootstrap import install
    except ImportError:  # an interpreter without seeder: its runs record nothing, verify says so
        return
    install()


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    spec.loader.exec_module(importlib.util.module_from_spec(spec))


_install()
_chain()
