"""Seeding calls after seeder.init: frameworks' routed and said once, the rest as they say.

A framework's run-level seeding is routed through seeder; a dataset's or library's local seeding
gets its own numbers, silently, with 0 or 2 workers; the user's own call seeds as it says and is
warned about once with its line. Real Lightning (seed_everything, LightningCLI), transformers
(set_seed, Trainer(args.seed)), accelerate, datasets, and the global seeding functions of random,
NumPy and torch. The drawn seed is shown.
"""

import functools
import inspect
import random
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from optional import need

import seeder
from seeder._errors import SeederWarning
from seeder._seeding.default import default_seeder

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).name


def _draws():
    return random.random(), float(np.random.random()), float(torch.rand(()))


def _caught(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [w for w in caught if issubclass(w.category, SeederWarning)]


@pytest.fixture
def run(fresh_default):
    def start(master):
        fresh_default.init(master_seed=master)
        fresh_default.reseed(0, 0)
        return fresh_default

    return start


def _line_of(fn, text):
    """The line number of ``text`` in ``fn``'s source (what a warning about that call must name)."""
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def _without_seeder(fn):
    seeder.default_seeder().reset()
    return fn()


def test_user_seeding_does_what_it_says_and_warns_once_with_its_line(run):
    def late():
        for _ in range(2):  # the same line twice: one warning per call on it
            # fmt: off
            torch.manual_seed(3); random.seed(3); np.random.seed(3)  # noqa: E702
            # fmt: on
        return _draws()

    expected = _without_seeder(late)
    line = _line_of(late, "torch.manual_seed(3)")
    for master in (11, 12):
        run(master)
        drawn = []
        caught = _caught(lambda drawn=drawn: drawn.append(late()))
        assert drawn == [expected]  # what the calls say, whatever the master seed
        assert len(caught) == 3, [str(w.message) for w in caught]
        for w, call in zip(caught, ("torch.manual_seed(3)", "random.seed(3)", "np.random.seed(3)")):
            text = str(w.message)
            assert text.startswith(f"{call} at {__file__}:{line} seeds ")
            assert (w.filename, w.lineno) == (__file__, line)
            assert f"depends on 3, not on master seed {master}" in text
            assert "remove the call" in text
    run(11)
    assert _caught(lambda: random.seed(11)) == []  # the master seed: the run depends on it alone
    assert random.random() == random.Random(11).random()


def test_allow_lets_frameworks_seed_as_they_say_without_a_warning(run, monkeypatch):
    seed_everything = need("lightning.pytorch", "seed_everything").seed_everything

    monkeypatch.setenv("SEEDER_FOREIGN_SEEDING", "allow")
    run(5)
    assert _caught(lambda: seed_everything(1234, verbose=False)) == []
    assert _caught(lambda: torch.manual_seed(3)) == []
    assert random.random() == random.Random(1234).random()


def test_lightning_seed_everything_is_routed_and_said_once(run):
    """Lightning's seed_everything leaves the run a function of the master seed; one warning
    names the call."""
    seed_everything = need("lightning.pytorch", "seed_everything").seed_everything

    def call(seed):
        # fmt: off
        seed_everything(seed, verbose=False); seed_everything(seed, verbose=False)  # noqa: E702
        # fmt: on

    line = _line_of(call, "seed_everything(seed")
    results = []
    for master, seed in ((8, 1234), (8, 4321), (9, 1234)):
        run(master)
        caught = _caught(lambda seed=seed: call(seed))
        assert len(caught) == 1, caught
        text = str(caught[0].message)
        start = f"Lightning's seed_everything({seed}), reached from {__file__}:{line},"
        assert text.startswith(start), text
        assert f"they follow master seed {master}" in text
        assert "remove the seed_everything call" in text
        results.append(_draws())
    assert results[0] == results[1] != results[2]


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 2)

    def forward(self, x, labels=None):
        return {"loss": self.lin(x).sum()}


def _cli_weights(default):
    import lightning.pytorch as pl
    from lightning.pytorch.cli import LightningCLI

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 2)

    caught = []

    def build():
        cli = LightningCLI(
            Model,
            run=False,
            args=[],
            seed_everything_default=default,
            save_config_callback=None,
            trainer_defaults={
                "logger": False,
                "enable_checkpointing": False,
                "enable_progress_bar": False,
                "enable_model_summary": False,
            },
        )
        caught.append(cli.model.lin.weight.detach().clone())

    warned = _caught(build)
    return caught[0], warned


