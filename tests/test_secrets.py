"""Secrets never reach a file: planted secrets of every kind against the real `seeder env`, `seeder
run` and `seeder verify`, every byte they wrote searched; the redaction path as properties; symlinks
planted where seeder writes."""

from __future__ import annotations

import json
import logging
import os
import re
import stat
import string
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO_ROOT, child_env
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from optional import need_verify

from seeder import SeederWarning
from seeder._safefile import UnsafeDirectoryError, write_file
from seeder.env._argv import HIDDEN
from seeder.env._capture import capture_environment
from seeder.env._recorded import NOT_RECORDED, is_recorded, recorded_environ
from seeder.env._redact import (
    MIN_LITERAL,
    Redactor,
    redact_argv,
    redact_json,
    redact_text,
)
from seeder.env._secretnames import REDACTED
from seeder.verify._flags import probe_argv

HEX40 = "9f3a1c5e7b2d4f6081a3c5e7092b4d6f8a1c3e5b"  # a wandb key
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJjaS1qb2ItcGxhbnRlZCJ9.c2lnbmF0dXJlUGxhbnRlZDAx"
# Secret-named variables: their values must leave no trace, whatever their length.
NAMED = {
    "API_KEY": "abc123",  # shorter than 8 characters
    "MYSQL_PWD": "myS9lPw",
    "DB_PW": "dbpw-4417x",
    "CI_JOB_JWT": JWT,
    "HF_TOKEN": "hf_PlantedHuggingFaceTokenAbcdefgh01",
    "GITHUB_TOKEN": "ghp_PlantedGithubTokenAbcdefghijklmnop0123",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYplantedKEY",
    "WANDB_API_KEY": HEX40,
    "SLACK_BOT_TOKEN": "xoxb-2222-planted-slackbot",
    "PGPASSWORD": "pg pass word 77",  # with spaces
    "SESSION_COOKIE": 'ck"quote\\back',  # quote and backslash: JSON and repr escape them
}
# Secrets inside variables whose names are not secret: found by pattern.
INDIRECT = {
    "ODBC_CONNECT": ("Driver={ODBC Driver 18};Server=db;Uid=sa;Pwd=odbcPw!42x;", "odbcPw!42x"),
    "ODBC_BRACED": ("Server=db;PWD={br;aced-Pw9};Database=x", "br;aced-Pw9"),
    "DATABASE_URL": ("postgresql://app:pgUrlPass99@db:5432/x", "pgUrlPass99"),
    "TRAIN_OPTS": ("--lr 0.1 --api-key optsKey-5521 --epochs 3", "optsKey-5521"),
    "DEPLOY_NOTE": ("rotated AKIAPLANTEDKEY123456 today", "AKIAPLANTEDKEY123456"),
    "WEBHOOK_HINT_X": ("see https://hooks.example/x?token=hookTok-3377", "hookTok-3377"),
    "ID_HEADER": ("Authorization: Bearer bearerTok-9912", "bearerTok-9912"),
    "AZURE_STORAGE": (
        "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=azK3yPlanted+Base64==;",
        "azK3yPlanted+Base64==",
    ),
}
# On the command line: flags, a Hydra override, a key=value, a webhook URL under a flag no pattern
# knows.
WEBHOOK_SECRET = "aBcDeFgHiJkLmNoPqRsTuVwX"  # letters only: no token pattern, no digit
WEBHOOK = f"https://hooks.slack.com/services/T024BE7LD/B01PLNTD9/{WEBHOOK_SECRET}"
ARGV = [
    "--db-password",
    "argvDbPw-31",
    "--token=argvTok-77x",
    "--api-key",
    "argvApiK-5",
    "--password=pw with space",
    "db.password=hydraPw-8q",
    "--secret",
    "s3",
    "--note",
    "abc123",
    "--notify",
    WEBHOOK,
]
ARGV_SECRETS = [
    "argvDbPw-31",
    "argvTok-77x",
    "argvApiK-5",
    "pw with space",
    "hydraPw-8q",
    WEBHOOK_SECRET,
]
# Every form a secret takes on a command line: flag=value, flag value, NAME=value, JSON, credentials
# in URLs (https, mysql, s3), a positional word.
ARGV_FORMS = [
    "--api-key=formApiKey-11",
    "--token",
    "formToken-12",
    "--pass=formPass-13",
    "--hf_token",
    "formHfToken-14",
    "API_KEY=formPairKey-15",
    '{"password": "formJsonPw-16"}',
    "https://alice:formHttpsPw-17@example.com/data",
    "mysql://bob:formMysqlPw-18@db.example:3306/app",
    "s3://AKIDPLANTED:formS3Secret-19@bucket/key",
    "formPositional-20",
]
ARGV_FORMS_SHOWN = [
    f"--api-key={HIDDEN}",
    "--token",
    HIDDEN,
    f"--pass={HIDDEN}",
    "--hf_token",
    HIDDEN,
    f"API_KEY={HIDDEN}",
    HIDDEN,
    HIDDEN,
    HIDDEN,
    HIDDEN,
    HIDDEN,
]
ARGV_FORM_SECRETS = [f"form{k}-{n}" for k, n in (("ApiKey", 11), ("Token", 12), ("Pass", 13))] + [
    "formHfToken-14",
    "formPairKey-15",
    "formJsonPw-16",
    "formHttpsPw-17",
    "formMysqlPw-18",
    "formS3Secret-19",
    "formPositional-20",
]
# Lines of an uncommitted change (git.diff).
DIFF_LINES = {
    "db_pass: yamlDbPass-61": "yamlDbPass-61",
    'wandb.login(key="0a1b2c3d4e5f60718293a4b5c6d7e8f901234567")': (
        "0a1b2c3d4e5f60718293a4b5c6d7e8f901234567"
    ),
    'password = "diffPassword-19"': "diffPassword-19",
    '"client_secret": "clientSecret-23",': "clientSecret-23",
    'conn = "Server=x;Pwd=diffOdbc-88;"': "diffOdbc-88",
    "export GITHUB_TOKEN=ghp_DiffGithubTokenAbcdefghijklmnopqr0123": (
        "ghp_DiffGithubTokenAbcdefghijklmnopqr0123"
    ),
    "aws_secret_access_key = Zk9PlantedAwsSecretInCredentialsFile01": (
        "Zk9PlantedAwsSecretInCredentialsFile01"
    ),
    "token: glpat-PlantedGitlabToken1234": "glpat-PlantedGitlabToken1234",
    'api_password = "two words planted"': "two words planted",
    "-----BEGIN PGP PRIVATE KEY BLOCK-----": None,
    "lQOYBGPlantedPgpKeyBody0123": "lQOYBGPlantedPgpKeyBody0123",
    "-----END PGP PRIVATE KEY BLOCK-----": None,
    "-----BEGIN OPENSSH PRIVATE KEY-----": None,
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAplanted": "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAplanted",
    "-----END OPENSSH PRIVATE KEY-----": None,
    'slack = "xoxp-1234567890-plantedslack"': "xoxp-1234567890-plantedslack",
    "jwt = " + JWT.replace("cGxhbnRlZCJ9", "ZGlmZiJ9"): JWT.replace("cGxhbnRlZCJ9", "ZGlmZiJ9"),
}
# Changes only the diff rule removes: credential files' lines, a key under a name no pattern knows.
DIFF_FILES = {
    ".netrc": ("machine api.example.com login me password netrcPw-4521\n", "netrcPw-4521"),
    ".pgpass": ("db.example.com:5432:app:me:pgpassPw-9931\n", "pgpassPw-9931"),
    "wandb.yaml": (f"wandb: {HEX40[::-1]}\n", HEX40[::-1]),
}
# A committed file whose change removes a secret and adds a YAML block scalar under a secret key.
CHANGED_FILES = {
    "settings.yaml": (
        "password: oldYamlPass-42\nlr: 1\n",
        "password: newYamlPass-43\nlr: 1\n"
        "password_block: |\n  blockScalarPw-77\n  second-Line-78\n",
        ("oldYamlPass-42", "newYamlPass-43", "blockScalarPw-77", "second-Line-78"),
    )
}
NEEDLES = sorted(
    {
        *NAMED.values(),
        *(v for _, v in INDIRECT.values()),
        *ARGV_SECRETS,
        *ARGV_FORM_SECRETS,
        *(v for _, _, values in CHANGED_FILES.values() for v in values),
        *(v for v in DIFF_LINES.values() if v),
        *(v for _, v in DIFF_FILES.values()),
    }
)
LEAKS = {"cases": 0, "leaks": 0}  # counted for the note


