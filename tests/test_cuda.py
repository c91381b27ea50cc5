"""CUDA: a training run resumed bit for bit, CUDA generators, every device's state,
map_location="cuda" checkpoints, deterministic mode before CUDA starts. Each case runs in a child
process, so that this
process never starts CUDA (other tests check what happens before it starts). The training run's
harness also runs on the CPU, so that it is checked on machines without a GPU too."""

import json
import subprocess
import sys

import pytest
import torch
from helpers import REPO_ROOT, child_env, communicate, json_lines, run_python

NO_CUDA = "needs a CUDA device (torch.cuda.is_available() is False)"

TRAIN = str(REPO_ROOT / "tests" / "scripts" / "cuda_train.py")


def _parse(name, rc, stdout, stderr):
    rows = json_lines(stdout, "RESULT ")
    assert rc == 0 and len(rows) == 1, f"{name}: exit {rc}\n{stdout[-3000:]}\n{stderr[-5000:]}"
    return rows[0]


def _together(device, runs):
    """Start every run of ``{name: args}`` at once, each a fresh interpreter (the runs of a call are
    independent: on 2 cores they start while others wait on imports); their RESULT rows."""
    procs = {
        name: subprocess.Popen(
            [sys.executable, TRAIN, "--device", device, *args],
            env=child_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=str(REPO_ROOT),
        )
        for name, args in runs.items()
    }
    out = {}
    try:
        for name, p in procs.items():
            stdout, stderr = communicate(p, 300)
            out[name] = _parse(name, p.returncode, stdout, stderr)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    return out


def _runner(device, scripts, start_is_subject):
    """``results(runs)``: the RESULT row of each run of ``{name: args}``. On CUDA the runs of a call
    start together, each a fresh interpreter. The CPU harness forks the runs whose start is not the
    subject (the references and the runs before a stop: ``start_is_subject=False``) one by one from
    ``scripts``; its resumes in a new process start together, fresh (forked too with
    ``SEEDER_TEST_FORKSERVER=1``, locally)."""
    if device != "cpu" or (start_is_subject and not scripts.forks):
        return lambda runs: _together(device, runs)

    def forked(name, args):
        done = scripts.run(
            [TRAIN, "--device", device, *args],
            timeout=300,
            check=False,
            start_is_subject=start_is_subject,
        )
        return _parse(name, done.returncode, done.stdout, done.stderr)

    return lambda runs: {name: forked(name, args) for name, args in runs.items()}


@pytest.mark.slow
@pytest.mark.parametrize(
    "device", [pytest.param("cuda", marks=pytest.mark.cuda), pytest.param("cpu", id="cpu-harness")]
)
def test_cuda_training_resumes_bitwise_mid_epoch_and_at_the_epoch_boundary(
    tmp_path, device, request
):
    """The README's wiring (seeder.DataLoader, 2 workers), deterministic mode before CUDA starts:
    stops at steps 7, 12 (epoch 0's last step), the end of epoch 0 and 17 resume bit for bit; a
    seeded repeat is bitwise; unseeded runs differ. 12 steps per epoch, 3 epochs."""
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip(NO_CUDA)
    ck = {name: str(tmp_path / f"{name}.pt") for name in ("mid", "last_step", "epoch_end", "later")}
    # The CPU harness checks the test and its child script, which the GPU run then trusts: the cases
    # that only repeat another on a CPU (a second seeded run, a second stop in epoch 0,
    # map_location="cpu") run on CUDA only.
    gpu_only = {"repeat", "last_step", "mid_on_device"} if device == "cpu" else set()
    scripts = request.getfixturevalue("scripts") if device == "cpu" else None
    first = _runner(device, scripts, start_is_subject=False)(
        {
            name: args
            for name, args in {
                "full": ("--seed", "7"),
                "repeat": ("--seed", "7"),
                "mid": ("--seed", "7", "--stop-at-step", "7", "--ckpt", ck["mid"]),
                "last_step": ("--seed", "7", "--stop-at-step", "12", "--ckpt", ck["last_step"]),
                "epoch_end": ("--seed", "7", "--stop-after-epochs", "1", "--ckpt", ck["epoch_end"]),
                "later": ("--seed", "7", "--stop-at-step", "17", "--ckpt", ck["later"]),
                "unseeded_a": (),
                "unseeded_b": (),
            }.items()
            if name not in gpu_only
        }
    )
    second = _runner(device, scripts, start_is_subject=True)(
        {
            name: args
            for name, args in {
                "mid": ("--resume", "--ckpt", ck["mid"]),
                "mid_on_device": ("--resume", "--ckpt", ck["mid"], "--map-location", device),
                "last_step": ("--resume", "--ckpt", ck["last_step"]),
                "epoch_end": ("--resume", "--ckpt", ck["epoch_end"], "--map-location", device),
                "later": ("--resume", "--ckpt", ck["later"]),
            }.items()
            if name not in gpu_only
        }
    )
    full = first["full"]
    assert len(full["losses"]) == 36
    for run in first.values():
        assert (
            run["deterministic"]
            and run["cudnn_deterministic"]
            and not run["cuda_started_before_init"]
        )
        assert run["cublas"] in (":4096:8", ":16:8")
    if "repeat" in first:
        assert (
            first["repeat"]["losses"] == full["losses"]
            and first["repeat"]["digest"] == full["digest"]
        )
    for name, stop in (("mid", 7), ("last_step", 12), ("epoch_end", 12), ("later", 17)):
        if name in first:
            assert first[name]["losses"] == full["losses"][:stop], name
    for name, stop in (
        ("mid", 7),
        ("mid_on_device", 7),
        ("last_step", 12),
        ("epoch_end", 12),
        ("later", 17),
    ):
        if name not in second:
            continue
        resumed = second[name]
        assert resumed["first_step"] == stop and resumed["master"] == 7, name
        assert resumed["losses"] == full["losses"][stop:], name
        assert resumed["digest"] == full["digest"], name
    a, b = first["unseeded_a"], first["unseeded_b"]
    assert a["master"] != b["master"] and a["losses"] != b["losses"] and a["digest"] != b["digest"]


