"""``seeder.permutation`` is :mod:`seeder.data.permutation`, kept as an import path."""
import importlib
import sys

sys.modules[__name__] = importlib.import_module("seeder.data.permutation")