def _planted_env(extra=None):
    env = child_env(
        {
            **NAMED,
            **{k: v for k, (v, _) in INDIRECT.items()},
            "PLANTED_NAMES": ",".join([*NAMED, *INDIRECT]),
        }
    )
    env.update(extra or {})
    return env


def _repo(path: Path) -> Path:
    path.mkdir()
    git = [
        "git",
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@example.invalid",
        "-c",
        "init.defaultBranch=main",
    ]
    (path / "config.py").write_text("lr = 0.1\n")
    for name in DIFF_FILES:
        (path / name).write_text("# empty\n")
    for name, (before, _, _) in CHANGED_FILES.items():
        (path / name).write_text(before)
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "init"]):
        subprocess.run(git + args, cwd=path, check=True, capture_output=True)
    (path / "config.py").write_text("lr = 0.2\n" + "\n".join(DIFF_LINES) + "\n")
    for name, (text, _) in DIFF_FILES.items():
        (path / name).write_text(text)
    for name, (_, after, _) in CHANGED_FILES.items():
        (path / name).write_text(after)
    return path


def _assert_nothing_printed(proc: subprocess.CompletedProcess, needles=NEEDLES) -> None:
    """No needle in what a command printed (stdout and stderr)."""
    found = [n for n in needles for text in (proc.stdout, proc.stderr) if n in text]
    LEAKS["cases"] += 2 * len(needles)
    LEAKS["leaks"] += len(found)
    assert not found, f"planted secrets printed: {found}"


def _assert_nothing_leaked(root: Path, needles=NEEDLES) -> int:
    """Every byte of every file under ``root``: no needle, in UTF-8 or as JSON escapes it. Returns
    the file count."""
    files = [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()]
    assert files
    found = []
    for path in files:
        data = path.read_bytes()
        for needle in needles:
            LEAKS["cases"] += 1
            forms = {
                needle.encode(),
                json.dumps(needle)[1:-1].encode(),
                repr(needle)[1:-1].encode(),
            }
            if any(f in data for f in forms):
                found.append((needle, str(path.relative_to(root))))
    LEAKS["leaks"] += len(found)
    assert not found, f"planted secrets reached files: {found}"
    return len(files)


# ------------------------------------------------------------------ the real commands, every byte
# they wrote


