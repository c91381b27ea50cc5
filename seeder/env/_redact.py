"""Redaction: the one path every file seeder writes and every line its commands print go through.

Record less rather than redact more: a snapshot records variables' values by allowlist
(:mod:`seeder.env._recorded`), a repository's change by its files and hash (the text only when
asked, :mod:`seeder.env._diffredact`), and a command line by the one rule of
:mod:`seeder.env._argv` (:data:`~seeder.env._argv.HIDDEN` for every value it cannot tell is
harmless). What remains is text a tool writes (logs, reasons, reports): :class:`Redactor`
replaces, with :data:`REDACTED`, the values of secret-named environment variables and the values
a command line hides (wherever they appear, as written or escaped), values after secret-looking
flags (``--db-password X``, ``--token=X``), ``name = value`` / ``name: value`` pairs with secret
names (``db_pass: X``, ``Pwd=X;`` in connection strings), credentials in URLs, secret query
parameters, well-known token formats (GitHub, GitLab, AWS, Slack, Hugging Face, OpenAI, JWTs) and
private-key blocks. :meth:`Redactor.data` applies it to a JSON-able object before it is
serialised (``argv`` lists through the command-line rule).

Example:
    >>> redact_text("pip install -i https://alice:s3cret@pypi.example/simple x")
    'pip install -i https://<redacted>@pypi.example/simple x'
    >>> Redactor({}).argv(["train.py", "--db-password", "pw", "--token=abc", "--lr", "0.1"])
    ['train.py', '--db-password', '<hidden>', '--token=<hidden>', '--lr', '0.1']
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

from seeder.env._argv import HIDDEN, argv_items, command_line, shown_value
from seeder.env._diffredact import redact_diff
from seeder.env._secretnames import (
    NOT_SECRET_VALUES,
    REDACTED,
    hides_value,
    is_secret_key,
    is_secret_name,
)

__all__ = [
    "MIN_LITERAL",
    "Redactor",
    "redact_text",
    "redact_argv",
    "redact_json",
    "file_redactor",
    "RedactingFilter",
    "RedactingStream",
    "command_text",
    "redacted_output",
]

#: Secret values shorter than this (and numbers, and ``true``/``false``-like words) are redacted
#: where they are named (the variable, a flag, a key) but not searched for elsewhere:
#: ``KEYTIMEOUT=1`` would otherwise remove every ``1`` of every file.
MIN_LITERAL = 4
_ARGV_KEYS = {"argv", "command", "cmd"}
_ARGS_KEYS = {"a_args", "b_args"}  # seeder compare's arguments of A and B
# A value a command line hides only because the rule cannot tell it is harmless, made of
# lower-case words (``relu``, ``cosine_warmup``): hidden there, not searched for in all text,
# where it would erase common words.
_PLAIN_WORDS = re.compile(r"[a-z]+(?:[_.\-][a-z]+)*")

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


def _searchable(value: str) -> bool:
    """Whether a secret value is searched for in all text: not too short, not a word or number that
    is everywhere."""
    if len(value) < MIN_LITERAL or value.strip().lower() in NOT_SECRET_VALUES:
        return False
    try:
        float(
            value
        )  # KEY_SIZE=2048: removing every 2048 would rewrite the numbers of logs and records
    except ValueError:
        return True
    return False


def _environ_secrets(environ: Mapping[str, str]) -> Iterator[str]:
    """The secret values of ``environ``: secret-named variables', URL passwords, secret pairs."""
    for name, value in environ.items():
        if is_secret_name(name):
            yield value
        for m in _URL_USERINFO.finditer(value):
            yield m.group("userinfo").partition(":")[2]
        for m in _KEY_VALUE.finditer(value):
            if is_secret_key(m.group("name")) and hides_value(m.group("name"), m.group("value")):
                yield m.group("value").strip("{}")


def _argv_secrets(argv: Sequence[Any]) -> Iterator[tuple[str, str]]:
    """``(value, what replaces it)`` for each value a command line hides or reduces, to be
    searched for in text too; a value under a secret-named option always."""
    for kind, option, value in argv_items([str(a) for a in argv])[1:]:
        shown = value if kind == "flag" else shown_value(value, option)
        if option is not None and is_secret_key(option) and shown != value:
            yield value, REDACTED
        elif shown != value and not _PLAIN_WORDS.fullmatch(value):
            yield value, shown


def _spellings(value: str) -> Iterator[str]:
    """``value`` as written in URLs, JSON and Python reprs (a script that prints its config)."""
    yield unquote(value)
    yield quote(value, safe="")
    yield json.dumps(value)[1:-1]
    yield repr(value)[1:-1]


def _short_words(values: Iterable[str]) -> Optional[re.Pattern[str]]:
    """One pattern for the values shorter than 8 characters, matched as whole words only."""
    short = [rf"(?<![A-Za-z0-9]){re.escape(v)}(?![A-Za-z0-9])" for v in values if len(v) < 8]
    return re.compile("|".join(short)) if short else None


