"""Every benchmark still runs: each script in a tiny configuration (its figures mean nothing here), checked for
its RATIO / ratio lines. The timing itself is the benchmarks' job, never a test's."""
import pytest

from helpers import REPO_ROOT, run_python

BENCH = REPO_ROOT / "benchmarks"

CASES = {
    "bench_reseed": (["--rounds", "1", "--calls", "2"], "RATIO seeder.reseed + 6 generators / lightning"),
    "bench_state": (["--repeat", "1", "--number", "2"], "RATIO seeder global RNGs capture+restore / Lightning"),
    "bench_cuda": (["--device", "cpu", "--rounds", "1", "--calls", "2"],
                   "RATIO seeder: global RNGs / Lightning _collect/_set_rng_states"),
    "bench_sampler": (["--sizes", "1e4", "--repeats", "1", "--torch-max", "1e4"], "ratio = ours / torch's"),
    "bench_dataloader": (["--repeats", "1", "--workers", "0", "--batches", "64", "--items", "512"], "throughput ratio"),
    "bench_elastic": (["--repeats", "1", "--workers", "0", "--items", "256", "--n-resume", "1e6"],
                      "throughput ratio elastic/default"),
    "bench_hf_resume": (["--items", "256"], "RATIO SeederTrainer / Trainer (ours / theirs)"),
    "bench_iterable": (["--items", "128", "--us", "0", "--workers", "0", "--repeats", "1", "--depths", "0.5"],
                       "throughput ratio ours/torch"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_benchmark_runs(name):
    args, expected = CASES[name]
    out = run_python([str(BENCH / f"{name}.py"), *args], timeout=300).stdout
    assert expected in out, out[-3000:]


def test_the_cuda_benchmark_skips_cleanly_without_cuda_or_runs_with_it():
    import torch

    out = run_python([str(BENCH / "bench_cuda.py"), "--rounds", "1", "--calls", "2"], timeout=300).stdout
    if torch.cuda.is_available():
        assert "RATIO seeder.reseed + 6 generators / lightning seed_everything" in out, out[-3000:]
    else:
        assert out.strip() == "skipped: no CUDA (torch.cuda.is_available() is False)"
