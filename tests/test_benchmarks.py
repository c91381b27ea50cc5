"""Every benchmark still runs: each script in a tiny configuration (its figures mean nothing here),
checked for its RATIO / ratio lines. The timing itself is the benchmarks' job, never a test's.

All of them run in one child (``tests/scripts/run_benchmarks.py``) forked from the session's
framework server, so torch, Lightning and transformers are imported once rather than once per
benchmark (the subject is the benchmarks, not a process start).
"""

import importlib.util
import json
import re

import pytest
from helpers import REPO_ROOT
from optional import need_installed

# the benchmarks run once, in one worker (the module's fixture), whichever tests a worker gets
pytestmark = pytest.mark.xdist_group("benchmarks")

BENCH = REPO_ROOT / "benchmarks"

CASES = {
    "bench_reseed": (
        ["--rounds", "1", "--calls", "2"],
        "RATIO seeder.reseed + 6 generators / lightning",
    ),
    "bench_state": (
        ["--repeat", "1", "--number", "2"],
        "RATIO seeder state_dict + load_state_dict / torch.save of a small model",
    ),
    "bench_step": (
        ["--items", "64", "--batch", "16", "--repeats", "1", "--save-every", "2"],
        "RATIO workers 2: seeder / torch epoch time",
    ),
    "bench_cuda": (
        ["--device", "cpu", "--rounds", "1", "--calls", "2"],
        "RATIO seeder: global RNGs / Lightning _collect/_set_rng_states",
    ),
    "bench_sampler": (
        # one sampler's peak memory (a fresh process each) and few per-sample items
        [
            *("--sizes", "1e4", "--repeats", "1", "--torch-max", "1e4"),
            *("--memory-of", "seeder-feistel", "--per-sample-items", "256"),
        ],
        "ratio = ours / torch's",
    ),
    "bench_dataloader": (
        ["--repeats", "1", "--workers", "0", "--batches", "64", "--items", "512"],
        "throughput ratio",
    ),
    "bench_elastic": (
        ["--repeats", "1", "--workers", "0", "--items", "256", "--n-resume", "1e6"],
        "throughput ratio elastic/default",
    ),
    "bench_hf_resume": (["--items", "256"], "RATIO SeederTrainer / Trainer (ours / theirs)"),
    "bench_iterable": (
        ["--items", "128", "--us", "0", "--workers", "0", "--repeats", "1", "--depths", "0.5"],
        "throughput ratio ours/torch",
    ),
    "bench_streams": (
        ["--items", "128", "--us", "0", "--workers", "0", "--repeats", "1", "--shards", "8"],
        "throughput ratio ours/torch",
    ),
    "bench_locate": (
        ["--rounds", "1", "--steps", "1"],
        "RATIO fingerprinted / baseline ms per step [cnn]",
    ),
    "bench_provenance": (
        ["--sizes", "1e4", "--batches", "8", "--repeats", "1", "--epoch-batches", "32"],
        "RATIO skip list / none, time per batch handed out",
    ),
    "bench_draws": (
        ["--draws", "0", "1000", "--repeat", "1", "--number", "1"],
        "RATIO counted / baseline step [1000 numbers]",
    ),
}
#: The optional packages a benchmark's baseline comes from (transformers' Trainer needs accelerate).
NEEDS = {
    "bench_reseed": ("lightning",),
    "bench_state": ("lightning",),
    "bench_cuda": ("lightning",),
    "bench_dataloader": ("torchdata",),
    "bench_iterable": ("torchdata",),
    "bench_hf_resume": ("transformers", "accelerate"),
}


def _installed(name: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in NEEDS.get(name, ()))


def run_all(server, cases: dict[str, tuple[str, list]]) -> dict[str, tuple[int, str]]:
    """``{label: (script name, arguments)}`` -> each label's (exit status, stdout), all run in one
    child of ``server`` (the session's ``framework_scripts``)."""
    runner = REPO_ROOT / "tests" / "scripts" / "run_benchmarks.py"
    proc = server.run(
        [
            runner,
            json.dumps([[label, str(BENCH / f"{n}.py"), a] for label, (n, a) in cases.items()]),
        ],
        timeout=600,
        check=False,
        start_is_subject=False,
    )
    found = {
        m.group(1): (int(m.group(3)), m.group(2))
        for m in re.finditer(r"=== BEGIN (\w+)\n(.*?)=== END \1 (-?\d+)\n", proc.stdout, re.S)
    }
    missing = set(cases) - set(found)
    assert not missing, (
        f"{sorted(missing)} did not finish\n--- stdout\n{proc.stdout[-3000:]}\n--- "
        f"stderr\n{proc.stderr[-4000:]}"
    )
    return {n: (rc, out + (proc.stderr[-3000:] if rc else "")) for n, (rc, out) in found.items()}


@pytest.fixture(scope="module")
def outputs(framework_scripts):
    cases = {n: (n, a) for n, (a, _) in CASES.items() if _installed(n)}
    if _installed("bench_cuda"):
        cases["bench_cuda_default"] = ("bench_cuda", ["--rounds", "1", "--calls", "2"])
    return run_all(framework_scripts, cases)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_benchmark_runs(name, outputs):
    # found, not imported here: the benchmarks' child imports them
    need_installed(NEEDS.get(name, ()), f"benchmarks/{name}.py's baseline")
    rc, out = outputs[name]
    assert rc == 0 and CASES[name][1] in out, out[-3000:]


@pytest.mark.slow
def test_the_cuda_benchmark_skips_cleanly_without_cuda_or_runs_with_it(outputs):
    import torch

    need_installed(["lightning"], "benchmarks/bench_cuda.py's baseline")
    rc, out = outputs["bench_cuda_default"]
    assert rc == 0, out
    if torch.cuda.is_available():
        assert "RATIO seeder.reseed + 6 generators / lightning seed_everything" in out, out[-3000:]
    else:
        assert out.strip() == "skipped: no CUDA (torch.cuda.is_available() is False)"