class Redactor:
    """Removes secrets from text, argv lists, diffs and JSON-able objects.

    Built from the environment (``environ``) and command lines (``argvs``) whose secret values
    it must also find as plain text anywhere: values of secret-named variables, passwords of
    URLs and values a command line hides are searched for (whole words when shorter than 8
    characters; not at all below :data:`MIN_LITERAL`).

    >>> r = Redactor({"MY_SECRET": "s3cr3t-value-long", "API_KEY": "abc123"})
    >>> r.text("echo s3cr3t-value-long abc123 xabc123")
    'echo <redacted> <redacted> xabc123'
    """

    def __init__(self, environ: Mapping[str, str], argvs: Iterable[Sequence[str]] = ()):
        # each secret value found, and what replaces it: REDACTED, or for a command-line value
        # what the command line shows (HIDDEN, a URL's scheme and host), so that text and argv agree
        found: dict[str, str] = {}

        def hide(value: str, shown: str = REDACTED) -> None:
            if found.get(value, REDACTED) == REDACTED:
                found[value] = shown if value not in shown else REDACTED

        for value in _environ_secrets(environ):
            hide(value)
        for argv in argvs:
            for value, shown in _argv_secrets(argv):
                hide(value, shown)
        for value, shown in list(found.items()):
            for spelling in _spellings(value):
                hide(spelling, shown if spelling == value else REDACTED)
        self.literals = sorted((v for v in found if _searchable(v)), key=len, reverse=True)
        self._shown = {v: found[v] for v in self.literals}
        self._short = _short_words(self.literals)

    def text(self, text: str) -> str:
        """``text`` with every secret replaced by :data:`REDACTED`."""
        for literal in self.literals:  # first: no pattern below may cut a known secret in two
            if len(literal) >= 8:
                text = text.replace(literal, self._shown[literal])
        if self._short is not None:
            text = self._short.sub(lambda m: self._shown.get(m.group(0), REDACTED), text)
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
            hidden = hides_value(name, value.strip("{}"), flag=group == "flag")
            if not is_secret_key(name) or not hidden:
                return m.group(0)
            return m.group(0)[: m.start("value") - m.start(0)] + REDACTED

        return sub

    def argv(self, argv: Sequence[Any], cwd: Optional[str] = None) -> list[str]:
        """A command line as every seeder tool writes it: the one rule of
        :func:`seeder.env._argv.command_line` (relative paths read from ``cwd``), then
        :meth:`text` on what it shows."""
        return [w if w == HIDDEN else self.text(w) for w in command_line(argv, cwd)]

    def diff(self, diff: str) -> str:
        """A ``git diff`` for a file (:func:`seeder.env._diffredact.redact_diff`, then
        :meth:`text` on each line).

        >>> d = "diff --git a/.pgpass b/.pgpass\\n@@ -0,0 +1 @@\\n+db:5432:app:me:pgPw\\n"
        >>> Redactor({}).diff(d).splitlines()[-1]
        '+<redacted>'
        """
        return redact_diff(diff, self.text)

    def data(self, obj: Any, key: str = "") -> Any:
        """A copy of a JSON-able object with every string redacted, before it is serialised.

        ``argv``/``command`` lists (and compare's ``a_args``/``b_args``) go through :meth:`argv`;
        a string under a secret key is removed.

        >>> record = {"argv": ["x", "--token", "t0k3n-value"], "password": "hunter2", "n": 1}
        >>> Redactor({}).data(record)
        {'argv': ['x', '--token', '<hidden>'], 'password': '<redacted>', 'n': 1}
        """
        if isinstance(obj, str):
            secret = bool(key) and is_secret_key(key) and hides_value(key, obj)
            return REDACTED if secret else self.text(obj)
        if isinstance(obj, Mapping):
            return {
                self.text(str(k)) if isinstance(k, str) else k: self.data(v, str(k))
                for k, v in obj.items()
            }
        if isinstance(obj, (list, tuple)):
            if key.lower() in _ARGV_KEYS and all(isinstance(a, str) for a in obj):
                return self.argv(obj)
            if key.lower() in _ARGS_KEYS and all(isinstance(a, str) for a in obj):
                return self.argv(["", *obj])[1:]  # arguments without their program
            return [self.data(v) for v in obj]
        return obj


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
    {'argv': ['t.py', '--db-password', '<hidden>'], 'reason': 'login <redacted> refused'}
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
    """``argv`` as a file shows it: the command-line rule (:mod:`seeder.env._argv`), then
    :meth:`Redactor.text` on what it shows.

    >>> redact_argv(["mysql", "--password", "pw", "-h", "db"], environ={})
    ['mysql', '--password', '<hidden>', '-h', '<hidden>']
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


def command_text(
    argv: Sequence[str], redactor: Optional[Redactor] = None, cwd: Optional[str] = None
) -> str:
    """A command line as one line of text, as seeder shows it: :meth:`Redactor.argv`, shell-quoted
    (``<hidden>`` and ``<redacted>`` left as they are); relative paths are read from ``cwd``.

    >>> command_text(["bash", "--token", "t0k", "--lr", "0.1", "a b"])
    'bash --token <hidden> --lr 0.1 <hidden>'
    """
    import shlex

    def plain(w: str) -> str:
        return w.replace(REDACTED, "x").replace(HIDDEN, "x")

    shown = (redactor or file_redactor([argv])).argv(argv, cwd)
    return " ".join(w if shlex.quote(plain(w)) == plain(w) else shlex.quote(w) for w in shown)


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
