"""notebooks/plot_losses.ipynb executes (nbclient, real kernel) against small verify and compare
outputs."""

from __future__ import annotations

import os
import sys

import pytest
from helpers import REPO_ROOT
from optional import need, need_verify

need_verify(figures=True)  # the notebook plots with matplotlib
nbformat = need("nbformat", "running the notebook")
nbclient = need("nbclient", "running the notebook")
from seeder.verify import CompareConfig, VerifyConfig, compare, verify  # noqa: E402

pytestmark = pytest.mark.slow

NOTEBOOK = REPO_ROOT / "notebooks" / "plot_losses.ipynb"
TOY = [sys.executable, str(REPO_ROOT / "tests" / "scripts" / "verify_toy.py")]


def execute(directory, monkeypatch):
    monkeypatch.setenv("SEEDER_VERIFY_DIR", str(directory))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])
    )
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # jupyter_client runs the "python3" kernel with this interpreter (it substitutes argv[0]
    # "python").
    nbclient.NotebookClient(
        nb,
        kernel_name="python3",
        timeout=180,
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    ).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    return images, text


def test_notebook_draws_a_verify_directory(tmp_path, monkeypatch):
    verify(
        VerifyConfig(
            command=TOY,
            out=tmp_path / "v",
            epochs=2,
            repeats=2,
            jobs=2,
            progress=False,
            figures=False,
        )
    )
    images, text = execute(tmp_path / "v", monkeypatch)
    assert len(images) == 4  # methodology, loss curves, overlay, spread
    assert "verdict: PASS" in text and "run 3 vs 1 max |diff| 0 over" in text


def test_notebook_draws_a_compare_directory(tmp_path, monkeypatch):
    compare(
        CompareConfig(
            command=TOY,
            out=tmp_path / "c",
            runs=2,
            epochs=2,
            b_args=["--lr", "0.07"],
            progress=False,
            figures=False,
        )
    )
    images, text = execute(tmp_path / "c", monkeypatch)
    assert len(images) == 2 and "interval for B - A" in text
