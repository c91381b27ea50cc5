"""``seeder.dali`` is :mod:`seeder.data.dali`, kept as an import path."""
import importlib
import sys

sys.modules[__name__] = importlib.import_module("seeder.data.dali")
