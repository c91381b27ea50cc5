"""seeder.Checkpoint with any number of named objects and values: a GAN (two models, two
optimizers), an EMA, a GradScaler, an RNN's hidden state and a best loss resume bit for bit; a file
that does not fit (another optimizer class, an object or value missing or extra) is refused before
anything loads; a load that fails half-way is undone."""

from __future__ import annotations

import types
import warnings

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import seeder
from seeder import StateError


class EMA:
    """An exponential moving average of a module's parameters, as the DDPM example keeps one."""

    def __init__(self, model: torch.nn.Module, decay: float = 0.9):
        self.decay, self.steps = decay, 0
        self.shadow = [p.detach().clone() for p in model.parameters()]

    def update(self, model: torch.nn.Module) -> None:
        self.steps += 1
        with torch.no_grad():
            for s, p in zip(self.shadow, model.parameters()):
                s.mul_(self.decay).add_(p, alpha=1 - self.decay)

    def state_dict(self) -> dict:
        return {"decay": self.decay, "steps": self.steps, "shadow": list(self.shadow)}

    def load_state_dict(self, state: dict) -> None:
        self.decay, self.steps = state["decay"], state["steps"]
        self.shadow = [t.clone() for t in state["shadow"]]


def gan(s: seeder.Seeder, path, opt=torch.optim.Adam):
    """A tiny GAN (netG, netD, their optimizers), an EMA of netG, a GradScaler and a best loss."""
    s.reseed(0, 0)
    netG = torch.nn.Sequential(torch.nn.Linear(2, 4), torch.nn.Dropout(0.2), torch.nn.Linear(4, 3))
    netD = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    optG, optD = opt(netG.parameters(), lr=0.05), torch.optim.Adam(netD.parameters(), lr=0.05)
    ema, scaler = EMA(netG), torch.amp.GradScaler("cpu")
    ckpt = seeder.Checkpoint(
        path,
        netG=netG,
        netD=netD,
        optG=optG,
        optD=optD,
        ema=ema,
        scaler=scaler,
        values={"best": float("inf"), "hidden": (torch.zeros(1, 3), torch.zeros(1, 3))},
        seeder=s,
    )
    return ckpt


def train(ckpt, steps, stop=None):
    """Train until ``steps`` optimizer steps; save and stop after ``stop``. Returns the losses."""
    o = ckpt.objects
    losses = []
    best, hidden = ckpt.values["best"], ckpt.values["hidden"]
    while ckpt.steps < steps:
        noise = torch.randn(4, 2)
        fake = o["netG"](noise)
        lossD = o["netD"](fake.detach()).mean() - o["netD"](torch.randn(4, 3)).mean()
        o["optD"].zero_grad()
        lossD.backward()
        o["optD"].step()
        h = hidden[0] * 0.5 + fake.mean(0, keepdim=True).detach()
        lossG = -o["netD"](fake).mean() + h.square().mean()
        o["optG"].zero_grad()
        o["scaler"].scale(lossG).backward()
        o["scaler"].step(o["optG"])
        o["scaler"].update()
        o["ema"].update(o["netG"])
        hidden = (h, hidden[1] + 1)  # carried from batch to batch, as an RNN's
        best = min(best, float(lossG))
        losses.append(float(lossG))
        ckpt.values.update(best=best, hidden=hidden)
        ckpt.step()
        if ckpt.steps == stop:
            ckpt.save()
            break
    return losses


def digest(ckpt):
    parts = {n: o.state_dict() for n, o in ckpt.objects.items()}
    parts.pop("scaler")
    return seeder.digest(parts, ckpt.values["hidden"], torch.tensor(ckpt.values["best"]))


def run(path, stop=None, resume=False, opt=torch.optim.Adam):
    s = seeder.Seeder()
    s.init(7)
    ckpt = gan(s, path, opt=opt)
    if resume:
        ckpt.resume(True)
    s.reseed(1, 0) if not resume else None
    return ckpt, train(ckpt, 6, stop)


def test_a_gan_with_ema_scaler_and_values_resumes_bit_for_bit(tmp_path):
    full, losses = run(tmp_path / "full.pt")
    path = tmp_path / "last.pt"
    _, head = run(path, stop=3)
    again, tail = run(path, resume=True)
    assert again.steps == 6 and head + tail == losses
    assert digest(again) == digest(full)
    assert isinstance(again.values["hidden"], tuple) and again.values["best"] == min(losses)
    saved = torch.load(path, weights_only=True)
    assert list(saved["objects"]) == ["netG", "netD", "optG", "optD", "ema", "scaler"]
    assert saved["objects"]["optG"] == "torch.optim.adam.Adam"