def _seeder(args, cwd=None, env=None, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "seeder", *args],
        cwd=cwd,
        env=env if env is not None else _planted_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_seeder_env_snapshot_and_seeder_run_write_no_planted_secret(tmp_path):
    repo = _repo(tmp_path / "repo")
    env = _planted_env()
    # the diff text only when asked for; redacted then
    p = _seeder(["env", "snapshot", "--diff", str(tmp_path / "cli")], cwd=repo, env=env)
    assert p.returncode == 0, p.stderr
    _assert_nothing_printed(p)
    code = "import seeder; seeder.init(7)"
    p = _seeder(
        ["run", "--seed", "7", "--", sys.executable, "-c", code, *ARGV, *ARGV_FORMS],
        cwd=repo,
        env={**env, "SEEDER_SNAPSHOT_DIR": str(tmp_path / "run")},
    )
    assert p.returncode == 0, p.stderr
    _assert_nothing_printed(p)
    for snap in ("cli", "run"):
        assert _assert_nothing_leaked(tmp_path / snap) >= 6
    p = _seeder(["env", "diff", str(tmp_path / "cli"), str(tmp_path / "run")], env=env)
    assert p.returncode in (0, 1), p.stderr
    _assert_nothing_printed(p)
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["run"]["argv"][1:] == [
        "--db-password",
        HIDDEN,
        f"--token={HIDDEN}",
        "--api-key",
        HIDDEN,
        f"--password={HIDDEN}",
        f"db.password={HIDDEN}",
        "--secret",
        HIDDEN,
        "--note",
        HIDDEN,
        "--notify",
        HIDDEN,
        *ARGV_FORMS_SHOWN,
    ]
    env_txt = (tmp_path / "run" / "env.txt").read_text()
    assert (
        all(f"{k}={REDACTED}\n" in env_txt for k in NAMED)
        and f"\nPWD={os.environ['PWD']}\n" in env_txt
    )
    assert (
        "ODBC_CONNECT=<not recorded>\n" in env_txt
    )  # a variable outside the allowlist: its name only
    # by default the change is recorded by its files and hash, not its text
    git = manifest["git"]
    assert not (tmp_path / "run" / "git.diff").exists() and "diff" not in git
    assert {"M config.py", "M .netrc", "M settings.yaml"} <= set(git["changed"])
    assert len(git["diff_sha256"]) == 64
    assert "  M settings.yaml\n" in (tmp_path / "run" / "git.txt").read_text()
    cli = json.loads((tmp_path / "cli" / "manifest.json").read_text())["git"]
    assert cli["diff"] == "git.diff" and cli["diff_sha256"] == git["diff_sha256"]
    diff = (tmp_path / "cli" / "git.diff").read_text()
    assert "+lr = 0.2" in diff and f"+db_pass: {REDACTED}" in diff
    assert f"+{REDACTED}\n" in diff.split("diff --git a/.netrc", 1)[1]
    assert f"+wandb: {REDACTED}" in diff
    settings = diff.split("diff --git a/settings.yaml", 1)[1]
    assert f"-password: {REDACTED}\n" in settings and f"+password: {REDACTED}\n" in settings
    assert f"+password_block: |\n+  {REDACTED}\n+  {REDACTED}\n" in settings
    for path in (tmp_path / "run").rglob("*"):
        assert stat.S_IMODE(path.stat().st_mode) == (0o700 if path.is_dir() else 0o600), path


SECRET_TOY = str(REPO_ROOT / "tests" / "scripts" / "verify_secret_toy.py")
#: The toy's command line with planted secrets, and what seeder shows of it.
TOY_ARGS = [*ARGV[:6], *ARGV_FORMS, *ARGV[-2:]]
TOY_SHOWN = [
    "--db-password",
    HIDDEN,
    f"--token={HIDDEN}",
    "--api-key",
    HIDDEN,
    f"--password={HIDDEN}",
    *ARGV_FORMS_SHOWN,
    "--notify",
    HIDDEN,
]


def test_seeder_verify_writes_no_planted_secret(tmp_path, started_in_tmp):
    need_verify(figures=False)
    out = tmp_path / "v"
    toy = [sys.executable, SECRET_TOY, *TOY_ARGS]
    p = _seeder(
        [
            "verify",
            "--out",
            str(out),
            "--epochs",
            "2",
            "--repeats",
            "2",
            "--jobs",
            "2",
            "--no-figures",
            "--no-mid-epoch",
            "--no-progress",
            "--",
            *toy,
        ]
    )
    assert p.returncode == 0, p.stdout + p.stderr
    _assert_nothing_printed(p)
    assert (
        _assert_nothing_leaked(out) >= 2 + 4 * 2 * 3
    )  # report.json, report.md; 8 runs' run.json, log.txt, metrics
    report = json.loads((out / "report.json").read_text())
    assert report["verdict"] == "PASS"
    expected = [toy[1], *TOY_SHOWN]
    assert report["config"]["command"][1:] == expected
    for run in report["runs"]:
        assert run["argv"][1 : len(expected) - 1] == expected[:-2]
        assert (
            json.loads((out / "runs" / run["name"] / "run.json").read_text())["argv"][
                1 : len(expected) - 1
            ]
            == expected[:-2]
        )
        log = (
            out / run["log"]
        ).read_text()  # the script printed its argv and environment: all redacted
        assert log.startswith("config: ") and f"MYSQL_PWD={REDACTED}" in log
    # the report's text shows a webhook as its JSON does
    md = (out / "report.md").read_text()
    assert "--notify" in md and "hooks.slack.com" not in md


