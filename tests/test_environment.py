"""Environment snapshot and diff with real tools: pip freeze, git, dpkg, a throwaway editable
install."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import site
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import child_env

from seeder import _cli as cli
from seeder.env._capture import capture_environment, default_snapshot_dir, load_snapshot
from seeder.env._diff import diff_environments
from seeder.env._recorded import NOT_RECORDED, recorded_environ
from seeder.env._redact import Redactor, redact_text
from seeder.env._secretnames import REDACTED, is_secret_name

# Planted secrets: none of these strings may appear in any file of a snapshot.
SECRETS = {
    "HF_TOKEN": "hf_PlantedHuggingFaceToken0123456789abcd",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYPLANTEDKEY",
    "WANDB_API_KEY": "0123456789abcdef0123456789abcdefplanted0",
    "MY_DB_PASSWORD": "correct-horse-battery-staple",
    "PIP_EXTRA_INDEX_URL": "https://alice:Sup3rSecretIndexPass@pypi.internal.example/simple",
    # a secret of no known shape, in an innocent name
    "NIGHTLY_SETTING": "plain-words-that-no-pattern-knows",
}
NEEDLES = [v for k, v in SECRETS.items() if k != "PIP_EXTRA_INDEX_URL"] + [
    "Sup3rSecretIndexPass",
    "alice:",
    "gitremote-Passw0rd-planted",
    "sk-plantedDiffSecretKey0123456789",
    "hunter2hunter2",
]


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        [
            "git",
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.invalid",
            "-c",
            "init.defaultBranch=main",
            *args,
        ],
        cwd=str(cwd),
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def _make_repo(path: Path, files: dict) -> Path:
    path.mkdir(parents=True)
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    _git(path, "init", "-q")
    _git(path, "add", "-A")
    _git(path, "commit", "-q", "-m", "initial")
    return path


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory):
    """Two snapshots taken in a dirty git repo with planted secrets; B also has LD_PRELOAD and two
    other variables."""
    tmp = tmp_path_factory.mktemp("env")
    repo = _make_repo(tmp / "repo", {"train.py": "lr = 0.1\n"})
    _git(
        repo,
        "remote",
        "add",
        "origin",
        "https://bob:gitremote-Passw0rd-planted@git.example/team/repo.git",
    )
    (repo / "train.py").write_text(
        "lr = 0.2\nAPI_KEY = 'sk-plantedDiffSecretKey0123456789'\n"
        "DATA = 'https://carol:hunter2hunter2@data.example/set'\n"
    )
    (repo / "new_module.py").write_text("x = 1\n")
    libm = next(
        (
            p
            for p in (
                "/lib/x86_64-linux-gnu/libm.so.6",
                "/usr/lib/x86_64-linux-gnu/libm.so.6",
                "/lib64/libm.so.6",
            )
            if os.path.exists(p)
        ),
        "/nonexistent/libfast.so",
    )
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(repo)
        for k, v in SECRETS.items():
            mp.setenv(k, v)
        mp.setenv("ZZZ_ORDINARY", "a")
        mp.setenv("TZ", "UTC")
        out["a"] = capture_environment(tmp / "a", diff=True)  # with the change's text
        mp.setenv("AAA_ORDINARY", "1")  # sorts before LD_PRELOAD, yet must be listed after it
        mp.setenv("ZZZ_ORDINARY", "b")  # its value is not recorded: the change is not seen
        mp.setenv("TZ", "Europe/Paris")
        mp.setenv("LD_PRELOAD", libm)
        out["b"] = capture_environment(tmp / "b")
    out["repo"], out["libm"] = repo, libm
    return out


def _freeze_label() -> str:
    """The freeze a snapshot of this interpreter must record: uv's where uv manages it or pip is
    absent."""
    cfg = Path(sys.prefix, "pyvenv.cfg")
    uv_env = cfg.exists() and any(
        line.split("=")[0].strip() == "uv" for line in cfg.read_text().splitlines()
    )
    has_pip = importlib.util.find_spec("pip") is not None
    return "uv pip freeze" if shutil.which("uv") and (uv_env or not has_pip) else "pip freeze"


def _venv_seeing_our_packages(venv: Path, make: list) -> Path:
    """A venv made by ``make`` whose python sees the packages this interpreter sees; returns its
    python.

    ``--system-site-packages`` is not enough: it shows the base installation's packages, not those
    of a venv the tests run in, nor a user site. A ``.pth`` file adds this interpreter's site
    directories.
    """
    subprocess.run(make, check=True, capture_output=True, timeout=120)
    vpy = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(vpy), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
        env=child_env(),
    ).stdout.strip()
    ours = site.getsitepackages() + ([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])
    Path(purelib, "seeder_test_parent_site.pth").write_text(
        "".join(f"{p}\n" for p in ours if os.path.isdir(p))
    )
    return vpy


# A PEP 517/660 build backend in the package itself, standard library only: the editable build needs
# no setuptools or wheel, whatever the machine has. The editable wheel holds a .pth naming the
# source tree.
_BACKEND = """
import base64, hashlib, os, zipfile

