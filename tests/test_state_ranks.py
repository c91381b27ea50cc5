"""Many ranks, one checkpoint: gather_state_dict under torchrun, per-rank files, and a change of
world size."""

from __future__ import annotations

import json
import random

import pytest
import torch
from helpers import torchrun

from seeder import Seeder, SeederWarning, StateError


@pytest.mark.slow
def test_gathered_and_per_rank_layouts_under_torchrun_then_world_change(tmp_path):
    torchrun(["tests/scripts/state_ranks.py", "save", str(tmp_path)], nproc=2)
    torchrun(["tests/scripts/state_ranks.py", "load", str(tmp_path)], nproc=2)
    results = [json.loads((tmp_path / f"result{r}.json").read_text()) for r in (0, 1)]
    assert results == [
        {"rank": r, "gathered": True, "per_rank": True, "seed": 4242} for r in (0, 1)
    ]
    gathered = torch.load(tmp_path / "all.pt", weights_only=True)
    assert [e["rank"] for e in gathered["ranks"]] == [0, 1]
    assert not torch.equal(
        gathered["ranks"][0]["rngs"]["torch"], gathered["ranks"][1]["rngs"]["torch"]
    )

    # The same checkpoint in a world of one process: an error by default, the next epoch boundary on
    # request.
    s = Seeder()
    s.init(1)
    s.register_generator(random.Random())
    with pytest.raises(StateError, match="world of 2"):
        s.load_state_dict(gathered)
    with pytest.raises(StateError, match="world of 2"):
        s.load_state_dict(torch.load(tmp_path / "rank1.pt", weights_only=True))
    with pytest.warns(SeederWarning, match="continuing with the checkpoint's seed"):
        s.load_state_dict(gathered, allow_world_change=True)
    assert s.get_master_seed() == 4242 and s.last_reseed == (1, 2)