@pytest.mark.slow
def test_seeder_locate_writes_and_prints_no_planted_secret(tmp_path, started_in_tmp, handoff_kept):
    out = tmp_path / "loc"
    causes = str(REPO_ROOT / "tests" / "scripts" / "locate_causes.py")
    command = [sys.executable, SECRET_TOY, causes, *TOY_ARGS, "--steps", "1"]
    # locate's torch runs hand their script to the handoff server: their start is not the subject
    env = _planted_env(handoff_kept.env())
    p = _seeder(
        ["locate", "--out", str(out), "--no-hash-check", "--", *command], env=env, timeout=400
    )
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    _assert_nothing_printed(p)
    assert _assert_nothing_leaked(out) >= 2 + 2 * 2  # report.json, report.md; runs' records, logs
    report = json.loads((out / "report.json").read_text())
    assert report["kind"] == "identical"
    assert report["command"] == [sys.executable, SECRET_TOY, causes, *TOY_SHOWN, "--steps", "1"]


@pytest.mark.slow
def test_seeder_compare_writes_and_prints_no_planted_secret(tmp_path, started_in_tmp):
    need_verify(figures=False)
    out = tmp_path / "c"
    p = _seeder(
        [
            "compare",
            "--out",
            str(out),
            "--epochs",
            "2",
            "--runs",
            "2",
            "--a",
            "--lr 0.05",
            "--b",
            "--lr 0.06 --api-key compareApiKey-5151",
            "--no-figures",
            "--no-progress",
            "--",
            sys.executable,
            SECRET_TOY,
            *TOY_ARGS,
        ]
    )
    assert p.returncode == 0, p.stdout + p.stderr
    needles = [*NEEDLES, "compareApiKey-5151"]
    _assert_nothing_printed(p, needles)
    assert _assert_nothing_leaked(out, needles) >= 2 + 4 * 2


# ------------------------------------------------------------------ the findings, one by one, on
# the public API


def recorded(env):
    """What a snapshot writes of ``env`` (env.txt)."""
    return recorded_environ(env, Redactor(env))


def test_short_secret_is_redacted_in_argv_as_in_the_environment():
    env = {"API_KEY": "abc123"}
    assert recorded(env)["API_KEY"] == REDACTED
    assert (
        redact_text("train.py --note abc123 --x=abc123", environ=env)
        == f"train.py --note {REDACTED} --x={REDACTED}"
    )
    assert (
        redact_text("xabc123 abc1234", environ=env) == "xabc123 abc1234"
    )  # whole words only below 8 characters


@pytest.mark.parametrize("name", ["MYSQL_PWD", "DB_PW", "CI_JOB_JWT", "REDIS_PASS", "SENTRY_DSN"])
def test_secret_names(name):
    value = "val-" + name.lower()
    assert recorded({name: value})[name] == REDACTED
    assert redact_text(f"echo {value}", environ={name: value}) == f"echo {REDACTED}"


@pytest.mark.parametrize("name", ["PWD", "OLDPWD", "PATH", "TOKENIZERS_PARALLELISM"])
def test_values_that_are_not_searched_for(name):
    """PWD is the working directory; TOKENIZERS_PARALLELISM=false would remove every `false`."""
    env = {
        "PWD": "/home/u",
        "OLDPWD": "/tmp",
        "PATH": "/usr/bin",
        "TOKENIZERS_PARALLELISM": "false",
    }
    assert redact_text("cd /home/u; false", environ=env) == "cd /home/u; false"
    shown = env[name] if is_recorded(name) else NOT_RECORDED  # PWD and PATH are recorded
    assert recorded(env)[name] == (REDACTED if name == "TOKENIZERS_PARALLELISM" else shown)


@pytest.mark.parametrize("var, secret", list(INDIRECT.values()))
def test_secrets_inside_other_variables(var, secret):
    # Under a variable a snapshot records (NCCL_*), the value is written scrubbed.
    assert secret not in recorded({"NCCL_X": var})["NCCL_X"]


@pytest.mark.parametrize("secret", [v for v in DIFF_LINES.values() if v])
def test_secrets_in_a_diff(secret):
    diff = "".join(f"+{line}\n" for line in DIFF_LINES)
    assert secret not in redact_text(diff, environ={})


@pytest.mark.parametrize(
    "text",
    [
        "eos_token = '</s>'",
        "sort_key = name",
        "max_tokens: 512",
        "pad_token_id = 0",
        "--password-file /run/secrets/pw",
        "key = 'id'",
        "step_key: step",
        "_=/usr/bin/python3",  # the shell's $_, in every environment a script prints
        "__: 5, -=x",
    ],
)
def test_what_is_not_a_secret_stays(text):
    assert redact_text(text, environ={}) == text


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet=string.printable, max_size=80))
def test_any_text_is_redacted_without_an_error(text):
    """A run's log line, whatever it holds, passes the redactor (a failure would lose it)."""
    assert isinstance(redact_text(text, environ={"API_TOKEN": "tok-123456789"}), str)


def test_argv_flags():
    argv = [
        "x",
        "--db-password",
        "p",
        "--token=t",
        "--api-key",
        "k",
        "--password",
        "--next",
        "-p",
        "8080",
        "--lr",
        "1",
    ]
    assert redact_argv(argv, environ={}) == [
        "x",
        "--db-password",
        HIDDEN,
        f"--token={HIDDEN}",
        "--api-key",
        HIDDEN,
        "--password",
        "--next",
        "-p",
        "8080",
        "--lr",
        "1",
    ]
    printed = Redactor(
        {}, [["t.py", "db.password=hydraPw-8q", "--db-password", "flagPw-1", "--token=tok-0042"]]
    )
    assert (
        printed.text("conf hydraPw-8q flagPw-1 tok-0042")
        == f"conf {REDACTED} {REDACTED} {REDACTED}"
    )


