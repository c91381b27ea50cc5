"""``import seeder.pyt as seeder``: NVIDIA seeder's import path, the same API as :mod:`seeder`."""
from . import *  # noqa: F401,F403
from . import __all__  # noqa: F401
