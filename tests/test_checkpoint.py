"""seeder.Checkpoint: a refused file changes nothing and names what is wrong; concurrent writers
never crash."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from helpers import child_env, communicate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import seeder
from seeder import StateError
from seeder._atomic import STALE_AFTER_S, write_atomic


def build(s):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    opt = torch.optim.Adam(net.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2)
    return net, opt, sched


def train_step(net, opt, sched):
    loss = net(torch.randn(5, 3)).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()


@pytest.fixture
def saved(tmp_path):
    """A checkpoint saved after 3 steps inside epoch 0, and the path it is at."""
    s = seeder.Seeder()
    s.init(11)
    s.reseed(1, 0)
    net, opt, sched = build(s)
    ckpt = seeder.Checkpoint(
        tmp_path / "last.pt", model=net, optimizer=opt, scheduler=sched, seeder=s
    )
    for _ in range(3):
        train_step(net, opt, sched)
        ckpt.step()
    ckpt.save()
    return tmp_path / "last.pt"


def fresh(path, seed=11):
    """What a resuming process has before ``resume``: a fresh model, an optimizer with one step's
    state, and a seeder."""
    s = seeder.Seeder()
    s.init(seed)
    s.reseed(0, 0)
    net, opt, sched = build(s)
    train_step(net, opt, sched)  # the optimizer holds per-parameter state: a load would replace it
    return seeder.Checkpoint(path, model=net, optimizer=opt, scheduler=sched, seeder=s)


def snapshot(ckpt):
    """Everything a resume changes, copied."""
    params = {k: v.clone() for k, v in ckpt.model.state_dict().items()}
    opt = ckpt.optimizer.state_dict()
    opt_state = {
        k: {n: (t.clone() if isinstance(t, torch.Tensor) else t) for n, t in v.items()}
        for k, v in opt["state"].items()
    }
    return (
        params,
        opt_state,
        ckpt.scheduler.state_dict(),
        ckpt.seeder.get_master_seed(),
        ckpt.seeder.last_reseed,
        torch.get_rng_state(),
        ckpt.steps,
    )


def same(a, b):
    def eq(x, y):
        if isinstance(x, torch.Tensor):
            return isinstance(y, torch.Tensor) and x.dtype == y.dtype and torch.equal(x, y)
        if isinstance(x, dict):
            return isinstance(y, dict) and x.keys() == y.keys() and all(eq(x[k], y[k]) for k in x)
        if isinstance(x, (list, tuple)):
            return len(x) == len(y) and all(eq(p, q) for p, q in zip(x, y))
        return x == y

    return eq(a, b)


def rewrite(path, **parts):
    state = torch.load(path, weights_only=True)
    state.update(parts)
    torch.save(state, path)


def test_a_valid_checkpoint_resumes_every_part(saved):
    ckpt = fresh(saved)
    assert ckpt.resume(True) == 0 and ckpt.steps == 3
    want = torch.load(saved, weights_only=True)
    assert (
        same(ckpt.model.state_dict(), want["model"])
        and ckpt.scheduler.state_dict() == want["scheduler"]
    )


@pytest.mark.parametrize("bad", ["no", "", 1, 0, 1.0, [True], "True"])
def test_resume_takes_only_true_false_or_none(saved, bad):
    ckpt = fresh(saved)
    before = snapshot(ckpt)
    with pytest.raises(TypeError, match="True, False or None"):
        ckpt.resume(bad)
    assert same(snapshot(ckpt), before)


def test_an_empty_file_is_one_error_naming_it(saved):
    saved.write_bytes(b"")
    ckpt = fresh(saved)
    before = snapshot(ckpt)
    with pytest.raises(StateError, match=f"{saved}.*empty") as info:
        ckpt.resume(True)
    assert "resume from an earlier checkpoint" in str(info.value)
    assert same(snapshot(ckpt), before)


@pytest.mark.parametrize("fraction", [0.01, 0.5, 0.99])
def test_a_truncated_file_is_one_error_naming_it(saved, fraction):
    data = saved.read_bytes()
    saved.write_bytes(data[: int(len(data) * fraction)])
    ckpt = fresh(saved)
    before = snapshot(ckpt)
    with pytest.raises(StateError, match=f"{saved} cannot be read.*truncated"):
        ckpt.resume(True)
    assert same(snapshot(ckpt), before)


@pytest.mark.parametrize("key", ["seeder", "model", "step"])
def test_a_file_without_a_part_is_one_error_naming_it(saved, key):
    state = torch.load(saved, weights_only=True)
    del state[key]
    torch.save(state, saved)
    ckpt = fresh(saved)
    before = snapshot(ckpt)
    with pytest.raises(StateError, match=f"{saved} has no '{key}'"):
        ckpt.resume(True)
    assert same(snapshot(ckpt), before)


def test_a_file_that_is_not_a_dict_or_a_directory_is_refused(saved, tmp_path):
    torch.save([1, 2], saved)
    with pytest.raises(StateError, match="holds a list"):
        fresh(saved).resume(True)
    with pytest.raises(ValueError, match="names a directory"):
        seeder.Checkpoint(str(tmp_path) + "/", model=torch.nn.Linear(1, 1))
    with pytest.raises(ValueError, match="names a directory"):
        seeder.Checkpoint(tmp_path, model=torch.nn.Linear(1, 1))
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        fresh(tmp_path / "missing.pt").resume(True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]  # nothing written on the way


@pytest.mark.parametrize("step", ["abc", -1, 2.5, True, None])
def test_a_bad_step_leaves_the_model_untouched(saved, step):
    rewrite(saved, step=step)
    ckpt = fresh(saved)
    before = snapshot(ckpt)
    with pytest.raises(StateError, match="'step' must be a non-negative int"):
        ckpt.resume(True)
    assert same(snapshot(ckpt), before)


def test_a_refused_seeder_part_leaves_model_optimizer_and_scheduler_untouched(saved):
    state = torch.load(saved, weights_only=True)
    state["seeder"]["derivation_version"] = 999
    torch.save(state, saved)
    ckpt = fresh(saved)
    before = snapshot(ckpt)
    with pytest.raises(StateError, match=f"{saved}: the seeder part: .*derivation"):
        ckpt.resume(True)
    assert same(
        snapshot(ckpt), before
    )  # model parameters bitwise equal, optimizer and scheduler too


def test_a_seeder_part_of_another_world_is_refused_before_the_model_loads(saved):
    state = torch.load(saved, weights_only=True)
    state["seeder"]["world_size"] = 2
    torch.save(state, saved)
    ckpt = fresh(saved)
    before = snapshot(ckpt)
    with pytest.raises(StateError, match="world of 2"):
        ckpt.resume(True)
    assert same(snapshot(ckpt), before)


def model_cases():
    return [
        ("missing", lambda m: {k: v for k, v in m.items() if k != "0.bias"}, "keys differ"),
        ("extra", lambda m: {**m, "3.weight": torch.zeros(1)}, "keys differ"),
        ("shape", lambda m: {**m, "0.weight": torch.zeros(4, 5)}, r"shape \(4, 5\)"),
        ("dtype", lambda m: {**m, "0.weight": m["0.weight"].double()}, "torch.float64"),
        ("not a tensor", lambda m: {**m, "0.weight": 3}, "not a tensor"),
        ("not a mapping", lambda m: [1, 2], "not a state dict"),
    ]


@pytest.mark.parametrize("name,change,match", model_cases(), ids=[c[0] for c in model_cases()])
def test_a_model_part_that_does_not_fit_changes_nothing(saved, name, change, match):
    state = torch.load(saved, weights_only=True)
    rewrite(saved, model=change(state["model"]))
    ckpt = fresh(saved)
    before = snapshot(ckpt)
    with pytest.raises(StateError, match=match):
        ckpt.resume(True)
    assert same(snapshot(ckpt), before)


def test_an_optimizer_part_that_does_not_fit_changes_nothing(saved):
    state = torch.load(saved, weights_only=True)
    opt = state["optimizer"]
    cases = [
        ({**opt, "param_groups": opt["param_groups"] * 2}, "2 parameter group"),
        (
            {**opt, "param_groups": [{**opt["param_groups"][0], "params": [0, 1]}]},
            "2 parameters in the checkpoint",
        ),
        (
            {**opt, "state": {**opt["state"], 0: {**opt["state"][0], "exp_avg": torch.zeros(9)}}},
            r"shape \(9,\)",
        ),
        ({**opt, "state": {99: {}}}, "parameter 99"),
        ({"state": {}}, "not an optimizer state dict"),
        (None, "not an optimizer state dict"),
    ]
    for bad, match in cases:
        rewrite(saved, optimizer=bad, model=state["model"])
        ckpt = fresh(saved)
        before = snapshot(ckpt)
        with pytest.raises(StateError, match=match):
            ckpt.resume(True)
        assert same(snapshot(ckpt), before), match
    for left_out in ("optimizer", "scheduler"):
        named = {k: v for k, v in state["objects"].items() if k != left_out}
        rewrite(saved, optimizer=opt, objects=named)
        ckpt = fresh(saved)
        before = snapshot(ckpt)
        with pytest.raises(StateError, match=f"holds no {left_out} state"):
            ckpt.resume(True)
        assert same(snapshot(ckpt), before)


PARTS = st.sampled_from(["model", "optimizer", "scheduler", "seeder", "step", "objects", "values"])
JUNK = st.one_of(
    st.none(),
    st.integers(-3, 3),
    st.text(max_size=3),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
    st.just(torch.zeros(2)),
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(part=PARTS, junk=JUNK, key=st.text(max_size=8))
def test_any_part_replaced_by_junk_loads_whole_or_changes_nothing(saved, part, junk, key):
    """Property: a checkpoint one of whose parts (or one key of a part) is junk either loads or
    raises a ``StateError`` naming the file, and a refusal leaves model, optimizer, scheduler,
    seeder and RNGs as they were."""
    good = torch.load(saved, weights_only=True)
    state = dict(good)
    if isinstance(state[part], dict) and key:
        state[part] = {**state[part], key: junk}
    else:
        state[part] = junk
    bad = saved.with_name("bad.pt")
    torch.save(state, bad)
    ckpt = fresh(bad)
    before = snapshot(ckpt)
    try:
        ckpt.resume(True)
    except StateError as exc:
        assert str(bad) in str(exc)
        assert same(snapshot(ckpt), before)


# ------------------------------------------------------------------------------ concurrent writers
WRITER = textwrap.dedent("""
    import sys, torch, seeder
    who = int(sys.argv[2])
    s = seeder.Seeder(); s.init(who); s.reseed(1, 0)
    net = torch.nn.Linear(64, 64)
    with torch.no_grad():
        net.weight.fill_(who); net.bias.fill_(who)
    ckpt = seeder.Checkpoint(sys.argv[1], model=net, seeder=s)
    print("ready", flush=True)
    sys.stdin.readline()  # both start saving together
    for step in range(30):
        ckpt.steps = step
        ckpt.save()
    print("done", flush=True)