def test_json_is_redacted_before_it_is_serialised():
    obj = {
        "argv": ["t", "--db-password", 'a"b\\c'],
        "reason": 'failed: a"b\\c',
        "loss_keys": ["loss"],
        "step_key": "step",
    }
    text = json.dumps(redact_json(obj))
    assert (
        'a\\"b\\\\c' not in text
        and json.loads(text)["loss_keys"] == ["loss"]
        and '"step_key": "step"' in text
    )


# ------------------------------------------------------------------ properties: any value, any
# alphabet

_ALPHABET = string.ascii_letters + string.digits + string.punctuation + " é中"
_SECRET_VARS = [
    "API_KEY",
    "MYSQL_PWD",
    "DB_PW",
    "CI_JOB_JWT",
    "HF_TOKEN",
    "MY_PASSWORD",
    "X_SECRET",
    "SESSION_COOKIE",
]


@settings(
    max_examples=60, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    value=st.text(alphabet=_ALPHABET, min_size=MIN_LITERAL, max_size=48),
    name=st.sampled_from(_SECRET_VARS),
)
def test_a_secret_variable_leaves_no_trace(value, name):
    try:
        float(value)
        assume(False)  # numbers are not searched for (documented)
    except ValueError:
        pass
    assume(
        value.strip().lower()
        not in ("true", "false", "none", "null", "auto", "default", "yes", "no")
    )
    r = Redactor({name: value, "OTHER": "x"})
    texts = [
        f"run {value} end",
        f"{value}",
        f"'{value}'",
        f"a={value};",
        json.dumps({"k": value}),
        repr([value]),
    ]
    for text in texts:
        clean = r.text(text)
        assume(
            value not in text.replace(value, REDACTED)
        )  # the value is not part of the fixed text around it
        LEAKS["cases"] += 1
        assert value not in clean, (text, clean)
    data = json.dumps(r.data({"argv": ["t", value], "msg": f"got {value}", name: value}))
    assert json.dumps(value)[1:-1] not in data
    assert recorded_environ({name: value, "OTHER": "x"}, r)[name] == REDACTED


@settings(max_examples=40, derandomize=True, deadline=None)
@given(
    value=st.text(alphabet=_ALPHABET.replace(" ", ""), min_size=1, max_size=32),
    flag=st.sampled_from(
        [
            "--password",
            "--db-password",
            "--token",
            "--api-key",
            "--hf_token",
            "--secret",
            "--key",
            "-passwd",
            "--client-secret",
            "--jwt",
        ]
    ),
)
def test_a_value_after_a_secret_flag_is_removed(value, flag):
    assume(not value.startswith("--"))
    LEAKS["cases"] += 2
    out = Redactor({}).argv(["train.py", flag, value, f"{flag}={value}", "--lr", "0.1"])
    assert out == ["train.py", flag, HIDDEN, f"{flag}={HIDDEN}", "--lr", "0.1"]


@settings(max_examples=40, derandomize=True, deadline=None)
@given(
    value=st.text(
        alphabet=string.ascii_letters + string.digits + "_-+/=.!@#$%^*~?|", min_size=1, max_size=40
    ),
    key=st.sampled_from(
        [
            "db_pass",
            "password",
            "Pwd",
            "PWD",
            "client_secret",
            "api_key",
            "secret_key",
            "passwd",
            "DB_PASSWORD",
            "apiKey",
            "privateKey",
            "AccountKey",
        ]
    ),
    sep=st.sampled_from([": ", " = ", "=", '": "', " := "]),
)
def test_a_value_under_a_secret_key_in_a_file_is_removed(value, key, sep):
    assume(
        value.lower()
        not in (
            "true",
            "false",
            "yes",
            "no",
            "on",
            "off",
            "none",
            "null",
            "auto",
            "default",
            "disabled",
            "enabled",
            "unset",
        )
        and not value.startswith("/")
    )
    line = (
        f'+    "{key}{sep}{value}",  # planted\n'
        if sep.startswith('"')
        else f"+    {key}{sep}{value};\n"
    )
    LEAKS["cases"] += 1
    assert redact_text(line, environ={}).split(sep, 1)[1].startswith(REDACTED), line


# ------------------------------------------------------------ the rule that needs no secret's shape

_HOSTS = st.from_regex(r"[a-z][a-z0-9]{0,10}(\.[a-z][a-z0-9]{0,6}){1,2}", fullmatch=True)
_URL_PARTS = st.text(
    alphabet=string.ascii_letters + string.digits + "-_.~%", min_size=1, max_size=24
)


@settings(max_examples=60, derandomize=True, deadline=None)
@given(
    host=_HOSTS,
    parts=st.lists(_URL_PARTS, min_size=1, max_size=4),
    query=st.none() | _URL_PARTS,
    user=st.none() | _URL_PARTS,
    option=st.sampled_from(["--notify", "--url", "--endpoint", "--x", None, "--data", "--config"]),
)
def test_a_url_on_the_command_line_keeps_its_scheme_and_host_only(host, parts, query, user, option):
    """Property: whatever its path, query or credentials (a Slack webhook has no token shape), a
    URL in argv is hidden, or shown as scheme and host under an option whose values are shown, and
    what was cut is not shown where the script prints it (its log)."""
    userinfo, query = (user + "@" if user else ""), ("?q=" + query if query else "")
    url = f"https://{userinfo}{host}/{'/'.join(parts)}{query}"
    argv = ["train.py", *([option] if option else []), url]
    r = Redactor({}, [argv])
    shown = option in ("--data", "--config")
    assert r.argv(argv)[-1] == (f"https://{host}/{REDACTED}" if shown else HIDDEN)
    assert url not in r.text(f"config: {argv}") and url not in json.dumps(r.data({"argv": argv}))
    LEAKS["cases"] += 1


