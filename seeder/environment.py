"""``seeder.environment`` is :mod:`seeder.env.environment`, kept as an import path."""
import importlib
import sys

sys.modules[__name__] = importlib.import_module("seeder.env.environment")
