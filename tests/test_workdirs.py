"""The runs' folders of seeder verify and the user's folder: copies of small files, one read-only
shared copy of large ones, dotfiles and credential files left out, and after the runs no link and
no change in the user's folder (without running a script: the folders as verify makes them)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from seeder.verify._shared import SHARED, SharedStore
from seeder.verify._workdirs import COPY_LIMIT, MIRROR_BUDGET, mirror_user_dir, unmirror


def _hashes(folder: Path) -> dict[str, str]:
    """Every entry under ``folder``: a file's bytes and mode, a link's target."""
    out = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(root) / name
            rel = str(path.relative_to(folder))
            if path.is_symlink():
                out[rel] = "link " + os.readlink(path)
            elif path.is_file():
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                out[rel] = f"{digest} {oct(path.stat().st_mode)} {path.stat().st_mtime_ns}"
    return out


_NAMES = st.sampled_from(["a.txt", "cfg.py", "notes.txt", "big.bin", ".env", ".netrc", "k.pem"])
_TREE = st.lists(
    st.tuples(st.sampled_from(["", "data/", "data/sub/", ".aws/"]), _NAMES, st.booleans()),
    min_size=1,
    max_size=8,
    unique_by=lambda t: t[0] + t[1],
)


def _plant(home: Path, tree: list[tuple[str, str, bool]]) -> None:
    for folder, name, large in tree:
        path = home / folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(COPY_LIMIT + 1 if large else 100))


@settings(
    max_examples=15,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(tree=_TREE)
@example(tree=[(".aws/", "a.txt", True)])  # a large file inside a left-out folder: not shared
def test_runs_write_into_their_own_folders_and_leave_no_link(tmp_path_factory, tree):
    """Property: whatever the user's folder holds, a run's folder holds copies or links into the
    shared copy (never into the user's folder), no dotfile or credential file, and writing into
    any file of it changes no byte of the user's folder; after unmirror nothing of the mirror is
    left."""
    base = tmp_path_factory.mktemp("case")
    home, runs = base / "user", base / "out" / "runs"
    home.mkdir()
    _plant(home, tree)
    before = _hashes(home)
    for name in ("full-0", "full-1"):
        mirror_user_dir(home, runs / name, keep_out=[base / "out"])
    home_real = home.resolve()
    for path in runs.rglob("*"):
        assert not path.name.startswith(".") or path.name == SHARED, path
        assert path.suffix != ".pem", path
        assert home_real not in Path(os.path.realpath(path)).parents, path
    for path in (runs / "full-0").rglob("*"):
        if not path.is_file():
            continue
        try:
            with open(path, "ab") as fh:  # a script appending to a file of its folder
                fh.write(b"!")
        except PermissionError:
            assert path.is_symlink()  # the shared read-only copy
    (runs / "full-0" / "data").mkdir(exist_ok=True)
    (runs / "full-0" / "data" / "written.txt").write_text("x")  # next to the user's data
    done = unmirror(runs, home)
    assert _hashes(home) == before
    assert not [p for p in runs.rglob("*") if p.is_symlink()] and not (runs / SHARED).exists()
    secrets = {
        ".aws" if f == ".aws/" else f + n
        for f, n, _ in tree
        if f == ".aws/" or n.startswith(".") or n == "k.pem"
    }
    assert set(done.left_out["secret"]) == secrets
    shared_large = any(
        large and f != ".aws/" and not n.startswith(".") and n != "k.pem" for f, n, large in tree
    )
    if shared_large and os.geteuid() == 0:  # root wrote into the shared copy: named, a FAIL
        assert done.changed and done.findings()
    elif not shared_large:
        assert done.changed == [] and done.findings() == []


def test_a_crowded_folder_is_one_link_to_its_shared_copy(tmp_path):
    home, runs = tmp_path / "user", tmp_path / "out" / "runs"
    many = home / "x" / "many"
    many.mkdir(parents=True)
    for i in range(5):
        (many / f"{i}.txt").write_text(str(i))
    (many / ".netrc").write_text("machine h password pw")
    mirror_user_dir(home, runs / "full-0", budget=1)  # past one entry: folders are shared
    link = runs / "full-0" / "x" / "many"
    assert link.is_symlink() and Path(os.path.realpath(link)).is_relative_to(runs / SHARED)
    assert sorted(p.name for p in link.iterdir()) == [f"{i}.txt" for i in range(5)]
    if os.geteuid() != 0:
        with pytest.raises(PermissionError):
            (link / "new.txt").write_text("x")
    unmirror(runs, home)
    assert sorted(p.name for p in many.iterdir()) == [
        ".netrc",
        *[f"{i}.txt" for i in range(5)],
    ]
    assert not list(runs.rglob("*"))


def test_past_the_budget_a_large_file_is_left_out_and_named(tmp_path):
    home, runs = tmp_path / "user", tmp_path / "out" / "runs"
    home.mkdir()
    (home / "a.bin").write_bytes(bytes(COPY_LIMIT + 10))
    (home / "b.bin").write_bytes(bytes(COPY_LIMIT + 10))
    store = SharedStore(runs, budget=COPY_LIMIT + 20)
    assert store.share(home / "a.bin", "a.bin") is not None
    assert store.share(home / "b.bin", "b.bin") is None and store.left_out("budget") == ["b.bin"]
    assert store.share(home / "b.bin", "b.bin") is None  # every run sees the same folder
    done = unmirror(runs, home)
    assert done.left_out["budget"] == ["b.bin"] and "b.bin" in done.notes()[0]
    assert MIRROR_BUDGET > 1000  # a folder of a few hundred files is mirrored file by file