_WORDISH = st.text(
    alphabet=string.ascii_letters + string.digits + "-_+=!@#$%^&*", min_size=9, max_size=40
)


@settings(max_examples=60, derandomize=True, deadline=None)
@given(
    value=_WORDISH,
    option=st.sampled_from(["--note", "--hook-id", "--x", "-k", "--passcode", "--wandb"]),
)
def test_a_value_seeder_cannot_show_harmless_is_not_shown(value, option):
    """Property: a value that is no number, path or URL, under an option not known to be
    harmless, is removed from argv and, unless made of lower-case words only, from any text that
    prints it."""
    assume(not value.startswith("-") and "/" not in value and "." not in value)
    assume(not re.fullmatch(r"[a-z]+(?:[_\-][a-z]+)*", value))
    try:
        float(value)
        assume(False)  # numbers are shown (documented)
    except ValueError:
        pass
    argv = ["train.py", option, value, f"{option}={value}"]
    r = Redactor({}, [argv])
    assert r.argv(argv) == ["train.py", option, HIDDEN, f"{option}={HIDDEN}"]
    assert value not in r.text(f"started with {value}")
    LEAKS["cases"] += 2


def test_what_a_command_line_shows():
    argv = [
        "/usr/bin/python",
        "-m",
        "torch.distributed.run",
        __file__,  # the script: an existing file
        "--lr",
        "-0.1",
        "--epochs",
        "3",
        "--out-dir",
        "/runs/exp-1",
        "--config",
        "configs/base.yaml",
        "--model",
        "resnet50-imagenet-v2",
        "--run-name",
        "my-long-experiment-name",
        "trainer.devices=4",
        "model=vit_base_patch16",
        "--amp",
        "--gpus",
        "0,1,2,3",
        "--data",
        f"/data/{HEX40}/x",
    ]
    shown = Redactor({}).argv(argv)
    assert shown[:-1] == argv[:-1]
    assert shown[-1] == f"/data/{REDACTED}/x"  # a token inside a path is cut
    hidden = ["t.py", "fit", "--note", "abc", "--act=relu", "no/such/dir/x", "hunter2"]
    assert Redactor({}).argv(hidden) == [
        "t.py",
        HIDDEN,
        "--note",
        HIDDEN,
        f"--act={HIDDEN}",
        HIDDEN,
        HIDDEN,
    ]


@pytest.mark.parametrize(
    "name",
    [
        ".netrc",
        "home/.pgpass",
        "prod.env",
        ".env",
        ".env.local",
        "aws/credentials",
        "deploy/secrets.yaml",
        "id_ed25519",
        "tls/server.key",
    ],
)
@pytest.mark.parametrize(
    "line",
    [
        "machine h login u password netrcPw-4521",
        "db:5432:app:me:pgpassPw-9931",
        "plain words only here",
    ],
)
def test_a_credential_files_lines_leave_nothing_in_a_diff(name, line):
    diff = (
        f"diff --git a/{name} b/{name}\nindex 1..2 100644\n--- a/{name}\n+++ b/{name}\n"
        f"@@ -1,2 +1,2 @@\n {line} kept\n-{line} old\n+{line} new\n"
    )
    out = Redactor({}).diff(diff)
    LEAKS["cases"] += 1
    assert line not in out and out.count(REDACTED) == 3 and f"+++ b/{name}" in out


@settings(max_examples=60, derandomize=True, deadline=None)
@given(
    token=st.text(alphabet=string.ascii_letters + string.digits, min_size=20, max_size=48),
    key=st.sampled_from(["wandb", "run_id", "hash", "x", "value", "neptune"]),
    sep=st.sampled_from([": ", " = ", "=", " "]),
)
def test_a_random_looking_token_in_a_diff_line_is_removed(token, key, sep):
    """Property: 20 or more letters and digits mixed, under any name (``wandb: <40 hex>``), leave
    no trace in a diff."""
    assume(any(c.isdigit() for c in token) and any(c.isalpha() for c in token))
    diff = f"diff --git a/c.yaml b/c.yaml\n@@ -1 +1,2 @@\n lr: 1\n+{key}{sep}{token}\n"
    LEAKS["cases"] += 1
    assert token not in Redactor({}).diff(diff)


def test_a_diff_keeps_what_is_harmless():
    diff = (
        "diff --git a/train.py b/train.py\n@@ -1,3 +1,3 @@\n import torch\n-lr = 0.1\n"
        "+lr = 0.2\n model = DistributedDataParallel(net)\n"
    )
    assert Redactor({}).diff(diff) == diff


_SECRET_WORDS = st.sampled_from(
    ["password", "db_pass", "api_token", "client_secret", "private_key"]
)
_VALUES = st.text(string.ascii_letters + string.digits + "-_!", min_size=6, max_size=30).filter(
    lambda v: any(c.isdigit() for c in v) and any(c.isalpha() for c in v)
)