DIST = "seeder_throwaway-0.1.0.dist-info"


def _wheel(directory, files):
    name, record = "seeder_throwaway-0.1.0-py3-none-any.whl", []
    metadata = "Metadata-Version: 2.1\\nName: seeder-throwaway\\nVersion: 0.1.0\\n"
    wheel = (
        "Wheel-Version: 1.0\\nGenerator: seeder-test\\nRoot-Is-Purelib: true\\n"
        "Tag: py3-none-any\\n"
    )
    files = dict(files, **{DIST + "/METADATA": metadata, DIST + "/WHEEL": wheel})
    with zipfile.ZipFile(os.path.join(directory, name), "w") as zf:
        for path, text in files.items():
            data = text.encode()
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            zf.writestr(path, data)
            record.append(f"{path},sha256={digest},{len(data)}")
        zf.writestr(DIST + "/RECORD", "\\n".join(record + [DIST + "/RECORD,,"]) + "\\n")
    return name


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    here = os.path.dirname(os.path.abspath(__file__))
    return _wheel(wheel_directory, {"seeder_throwaway.pth": here + "\\n"})


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    raise RuntimeError("this test package installs only in editable mode")
"""


def _files(d: Path):
    return [p for p in d.rglob("*") if p.is_file()]


def test_no_secret_in_any_file_and_owner_only(snapshots):
    for key in ("a", "b"):
        d = snapshots[key]
        assert stat.S_IMODE(d.stat().st_mode) == 0o700
        files = _files(d)
        assert len(files) >= 6
        for path in files:
            text = path.read_text(encoding="utf-8", errors="replace")
            for needle in NEEDLES:
                assert needle not in text, f"{needle!r} leaked into {path}"
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        for sub in (p for p in d.rglob("*") if p.is_dir()):
            assert stat.S_IMODE(sub.stat().st_mode) == 0o700, sub
    env = (snapshots["a"] / "env.txt").read_text()
    assert f"HF_TOKEN={REDACTED}\n" in env and f"WANDB_API_KEY={REDACTED}\n" in env
    assert (
        "PIP_EXTRA_INDEX_URL=<not recorded>\n" in env and "NIGHTLY_SETTING=<not recorded>\n" in env
    )
    assert (
        "TZ=UTC\n" in env
        and "ZZZ_ORDINARY=<not recorded>\n" in env
        and env.splitlines() == sorted(env.splitlines(), key=lambda line: line.split("=")[0])
    )
    diff = (snapshots["a"] / "git.diff").read_text()
    assert "+lr = 0.2" in diff and REDACTED in diff  # the change is there, its secrets are not
    # by default: which files changed and the change's hash, not its text
    git_b = load_snapshot(snapshots["b"])["git"]
    assert not (snapshots["b"] / "git.diff").exists() and "diff" not in git_b
    assert git_b["changed"] and all(
        c.startswith(("M ", "A ", "D ", "R ")) for c in git_b["changed"]
    )
    assert git_b["diff_sha256"] == load_snapshot(snapshots["a"])["git"]["diff_sha256"]
    git_txt = (snapshots["a"] / "git.txt").read_text()
    assert f"https://{REDACTED}@git.example/team/repo.git" in git_txt


def test_manifest_indexes_every_file_and_tool(snapshots):
    d = snapshots["a"]
    m = load_snapshot(d)
    written = {str(p.relative_to(d)) for p in _files(d)} - {"manifest.json"}
    assert written == set(m["files"])
    for name, entry in m["files"].items():
        assert entry["sha256"] == hashlib.sha256((d / name).read_bytes()).hexdigest()
    for label, entry in m["tools"].items():
        assert entry["status"] in ("ok", "missing", "failed", "not a git repository"), (
            label,
            entry,
        )
        assert ("file" in entry) == (entry["status"] == "ok" and label not in ("git",)), (
            label,
            entry,
        )
    expect_present = {
        "dpkg-query": "dpkg-query",
        "conda list": "conda",
        "nvidia-smi": "nvidia-smi",
        "lscpu": "lscpu",
    }
    for label, exe in expect_present.items():
        assert (m["tools"][label]["status"] == "ok") == (shutil.which(exe) is not None), label
    label = _freeze_label()
    assert {"pip freeze", "uv pip freeze"} & set(m["tools"]) == {label}, m["tools"]
    assert m["tools"][label]["status"] == "ok", m["tools"][label]
    reqs = (
        d / "requirements.txt"
    ).read_text()  # a real `pip freeze` (or `uv pip freeze`) of this interpreter
    assert f"numpy=={np.__version__}" in reqs.splitlines()
    assert m["packages"]["numpy"] == np.__version__
    assert m["torch"]["version"] == torch.__version__ and m["torch"]["cuda"] == torch.version.cuda
    assert (
        m["torch"]["settings"]["deterministic_algorithms"]
        == torch.are_deterministic_algorithms_enabled()
    )
    assert "PyTorch built with" in (d / "torch-config.txt").read_text()
    assert m["python"]["version"] == ".".join(map(str, sys.version_info[:3]))
    assert m["system"]["cpu_count"] == os.cpu_count() and m["system"]["os"]
    git = m["git"]
    assert git["status"] == "ok" and git["dirty"] is True and git["untracked"] == ["new_module.py"]
    assert (
        git["commit"] == _git(snapshots["repo"], "rev-parse", "HEAD").strip()
        and git["branch"] == "main"
    )
    if shutil.which("dpkg-query"):
        assert (
            "\tamd64" in (d / "apt-packages.txt").read_text()
            or "\tall" in (d / "apt-packages.txt").read_text()
        )


def test_diff_lists_ld_preload_first(snapshots, capsys):
    result = diff_environments(snapshots["a"], snapshots["b"])
    assert not result.equal
    env = result.sections["environment"]
    assert [(c.key, c.kind) for c in env] == [
        ("LD_PRELOAD", "added"),
        ("AAA_ORDINARY", "added"),
        ("TZ", "changed"),
    ]
    assert env[0].important and env[0].b == snapshots["libm"] and not env[1].important
    assert [name for name, changes in result.sections.items() if changes] == ["environment"]
    assert diff_environments(snapshots["a"], snapshots["a"]).equal
    assert cli.main(["env", "diff", str(snapshots["a"]), str(snapshots["b"])]) == 1
    table = capsys.readouterr().out
    rows = [line for line in table.splitlines() if line.startswith("  ")]
    assert rows[1].startswith("  +!LD_PRELOAD"), table  # rows[0] is the column header
    assert cli.main(["env", "diff", "--json", str(snapshots["b"]), str(snapshots["b"])]) == 0
    assert json.loads(capsys.readouterr().out)["equal"] is True


def test_existing_snapshot_is_not_overwritten(snapshots, tmp_path):
    with pytest.raises(FileExistsError, match="overwrite=True"):
        capture_environment(snapshots["a"])
    with pytest.raises(TypeError):
        capture_environment(tmp_path / "x", overwrite="yes")
    with pytest.raises(TypeError):
        capture_environment(tmp_path / "y", extra={"f": object()})
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_overwrite_replaces_the_previous_snapshot(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    d = tmp_path / "snap"
    d.mkdir()
    (d / "editable").mkdir()
    (d / "editable" / "gone.diff").write_text("stale")
    (d / "notes.txt").write_text("mine")  # not a snapshot file: kept
    (d / "manifest.json").write_text(
        json.dumps({"files": {"editable/gone.diff": {}, "../outside": {}}})
    )
    capture_environment(d, overwrite=True)
    assert not (d / "editable" / "gone.diff").exists() and (d / "notes.txt").read_text() == "mine"
    assert "editable/gone.diff" not in load_snapshot(d)["files"]


def test_missing_tools_are_recorded_not_fatal(tmp_path, monkeypatch):
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no git, dpkg-query, conda, nvidia-smi, lscpu, uv
    monkeypatch.chdir(tmp_path)
    for var in ("CONDA_EXE", "LMOD_CMD", "MODULES_CMD", "LOADEDMODULES"):
        monkeypatch.delenv(var, raising=False)
    d = capture_environment(tmp_path / "snap")
    tools = load_snapshot(d)["tools"]
    for label in ("dpkg-query", "conda list", "nvidia-smi", "lscpu", "git", "module list"):
        assert tools[label]["status"] == "missing", (label, tools[label])
    if (
        importlib.util.find_spec("pip") is not None
    ):  # run as `sys.executable -m pip`, PATH-independent
        assert tools["pip freeze"]["status"] == "ok" and (d / "requirements.txt").exists()
    else:  # and uv, the other way to freeze, is not on this PATH
        assert tools["pip freeze"]["status"] == "missing" and not (d / "requirements.txt").exists()
    assert not (d / "apt-packages.txt").exists()


def test_modules_recorded_from_loadedmodules(tmp_path, monkeypatch):
    for var in ("LMOD_CMD", "MODULES_CMD"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("LOADEDMODULES", "cuda/12.4:nccl/2.21")
    monkeypatch.chdir(tmp_path)
    d = capture_environment(tmp_path / "snap")
    assert (d / "modules.txt").read_text() == "cuda/12.4\nnccl/2.21\n"


def test_default_snapshot_dir_follows_seed_000(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "123456")
    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    assert default_snapshot_dir(tmp_path) == tmp_path / "repro" / "123456"
    monkeypatch.setenv(
        "SLURM_RESTART_COUNT", "2"
    )  # a requeued job keeps its id: keep both snapshots
    assert default_snapshot_dir(tmp_path) == tmp_path / "repro" / "123456-restart2"
    monkeypatch.delenv("SLURM_JOB_ID")
    monkeypatch.chdir(tmp_path)
    d = default_snapshot_dir()
    assert (
        d.parent == tmp_path / "repro"
        and d.name.startswith("local-")
        and d.name.endswith(f"-{os.getpid()}")
    )


@pytest.mark.parametrize(
    "text, expected",
    [
        ("https://u:p@h/x", f"https://{REDACTED}@h/x"),
        (
            "git+ssh://ghp_abcdefghijklmnopqrstuvwxyz0123456789@github.com/o/r",
            f"git+ssh://{REDACTED}@github.com/o/r",
        ),
        (
            "https://s3.example/b/o?X-Amz-Signature=abc123&x=1",
            f"https://s3.example/b/o?X-Amz-Signature={REDACTED}&x=1",
        ),
        (
            "https://conda.anaconda.org/t/tk-12345678-abcdef/ch/linux-64",
            f"https://conda.anaconda.org/t/{REDACTED}/ch/linux-64",
        ),
        ("token hf_abcdefghijklmnopqrstuvwxyzABCDEFGH here", f"token {REDACTED} here"),
        ("AKIAIOSFODNN7EXAMPLE", REDACTED),
        ('password = "hunter2"', f'password = "{REDACTED}"'),
        ('"api_key": "abc"', f'"api_key": "{REDACTED}"'),
        ("Authorization: Bearer abc.def", f"Authorization: Bearer {REDACTED}"),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----", REDACTED),
        # not secrets: left alone
        ('eos_token = "</s>"', 'eos_token = "</s>"'),
        (
            "tokenizer = AutoTokenizer.from_pretrained(name)",
            "tokenizer = AutoTokenizer.from_pretrained(name)",
        ),
        ("tokenizers==0.15.0", "tokenizers==0.15.0"),
        ("git@github.com:o/r.git", "git@github.com:o/r.git"),
    ],
)
def test_redact_text(text, expected):
    assert redact_text(text, environ={}) == expected


def test_redaction_by_name_and_by_literal_value():
    assert all(
        is_secret_name(n)
        for n in (
            "HF_TOKEN",
            "AWS_SECRET_ACCESS_KEY",
            "WANDB_API_KEY",
            "GITHUB_PAT_TOKEN",
            "DB_PASSWD",
            "NETRC_CREDENTIALS",
            "HTTP_AUTH",
            "SENTRY_DSN",
        )
    )
    assert not any(
        is_secret_name(n)
        for n in (
            "PATH",
            "PWD",
            "LD_PRELOAD",
            "CUDA_VISIBLE_DEVICES",
            "NCCL_DEBUG",
            "OMP_NUM_THREADS",
            "CUBLAS_WORKSPACE_CONFIG",
            "PYTHONHASHSEED",
        )
    )
    env = {"MY_SECRET": "s3cr3t-value-long", "PIP_INDEX_URL": "https://u:longpassword1@h/simple"}
    assert recorded_environ(env, Redactor(env)) == {
        "MY_SECRET": REDACTED,
        "PIP_INDEX_URL": NOT_RECORDED,
    }
    # a secret's value is removed wherever it appears, even with no pattern around it
    assert (
        redact_text("echo s3cr3t-value-long; curl longpassword1", environ=env)
        == f"echo {REDACTED}; curl {REDACTED}"
    )


def test_diff_of_packages_torch_driver_git_from_manifests(snapshots):
    a = load_snapshot(snapshots["a"])
    a["gpus"] = []  # whatever this machine has: A has no GPU, B one
    b = json.loads(json.dumps(a))
    b["packages"]["numpy"] = "0.0.1"
    b["packages"]["brand-new"] = "1.0"
    del b["packages"]["torch"]
    b["torch"]["cudnn"] = (a["torch"]["cudnn"] or 0) + 1
    b["gpus"] = [{"index": "0", "name": "NVIDIA H100", "driver": "550.54", "memory": "80 GiB"}]
    b["git"]["commit"] = "0" * 40
    b["python"]["version"] = "2.7.18"
    d = diff_environments(a, b)
    packages = {c.key: (c.kind, c.a, c.b) for c in d.sections["packages"]}
    assert packages == {
        "brand-new": ("added", None, "1.0"),
        "numpy": ("changed", a["packages"]["numpy"], "0.0.1"),
        "torch": ("removed", a["packages"]["torch"], None),
    }
    assert [(c.key, c.b) for c in d.sections["torch"]] == [("cudnn", b["torch"]["cudnn"])]
    assert [(c.key, c.kind) for c in d.sections["gpus"]] == [("gpu0", "added")]
    c = json.loads(json.dumps(b))
    c["gpus"][0]["driver"] = "560.35"
    assert [(c.key, c.kind) for c in diff_environments(b, c).sections["gpus"]] == [
        ("gpu0", "changed")
    ]
    assert [c.key for c in d.sections["git"]] == ["commit"] and [
        c.key for c in d.sections["python"]
    ] == ["version"]
    text = d.format()
    for title in (
        "Python packages: 1 added, 1 removed, 1 changed",
        "torch, CUDA, cuDNN, NCCL",
        "GPUs and driver",
        "git state",
    ):
        assert title in text, text
    with pytest.raises(ValueError, match="not a seeder environment snapshot"):
        diff_environments(a, {"format": "x"})
    with pytest.raises(TypeError, match="single string"):
        diff_environments(a, b, ignore="PATH")


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("pip") is None, reason="pip is not installed")
def test_editable_install_in_a_venv_has_its_diff_captured(tmp_path):
    """pip install -e of a throwaway git repo into a fresh venv, then a local change: the venv's
    snapshot holds it."""
    pkg = _make_repo(
        tmp_path / "throwaway",
        {
            "pyproject.toml": "[build-system]\nrequires = []\nbuild-backend = "
            '"throwaway_backend"\nbackend-path = ["."]\n',
            "throwaway_backend.py": _BACKEND,
            "seeder_throwaway/__init__.py": "VALUE = 1\n",
        },
    )
    venv = tmp_path / "venv"
    vpy = _venv_seeing_our_packages(
        venv, [sys.executable, "-m", "venv", "--without-pip", str(venv)]
    )
    install = subprocess.run(
        [
            str(vpy),
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-e",
            str(pkg),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=child_env({"PIP_DISABLE_PIP_VERSION_CHECK": "1"}),
    )
    assert install.returncode == 0, install.stderr[-3000:]
    (pkg / "seeder_throwaway" / "__init__.py").write_text(
        "VALUE = 2\nTOKEN_URL = 'https://dave:hunter2hunter2@models.example/x'\n"
    )
    out = subprocess.run(
        [str(vpy), "-m", "seeder", "env", "snapshot", "--diff", str(tmp_path / "snap")],
        env=child_env(),
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    snap = Path(out.stdout.strip())
    m = load_snapshot(snap)
    assert m["python"]["executable"] == str(vpy) and m["python"]["virtualenv"] is True
    (entry,) = [e for e in m["editables"] if e["name"] == "seeder-throwaway"]
    assert entry["path"] == str(pkg) and entry["git"]["dirty"] is True
    assert entry["git"]["commit"] == _git(pkg, "rev-parse", "HEAD").strip()
    diff = (snap / "editable" / "seeder-throwaway.diff").read_text()
    assert "-VALUE = 1" in diff and "+VALUE = 2" in diff and "hunter2hunter2" not in diff
    assert (
        "seeder-throwaway" in (snap / "requirements.txt").read_text()
    )  # the venv's own pip freeze
    assert m["git"]["status"] == "not a git repository"  # tmp_path is no repository


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("uv") is None, reason="uv is not installed")
def test_uv_environment_is_frozen_with_uv(tmp_path):
    venv = tmp_path / "uvenv"
    vpy = _venv_seeing_our_packages(
        venv, ["uv", "venv", "-q", "--python", sys.executable, str(venv)]
    )
    out = subprocess.run(
        [str(vpy), "-m", "seeder", "env", "snapshot", "--diff", str(tmp_path / "snap")],
        env=child_env(),
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    tools = load_snapshot(tmp_path / "snap")["tools"]
    assert tools["uv pip freeze"]["status"] == "ok" and "pip freeze" not in tools


def test_env_diff_compares_an_old_snapshot_with_the_diff_text_by_hash_and_files(tmp_path):
    """A snapshot that stored the change's text (``git.diff``, ``diffsha256``: earlier seeders)
    compares with one that records the changed files and ``diff_sha256``: the same change is no
    difference, another hash or file is."""
    from seeder.env._capture import SNAPSHOT_FORMAT, SNAPSHOT_VERSION

    old = tmp_path / "old"
    old.mkdir()
    (old / "git.diff").write_text(
        "diff --git a/train.py b/train.py\n@@ -1 +1 @@\n-lr = 1\n+lr = 2\n"
        "diff --git a/c.yaml b/c.yaml\n@@ -1 +1 @@\n-a: 1\n+a: 2\n"
    )
    base = {"format": SNAPSHOT_FORMAT, "version": SNAPSHOT_VERSION}
    git = {"status": "ok", "commit": "abc", "branch": "main", "dirty": True, "untracked": []}
    old_manifest = {
        **base,
        "git": {**git, "remotes": [], "diff": "git.diff", "diffsha256": "h1"},
        "files": {"git.diff": {"sha256": "h1"}},
        "_dir": str(old),
    }
    new = {**base, "git": {**git, "remotes": [], "changed": ["M c.yaml", "M train.py"]}}
    same = diff_environments(old_manifest, {**new, "git": {**new["git"], "diff_sha256": "h1"}})
    assert same.sections["git"] == []
    other = diff_environments(
        old_manifest,
        {**new, "git": {**new["git"], "diff_sha256": "h2", "changed": ["M train.py"]}},
    )
    assert {c.key for c in other.sections["git"]} == {"diff_sha256", "changed"}
    assert next(c for c in other.sections["git"] if c.key == "diff_sha256").important