def test_lightning_cli_seed_everything_default_is_routed(run):
    need("lightning.pytorch.cli", "LightningCLI")  # jsonargparse too
    run(3)
    a, warned = _cli_weights(1234)
    assert len(warned) == 1 and "seed_everything_default=False" in str(warned[0].message), warned
    run(3)
    b, _ = _cli_weights(99)
    run(3)
    c, none = _cli_weights(False)  # what docs/lightning.md says: no seeding by the CLI, no warning
    run(4)
    d, _ = _cli_weights(1234)
    assert none == [] and torch.equal(a, b) and not torch.equal(a, d)


def test_transformers_and_accelerate_set_seed(run):
    transformers = need("transformers", "transformers' set_seed")
    accelerate_utils = need("accelerate.utils", "accelerate's set_seed")

    results = []
    for seed in (1, 2):
        run(9)
        caught = _caught(lambda seed=seed: transformers.set_seed(seed))
        caught += _caught(lambda seed=seed: accelerate_utils.set_seed(seed))
        assert [str(w.message).split(", reached from")[0] for w in caught] == [
            f"transformers' set_seed({seed})",
            f"accelerate's set_seed({seed})",
        ], caught
        results.append(_draws())
    assert results[0] == results[1]


def test_trainer_seed_is_warned_and_seeder_trainer_is_not(run, tmp_path):
    need("transformers", "a Trainer")
    from transformers import Trainer, TrainingArguments

    from seeder.integrations.transformers import SeederTrainer

    args = TrainingArguments(
        output_dir=str(tmp_path), seed=77, report_to=[], use_cpu=True, disable_tqdm=True
    )
    run(2)
    caught = _caught(lambda: Trainer(model=_Net(), args=args))
    assert (
        len(caught) == 1
        and "SeederTrainer" in str(caught[0].message)
        and f"{HERE}:" in str(caught[0].message)
    )
    run(2)
    assert (
        _caught(
            lambda: SeederTrainer(model=_Net(), args=args, train_dataset=[{"x": torch.zeros(4)}])
        )
        == []
    )


def test_drawn_seed_is_on_stderr_with_logging_unconfigured(
    fresh_default, capfd, monkeypatch, scripts, tmp_path
):
    # a run of its own (forked from the session's server: its start is not the subject), logging
    # unconfigured, SEEDER_QUIET empty
    script = tmp_path / "drawn.py"
    script.write_text("import seeder\nseeder.init()\nprint(seeder.get_master_seed())\n")
    shown = scripts.run([script], env={"SEEDER_QUIET": ""}, start_is_subject=False)
    seed = int(shown.stdout.strip())
    assert (
        f"seeder: master seed {seed} drawn from OS entropy (replay with SEEDER_SEED={seed})"
        in shown.stderr
    )
    fresh_default.init(5)  # given: nothing to replay
    monkeypatch.setenv("SEEDER_QUIET", "1")
    fresh_default.init()  # silenced
    assert "master seed" not in capfd.readouterr().err


def test_numpy_draws_before_init_reach_verify_diagnosis(
    tool_hooks, fresh_default, tmp_path, monkeypatch
):
    from seeder.verify._diagnose import preinit_hints

    for name, draw in (("drawn", True), ("clean", False)):
        run_dir = tmp_path / name
        run_dir.mkdir()
        monkeypatch.setenv("SEEDER_TRACE", str(run_dir / "trace"))
        np.random.seed(0)  # no seeder run yet: seeds as it says
        if draw:
            np.random.permutation(10)  # a dataset split before seeder.init
        fresh_default.init(master_seed=1)
        default_seeder().reset()
    hints = preinit_hints([tmp_path / "drawn"])
    assert len(hints) == 1 and hints[0].startswith(
        "NumPy's global RNG was drawn from before seeder.init (at "
    )
    assert f"{HERE}:" in hints[0] and preinit_hints([tmp_path / "clean"]) == []


