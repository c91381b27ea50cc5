"""``seeder.workers`` is :mod:`seeder.data.workers`, kept as an import path."""
import importlib
import sys

sys.modules[__name__] = importlib.import_module("seeder.data.workers")
