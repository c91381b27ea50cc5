"""``seeder.determinism`` is :mod:`seeder.env.determinism`, kept as an import path."""
import importlib
import sys

sys.modules[__name__] = importlib.import_module("seeder.env.determinism")