@pytest.mark.parametrize("dynamo_first", [True, False])
def test_torch_dynamo_wrapping_manual_seed_keeps_the_watch(dynamo_first):
    """torch._dynamo wraps torch.manual_seed when it is imported, before or after seeder.init:
    the user's call still seeds as it says and warns once, naming the line."""
    from helpers import run_python

    code = (
        "import warnings, torch, seeder\n"
        + ("import torch._dynamo\n" if dynamo_first else "")
        + "seeder.init(5); seeder.reseed(0, 0)\n"
        + ("" if dynamo_first else "import torch._dynamo\n")
        + "assert torch.manual_seed is not getattr(torch.manual_seed, '__wrapped__', None)\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always'); torch.manual_seed(3)\n"
        "a = torch.rand(2)\n"
        "g = torch.Generator().manual_seed(3)\n"
        "assert torch.equal(a, torch.rand(2, generator=g)), 'seeds as it says'\n"
        "print(len(caught), 'torch.manual_seed(3) at <string>:' in str(caught[0].message))\n"
    )
    out = run_python(["-c", code], env={"SEEDER_QUIET": "1"}).stdout.split()
    assert out == ["1", "True"]


class FakeData(torch.utils.data.Dataset):
    """torchvision's ``FakeData``: its ``__getitem__`` seeds torch's generator from the index.

    The sample logic of ``torchvision/datasets/fakedata.py`` (pytorch/vision; the same from
    torchvision 0.9 to 0.28): an index past the end raises ``IndexError``; then
    ``get_rng_state``, ``torch.manual_seed(index + random_offset)``, an image from
    ``torch.randn(*image_size)``, a label from ``torch.randint(0, num_classes, size=(1,),
    dtype=torch.long)[0]``, ``set_rng_state`` back, and ``(image, label.item())``. The
    conversion to a PIL image and the transforms are left out (torchvision does not install next
    to torch 2.13 CPU here); they draw nothing.
    """

    def __init__(self, size=16, image_size=(3, 4, 4), num_classes=10, random_offset=0):
        self.size, self.image_size, self.num_classes = size, image_size, num_classes
        self.random_offset = random_offset

    def __getitem__(self, index):
        if index >= len(self):
            raise IndexError(f"{self.__class__.__name__} index out of range")
        rng_state = torch.get_rng_state()
        torch.manual_seed(index + self.random_offset)
        img = torch.randn(*self.image_size)
        target = torch.randint(0, self.num_classes, size=(1,), dtype=torch.long)[0]
        torch.set_rng_state(rng_state)
        return img, target.item()

    def __len__(self):
        return self.size


def _fake_batches(loader):
    return [(images.clone(), labels.tolist()) for images, labels in loader]


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])
@pytest.mark.parametrize("kind", ["seeder", "torch"])
def test_fakedata_yields_under_seeder_what_it_yields_without(run, kind, workers):
    """A dataset seeding from its index gets its own numbers, with 0 or 2 workers; nothing is
    warned."""
    plain = _without_seeder(
        lambda: _fake_batches(torch.utils.data.DataLoader(FakeData(), batch_size=4))
    )
    assert len({label for _, labels in plain for label in labels}) > 1  # the samples differ
    run(7)
    seeder.reseed(1, 0)
    if kind == "seeder":
        loader = seeder.DataLoader(FakeData(), batch_size=4, num_workers=workers)
    else:
        loader = torch.utils.data.DataLoader(FakeData(), batch_size=4, num_workers=workers)
    got = []
    caught = _caught(lambda: got.extend(_fake_batches(loader)))
    assert [labels for _, labels in got] == [labels for _, labels in plain]
    assert all(torch.equal(a, b) for (a, _), (b, _) in zip(got, plain))
    assert caught == []  # seeding inside a fetch is the dataset's: no warning names the loop
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SeederWarning)  # indexed by the test's line: a user call
        direct = [FakeData()[i] for i in range(16)]
    assert [label for _, label in direct] == [label for _, labels in plain for label in labels]


def test_a_library_seeding_locally_gets_its_own_numbers_silently(run):
    """``datasets``' ``temp_seed`` seeds NumPy's and torch's global RNGs and puts them back: under
    seeder it draws what it draws without, says nothing, and the run's RNGs stand where they
    stood."""
    py_utils = need("datasets.utils.py_utils", "datasets' temp_seed")

    def local():
        with py_utils.temp_seed(42, set_pytorch=True):
            return float(np.random.random()), float(torch.rand(()))

    expected = _without_seeder(local)
    run(7)
    before = np.random.get_state()[1].copy(), torch.get_rng_state()
    got = []
    assert _caught(lambda: got.append(local())) == [] and got == [expected]
    assert np.array_equal(before[0], np.random.get_state()[1])
    assert torch.equal(before[1], torch.get_rng_state())


