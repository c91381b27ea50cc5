"""``seeder.sampler`` is :mod:`seeder.data.sampler`, kept as an import path."""
import importlib
import sys

sys.modules[__name__] = importlib.import_module("seeder.data.sampler")
