"""``import seeder.pyt as seeder``: NVIDIA seeder's import path, the same API as :mod:`seeder`."""

from seeder import *  # noqa: F401,F403
from seeder import __all__  # noqa: F401
