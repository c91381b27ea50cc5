"""``seeder.launcher`` is :mod:`seeder.env.launcher`, kept as an import path."""
import importlib
import sys

sys.modules[__name__] = importlib.import_module("seeder.env.launcher")
