"""The test harness itself: a hung child fails its test with the stacks of every process it started."""
import pytest

from helpers import run_python

HANG = """
import subprocess, sys, threading
child = subprocess.Popen([sys.executable, "-c", "import threading; threading.Event().wait()"])
threading.Event().wait()
"""


def test_a_hung_child_fails_with_the_stack_of_every_process_it_started():
    with pytest.raises(AssertionError, match="hung for 5 s") as info:
        run_python(["-c", HANG], timeout=5)
    text = str(info.value)
    child, grandchild = text.index('File "<string>", line 4 in <module>'), text.index('File "<string>", line 1 in <module>')
    assert child < grandchild  # one process after the other, parents first: the stacks do not interleave
