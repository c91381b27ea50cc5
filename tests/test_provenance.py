"""What did step N see: ``indices_at`` against iteration, ``skip`` across resumes and world sizes,
the dataset's identity in the state, and ``seeder data show`` on real checkpoint files."""

from __future__ import annotations

import json
import random
import warnings

import numpy as np
import pytest
import torch
from helpers import REPO_ROOT, run_python
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import seeder
from seeder import StateError
from seeder import _cli as cli

PROPS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class Augmented(torch.utils.data.Dataset):
    """Each item: its index and one draw from each global RNG (its augmentation)."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor(
            [float(i), random.random(), float(np.random.rand()), float(torch.rand(()))],
            dtype=torch.float64,
        )


class Other(Augmented):
    """Another dataset class of the same length."""


def make_seeder(master: int = 5, epoch: int = 0) -> seeder.Seeder:
    s = seeder.Seeder()
    s.init(master)
    s.reseed(1, epoch)
    return s


def as_lists(batches):
    return [b.tolist() for b in batches]


# --------------------------------------------------------------------------- indices_at
@pytest.mark.filterwarnings("ignore:seeder.reseed.*was already called")
@PROPS
@given(
    n=st.one_of(st.integers(1, 300), st.integers(4097, 6000)),
    batch=st.integers(1, 17),
    world=st.integers(1, 4),
    data=st.data(),
    shuffle=st.booleans(),
    drop_last=st.booleans(),
    cut=st.booleans(),
    epoch=st.integers(0, 2**32 - 2),
    mode=st.sampled_from(["feistel", "torch"]),
)
def test_indices_at_equals_iteration_any_epoch_rank_and_layout(
    n, batch, world, data, shuffle, drop_last, cut, epoch, mode
):
    rank = data.draw(st.integers(0, world - 1))
    if n > 4096:  # a permutation of Feistel size, in few batches
        batch *= 97
    s = make_seeder(master=n * 7 + batch)
    sampler = seeder.DistributedSampler(
        range(n), world, rank, shuffle=shuffle, drop_last=cut, mode=mode, seeder=s, join=False
    )
    loader = seeder.DataLoader(
        torch.arange(n), batch_size=batch, sampler=sampler, drop_last=drop_last, seeder=s
    )
    # a future epoch, answered before the run gets there
    ahead = [loader.indices_at(epoch, b) for b in range(len(loader))]
    s.reseed(1, epoch)
    assert as_lists(loader) == ahead
    s.reseed(1, epoch + 1)  # and a past one
    assert [loader.indices_at(epoch, b) for b in range(len(loader))] == ahead
    if len(loader):
        b = data.draw(st.integers(0, len(loader) - 1))
        parts = loader.global_indices_at(epoch, b)
        assert len(parts) == world and parts[rank] == ahead[b]
        others = seeder.DistributedSampler(
            range(n),
            world,
            (rank + 1) % world,
            shuffle=shuffle,
            drop_last=cut,
            mode=mode,
            seeder=s,
            join=False,
        )
        other = seeder.DataLoader(
            torch.arange(n), batch_size=batch, sampler=others, drop_last=drop_last, seeder=s
        )
        s.reseed(1, epoch)
        assert as_lists(other)[b] == parts[(rank + 1) % world]


@PROPS
@given(
    n=st.integers(1, 200),
    start=st.integers(0, 200),
    stop=st.integers(0, 200),
    world=st.integers(1, 3),
    epoch=st.integers(0, 50),
)
def test_sampler_indices_at_equals_its_iteration(n, start, stop, world, epoch):
    s = make_seeder(epoch=epoch)
    sampler = seeder.DistributedSampler(range(n), world, world - 1, seeder=s, join=False)
    start, stop = sorted((min(start, sampler.num_samples), min(stop, sampler.num_samples)))
    assert sampler.indices_at(epoch, start, stop) == list(sampler)[start:stop]


def test_indices_at_refuses_positions_outside_the_epoch():
    s = make_seeder()
    loader = seeder.DataLoader(torch.arange(10), batch_size=4, shuffle=True, seeder=s)
    with pytest.raises(ValueError, match=r"batch must be an int in \[0, 3\)"):
        loader.indices_at(0, 3)
    with pytest.raises(ValueError, match="rank must be an int"):
        loader.indices_at(0, 0, rank=1)
    with pytest.raises(ValueError, match="start and stop"):
        loader.sampler.indices_at(0, 5, 11)


def test_indices_at_never_touches_the_dataset():
    class Untouchable(torch.utils.data.Dataset):
        def __len__(self):
            return 100

        def __getitem__(self, i):
            raise AssertionError("fetched")

    s = make_seeder()
    loader = seeder.DataLoader(Untouchable(), batch_size=8, shuffle=True, seeder=s)
    assert len(loader.indices_at(10**6, 12)) == 4


def test_a_stream_loader_refuses_indices_and_skips_saying_why():
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(8))

    s = make_seeder()
    loader = seeder.IterableDataLoader(Stream(), batch_size=2, seeder=s)
    for call in (
        lambda: loader.indices_at(0, 1),
        lambda: loader.global_indices_at(0, 1),
        lambda: loader.skip(0, 1),
    ):
        with pytest.raises(NotImplementedError, match="known only by reading the stream"):
            call()


@pytest.mark.slow
@pytest.mark.parametrize("workers", [2, 3])
def test_indices_at_equals_iteration_with_workers(workers):
    s = make_seeder(epoch=4)
    loader = seeder.DataLoader(
        torch.arange(101), batch_size=6, shuffle=True, num_workers=workers, seeder=s
    )
    assert as_lists(loader) == [loader.indices_at(4, b) for b in range(len(loader))]


@pytest.mark.filterwarnings("ignore:seeder.reseed.*was already called")
@PROPS
@given(
    n=st.integers(1, 200),
    batch=st.integers(1, 8),
    world=st.integers(1, 4),
    shuffle=st.booleans(),
    drop_last=st.booleans(),
    epoch=st.integers(0, 1000),
)
def test_elastic_indices_at_equals_iteration_and_global_batches(
    n, batch, world, shuffle, drop_last, epoch
):
    s = make_seeder()
    loaders = [
        seeder.ElasticDataLoader(
            torch.arange(n),
            batch,
            shuffle=shuffle,
            drop_last=drop_last,
            num_replicas=world,
            rank=r,
            seeder=s,
        )
        for r in range(world)
    ]
    ahead = [[ld.indices_at(epoch, b) for b in range(len(ld))] for ld in loaders]
    # the last rank has a part of every global step
    steps = [loaders[0].global_indices_at(epoch, b) for b in range(len(loaders[-1]))]
    s.reseed(1, epoch)
    got = [as_lists(ld) for ld in loaders]
    assert got == ahead
    for r in range(world):
        assert [step[r] for step in steps if step[r]] == got[r]


def test_elastic_indices_at_after_a_global_batch_change_follows_the_new_steps():
    s = make_seeder()
    one = seeder.ElasticDataLoader(torch.arange(30), 4, shuffle=True, seeder=s)
    it = iter(one)
    next(it), next(it)
    two = seeder.ElasticDataLoader(
        torch.arange(30), 3, shuffle=True, seeder=s, allow_global_batch_change=True
    )
    two.load_state_dict(one.state_dict())
    ahead = [two.indices_at(0, b) for b in range(two.batches_done, len(two))]
    assert as_lists(two) == ahead


# --------------------------------------------------------------------------- skip
def reference(n, batch, epoch=0, master=5, **kw):
    s = make_seeder(master, epoch)
    return as_lists(seeder.DataLoader(Augmented(n), batch_size=batch, shuffle=True, seeder=s, **kw))


@PROPS
@given(
    n=st.integers(2, 60),
    batch=st.integers(1, 5),
    data=st.data(),
)
def test_skipped_batches_never_come_out_and_the_rest_is_bitwise_the_same_across_resumes(
    n, batch, data
):
    ref = reference(n, batch)
    count = len(ref)
    skipped: set[int] = set()
    s = make_seeder()
    loader = seeder.DataLoader(Augmented(n), batch_size=batch, shuffle=True, seeder=s)
    got = []
    for _ in range(3):  # skips added at each resume, a resume after each part
        done = loader.batches_done
        more = data.draw(st.sets(st.integers(done, count - 1)) if done < count else st.just(set()))
        loader.skip(0, sorted(more))
        skipped |= more
        assert loader.skipped(0) == sorted(skipped)
        left = count - done - len([b for b in skipped if b >= done])
        it = iter(loader)
        assert len(it) == left
        for _ in range(data.draw(st.integers(0, left))):
            got.append(next(it).tolist())
        state = loader.state_dict()
        loader = seeder.DataLoader(Augmented(n), batch_size=batch, shuffle=True, seeder=s)
        loader.load_state_dict(state)
        assert loader.skipped(0) == sorted(skipped)
    got += as_lists(loader)
    assert got == [ref[b] for b in range(count) if b not in skipped]


def test_skip_of_a_later_epoch_survives_the_resume_and_applies_there():
    s = make_seeder()
    loader = seeder.DataLoader(Augmented(12), batch_size=2, shuffle=True, seeder=s)
    loader.skip(2, [0, 5])
    it = iter(loader)
    next(it)
    again = seeder.DataLoader(Augmented(12), batch_size=2, shuffle=True, seeder=s)
    again.load_state_dict(loader.state_dict())
    s.reseed(1, 2)
    assert as_lists(again) == [
        b for i, b in enumerate(reference(12, 2, epoch=2)) if i not in (0, 5)
    ]


def test_a_batch_skipped_while_an_iterator_runs_is_dropped_by_it():
    s = make_seeder()
    ref = reference(20, 2)
    loader = seeder.DataLoader(Augmented(20), batch_size=2, shuffle=True, seeder=s)
    it = iter(loader)
    first = next(it).tolist()
    loader.skip(0, [1, 4])
    assert [first] + as_lists(it) == [b for i, b in enumerate(ref) if i not in (1, 4)]


@pytest.mark.slow
def test_skip_with_workers_keeps_every_other_batch_and_drops_a_prefetched_one():
    s = make_seeder()
    ref = reference(40, 3)
    loader = seeder.DataLoader(Augmented(40), batch_size=3, shuffle=True, num_workers=2, seeder=s)
    loader.skip(0, [2, 7])
    it = iter(loader)
    head = [next(it).tolist() for _ in range(2)]
    loader.skip(0, 3)  # its workers have fetched it already
    assert head + as_lists(it) == [b for i, b in enumerate(ref) if i not in (2, 3, 7)]


def test_skip_refuses_bad_batches_and_records_nothing():
    s = make_seeder()
    loader = seeder.DataLoader(torch.arange(10), batch_size=2, seeder=s)
    it = iter(loader)
    next(it), next(it)
    before = loader.state_dict()
    with pytest.raises(ValueError, match="batch 5 is not a batch of epoch 0, which has 5"):
        loader.skip(0, [3, 5])
    with pytest.raises(ValueError, match="batch 1 of epoch 0 was already handed out"):
        loader.skip(0, [1, 3])
    with pytest.raises(TypeError, match="batches must be"):
        loader.skip(0, "3")
    with pytest.raises(TypeError, match="batches must be ints"):
        loader.skip(0, [3.0])
    assert loader.state_dict() == before and loader.skipped(0) == []


def test_skipping_a_skipped_batch_again_changes_nothing_even_behind_the_position():
    s = make_seeder()
    loader = seeder.DataLoader(torch.arange(10), batch_size=2, seeder=s)
    loader.skip(0, 1)
    it = iter(loader)
    next(it), next(it)  # batches 0 and 2
    loader.skip(0, [1, 3])  # the recipe re-applies every spike's skip after a rollback
    assert loader.skipped(0) == [1, 3] and as_lists(it) == [[8, 9]]


def test_a_corrupt_skip_list_is_refused_before_anything_changes():
    s = make_seeder()
    loader = seeder.DataLoader(torch.arange(10), batch_size=2, seeder=s)
    state = loader.state_dict()
    for bad in ([[0, 3, 2]], [[0, 1, 9]], [[0, 3, 4], [0, 1, 2]], [[0, 1, True]], "x"):
        with pytest.raises(StateError, match="skips"):
            loader.load_state_dict({**state, "skips": bad})
    assert loader.state_dict() == state
    loader.load_state_dict({**state, "skips": [[0, 1, 3], [4, 0, 2]]})
    assert loader.skipped(0) == [1, 2] and loader.skipped(4) == [0, 1]


def elastic(s, world, batch, n=23, **kw):
    return [
        seeder.ElasticDataLoader(
            Augmented(n), batch, shuffle=True, num_replicas=world, rank=r, seeder=s, **kw
        )
        for r in range(world)
    ]


def rows(batches):
    return {int(row[0]): row.tolist() for b in batches for row in b}


@PROPS
@given(
    before=st.sampled_from([1, 2, 4]),
    after=st.sampled_from([1, 2, 4]),
    data=st.data(),
)
def test_elastic_skips_survive_world_size_changes(before, after, data):
    s = make_seeder()
    ref_loaders = elastic(s, 1, 4)
    ref = [b for b in ref_loaders[0]]  # global batches of 4
    steps = len(ref)
    a = elastic(s, before, 4 // before)
    k = data.draw(st.integers(0, steps - 2))  # a rank may sit out the last step: stop before
    skip = data.draw(st.sets(st.integers(k, steps - 1)) if k < steps else st.just(set()))
    trained = {}
    for loader in a:
        loader.skip(0, sorted(skip))
        it = iter(loader)
        taken = []
        while loader.batches_done < k:
            try:
                taken.append(next(it))
            except StopIteration:
                break
        trained.update(rows(taken))
    states = [loader.state_dict() for loader in a]
    assert all(st_ == states[0] for st_ in states)
    b = elastic(s, after, 4 // after)
    for loader in b:
        loader.load_state_dict(states[0])
        assert sorted(loader.skipped(0)) == sorted(skip)
        trained.update(rows(loader))
    want = rows([step for i, step in enumerate(ref) if i not in skip])
    assert trained == want


def test_elastic_skips_after_a_global_batch_change_cover_whole_new_steps():
    s = make_seeder()
    one = elastic(s, 1, 4, n=30)[0]
    one.skip(0, [3])  # positions 12..16
    two = elastic(s, 1, 3, n=30, allow_global_batch_change=True)[0]
    with pytest.warns(seeder.SeederWarning, match="2 in epoch 0 sample.s. more are skipped"):
        two.load_state_dict(one.state_dict())
    seen = rows(two)
    assert not set(seen) & set(one.indices_at(0, 3))
    assert two.skipped(0) == [4, 5]  # steps 12..15 and 15..18 overlap the skipped positions


# --------------------------------------------------------------------------- identity
class Named(Augmented):
    def __init__(self, n, fingerprint):
        super().__init__(n)
        self.seeder_fingerprint = fingerprint


def test_a_state_of_another_dataset_class_is_refused_naming_both():
    s = make_seeder()
    saved = seeder.DataLoader(Augmented(12), batch_size=3, shuffle=True, seeder=s)
    it = iter(saved)
    next(it)
    state = saved.state_dict()
    other = seeder.DataLoader(Other(12), batch_size=3, shuffle=True, seeder=s)
    before = other.state_dict()
    with pytest.raises(StateError, match=r"test_provenance:Augmented of length 12.*Other of len"):
        other.load_state_dict(state)
    assert other.state_dict() == before
    meant = seeder.DataLoader(
        Other(12), batch_size=3, shuffle=True, seeder=s, allow_dataset_change=True
    )
    meant.load_state_dict(state)
    assert meant.batches_done == 1


def test_a_class_of_a_script_run_as_main_is_the_same_class():
    s = make_seeder()
    state = seeder.DataLoader(Augmented(6), batch_size=2, seeder=s).state_dict()
    state["dataset"]["class"] = "__main__:Augmented"  # the script that saved it ran as __main__
    seeder.DataLoader(Augmented(6), batch_size=2, seeder=s).load_state_dict(state)


def test_another_fingerprint_is_refused_and_the_same_class_without_one_accepted():
    s = make_seeder()
    v1 = seeder.DataLoader(Named(8, "v1"), batch_size=2, seeder=s).state_dict()
    with pytest.raises(StateError, match="fingerprint 'v1'.*fingerprint 'v2'"):
        seeder.DataLoader(Named(8, "v2"), batch_size=2, seeder=s).load_state_dict(v1)
    seeder.DataLoader(Named(8, "v1"), batch_size=2, seeder=s).load_state_dict(v1)
    plain = seeder.DataLoader(Augmented(8), batch_size=2, seeder=s).state_dict()
    seeder.DataLoader(Augmented(8), batch_size=2, seeder=s).load_state_dict(plain)
    assert plain["dataset"]["fingerprint"] is None


def test_the_seeder_state_refuses_another_dataset_before_anything_changes():
    s = make_seeder()
    loader = seeder.DataLoader(Named(8, "a"), batch_size=2, seeder=s)
    next(iter(loader))
    state = s.state_dict()
    t = make_seeder(master=9)
    other = seeder.DataLoader(Named(8, "b"), batch_size=2, seeder=t)
    before = t.state_dict()
    with pytest.raises(StateError, match="fingerprint 'a'"):
        t.load_state_dict(state)
    assert t.get_master_seed() == 9 and other.batches_done == 0
    assert str(t.state_dict()) == str(before)


def test_a_repr_fingerprint_is_a_hash_that_warns_and_a_default_repr_none():
    class Files(torch.utils.data.Dataset):
        def __init__(self, root):
            self.root = root

        def __len__(self):
            return 4

        def __getitem__(self, i):
            return i

        def __repr__(self):
            return f"Files(root={self.root!r})"

    s = make_seeder()
    state = seeder.DataLoader(Files("/secret/a"), seeder=s).state_dict()
    assert "/secret" not in str(state) and state["dataset"]["fingerprint"].startswith("repr:")
    with pytest.warns(seeder.SeederWarning, match="repr differs"):  # paths differ by machine
        seeder.DataLoader(Files("/secret/b"), seeder=s).load_state_dict(state)
    with pytest.raises(StateError, match="Files of length 4"):  # explicit fingerprints refuse
        seeder.DataLoader(Named(4, "v1"), seeder=s).load_state_dict(state)
    assert seeder.DataLoader(Augmented(4), seeder=s).dataset_identity()["fingerprint"] is None


def test_a_bad_fingerprint_type_is_named():
    s = make_seeder()
    with pytest.raises(TypeError, match="seeder_fingerprint must be a str, int or bytes"):
        seeder.DataLoader(Named(4, 1.5), seeder=s).state_dict()


def test_hugging_face_datasets_are_told_apart_by_their_fingerprint():
    datasets = pytest.importorskip("datasets")
    s = make_seeder()
    a = datasets.Dataset.from_dict({"x": [1, 2, 3]}).with_format("torch")
    b = datasets.Dataset.from_dict({"x": [1, 2, 4]}).with_format("torch")
    state = seeder.DataLoader(a, seeder=s).state_dict()
    assert state["dataset"]["fingerprint"] == f"datasets:{a._fingerprint}"
    with pytest.raises(StateError, match="datasets.arrow_dataset:Dataset of length 3"):
        seeder.DataLoader(b, seeder=s).load_state_dict(state)


def test_states_of_the_previous_versions_still_load():
    s = make_seeder()
    loader = seeder.DataLoader(Augmented(10), batch_size=2, shuffle=True, seeder=s)
    next(iter(loader))
    new = loader.state_dict()
    old = {k: v for k, v in new.items() if k not in ("skips", "dataset", "seed")}
    again = seeder.DataLoader(Other(10), batch_size=2, shuffle=True, seeder=s)
    with pytest.raises(StateError, match="Augmented"):
        again.load_state_dict(new)
    again.load_state_dict({**old, "version": 1})  # no identity recorded: as before
    assert again.batches_done == 1
    e = elastic(s, 1, 2)[0]
    st_e = {k: v for k, v in e.state_dict().items() if k not in ("skips", "dataset", "seed")}
    elastic(s, 2, 1)[1].load_state_dict({**st_e, "version": 2})


# --------------------------------------------------------------------------- seeder data show
def show(argv, capsys):
    code = cli.main(["data", "show", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def checkpoint(tmp_path, s, loader_args=None, skip=(), steps=1, **kw):
    loader = seeder.DataLoader(
        Augmented(50), batch_size=4, shuffle=True, seeder=s, **(loader_args or {})
    )
    loader.skip(0, list(skip))
    it = iter(loader)
    for _ in range(steps):
        next(it)
    path = tmp_path / "last.pt"
    seeder.Checkpoint(path, model=torch.nn.Linear(2, 1), seeder=s, **kw).save()
    return loader, path


def test_data_show_reads_a_checkpoint_file_for_any_epoch_and_marks_skips(tmp_path, capsys):
    s = make_seeder()
    loader, path = checkpoint(tmp_path, s, skip=[4])
    for epoch, batch in ((0, 4), (0, 12), (7, 2)):
        code, out, _ = show(
            [str(path), "--epoch", str(epoch), "--batch", str(batch), "--json"], capsys
        )
        assert code == 0
        row = json.loads(out.splitlines()[-1])
        assert row["epoch"] == epoch and row["batch"] == batch
        assert row["indices"] == loader.indices_at(epoch, batch)
        assert row["skipped"] is ((epoch, batch) == (0, 4))
    code, out, _ = show([str(path), "--epoch", "0", "--batch", "3-5"], capsys)
    lines = out.splitlines()
    assert code == 0 and len(lines) == 3 and "skipped" in lines[1] and "skipped" not in lines[0]
    code, out, _ = show([str(path), "--epoch", "0", "--batch", "3-5", "--json"], capsys)
    row = json.loads(out.splitlines()[-1])
    assert row["batch"] == [3, 5] and row["skipped"] == [4]
    assert row["indices"] == [loader.indices_at(0, b) for b in (3, 4, 5)]


def test_data_show_matches_what_the_loader_yields(tmp_path, capsys):
    s = make_seeder()
    loader, path = checkpoint(tmp_path, s)
    s.reseed(1, 3)
    yielded = [b[:, 0].long().tolist() for b in loader]
    code, out, _ = show(
        [str(path), "--epoch", "3", "--batch", f"0-{len(yielded) - 1}", "--json"], capsys
    )
    assert code == 0 and json.loads(out.splitlines()[-1])["indices"] == yielded


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    n=st.integers(1, 120),
    batch=st.integers(1, 9),
    world=st.integers(1, 3),
    data=st.data(),
    mode=st.sampled_from(["feistel", "torch"]),
    seed=st.one_of(st.none(), st.integers(0, 2**63 - 1)),
    cut=st.booleans(),
    drop_last=st.booleans(),
)
def test_data_show_equals_indices_at_for_any_layout(
    tmp_path, capsys, n, batch, world, data, mode, seed, cut, drop_last
):
    rank = data.draw(st.integers(0, world - 1))
    s = make_seeder(master=n + batch)
    sampler = seeder.DistributedSampler(
        range(n), world, rank, seed=seed, drop_last=cut, mode=mode, seeder=s, join=False
    )
    loader = seeder.DataLoader(
        torch.arange(n), batch_size=batch, sampler=sampler, drop_last=drop_last, seeder=s
    )
    if not len(loader):
        return
    epoch = data.draw(st.integers(0, 100))
    b = data.draw(st.integers(0, len(loader) - 1))
    path = tmp_path / "state.pt"
    torch.save({"seeder": s.state_dict()}, path)
    argv = [str(path), "--epoch", str(epoch), "--batch", str(b), "--rank", str(rank), "--json"]
    code, out, err = show(argv, capsys)
    assert code == 0, err
    assert json.loads(out.splitlines()[-1])["indices"] == loader.indices_at(epoch, b)


def test_data_show_reads_a_loader_state_under_any_key_and_a_gathered_state(tmp_path, capsys):
    s = make_seeder()
    loader = seeder.DataLoader(Augmented(30), batch_size=4, shuffle=True, seeder=s)
    path = tmp_path / "lightning_like.pt"
    torch.save({"loops": {"fit": [{"loader": loader.state_dict()}]}}, path)
    code, out, _ = show([str(path), "--epoch", "0", "--batch", "2", "--json"], capsys)
    assert code == 0 and json.loads(out.splitlines()[-1])["indices"] == loader.indices_at(0, 2)
    code, _, err = show([str(path), "--epoch", "1", "--batch", "2"], capsys)
    assert code == 2 and "holds the shuffle key of epoch 0 only" in err
    assert len(err.strip().splitlines()) == 1
    both = tmp_path / "framework_like.pt"  # the loop's copy and the seeder's: one loader
    torch.save({"loops": {"loader": loader.state_dict()}, "callbacks": s.state_dict()}, both)
    code, out, _ = show([str(both), "--epoch", "4", "--batch", "0", "--json"], capsys)
    assert code == 0 and json.loads(out.splitlines()[-1])["indices"] == loader.indices_at(4, 0)
    gathered = tmp_path / "gathered.pt"
    torch.save({"state": s.gather_state_dict()}, gathered)
    code, out, _ = show([str(gathered), "--epoch", "5", "--batch", "1", "--json"], capsys)
    assert code == 0 and json.loads(out.splitlines()[-1])["indices"] == loader.indices_at(5, 1)


def test_data_show_on_an_elastic_checkpoint_gives_the_global_batch_or_a_rank_part(tmp_path, capsys):
    s = make_seeder()
    loaders = [  # two ranks' runs: the file holds rank 0's
        seeder.ElasticDataLoader(Augmented(23), 3, shuffle=True, num_replicas=2, rank=r, seeder=t)
        for r, t in ((0, s), (1, make_seeder()))
    ]
    loaders[0].skip(1, [2])
    path = tmp_path / "elastic.pt"
    torch.save({"seeder": s.state_dict()}, path)
    code, out, _ = show([str(path), "--epoch", "1", "--batch", "2", "--json"], capsys)
    row = json.loads(out.splitlines()[-1])
    assert code == 0 and row["skipped"] is True
    assert row["indices"] == sum(loaders[0].global_indices_at(1, 2), [])
    code, out, _ = show(
        [str(path), "--epoch", "1", "--batch", "0", "--rank", "1", "--json"], capsys
    )
    assert json.loads(out.splitlines()[-1])["indices"] == loaders[1].indices_at(1, 0)


def test_data_show_bad_files_keys_and_positions_exit_2_with_one_line(tmp_path, capsys):
    s = make_seeder()
    _, path = checkpoint(tmp_path, s)
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint")
    pickled = tmp_path / "pickled.pt"
    torch.save({"dataset": Augmented(3)}, pickled)  # a class: weights_only refuses it
    nothing = tmp_path / "nothing.pt"
    torch.save({"model": {"w": torch.ones(1)}}, nothing)
    two = tmp_path / "two.pt"
    other = seeder.DataLoader(Augmented(8), seeder=s)
    torch.save({"seeder": s.state_dict()}, two)
    cases = [
        ([str(tmp_path / "missing.pt"), "--epoch", "0", "--batch", "1"], "no such file"),
        ([str(tmp_path), "--epoch", "0", "--batch", "1"], "directory"),
        ([str(garbage), "--epoch", "0", "--batch", "1"], "not"),
        ([str(pickled), "--epoch", "0", "--batch", "1"], "weights_only=True"),
        ([str(nothing), "--epoch", "0", "--batch", "1"], "holds no seeder.DataLoader"),
        ([str(two), "--epoch", "0", "--batch", "1"], "several loader states"),
        ([str(two), "--epoch", "0", "--batch", "1", "--loader", "loader.9"], "named 'loader.9'"),
        ([str(path), "--epoch", "0", "--batch", "13"], r"batch must be an int in [0, 13)"),
        ([str(path), "--epoch", "0", "--batch", "5-2"], "FIRST <= LAST"),
        ([str(path), "--epoch", "0", "--batch", "1", "--rank", "1"], "--rank must be in [0, 1)"),
        ([str(path), "--epoch", "-1", "--batch", "1"], "--epoch must be"),
    ]
    for argv, message in cases:
        code, out, err = show(argv, capsys)
        assert code == 2 and message in err, (argv, err)
        assert len(err.strip().splitlines()) == 1 and err.startswith("seeder data show: error:")
    del other
    code, out, _ = show([str(two), "--epoch", "0", "--batch", "1", "--loader", "loader.1"], capsys)
    assert code == 0


def test_data_show_refuses_a_corrupt_loader_state(tmp_path, capsys):
    s = make_seeder()
    loader = seeder.DataLoader(Augmented(8), batch_size=2, seeder=s)
    path = tmp_path / "bad.pt"
    torch.save({"loader": {**loader.state_dict(), "batch_size": "2"}}, path)
    code, _, err = show([str(path), "--epoch", "0", "--batch", "0"], capsys)
    assert code == 2 and "batch_size" in err


@pytest.mark.slow
def test_data_show_in_a_fresh_process_needs_no_training_code(tmp_path, scripts):
    train = tmp_path / "mytrain.py"
    train.write_text(
        "import sys, torch, seeder\n"
        "class Images(torch.utils.data.Dataset):\n"
        "    def __len__(self): return 40\n"
        "    def __getitem__(self, i): return torch.tensor(i)\n"
        "seeder.init(11); seeder.reseed(1, 0)\n"
        "loader = seeder.DataLoader(Images(), batch_size=4, shuffle=True)\n"
        "loader.skip(2, [3])\n"
        "print(loader.indices_at(2, 3))\n"
        "seeder.Checkpoint(sys.argv[1], model=torch.nn.Linear(1, 1)).save()\n"
    )
    ckpt = tmp_path / "ckpt.pt"
    # the training run (forked: its start is not the subject) and the show (a fresh interpreter
    # that never saw the training code)
    want = scripts.run([train, ckpt], cwd=tmp_path, start_is_subject=False).stdout.strip()
    got = run_python(
        ["-m", "seeder", "data", "show", str(ckpt), "--epoch", "2", "--batch", "3", "--json"],
        cwd=REPO_ROOT,
    )
    row = json.loads(got.stdout.strip().splitlines()[-1])
    assert row == {"epoch": 2, "batch": 3, "indices": json.loads(want), "rank": 0, "skipped": True}


def test_skips_of_another_worlds_plain_loader_are_named_when_not_carried_over():
    """A plain loader's skips are batches of one world size: a load of another world's state
    (allow_world_change=True, the next epoch boundary) warns that they are not carried over."""
    two = seeder.Seeder()
    two.init(5, ngpus=2, rank=0)
    two.reseed(1, 0)
    loader = seeder.DataLoader(Augmented(12), batch_size=2, shuffle=True, seeder=two)
    loader.skip(3, [1])
    state = two.state_dict()
    one = make_seeder()
    seeder.DataLoader(Augmented(12), batch_size=2, shuffle=True, seeder=one)
    with pytest.warns(seeder.SeederWarning, match=r"loader\.0 \(epochs 3\).*not carried"):
        one.load_state_dict(state, allow_world_change=True)
    clean = seeder.Seeder()
    clean.init(5, ngpus=2, rank=0)
    clean.reseed(1, 0)
    seeder.DataLoader(Augmented(12), batch_size=2, shuffle=True, seeder=clean)
    quiet = make_seeder()
    seeder.DataLoader(Augmented(12), batch_size=2, shuffle=True, seeder=quiet)
    with warnings.catch_warnings():
        warnings.simplefilter("error", seeder.SeederWarning)
        quiet.load_state_dict(clean.state_dict(), allow_world_change=True)
