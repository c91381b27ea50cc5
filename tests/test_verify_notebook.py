"""notebooks/plot_losses.ipynb executes (nbclient, real kernel) against small verify and compare
outputs."""

from __future__ import annotations

import copy
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


def execute(directories, monkeypatch):
    """The notebook's cells run once for each of ``directories``, in one kernel (a kernel starts in
    seconds): before each pass a cell sets ``$SEEDER_VERIFY_DIR``, which the notebook's first cell
    reads. ``[(images, text)]``, one per directory."""
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])
    )
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nb = nbformat.v4.new_notebook(metadata=notebook.metadata)
    for directory in directories:
        nb.cells.append(
            nbformat.v4.new_code_cell(
                f"import os\nos.environ['SEEDER_VERIFY_DIR'] = {str(directory)!r}"
            )
        )
        nb.cells.extend(copy.deepcopy(notebook.cells))
    # jupyter_client runs the "python3" kernel with this interpreter (it substitutes argv[0]
    # "python").
    nbclient.NotebookClient(
        nb,
        kernel_name="python3",
        timeout=180,
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    ).execute()
    passes, code = [], []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        if cell.source.startswith("import os\nos.environ['SEEDER_VERIFY_DIR']"):
            code = []
            passes.append(code)
        else:
            code.extend(cell.outputs)
    assert len(passes) == len(directories)
    results = []
    for outputs in passes:
        assert not [o for o in outputs if o.output_type == "error"]
        images = [o for o in outputs if "image/png" in o.get("data", {})]
        text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
        results.append((images, text))
    return results


def test_notebook_draws_a_verify_and_a_compare_directory(tmp_path, monkeypatch, started_in_tmp):
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
    compare(
        CompareConfig(
            command=TOY,
            out=tmp_path / "c",
            runs=2,
            epochs=2,
            b_args=["--lr", "0.07"],
            jobs=2,
            progress=False,
            figures=False,
        )
    )
    (verify_images, verify_text), (compare_images, compare_text) = execute(
        [tmp_path / "v", tmp_path / "c"], monkeypatch
    )
    assert len(verify_images) == 4  # methodology, loss curves, overlay, spread
    assert "verdict: PASS" in verify_text and "run 3 vs 1 max |diff| 0 over" in verify_text
    assert len(compare_images) == 2 and "interval for B - A" in compare_text