def test_torch_seed_warns_with_its_line_and_seeds_from_entropy(run):
    """``torch.seed()`` and ``torch.random.seed()`` reseed torch's generator from OS entropy: they
    seed as they say, and one warning each names the line."""

    def late():
        # fmt: off
        a = torch.seed(); b = torch.random.seed()  # noqa: E702
        # fmt: on
        return a, b

    line = _line_of(late, "torch.seed()")
    run(4)
    got = []
    caught = _caught(lambda: got.append(late()))
    assert [str(w.message).split(" at ")[0] for w in caught] == [
        "torch.seed()",
        "torch.random.seed()",
    ], caught
    for w in caught:
        assert (w.filename, w.lineno) == (__file__, line)
        assert "a seed drawn from OS entropy" in str(w.message)
    seed = got[0][1]
    assert torch.initial_seed() == seed  # seeded as it says
    assert torch.equal(torch.rand(3), torch.rand(3, generator=torch.Generator().manual_seed(seed)))


@pytest.mark.parametrize("bad", [-1, 2**32, 2**70, 3.7, "7"])
def test_transformers_set_seed_of_a_bad_seed_raises_as_without_seeder(run, bad):
    transformers = need("transformers", "transformers' set_seed")

    with pytest.raises(Exception) as plain:
        _without_seeder(lambda: transformers.set_seed(bad))
    run(9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SeederWarning)
        with pytest.raises(plain.type):
            transformers.set_seed(bad)


def test_accelerate_set_seed_of_a_bad_seed_raises_as_without_seeder(run):
    accelerate_utils = need("accelerate.utils", "accelerate's set_seed")

    with pytest.raises(Exception) as plain:
        _without_seeder(lambda: accelerate_utils.set_seed(-5))
    run(9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SeederWarning)
        with pytest.raises(plain.type):
            accelerate_utils.set_seed(-5)


def test_seeding_inside_a_fork_rng_block_is_not_warned(run):
    """A block of ``torch.random.fork_rng`` or ``seeder.fork_rng`` puts the RNGs back: the seeding
    inside is not the run's. What the block does not put back still warns."""
    run(3)
    before = torch.get_rng_state()

    def forked():
        with torch.random.fork_rng():
            torch.manual_seed(5)
            inside = torch.rand(2)
        with seeder.fork_rng():
            torch.manual_seed(6)
            random.seed(6)
            np.random.seed(6)
        return inside

    got = []
    assert _caught(lambda: got.append(forked())) == []
    assert torch.equal(got[0], torch.rand(2, generator=torch.Generator().manual_seed(5)))
    assert torch.equal(before, torch.get_rng_state())

    def not_put_back():
        with torch.random.fork_rng():
            random.seed(7)  # torch's fork_rng puts back torch's generators only
        with torch.random.fork_rng(enabled=False):
            torch.manual_seed(7)

    caught = _caught(not_put_back)
    assert [str(w.message).split(" at ")[0] for w in caught] == [
        "random.seed(7)",
        "torch.manual_seed(7)",
    ]


@pytest.mark.parametrize("value", ["yes", "1", " allow", "warn"])
def test_a_bad_foreign_seeding_setting_is_an_error_at_init(fresh_default, monkeypatch, value):
    monkeypatch.setenv("SEEDER_FOREIGN_SEEDING", value)
    with pytest.raises(ValueError, match=r"SEEDER_FOREIGN_SEEDING=.*'allow'.*unset it"):
        fresh_default.init(master_seed=1)
    assert not default_seeder().initialized  # nothing changed
    monkeypatch.setenv("SEEDER_FOREIGN_SEEDING", "ALLOW")
    fresh_default.init(master_seed=1)
    assert default_seeder().initialized