def test_the_objects_are_a_read_only_mapping_in_save_order(tmp_path):
    net, opt = torch.nn.Linear(1, 1), None
    ema = EMA(net)
    ckpt = seeder.Checkpoint(tmp_path / "c.pt", model=net, optimizer=opt, ema=ema)
    assert dict(ckpt.objects) == {"model": net, "ema": ema} and ckpt.optimizer is None
    assert isinstance(ckpt.objects, types.MappingProxyType)
    with pytest.raises(TypeError):
        ckpt.objects["x"] = net  # type: ignore[index]


def saved_with_adam(tmp_path):
    s = seeder.Seeder()
    s.init(7)
    s.reseed(1, 0)
    net = torch.nn.Linear(3, 2)
    adam = torch.optim.Adam(net.parameters(), lr=0.1)
    net(torch.ones(3)).sum().backward()
    adam.step()
    seeder.Checkpoint(tmp_path / "a.pt", model=net, optimizer=adam, seeder=s).save()
    return tmp_path / "a.pt"


def test_an_adam_checkpoint_is_refused_by_an_sgd_optimizer_naming_both(tmp_path):
    path = saved_with_adam(tmp_path)
    s = seeder.Seeder()
    s.init(7)
    net = torch.nn.Linear(3, 2)
    sgd = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    before = [p.clone() for p in net.parameters()], sgd.state_dict()
    with pytest.raises(StateError, match=r"torch\.optim\.adam\.Adam.*torch\.optim\.sgd\.SGD"):
        seeder.Checkpoint(path, model=net, optimizer=sgd, seeder=s).resume(True)
    assert all(torch.equal(a, b) for a, b in zip(before[0], net.parameters()))
    assert sgd.state_dict() == before[1] and s.last_reseed is None