""")


@pytest.mark.slow
def test_two_processes_saving_to_one_path_never_crash_and_leave_one_whole_file(tmp_path):
    path = tmp_path / "ckpt" / "last.pt"
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), str(who)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
        )
        for who in (1, 2)
    ]
    try:
        for w in writers:
            assert w.stdout.readline().strip() == "ready", w.stderr.read()
        for w in writers:
            w.stdin.write("go\n")
            w.stdin.flush()
        results = [communicate(w, 120) for w in writers]
    finally:
        for w in writers:
            if w.poll() is None:
                w.kill()
                w.wait()
    for w, (out, err) in zip(writers, results):
        assert w.returncode == 0 and out.strip() == "done", err[-3000:]
    state = torch.load(path, weights_only=True)
    who = int(state["model"]["bias"][0])
    assert who in (1, 2) and torch.equal(state["model"]["weight"], torch.full((64, 64), float(who)))
    assert state["seeder"]["master_seed"] == who and state["step"] == 29
    assert sorted(p.name for p in path.parent.iterdir()) == [
        "last.pt"
    ]  # every temporary file renamed or removed


def test_a_temporary_file_is_removed_only_once_its_writer_is_gone(tmp_path):
    """Killed writes (dead pid on this host; on another host an unlocked file older than a minute)
    are removed; a live writer's file, this process's and a recent one of another host stay."""
    target = tmp_path / "last.pt"
    live = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = seeder._atomic.temp_name("x").split(".")[2]
    names = {
        "dead": f".last.pt.{host}.{dead.pid}.00aa.tmp",
        "dead_pid_only": f".last.pt.{dead.pid}.tmp",
        "live": f".last.pt.{host}.{live.pid}.00bb.tmp",
        "mine": f".last.pt.{host}.{os.getpid()}.00cc.tmp",
        "other_old": ".last.pt.elsewhere.1.00dd.tmp",
        "other_new": ".last.pt.elsewhere.2.00ee.tmp",
        "other_file": f".last.pt.bak.{host}.{dead.pid}.00ff.tmp",
    }
    for name in names.values():
        (tmp_path / name).write_bytes(b"half")
    old = time.time() - STALE_AFTER_S - 5
    os.utime(tmp_path / names["other_old"], (old, old))
    try:
        write_atomic(target, b"whole")
        left = {p.name for p in tmp_path.iterdir()}
        assert left == {
            "last.pt",
            names["live"],
            names["mine"],
            names["other_new"],
            names["other_file"],
        }
        live.stdin.close()
        live.wait()
        write_atomic(target, b"again")
        assert names["live"] not in {p.name for p in tmp_path.iterdir()}
    finally:
        if live.poll() is None:
            live.kill()
            live.wait()
    assert target.read_bytes() == b"again"
    with pytest.raises(IsADirectoryError):
        write_atomic(str(tmp_path) + "/", b"x")


def test_ctrl_c_while_a_checked_file_loads_lets_every_part_load_first(saved, python_sigint):
    """A Ctrl-C that arrives while the checked parts load is delivered once all of them loaded:
    never a model of the checkpoint with the optimizer and seeder of the fresh run."""
    import signal

    class Interrupted(torch.nn.Sequential):
        def load_state_dict(self, *args, **kwargs):
            out = super().load_state_dict(*args, **kwargs)
            signal.raise_signal(signal.SIGINT)  # the user presses Ctrl-C here
            return out

    ckpt = fresh(saved)
    net = Interrupted(*ckpt.model)
    ckpt.model = net
    want = torch.load(saved, weights_only=True)
    with pytest.raises(KeyboardInterrupt):
        ckpt.resume(True)
    assert (
        same(net.state_dict(), want["model"]) and ckpt.scheduler.state_dict() == want["scheduler"]
    )
    assert same(ckpt.optimizer.state_dict()["state"], want["optimizer"]["state"])
    assert ckpt.steps == 3 and ckpt.seeder.last_reseed == (1, 0)


@pytest.mark.parametrize(
    "kw", [{"model": "net"}, {"optimizer": 3}, {"scheduler": "step"}, {"netD": [1]}]
)
def test_what_cannot_be_saved_and_loaded_is_refused_when_the_checkpoint_is_built(tmp_path, kw):
    args = {"model": torch.nn.Linear(1, 1), **kw}
    with pytest.raises(TypeError, match=f"{next(iter(kw))} must have state_dict"):
        seeder.Checkpoint(tmp_path / "last.pt", **args)


def test_the_write_without_directory_descriptors_is_atomic_too(tmp_path):
    """Where directories cannot be opened (Windows), the file is still written whole by a rename."""
    from seeder._atomic import _write_by_path

    (tmp_path / "f.bin").write_bytes(b"old")
    _write_by_path(str(tmp_path), "f.bin", b"new", 0o600)
    assert (tmp_path / "f.bin").read_bytes() == b"new" and len(list(tmp_path.iterdir())) == 1