def test_routed_calls_are_bounded(run):
    transformers = need("transformers", "transformers' set_seed")
    from seeder._seeding.foreign import ROUTED_KEPT, routed_calls

    run(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SeederWarning)
        for seed in range(ROUTED_KEPT // 4 + 5):  # four routed calls each
            transformers.set_seed(seed)
    calls = routed_calls()
    assert len(calls) == ROUTED_KEPT
    assert calls[-1]["call"].startswith(f"transformers' set_seed({ROUTED_KEPT // 4 + 4})")


class _SeedingSampler(torch.utils.data.Sampler):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __iter__(self):
        torch.manual_seed(21)  # the sampler's own seeding: in the main process, the loop's RNG
        yield from range(self.n)


def _seeding_collate(batch):
    random.seed(22)
    return torch.utils.data.default_collate(batch)


def test_a_sampler_or_collate_fn_seeding_in_the_main_process_warns(run):
    """Only the dataset's fetch is local: a sampler's or a collate_fn's seeding in the main process
    re-seeds the training loop's RNG, so it seeds as it says and warns with its line."""
    data = torch.arange(8.0)
    run(3)
    drawn = []

    def loop(loader):
        for _ in loader:
            drawn.append((float(torch.rand(())), random.random()))

    caught = _caught(
        lambda: loop(torch.utils.data.DataLoader(data, sampler=_SeedingSampler(8), batch_size=8))
    )
    assert [str(w.message).split(" at ")[0] for w in caught] == ["torch.manual_seed(21)"]
    assert caught[0].lineno == _line_of(_SeedingSampler.__iter__, "torch.manual_seed(21)")
    assert drawn[-1][0] == float(torch.rand((), generator=torch.Generator().manual_seed(21)))

    caught = _caught(
        lambda: loop(torch.utils.data.DataLoader(data, collate_fn=_seeding_collate, batch_size=8))
    )
    assert [str(w.message).split(" at ")[0] for w in caught] == ["random.seed(22)"]
    assert drawn[-1][1] == random.Random(22).random()


def test_seeder_loaders_put_the_loop_rngs_back_after_a_collate_fn_seeding(run):
    """seeder's loaders put the training loop's RNGs back after each fetch, collate_fn included:
    its seeding does not reach the loop, and is not warned about."""
    data = torch.arange(8.0)
    runs = []
    for collate in (_seeding_collate, torch.utils.data.default_collate):
        run(3)
        seeder.reseed(1, 0)
        loader = seeder.DataLoader(data, collate_fn=collate, batch_size=4)
        drawn = []

        def loop(loader=loader, drawn=drawn):
            for _ in loader:
                drawn.append(random.random())

        runs.append((_caught(loop), drawn))
    assert runs[0] == ([], runs[1][1])


def test_a_name_bound_before_init_is_warned_about_at_init_with_its_line(tmp_path):
    """``from torch import manual_seed`` before ``init`` keeps torch's own function, whose calls
    seeder cannot see: ``init`` says so once per name, naming the file and line."""
    from helpers import run_python

    script = tmp_path / "train.py"
    script.write_text(
        "import warnings\n"
        "from random import seed\n"
        "from torch import manual_seed as ms\n"
        "import seeder\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    seeder.init(3); seeder.init(4)\n"
        "    import random; random.seed(2)  # through the module: watched as always\n"
        "for w in caught:\n"
        "    print(w.lineno, str(w.message).split(' before')[0])\n"
    )
    out = run_python([str(script)], env={"SEEDER_QUIET": "1"}).stdout.splitlines()
    assert out[:2] == [
        f"2 {script}:2 binds 'seed' to random.seed",
        f"3 {script}:3 binds 'ms' to torch.manual_seed",
    ], out
    assert len(out) == 3 and out[2].startswith(f"8 random.seed(2) at {script}:8"), out


class _GeneratedStream(torch.utils.data.IterableDataset):
    """An ``IterableDataset`` whose ``__iter__`` returns a generator of a plain function."""

    def __iter__(self):
        def items():
            for i in range(4):
                torch.manual_seed(i)  # seeds from the item's index: the dataset's own fetch
                yield torch.rand(())

        return items()


def test_an_iterable_dataset_s_generator_is_a_fetch_and_a_partial_collate_fn_is_not(run):
    plain = _without_seeder(
        lambda: [b.tolist() for b in torch.utils.data.DataLoader(_GeneratedStream(), batch_size=2)]
    )
    run(3)
    got = []
    caught = _caught(
        lambda: got.extend(
            b.tolist() for b in torch.utils.data.DataLoader(_GeneratedStream(), batch_size=2)
        )
    )
    assert caught == [] and got == plain
    collate = functools.partial(_seeding_collate)
    caught = _caught(
        lambda: list(torch.utils.data.DataLoader(torch.arange(4.0), collate_fn=collate))
    )
    assert [str(w.message).split(" at ")[0] for w in caught] == ["random.seed(22)"]