def test_a_checkpoint_of_another_master_seed_says_which_seed_the_run_follows(tmp_path):
    path = saved_with_adam(tmp_path)  # master seed 7
    s = seeder.Seeder()
    s.init(3)  # the run was started with --seed 3
    net = torch.nn.Linear(3, 2)
    ckpt = seeder.Checkpoint(
        path, model=net, optimizer=torch.optim.Adam(net.parameters()), seeder=s
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ckpt.resume(True)
    said = [w for w in caught if issubclass(w.category, seeder.SeederWarning)]
    assert len(said) == 1 and s.get_master_seed() == 7
    assert f"{path} was saved by a run of master seed 7" in str(said[0].message)
    assert "follows master seed 7 from here, not 3" in str(said[0].message)
    assert said[0].filename == __file__  # at the resume() call
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ckpt.resume(True)  # the same seed: nothing to say
    assert not [w for w in caught if issubclass(w.category, seeder.SeederWarning)]


class Fails(EMA):
    """An EMA whose first load changes something, then raises."""

    failed = False

    def load_state_dict(self, state: dict) -> None:
        if self.failed:
            return super().load_state_dict(state)
        self.failed, self.steps = True, -1
        raise RuntimeError("cannot load")


def test_a_load_that_fails_half_way_puts_every_loaded_object_back(tmp_path):
    path = tmp_path / "c.pt"
    s = seeder.Seeder()
    s.init(7)
    s.reseed(1, 0)
    net = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(net.parameters(), lr=0.1)
    net(torch.ones(3)).sum().backward()
    opt.step()
    seeder.Checkpoint(path, model=net, optimizer=opt, ema=Fails(net), seeder=s).save()
    s2 = seeder.Seeder()
    s2.init(7)
    net2 = torch.nn.Linear(3, 2)
    opt2 = torch.optim.Adam(net2.parameters(), lr=0.1)
    net2(torch.ones(3)).sum().backward()
    opt2.step()
    ema = Fails(net2)
    before = seeder.digest(net2, opt2), ema.state_dict()
    ckpt = seeder.Checkpoint(path, model=net2, optimizer=opt2, ema=ema, seeder=s2)
    with pytest.raises(RuntimeError, match="cannot load"):
        ckpt.resume(True)
    assert seeder.digest(net2, opt2) == before[0] and ckpt.steps == 0
    assert ema.steps == 0 and s2.last_reseed is None  # put back, the seeder never loaded


def test_objects_and_values_missing_or_extra_are_refused_naming_them(tmp_path):
    path = tmp_path / "c.pt"
    s = seeder.Seeder()
    s.init(7)
    net, ema = torch.nn.Linear(2, 2), None
    seeder.Checkpoint(path, model=net, ema=EMA(net), values={"best": 1.0}, seeder=s).save()
    cases = [
        ({"model": net}, {"best": 1.0}, "holds the state of 'ema'"),
        ({"model": net, "ema": EMA(net), "ema2": EMA(net)}, {"best": 1.0}, "holds no ema2 state"),
        ({"model": net, "ema": EMA(net)}, {}, r"not given here \['best'\]"),
        ({"model": net, "ema": EMA(net)}, {"best": 1.0, "h": None}, r"missing \['h'\]"),
        ({"model": net, "ema": EMA(net)}, {"best": torch.zeros(1)}, "a tensor here"),
        ({"model": net, "ema": EMA(torch.nn.Linear(2, 3))}, {"best": 1.0}, r"shape \(2, 2\)"),
    ]
    for objects, values, match in cases:
        ckpt = seeder.Checkpoint(path, **objects, values=values, seeder=s)
        before = seeder.digest(net), dict(ckpt.values)
        with pytest.raises(StateError, match=match):
            ckpt.resume(True)
        assert seeder.digest(net) == before[0] and ckpt.values == before[1], match
    assert ema is None


def test_what_a_checkpoint_cannot_hold_is_refused_when_built_or_saved(tmp_path):
    import numpy as np

    net = torch.nn.Linear(1, 1)
    with pytest.raises(TypeError, match=r"values=\{'hidden': \.\.\.\}"):
        seeder.Checkpoint(tmp_path / "c.pt", model=net, hidden=torch.zeros(1))
    with pytest.raises(ValueError, match="name of the checkpoint file's own"):
        seeder.Checkpoint(tmp_path / "c.pt", model=net, objects=net)
    with pytest.raises(TypeError, match=r"values\['x'\]\[0\] is a numpy.ndarray"):
        seeder.Checkpoint(tmp_path / "c.pt", model=net, values={"x": [np.zeros(2)]})
    s = seeder.Seeder()
    s.init(1)
    ckpt = seeder.Checkpoint(tmp_path / "c.pt", model=net, values={"x": 0}, seeder=s)
    ckpt.values["x"] = object()
    with pytest.raises(TypeError, match=r"values\['x'\] is a builtins.object"):
        ckpt.save()
    assert not (tmp_path / "c.pt").exists()


def test_a_file_written_before_named_objects_still_resumes(tmp_path):
    """A file of model, optimizer, scheduler, seeder and step (no names, ``None`` for a part not
    saved) loads into the same keywords."""
    s = seeder.Seeder()
    s.init(7)
    s.reseed(1, 2)
    net = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    path = tmp_path / "old.pt"
    old = {"model": net.state_dict(), "optimizer": opt.state_dict(), "scheduler": None}
    torch.save({**old, "seeder": s.state_dict(), "step": 5}, path)
    s2 = seeder.Seeder()
    s2.init(7)
    net2 = torch.nn.Linear(2, 2)
    ckpt = seeder.Checkpoint(
        path, model=net2, optimizer=torch.optim.SGD(net2.parameters()), seeder=s2
    )
    assert ckpt.resume(True) == 2 and ckpt.steps == 5
    assert seeder.digest(net2) == seeder.digest(net)


VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=False), st.text()),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner, inner),
        st.dictionaries(st.text(max_size=3), inner, max_size=3),
    ),
    max_leaves=6,
)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=VALUES, other=VALUES)
def test_any_value_saved_reads_back_equal_or_is_refused_changing_nothing(tmp_path, value, other):
    """Property: a saved value reads back equal after a resume whose fresh value is of its kind;
    one of another kind is refused and the fresh value stays."""
    s = seeder.Seeder()
    s.init(1)
    path = tmp_path / "v.pt"
    seeder.Checkpoint(path, values={"v": value}, seeder=s).save()
    ckpt = seeder.Checkpoint(path, values={"v": other}, seeder=s)
    try:
        ckpt.resume(True)
    except StateError as exc:
        assert "values['v']" in str(exc) and ckpt.values == {"v": other}
    else:
        assert ckpt.values == {"v": value}