CUDA_GENERATOR = """
import io, torch, seeder
seeder.init(5)
g = torch.Generator(device="cuda")
seeder.register_generator(g)
seeder.reseed(1, 0)
a = torch.rand(4, device="cuda", generator=g)
seeder.reseed(1, 0)
again = torch.rand(4, device="cuda", generator=g)
assert torch.equal(again, a), "reseed(1, 0) again repeats the stream"
seeder.reseed(1, 1)
again = torch.rand(4, device="cuda", generator=g)
assert not torch.equal(again, a), "a new epoch gets a new stream"
assert not torch.equal(torch.rand(4, device="cuda"), torch.rand(4, device="cuda", generator=g))
state = seeder.state_dict()
want = torch.rand(4, device="cuda", generator=g)
buf = io.BytesIO(); torch.save(state, buf)
for loaded in (state, torch.load(io.BytesIO(buf.getvalue()), weights_only=True),
               torch.load(io.BytesIO(buf.getvalue()), map_location="cuda", weights_only=True)):
    torch.rand(100, device="cuda", generator=g)
    seeder.load_state_dict(loaded)
    assert torch.equal(torch.rand(4, device="cuda", generator=g), want)
print("ok")
"""


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
def test_a_cuda_generator_is_reseeded_saved_and_restored():
    assert run_python(["-c", CUDA_GENERATOR]).stdout.strip() == "ok"


EVERY_DEVICE = """
import torch, seeder
n = torch.cuda.device_count()
seeder.init(3)
seeder.reseed(1, 0)
for d in range(n):
    torch.rand(1, device=f"cuda:{d}")
state = seeder.state_dict()
assert len(state["rngs"]["cuda"]) == n
now = torch.cuda.get_rng_state_all()
assert all(torch.equal(a, b) for a, b in zip(state["rngs"]["cuda"], now)), "torch's bytes"
want = [torch.rand(3, device=f"cuda:{d}") for d in range(n)]
for d in range(n):
    torch.rand(50, device=f"cuda:{d}")
seeder.load_state_dict(state)
assert all(torch.equal(torch.rand(3, device=f"cuda:{d}"), want[d]) for d in range(n))
before = torch.cuda.get_rng_state_all()
bad = dict(state, rngs=dict(state["rngs"], cuda=state["rngs"]["cuda"] + state["rngs"]["cuda"][:1]))
try:
    seeder.load_state_dict(bad)
    raise SystemExit("a state for another number of devices was accepted")
except seeder.StateError as exc:
    assert "CUDA_VISIBLE_DEVICES" in str(exc), exc
now = torch.cuda.get_rng_state_all()
assert all(torch.equal(a, b) for a, b in zip(before, now)), "a refused state changed nothing"
print("ok", n)
"""


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
def test_every_cuda_device_state_is_captured_and_restored():
    out = run_python(["-c", EVERY_DEVICE]).stdout.split()
    assert out == ["ok", str(torch.cuda.device_count())]


MAP_LOCATION_CUDA = """
import random, sys, numpy as np, torch, seeder
path = sys.argv[1]
seeder.init(11)
g = torch.Generator(device="cuda")
seeder.register_generator(g)
seeder.register_generator(np.random.default_rng())
seeder.reseed(1, 0)
torch.save({"seeder": seeder.state_dict()}, path)
def draws():
    return (random.random(), float(np.random.rand()), torch.rand(3).tolist(),
            torch.rand(3, device="cuda").tolist(),
            torch.rand(3, device="cuda", generator=g).tolist())
want = draws()
draws()
ckpt = torch.load(path, map_location="cuda", weights_only=True)
# map_location='cuda' puts the CPU RNG state on the GPU
assert ckpt["seeder"]["rngs"]["torch"].is_cuda
# torch.set_rng_state would say: RNG state must be a torch.ByteTensor
seeder.load_state_dict(ckpt["seeder"])
assert draws() == want
print("ok")
"""


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
def test_a_checkpoint_loaded_with_map_location_cuda_restores_exactly(tmp_path):
    assert run_python(["-c", MAP_LOCATION_CUDA, str(tmp_path / "ckpt.pt")]).stdout.strip() == "ok"


DETERMINISTIC_FIRST = """
import json, os, torch, seeder
started = torch.cuda.is_initialized()
seeder.init(1, deterministic=True)
a = torch.randn(64, 64, device="cuda")
# cuBLAS in deterministic mode raises unless CUBLAS_WORKSPACE_CONFIG was set before CUDA started
b = a @ a
torch.cuda.synchronize()
try:
    torch.histc(torch.rand(10, device="cuda"))
    refused = False
except RuntimeError as exc:
    refused = "deterministic" in str(exc)
print(json.dumps({"started": started, "cublas": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
                  "algorithms": torch.are_deterministic_algorithms_enabled(),
                  "cudnn": [torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark],
                  "refused": refused}))
"""


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
def test_deterministic_mode_is_set_before_cuda_starts():
    out = json.loads(
        run_python(["-c", DETERMINISTIC_FIRST], env={"CUBLAS_WORKSPACE_CONFIG": ""}).stdout
    )
    assert out == {
        "started": False,
        "cublas": ":4096:8",
        "algorithms": True,
        "cudnn": [True, False],
        "refused": True,
    }