@settings(max_examples=60, derandomize=True, deadline=None)
@given(key=_SECRET_WORDS, old=_VALUES, new=_VALUES, indent=st.sampled_from(["", "  ", "    "]))
def test_a_removed_line_and_an_unchanged_line_under_a_secret_key_leave_nothing(
    key, old, new, indent
):
    diff = (
        f"diff --git a/c.yaml b/c.yaml\n@@ -1,3 +1,3 @@\n section:\n-{indent}{key}: {old}\n"
        f"+{indent}{key}: {new}\n {indent}backup_{key}: {old}x\n"
    )
    shown = Redactor({}).diff(diff)
    assert old not in shown and new not in shown
    assert f"-{indent}{key}: {REDACTED}\n" in shown and f"+{indent}{key}: {REDACTED}\n" in shown


@settings(max_examples=60, derandomize=True, deadline=None)
@given(
    key=st.sampled_from(["password_block", "ssh_private_key", "token", "secret_pem"]),
    lines=st.lists(_VALUES, min_size=1, max_size=4),
    style=st.sampled_from(["|", ">", "|-", ">+", "|2"]),
    side=st.sampled_from("+- "),
)
def test_a_block_scalar_under_a_secret_key_leaves_nothing(key, lines, style, side):
    body = "".join(f"{side}    {v}\n" for v in lines)
    diff = (
        f"diff --git a/c.yaml b/c.yaml\n@@ -1,9 +1,9 @@\n top:\n{side}  {key}: {style}\n{body}"
        f"{side}  after: kept-value\n"
    )
    shown = Redactor({}).diff(diff)
    assert not any(v in shown for v in lines), shown
    assert f"{side}    {REDACTED}\n" in shown and f"{side}  after: kept-value\n" in shown


def test_a_block_scalar_under_another_key_is_kept():
    diff = "diff --git a/c.yaml b/c.yaml\n@@ -1 +1,3 @@\n+notes: |\n+  long-text-value-1\n+lr: 2\n"
    assert Redactor({}).diff(diff) == diff


@settings(max_examples=60, derandomize=True, deadline=None)
@given(
    host=st.from_regex(r"[a-z]{3,10}\.(com|io|example)", fullmatch=True),
    path=st.lists(st.text(string.ascii_letters, min_size=4, max_size=20), min_size=1, max_size=3),
    flag=st.sampled_from(["--notify", "--callback", "--report-to", "--data", "--log-dir"]),
)
def test_a_url_on_the_command_line_reads_the_same_in_text_and_in_argv(host, path, flag):
    url = f"https://{host}/" + "/".join(path)
    argv = ["train.py", flag, url]
    r = Redactor({}, [argv])
    shown = f"https://{host}/{REDACTED}" if flag in ("--data", "--log-dir") else HIDDEN
    assert r.text(" ".join(argv)) == " ".join(r.argv(argv)) == f"train.py {flag} {shown}"


def test_a_command_verify_cannot_probe_is_named_redacted(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("")
    command = ["bash", str(script), *ARGV_FORMS]
    argv, why = probe_argv(command, Path("."))
    assert argv is None and why.startswith(f"bash {script} --api-key={HIDDEN} --token {HIDDEN}")
    assert not [s for s in ARGV_FORM_SECRETS if s in why]


def test_a_seeder_log_record_shows_no_url_path_given_on_the_command_line(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["train.py", "--notify", WEBHOOK])
    handler = logging.FileHandler(tmp_path / "seeder.log")
    logger = logging.getLogger("seeder")
    logger.addHandler(handler)
    try:
        logger.warning("posting to %s", WEBHOOK)
    finally:
        logger.removeHandler(handler)
        handler.close()
    assert WEBHOOK_SECRET not in (tmp_path / "seeder.log").read_text()


# ------------------------------------------------------------------ files are never written through
# a symlink


def test_snapshot_refuses_a_directory_with_a_planted_symlink(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    victim.chmod(0o644)
    for existing_snapshot in (False, True):
        d = tmp_path / f"snap{int(existing_snapshot)}"
        d.mkdir()
        if existing_snapshot:
            (d / "manifest.json").write_text(json.dumps({"files": {}}))
        (d / "env.txt").symlink_to(victim)
        with pytest.raises(UnsafeDirectoryError, match="symbolic link"):
            capture_environment(d, overwrite=True)
        assert victim.read_text() == "precious" and stat.S_IMODE(victim.stat().st_mode) == 0o644
    with pytest.warns(SeederWarning, match="symbolic link"):  # seeder run's snapshot hook
        _snapshot_at_init(tmp_path / "snap0")  # training goes on without the snapshot
    assert victim.read_text() == "precious" and stat.S_IMODE(victim.stat().st_mode) == 0o644
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "weights.pt").write_text("w")
    with pytest.raises(UnsafeDirectoryError, match="not empty"):
        capture_environment(foreign)
    assert sorted(p.name for p in foreign.iterdir()) == ["weights.pt"]


def test_write_file_replaces_a_symlink_instead_of_following_it(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("v")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "report.json").symlink_to(victim)
    (tmp_path / "d" / "sub").symlink_to(tmp_path)
    write_file(tmp_path / "d", "report.json", b"{}")
    with pytest.raises(UnsafeDirectoryError):
        write_file(tmp_path / "d", "sub/victim", b"x")
    assert victim.read_text() == "v" and (tmp_path / "d" / "report.json").read_text() == "{}"
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == [
        "report.json",
        "sub",
    ]  # no temporary file left


def test_verify_writes_reports_and_run_records_without_following_symlinks(tmp_path):
    need_verify(figures=False)
    from seeder.verify._runner import RunSpec, run_all
    from seeder.verify._session import OutputDirError, prepare_out, write_json

    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "file").write_text("v")
    out = tmp_path / "out"
    out.mkdir()
    (out / ".seeder-verify").write_text("{}")
    (out / "runs").symlink_to(victim)
    with pytest.raises(OutputDirError, match="symbolic link"):
        prepare_out(out)
    (out / "runs").unlink()
    (out / "report.json").symlink_to(victim / "file")
    write_json(out / "report.json", {"argv": ["t", "--token", "tok-planted-1"]})
    assert (victim / "file").read_text() == "v" and "tok-planted-1" not in (
        out / "report.json"
    ).read_text()
    work = tmp_path / "run"
    work.mkdir()
    (work / "run.json").symlink_to(victim / "file")
    (work / "log.txt").symlink_to(victim / "log")
    res = run_all(
        [RunSpec("r", [sys.executable, "-c", "print('api_key = k3yPrintedByTheRun01')"], work)],
        progress=False,
    )
    assert res[0].ok and (victim / "file").read_text() == "v" and not (victim / "log").exists()
    assert (
        "k3yPrintedByTheRun01"
        not in (work / "log.txt").read_text() + (work / "run.json").read_text()
    )


