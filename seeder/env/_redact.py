"""Redaction: the one path every file seeder writes goes through, so that no secret reaches a file.

Pattern-based and pure. :class:`Redactor` removes, replacing each with :data:`REDACTED`:
the values of secret-named environment variables (wherever they appear), values after
secret-looking flags (``--db-password X``, ``--token=X``), ``name = value`` /
``name: value`` pairs with secret names
(``db_pass: X``, ``Pwd=X;`` in connection strings), credentials in URLs, secret query
parameters, well-known token formats (GitHub, GitLab, AWS, Slack, Hugging Face,
OpenAI, JWTs) and private-key blocks. :meth:`Redactor.data` applies it to a
JSON-able object before it is serialised (``argv`` lists flag by flag).

A pattern finds the secrets it knows; a rule without shapes decides what is shown of the rest:

* A command-line value is shown when seeder can tell it is harmless: a number, a ``true``/``false``
  word, a value of at most :data:`SHORT` characters, a path (``/…``, ``./…``, ``~/…``, or with a
  ``/`` or a file extension), or the value of an option whose name is on :data:`SHOWN_OPTIONS`
  (``--model``, ``--out-dir``, ``--config``, ...). Any other value is replaced whole.
* A URL shows its scheme and host only: credentials, path and query are replaced.
* Inside what is shown, a random-looking chunk (:func:`random_looking`: 20 or more letters and
  digits mixed, or 32 or more hexadecimal digits) is replaced: a token pasted into a path or a name.
* A diff shows nothing of a file that looks like a credential file (:func:`credential_file`:
  ``.netrc``, ``.pgpass``, ``*.env``, ``credentials``, keys, ...): its lines are replaced whole;
  in other files' lines, random-looking chunks and the value after ``password``/``secret``/``token``
  words are replaced.

Example:
    >>> redact_text("pip install -i https://alice:s3cret@pypi.example/simple x")
    'pip install -i https://<redacted>@pypi.example/simple x'
    >>> is_secret_name("HF_TOKEN"), is_secret_name("OMP_NUM_THREADS")
    (True, False)
    >>> Redactor({}).argv(["train.py", "--db-password", "pw", "--token=abc", "--lr", "0.1"])
    ['train.py', '--db-password', '<redacted>', '--token=<redacted>', '--lr', '0.1']
    >>> shown_value("resnet50", "--model"), shown_value("some-long-value", "--note")
    ('resnet50', '<redacted>')
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Optional, TextIO, cast
from urllib.parse import quote, unquote

__all__ = [
    "REDACTED",
    "SECRET_NAME_PARTS",
    "SECRET_NAME_WORDS",
    "SECRET_KEY_WORDS",
    "MIN_LITERAL",
    "Redactor",
    "is_secret_name",
    "is_secret_key",
    "redact_text",
    "redact_argv",
    "redact_json",
    "file_redactor",
    "RedactingFilter",
    "SHORT",
    "SHOWN_OPTIONS",
    "is_number",
    "random_looking",
    "mask_random",
    "strip_urls",
    "is_path",
    "shown_value",
    "credential_file",
    "redact_diff",
    "RedactingStream",
    "command_text",
    "redacted_output",
]

#: What replaces a secret in every file seeder writes.
REDACTED = "<redacted>"

#: Parts of variable names whose values are secret (matched anywhere in the upper-cased name).
SECRET_NAME_PARTS = (
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "PASS",
    "KEY",
    "CREDENTIAL",
    "CREDS",
    "AUTH",
    "COOKIE",
    "PRIVATE",
    "SIGNATURE",
    "DSN",
    "WEBHOOK",
    "CONNECTION_STRING",
    "SAS_",
)
#: Whole words (split at ``_`` and other non-alphanumerics) that make a variable name secret:
#: ``MYSQL_PWD``, ``DB_PW``.
SECRET_NAME_WORDS = ("PWD", "PW", "JWT", "SAS", "OTP")
#: Last words of flag and key names whose value is secret (``--db-password``, ``db_pass:``,
#: ``Pwd=``, ``--api-key``).
SECRET_KEY_WORDS = (
    "password",
    "passwd",
    "passphrase",
    "pwd",
    "pw",
    "pass",
    "secret",
    "token",
    "apikey",
    "key",
    "credential",
    "credentials",
    "creds",
    "jwt",
    "cookie",
    "dsn",
    "webhook",
    "signature",
    "sas",
    "accountkey",
    "sharedaccesskey",
    "auth",
    "authorization",
)
#: Secret values shorter than this (and numbers, and ``true``/``false``-like words) are redacted
#: where they are named (the variable, a flag, a key) but not searched for elsewhere:
#: ``KEYTIMEOUT=1`` would otherwise remove every ``1`` of every file.
MIN_LITERAL = 4
_NOT_SECRET_VALUES = {
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
}

_URL_USERINFO = re.compile(
    r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>(?:[^\s/?#@'\"<>]|<redacted>)+)@"
)
_QUERY_SECRET = re.compile(
    r"(?i)(?P<key>[?&;][^=&\s#]*?(?:token|secret|sig|signature|key|password|passwd|pwd|auth|credential)[^=&\s#]*=)"
    r"(?P<value>[^&\s#'\"]+)"
)
_CONDA_TOKEN = re.compile(r"/t/[A-Za-z0-9_\-]{8,}(?=/)")
_KNOWN_TOKENS = re.compile(
    r"(?<![A-Za-z0-9])(?:hf_[A-Za-z0-9]{30,}|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,}"
    r"|glpat-[A-Za-z0-9_\-]{20,}|(?:AKIA|ASIA)[0-9A-Z]{16}|sk-[A-Za-z0-9_\-]{20,}|xox[abposr]-[A-Za-z0-9\-]{10,}"
    r"|xapp-[A-Za-z0-9\-]{10,}|AIza[0-9A-Za-z_\-]{35}|npm_[A-Za-z0-9]{36}|pypi-[A-Za-z0-9_\-]{50,}"
    r"|[sr]k_(?:live|test)_[A-Za-z0-9]{16,}|ya29\.[A-Za-z0-9_\-]{20,}"
    r"|eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*)"
)
_PRIVATE_KEY = re.compile(
    r"-----BEGIN [A-Z ]*PRIVATE KEY[A-Z ]*-----.*?(?:-----END [A-Z ]*PRIVATE KEY[A-Z ]*-----|\Z)",
    re.S,
)
_AUTH_HEADER = re.compile(
    r"(?i)(\b(?:proxy-)?authorization\s*[:=]\s*[\"']?(?:bearer|basic|token|digest)?\s*)[^\s\"']+"
)
# --flag value / --flag=value, in free text (logs, variables, diffs); argv lists go through
# Redactor.argv.
_FLAG = re.compile(
    r"(?<![\w\-])(?P<flag>--?[A-Za-z][A-Za-z0-9_.\-]*)(?P<sep>=|[ \t]+)(?P<q>[\"'])?"
    r"(?P<value>(?(q)[^\"'\n]+|(?!-)[^\s\"']+))"
)
# name = value, name: value, "name": "value", Pwd={a;b}: diffs, configs, connection strings.
_KEY_VALUE = re.compile(
    r"(?P<name>(?<![A-Za-z0-9_.\-])[A-Za-z_][A-Za-z0-9_.\-]*)(?P<sep>[\"']?[ \t]*(?::=|[:=])[ \t]*)"
    r"(?P<q>[\"'])?(?P<value>(?(q)[^\"'\n]+|(?:\{[^}\n]*\}|[^\s\"',;)}\]&]+)))"
)
_CREDENTIAL_LIKE = re.compile(r"[A-Za-z0-9_\-+/=.~]{8,}")
_HIGH_ENTROPY = re.compile(
    r"(?=[A-Za-z0-9_\-+/=.]*\d)(?=[A-Za-z0-9_\-+/=.]*[A-Za-z])[A-Za-z0-9_\-+/=.]{16,}"
)
_WORDS = re.compile(r"[a-z0-9]+")
_ARGV_KEYS = {"argv", "command", "cmd"}
_HYDRA_KEY = re.compile(r"[+~]{0,2}[A-Za-z_][A-Za-z0-9_.\-/@]*")  # overrides: trainer.devices=4


# What is shown of a value no pattern names as secret: a rule without shapes.

#: Values of at most this many characters are shown (shorter than any credential worth the name).
SHORT = 8
#: Last words of option names whose values are shown: paths, names and choices of training scripts.
SHOWN_OPTIONS = frozenset(
    {
        "dir",
        "path",
        "file",
        "root",
        "folder",
        "out",
        "output",
        "outdir",
        "config",
        "cfg",
        "conf",
        "name",
        "model",
        "arch",
        "dataset",
        "data",
        "device",
        "devices",
        "backend",
        "loader",
        "optimizer",
        "scheduler",
        "mode",
        "precision",
        "dtype",
        "strategy",
        "accelerator",
        "log",
        "logdir",
        "ckpt",
        "checkpoint",
        "resume",
        "task",
        "split",
        "format",
        "type",
        "kind",
        "level",
        "policy",
        "method",
        "template",
        "script",
        "module",
        "prefix",
        "suffix",
        "tag",
        "tags",
        "project",
        "experiment",
        "run",
        "group",
        "engine",
        "loss",
        "metric",
        "monitor",
        "m",
    }
)
_URL = re.compile(
    r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?:[^\s/?#@'\"<>]*@)?(?P<host>[^\s/?#'\"<>]+)"
    r"(?P<rest>[/?#][^\s'\"<>]*)?"
)
_CHUNK = re.compile(r"[A-Za-z0-9+]+")
_HEX = re.compile(r"[0-9a-fA-F]{32,}")
_SPACED_SECRET = re.compile(
    r"(?i)(?<![A-Za-z0-9_])(?P<key>password|passwd|passphrase|secret|token|apikey)"
    r"(?P<sep>\s+)(?P<value>[^\s<=:\"'][^\s]*)"
)  # ``password X`` (.netrc)
_CREDENTIAL_NAMES = re.compile(
    r"(?i)^(?:[._]?netrc|\.pgpass|\.pypirc|\.npmrc|\.yarnrc|\.git-credentials|\.htpasswd"
    r"|\.dockercfg|\.s3cfg|\.boto|\.vault-token|kubeconfig|\.my\.cnf"
    r"|id_(?:rsa|dsa|ecdsa|ed25519)(?:\.pub)?|\.?env(?:\..*)?|.*\.env"
    r"|.*(?:credential|secret|password|passwd|pgpass|netrc).*"
    r"|.*\.(?:pem|key|p12|pfx|jks|keystore|asc|gpg))$"
)
_DIFF_FILE = re.compile(r"^diff --git a/(?P<a>.*) b/(?P<b>.*)$")


def random_looking(chunk: str) -> bool:
    """Whether ``chunk`` (letters and digits) looks like a token rather than a word or a number.

    >>> [random_looking(c) for c in ("9f3a1c5e7b2d4f6081a3c5e7092b4d6f8a1c3e5b",
    ...                              "Zk9PlantedAwsSecret0123", "resnet50",
    ...                              "DistributedDataParallel", "20240101")]
    [True, True, False, False, False]
    """
    if _HEX.fullmatch(chunk):
        return True
    return len(chunk) >= 20 and any(c.isdigit() for c in chunk) and any(c.isalpha() for c in chunk)


def mask_random(text: str) -> str:
    """``text`` with each random-looking chunk replaced.

    >>> mask_random("wandb: 0a1b2c3d4e5f60718293a4b5c6d7e8f901234567")
    'wandb: <redacted>'
    """
    return _CHUNK.sub(lambda m: REDACTED if random_looking(m.group(0)) else m.group(0), text)


def strip_urls(text: str) -> str:
    """``text`` with each URL reduced to its scheme and host (credentials, path and query replaced).

    >>> strip_urls("post to https://user:pw@hooks.example.com:8443/services/T0/B0/x?sig=1 now")
    'post to https://hooks.example.com:8443/<redacted> now'
    """
    return _URL.sub(
        lambda m: m.group("head") + m.group("host") + ("/" + REDACTED if m.group("rest") else ""),
        text,
    )


def is_path(value: str) -> bool:
    """Whether ``value`` reads as a file path: ``/``, ``./``, ``../`` or ``~`` first, or a ``/`` or
    an extension in it.

    >>> is_path("/data/x"), is_path("configs/a.yaml"), is_path("train.py"), is_path("hunter2-horse")
    (True, True, True, False)
    """
    if "://" in value or any(c.isspace() for c in value):
        return False
    return (
        value.startswith(("/", "./", "../", "~"))
        or "/" in value
        or re.search(r"\.[A-Za-z][A-Za-z0-9]{0,5}$", value) is not None
    )


def _harmless(value: str) -> bool:
    if len(value) <= SHORT or value.strip().lower() in _NOT_SECRET_VALUES:
        return True
    try:
        float(value)
        return True
    except ValueError:
        return all(is_number(v) for v in value.split(",")) and "," in value


def is_number(text: str) -> bool:
    """Whether ``text`` reads as one number (``float`` takes it).

    >>> is_number("-3e-4"), is_number("0,1")
    (True, False)
    """
    try:
        float(text)
    except ValueError:
        return False
    return True


def shown_value(value: str, option: Optional[str] = None) -> str:
    """What a file shows of the command-line ``value`` (of ``option``, or positional); see above.

    Args:
        value: the value as given.
        option: the option it is the value of (``--out-dir``, a Hydra override's
            ``trainer.devices``), or ``None``.

    Returns:
        ``value``, with URLs reduced and random-looking chunks replaced, when it is harmless or its
        option is on :data:`SHOWN_OPTIONS`; else ``<redacted>``.

    >>> shown_value("/runs/exp1", None), shown_value("my-run-with-a-long-name", "--run-name")
    ('/runs/exp1', 'my-run-with-a-long-name')
    """
    words = _key_words(option) if option else []
    stripped = strip_urls(value)
    if stripped != value:
        return mask_random(stripped)
    if _harmless(value) or is_path(value) or (words and words[-1] in SHOWN_OPTIONS):
        return mask_random(value)
    return REDACTED


def credential_file(path: str) -> bool:
    """Whether a file's name says it holds credentials, so that a diff shows none of its lines.

    >>> [credential_file(p) for p in (".netrc", "home/.pgpass", "prod.env", ".env.local", "c.yaml",
    ...                               "model.py")]
    [True, True, True, True, False, False]
    """
    return _CREDENTIAL_NAMES.match(path.rsplit("/", 1)[-1]) is not None


_BLOCK_SCALAR = re.compile(
    r"^(?P<indent>[ \t]*)(?:-[ \t]+)?[\"']?(?P<name>[A-Za-z_][A-Za-z0-9_.\-]*)[\"']?[ \t]*:[ \t]*"
    r"[|>][-+0-9]*[ \t]*(?:#.*)?$"
)


def _names_secret(name: str) -> bool:
    """Whether any word of a key names a secret (``password_block``, ``ssh_key_pem``)."""
    words = _key_words(name)
    return any(
        w in SECRET_KEY_WORDS or a + b in SECRET_KEY_WORDS
        for w, a, b in zip(words, words, words[1:] + [""])
    )


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def redact_diff(diff: str, text: Optional[Callable[[str], str]] = None) -> str:
    """A unified diff (``git diff``) showing no line of a credential file's change, and in others
    no random-looking chunk, URL path, value after a ``password``/``secret``/``token`` word, or
    line of a YAML block scalar under a key with a secret word (``password_block: |``); ``text``
    (a :meth:`Redactor.text`) applies to each line without its ``+``/``-``/`` `` mark, so that a
    removed or unchanged line is read as the file has it.

    >>> print(redact_diff("diff --git a/.netrc b/.netrc\\n@@ -0,0 +1 @@\\n+machine h password pw\\n"
    ...                   "diff --git a/c.yaml b/c.yaml\\n@@ -1 +1 @@\\n-lr: 1\\n+lr: 2"))
    diff --git a/.netrc b/.netrc
    @@ -0,0 +1 @@
    +<redacted>
    diff --git a/c.yaml b/c.yaml
    @@ -1 +1 @@
    -lr: 1
    +lr: 2
    >>> print(redact_diff("@@ -1 +1,3 @@\\n+password_block: |\\n+  s3cret-line\\n+lr: 2"))
    @@ -1 +1,3 @@
    +password_block: |
    +  <redacted>
    +lr: 2
    """
    out, hidden, in_hunk = [], False, False
    block: dict[str, int] = {}  # per side ("+", "-"): the indent of a secret block scalar's key
    for line in diff.splitlines(keepends=True):
        header = _DIFF_FILE.match(line.rstrip("\n"))
        if header is not None:
            hidden = credential_file(header.group("a")) or credential_file(header.group("b"))
            in_hunk = False
            block.clear()
        elif line.startswith("@@"):
            in_hunk = True
            block.clear()
        elif in_hunk and line[:1] in ("+", "-", " "):
            end = "\n" if line.endswith("\n") else ""
            body = line[1 : len(line) - len(end)]
            sides = ("+", "-") if line[0] == " " else (line[0],)
            inside = [
                s for s in sides if s in block and (not body.strip() or _indent(body) > block[s])
            ]
            for s in sides:
                if s not in inside:
                    block.pop(s, None)
            scalar = _BLOCK_SCALAR.match(body)
            if scalar is not None and _names_secret(scalar.group("name")):
                block.update({s: _indent(body) for s in sides})
            if hidden:
                body = REDACTED if body.strip() else body
            elif inside:  # a line of a secret's block scalar: its indent only
                body = body[: _indent(body)] + REDACTED if body.strip() else body
            else:
                body = _SPACED_SECRET.sub(
                    lambda m: m.group("key") + m.group("sep") + REDACTED, body
                )
                body = mask_random(strip_urls(body))
                if text is not None:
                    body = text(body)
            line = line[0] + body + end
        elif text is not None:
            line = text(line)
        out.append(line)
    return "".join(out)


def is_secret_name(name: str) -> bool:
    """Whether an environment variable's value is treated as secret (by its name).

    >>> names = ("AWS_SECRET_ACCESS_KEY", "WANDB_API_KEY", "MYSQL_PWD", "DB_PW", "PWD", "PATH")
    >>> [is_secret_name(n) for n in names]
    [True, True, True, True, False, False]
    """
    upper = name.upper()
    if any(part in upper for part in SECRET_NAME_PARTS):
        return True
    words = re.split(r"[^A-Z0-9]+", upper)
    return len(words) > 1 and any(w in SECRET_NAME_WORDS for w in words)


def _key_words(name: str) -> list[str]:
    return _WORDS.findall(re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name.lstrip("-")).lower())


def is_secret_key(name: str) -> bool:
    """Whether a flag or key name (``--db-password``, ``db_pass``, ``Pwd``, ``apiKey``) names a
    secret: its last word.

    >>> keys = ("--db-password", "db_pass", "Pwd", "apiKey", "--max-tokens", "--password-file")
    >>> [is_secret_key(n) for n in keys]
    [True, True, True, True, False, False]
    """
    words = _key_words(name)
    return bool(words) and (
        words[-1] in SECRET_KEY_WORDS or "".join(words[-2:]) in SECRET_KEY_WORDS
    )


_STRONG_KEY = {
    "api",
    "access",
    "secret",
    "private",
    "account",
    "auth",
    "master",
    "client",
    "encryption",
    "signing",
    "license",
    "shared",
    "session",
    "app",
}
_NOT_A_TOKEN = {
    "eos",
    "bos",
    "pad",
    "unk",
    "sep",
    "cls",
    "mask",
    "special",
    "start",
    "end",
    "stop",
    "max",
    "num",
}


def _hides(name: str, value: str, flag: bool = False) -> bool:
    """Whether ``value`` under the secret key ``name`` is removed.

    A flag's value always is (but ``true``/``false``); a key named only ``key``, ``*_key``
    (``sort_key``) or ``eos_token``-like, only when the value looks like a credential (long, letters
    and digits).
    """
    if not value or value == REDACTED or value.startswith("<"):
        return False
    words = _key_words(name)
    last, before = words[-1], words[-2] if len(words) > 1 else ""
    if words == ["pwd"] and value.startswith(
        "/"
    ):  # the shell's PWD=/home/me (ODBC's PWD= is a password)
        return False
    if last in ("password", "passwd", "pwd", "pw", "pass", "secret", "passphrase"):
        return True
    if not flag and (
        (last == "key" and before not in _STRONG_KEY)
        or (last == "token" and before in _NOT_A_TOKEN)
        or last in ("auth", "authorization")
    ):
        return bool(
            _HIGH_ENTROPY.fullmatch(value)
            or (_CREDENTIAL_LIKE.fullmatch(value) and re.search(r"\d", value))
        )
    return value.lower() not in _NOT_SECRET_VALUES


def _searchable(value: str) -> bool:
    """Whether a secret value is searched for in all text: not too short, not a word or number that
    is everywhere."""
    if len(value) < MIN_LITERAL or value.strip().lower() in _NOT_SECRET_VALUES:
        return False
    try:
        float(
            value
        )  # KEY_SIZE=2048: removing every 2048 would rewrite the numbers of logs and records
    except ValueError:
        return True
    return False


class Redactor:
    """Removes secrets from text, argv lists, diffs and JSON-able objects.

    Built from the environment (``environ``) and command lines (``argvs``) whose secret values
    it must also find as plain text anywhere: values of secret-named variables, passwords of
    URLs and values after secret flags are searched for (whole words when shorter than 8
    characters; not at all below :data:`MIN_LITERAL`).

    >>> r = Redactor({"MY_SECRET": "s3cr3t-value-long", "API_KEY": "abc123"})
    >>> r.text("echo s3cr3t-value-long abc123 xabc123")
    'echo <redacted> <redacted> xabc123'
    """

    def __init__(self, environ: Mapping[str, str], argvs: Iterable[Sequence[str]] = ()):
        # each secret value found, and what replaces it: REDACTED, or for a command-line value
        # the form :meth:`argv` shows (a URL's scheme and host), so that text and argv agree
        found: dict[str, str] = {}

        def hide(value: str, shown: str = REDACTED) -> None:
            if found.get(value, REDACTED) == REDACTED:
                found[value] = shown if value not in shown else REDACTED

        for name, value in environ.items():
            if is_secret_name(name):
                hide(value)
            for m in _URL_USERINFO.finditer(value):
                hide(m.group("userinfo").partition(":")[2])
            for m in _KEY_VALUE.finditer(value):
                if is_secret_key(m.group("name")) and _hides(m.group("name"), m.group("value")):
                    hide(m.group("value").strip("{}"))
        for argv in argvs:
            args = [str(a) for a in argv]
            for i, a in enumerate(args):
                name, eq, value = a.partition("=")  # --token=X, db.password=X (a Hydra override)
                if eq and is_secret_key(name) and _hides(name, value, flag=name.startswith("-")):
                    hide(value)
                elif (
                    not eq
                    and a.startswith("-")
                    and is_secret_key(a)
                    and i + 1 < len(args)
                    and not args[i + 1].startswith("--")
                ):
                    hide(args[i + 1])
            for kind, option, value in _argv_items(args)[1:]:  # what argv() hides, text hides
                if kind != "flag":
                    shown = shown_value(value, option)
                    if shown != value:
                        hide(value, shown)
        # As written in URLs, JSON and Python reprs (a script that prints its argv or config) too.
        for value, shown in list(found.items()):
            for f in (
                unquote,
                lambda v: quote(v, safe=""),
                lambda v: json.dumps(v)[1:-1],
                lambda v: repr(v)[1:-1],
            ):
                hide(f(value), shown if f(value) == value else REDACTED)
        long_first = sorted((v for v in found if _searchable(v)), key=len, reverse=True)
        self.literals = long_first
        self._shown = {v: found[v] for v in long_first}
        self._short = (
            re.compile(
                "|".join(
                    rf"(?<![A-Za-z0-9]){re.escape(v)}(?![A-Za-z0-9])"
                    for v in long_first
                    if len(v) < 8
                )
            )
            if any(len(v) < 8 for v in long_first)
            else None
        )

    def text(self, text: str) -> str:
        """``text`` with every secret replaced by :data:`REDACTED`."""
        for literal in self.literals:  # first: no pattern below may cut a known secret in two
            if len(literal) >= 8:
                text = text.replace(literal, self._shown[literal])
        if self._short is not None:
            text = self._short.sub(REDACTED, text)
        text = _PRIVATE_KEY.sub(REDACTED, text)
        text = _URL_USERINFO.sub(lambda m: m.group("scheme") + REDACTED + "@", text)
        text = _QUERY_SECRET.sub(lambda m: m.group("key") + REDACTED, text)
        text = _CONDA_TOKEN.sub("/t/" + REDACTED, text)
        text = _KNOWN_TOKENS.sub(REDACTED, text)
        text = _AUTH_HEADER.sub(lambda m: m.group(1) + REDACTED, text)
        text = _FLAG.sub(self._pair("flag"), text)
        return _KEY_VALUE.sub(self._pair("name"), text)

    @staticmethod
    def _pair(group: str) -> Callable[[re.Match[str]], str]:
        def sub(m: re.Match[str]) -> str:
            name, value = m[group], m["value"]  # groups that take part in every match
            if not is_secret_key(name) or not _hides(name, value.strip("{}"), flag=group == "flag"):
                return m.group(0)
            return m.group(0)[: m.start("value") - m.start(0)] + REDACTED

        return sub

    def argv(self, argv: Sequence[Any]) -> list[str]:
        """A command line showing only what seeder can tell is harmless
        (:func:`shown_value`): the value after each secret flag (``--password X``,
        ``--token=X``) is removed, and so is any other value that is not a number, short, a path or
        the value of a known-harmless option; URLs keep scheme and host."""
        out: list[str] = []
        for kind, option, value in _argv_items([str(a) for a in argv]):
            name = option or ""  # a "value" and a "pair" always have their option
            if kind == "flag":
                out.append(self.text(value))
            elif kind == "value":
                out.append(REDACTED if is_secret_key(name) else self.text(shown_value(value, name)))
            elif kind == "pair":
                hide = (
                    is_secret_key(name)
                    and bool(value)
                    and (name.startswith("-") or _hides(name, value))
                )
                shown = REDACTED if hide else shown_value(value, name)
                out.append(self.text(f"{name}={shown}"))
            else:
                out.append(self.text(shown_value(value)))
        return out

    def diff(self, diff: str) -> str:
        """A ``git diff`` for a file: no line of a credential file's change (``.netrc``,
        ``.pgpass``, ``*.env``, ...), no random-looking token, URL path or value after
        ``password``-like words elsewhere, then :meth:`text`.

        >>> d = "diff --git a/.pgpass b/.pgpass\\n@@ -0,0 +1 @@\\n+db:5432:app:me:pgPw\\n"
        >>> Redactor({}).diff(d).splitlines()[-1]
        '+<redacted>'
        """
        return redact_diff(diff, self.text)

    def data(self, obj: Any, key: str = "") -> Any:
        """A copy of a JSON-able object with every string redacted, before it is serialised.

        ``argv``/``command`` lists go through :meth:`argv`; a string under a secret key is removed.

        >>> record = {"argv": ["x", "--token", "t0k3n-value"], "password": "hunter2", "n": 1}
        >>> Redactor({}).data(record)
        {'argv': ['x', '--token', '<redacted>'], 'password': '<redacted>', 'n': 1}
        """
        if isinstance(obj, str):
            return REDACTED if key and is_secret_key(key) and _hides(key, obj) else self.text(obj)
        if isinstance(obj, Mapping):
            return {
                self.text(str(k)) if isinstance(k, str) else k: self.data(v, str(k))
                for k, v in obj.items()
            }
        if isinstance(obj, (list, tuple)):
            if key.lower() in _ARGV_KEYS and all(isinstance(a, str) for a in obj):
                return self.argv(obj)
            return [self.data(v) for v in obj]
        return obj


def _argv_items(args: Sequence[str]) -> list[tuple[str, Optional[str], str]]:
    """``(kind, option, text)`` of each element of a command line: ``flag`` (``--lr``), ``value``
    (the one after a flag; ``option`` is the flag), ``pair`` (``--lr=0.1``, ``trainer.devices=4``;
    ``option`` is the name, ``text`` the value) or ``positional``.

    >>> [k for k, _, _ in _argv_items(["t.py", "--lr", "0.1", "a.b=1", "x"])]
    ['positional', 'flag', 'value', 'pair', 'positional']
    """
    items: list[tuple[str, Optional[str], str]] = []
    option: Optional[str] = None  # the flag whose value comes next
    for a in args:
        name, eq, value = a.partition("=")
        if option is not None and not a.startswith("--"):
            items.append(("value", option, a))
            option = None
            continue
        option = None
        if a.startswith("-") and not is_number(a) and not eq:
            items.append(("flag", None, a))
            option = a
        elif eq and (a.startswith("-") or _HYDRA_KEY.fullmatch(name)):
            items.append(("pair", name, value))
        else:
            items.append(("positional", None, a))
    return items


def file_redactor(argvs: Iterable[Sequence[str]] = ()) -> Redactor:
    """The redactor for files written now: this process's environment, its ``sys.argv`` and
    ``argvs``.

    >>> file_redactor([["train.py", "--api-key", "k3y-value"]]).text("key k3y-value")
    'key <redacted>'
    """
    import sys

    return Redactor(os.environ, [sys.argv, *argvs])


def _argvs_in(obj: Any, key: str = "") -> list[list[str]]:
    if isinstance(obj, Mapping):
        return [a for k, v in obj.items() for a in _argvs_in(v, str(k))]
    if isinstance(obj, (list, tuple)):
        if key.lower() in _ARGV_KEYS and all(isinstance(a, str) for a in obj):
            return [list(obj)]
        return [a for v in obj for a in _argvs_in(v)]
    return []


def redact_json(obj: Any, argvs: Iterable[Sequence[str]] = ()) -> Any:
    """A JSON-able object ready for a file: :meth:`Redactor.data` with :func:`file_redactor` of its
    own argv lists.

    >>> redact_json({"argv": ["t.py", "--db-password", "pa55w0rd"],
    ...              "reason": "login pa55w0rd refused"})
    {'argv': ['t.py', '--db-password', '<redacted>'], 'reason': 'login <redacted> refused'}
    """
    return file_redactor([*_argvs_in(obj), *argvs]).data(obj)


def redact_text(text: str, environ: Optional[Mapping[str, str]] = None) -> str:
    """``text`` with secrets replaced by ``<redacted>``.

    Credentials in URLs, secret query parameters, well-known token formats (``hf_``,
    ``ghp_``, ``AKIA``, ``sk-``, JWTs, ...), private-key blocks, values after secret flags,
    ``password = ...``-style pairs, and any literal value of a secret-named variable of
    ``environ`` (``os.environ`` by default) are removed. Pattern-based: review a file
    before publishing it.

    >>> redact_text("git+https://ghp_abcdefghijklmnopqrstuvwxyz0123456789@github.com/o/r")
    'git+https://<redacted>@github.com/o/r'
    """
    return Redactor(os.environ if environ is None else environ).text(text)


def redact_argv(argv: Sequence[str], environ: Optional[Mapping[str, str]] = None) -> list[str]:
    """``argv`` with values after secret flags and every other secret removed.

    >>> redact_argv(["mysql", "--password", "pw", "-h", "db"], environ={})
    ['mysql', '--password', '<redacted>', '-h', 'db']
    """
    return Redactor(os.environ if environ is None else environ, [argv]).argv(argv)


class RedactingFilter(logging.Filter):
    """Redacts each record of the ``seeder`` logger (its message with its arguments) before a
    handler writes it.

    Installed on the ``seeder`` logger when this module is imported (every snapshot and verify
    imports it).

    >>> record = logging.LogRecord("seeder", 20, "", 0, "got %s", ("--token=t0k",), None)
    >>> RedactingFilter().filter(record)
    True
    """

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # a broken format: logging reports it itself
            return True
        clean = file_redactor().text(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True


def command_text(argv: Sequence[str], redactor: Optional[Redactor] = None) -> str:
    """A command line as one line of text, as seeder shows it: :meth:`Redactor.argv`, shell-quoted
    (``<redacted>`` left as it is).

    >>> command_text(["bash", "run.sh", "--token", "t0k", "a b"])
    "bash run.sh --token <redacted> 'a b'"
    """
    import shlex

    shown = (redactor or file_redactor([argv])).argv(argv)
    return " ".join(
        w if shlex.quote(w.replace(REDACTED, "x")) == w.replace(REDACTED, "x") else shlex.quote(w)
        for w in shown
    )


class RedactingStream:
    """A text stream whose every write goes through a :class:`Redactor` first: what a seeder tool
    prints follows the rule its files follow.

    >>> import io
    >>> buf = io.StringIO(); out = RedactingStream(buf, Redactor({}, [["t.py", "--token", "t0k"]]))
    >>> _ = out.write("ran t.py --token t0k"); buf.getvalue()
    'ran t.py --token <redacted>'
    """

    def __init__(self, stream: Any, redactor: Redactor) -> None:
        self.stream, self.redactor = stream, redactor

    def write(self, text: str) -> int:
        self.stream.write(self.redactor.text(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding, ...
        return getattr(self.stream, name)


@contextlib.contextmanager
def redacted_output(argvs: Iterable[Sequence[str]] = ()) -> Iterator[None]:
    """``sys.stdout`` and ``sys.stderr`` through :func:`file_redactor` (of ``argvs`` too) while the
    block runs: the seeder command's own output.

    >>> import contextlib, io, sys
    >>> buf = io.StringIO()
    >>> with contextlib.redirect_stdout(buf), redacted_output([["t.py", "--api-key", "k3y-v"]]):
    ...     print("driven as t.py --api-key k3y-v")
    >>> buf.getvalue()
    'driven as t.py --api-key <redacted>\\n'
    """
    import sys

    redactor = file_redactor(argvs)
    saved = sys.stdout, sys.stderr
    sys.stdout = cast(TextIO, RedactingStream(sys.stdout, redactor))
    sys.stderr = cast(TextIO, RedactingStream(sys.stderr, redactor))
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


_seeder_logger = logging.getLogger("seeder")
if not any(isinstance(f, RedactingFilter) for f in _seeder_logger.filters):
    _seeder_logger.addFilter(RedactingFilter())
