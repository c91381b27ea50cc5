"""seeder.data.dali without DALI: importable, and a clear install message when a DALI feature is
used.

Runs whether or not DALI is installed: the child process hides nvidia.dali from import.
"""

from __future__ import annotations

import pytest
from helpers import run_python

HIDE_DALI = """
import sys
class _NoDali:
    def find_spec(self, name, path=None, target=None):
        if name == "nvidia.dali" or name.startswith("nvidia.dali."):
            raise ModuleNotFoundError(f"No module named {name!r} (hidden by the test)")
        return None
sys.meta_path.insert(0, _NoDali())
"""


@pytest.mark.slow
def test_seeder_and_seeder_data_dali_import_without_dali_and_say_how_to_install():
    code = (
        HIDE_DALI
        + """
import seeder, seeder.data.dali
from seeder.data import dali
dali_modules = [m for m in sys.modules if m == "nvidia.dali" or m.startswith("nvidia.dali.")]
assert not dali_modules, "import seeder imported DALI"
seeder.init(42)
assert 0 <= dali.pipeline_seed(0) < 2**32  # seeds need no DALI
assert dali.pipeline_kwargs(0)["enable_checkpointing"] is True
import random
seeder.register_generator(random.Random())  # register_generator still works without DALI
for call in (dali.require_dali, lambda: seeder.data.dali.track(object(), 0)):
    try:
        call()
    except ImportError as exc:
        print("MSG", exc)
    else:
        raise AssertionError("no ImportError without DALI")
"""
    )
    out = run_python(["-c", code]).stdout
    msgs = [line for line in out.splitlines() if line.startswith("MSG ")]
    assert len(msgs) == 2
    for msg in msgs:
        assert (
            "pip install 'seeder[dali]'" in msg
            and "nvidia-dali-cuda120" in msg
            and "nvidia-dali-cuda130" in msg
        )


@pytest.mark.slow
def test_seeder_data_dali_is_reached_as_an_attribute_after_import_seeder_data():
    code = (
        HIDE_DALI
        + """
import seeder.data
names = [n for n in dir(seeder.data) if not n.startswith("_")]
assert names == sorted([*seeder.data.__all__, "dali"]), names
assert seeder.data.dali.pipeline_seed.__module__ == "seeder.data.dali"
assert 0 <= seeder.data.dali.MAX_DALI_SEED
print("OK")
"""
    )
    assert run_python(["-c", code]).stdout.split() == ["OK"]


def test_import_seeder_does_not_import_dali_in_this_process_if_not_already():
    import sys

    import seeder  # noqa: F401
    import seeder.data.dali  # noqa: F401
    from seeder.data import dali

    assert "seeder.data.dali" in sys.modules
    # Other tests may import DALI themselves; seeder.data.dali must never be the one: it only peeks.
    assert dali._pipeline_class() is getattr(
        sys.modules.get("nvidia.dali.pipeline"), "Pipeline", None
    )