def test_seeder_log_records_are_redacted_before_a_file_handler_writes_them(tmp_path, monkeypatch):
    monkeypatch.setenv("MYSQL_PWD", "logPw-8812")
    handler = logging.FileHandler(tmp_path / "seeder.log")
    logger = logging.getLogger("seeder")
    logger.addHandler(handler)
    try:
        logger.warning("could not start %s", ["t.py", "--token=logTok-55", "logPw-8812"])
    finally:
        logger.removeHandler(handler)
        handler.close()
    text = (tmp_path / "seeder.log").read_text()
    assert "could not start" in text and "logTok-55" not in text and "logPw-8812" not in text


# Every form of issue 41's planted secrets, as a function of the secret value.
_FORMS = [
    lambda v: [f"--api-key={v}"],
    lambda v: ["--token", v],
    lambda v: [f"--pass={v}"],
    lambda v: ["--hf_token", v],
    lambda v: [f"API_KEY={v}"],
    lambda v: [json.dumps({"password": v})],
    lambda v: [f"https://alice:{v}@example.com/data"],
    lambda v: [f"mysql://bob:{v}@db.example:3306/app"],
    lambda v: [f"s3://AKIDPLANTED:{v}@bucket/key"],
    lambda v: [v],  # positional
    lambda v: ["--note", v],
    lambda v: ["--notify", f"https://hooks.example.com/services/{v}"],
]
_HARMLESS = [["--lr", "0.1"], ["--epochs", "3"], ["--model", "resnet50"], ["-v"], ["--amp"]]
# A secret as people make them: letters and digits (at least one of each), dashes, underscores.
_SECRET_VALUES = st.from_regex(r"[A-Za-z][A-Za-z0-9_\-]{3,22}[0-9]", fullmatch=True)


@settings(max_examples=80, derandomize=True, deadline=None)
@given(
    secret=_SECRET_VALUES,
    forms=st.lists(st.sampled_from(range(len(_FORMS))), min_size=1, max_size=4),
    harmless=st.lists(st.sampled_from(_HARMLESS), max_size=3),
)
def test_no_planted_secret_reaches_any_command_line_a_tool_writes_or_prints(
    secret, forms, harmless
):
    """Property: whatever form a secret takes on a command line, no path by which a seeder tool
    writes or prints that command line (a record's ``argv``, the one-line form, a log line that
    quotes it, a report's JSON, the tool's redacted stdout, a diff that removes it) shows it."""
    import contextlib
    import io

    from seeder.env._redact import command_text, file_redactor, redacted_output

    assume(secret not in json.dumps(_HARMLESS) and "resnet50" not in secret)
    argv = ["train.py"] + [w for f in forms for w in _FORMS[f](secret)]
    argv += [w for pair in harmless for w in pair]
    r = file_redactor([argv])
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), redacted_output([argv]):
        print("driven as", " ".join(argv), argv)
    diff = (
        "diff --git a/c.yaml b/c.yaml\n@@ -1,2 +1,3 @@\n"
        f"-password: {secret}\n+password: x\n+password_block: |\n+  {secret}\n"
    )
    outputs = [
        json.dumps(r.argv(argv)),
        command_text(argv),
        r.text(" ".join(argv)),
        r.text(f"config: {argv}"),
        json.dumps(redact_json({"argv": argv, "command": argv, "log": " ".join(argv)})),
        buf.getvalue(),
        r.diff(diff),
    ]
    LEAKS["cases"] += len(outputs)
    leaked = [o for o in outputs if secret in o]
    LEAKS["leaks"] += len(leaked)
    assert not leaked, leaked


def test_leak_count_for_the_note():
    """Runs last in this file: prints the cases checked and the leaks found (0)."""
    print(f"\nsecrets: {LEAKS['cases']} planted-value checks, {LEAKS['leaks']} leaks")
    assert LEAKS["leaks"] == 0


def _snapshot_at_init(directory):
    """``init`` of the module-level seeder with the snapshot hook ``seeder run`` installs."""
    from seeder._run import bootstrap
    from seeder._seeding.default import default_seeder

    os.environ["SEEDER_SNAPSHOT_DIR"] = str(directory)
    bootstrap.install()
    try:
        default_seeder().init(5)
    finally:
        bootstrap.uninstall()
        default_seeder().reset()
        del os.environ["SEEDER_SNAPSHOT_DIR"]
