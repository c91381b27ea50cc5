"""What a file seeder writes shows of a value no pattern names as secret: a rule without shapes.

A pattern finds the secrets it knows; this module decides what is shown of everything else.

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
    >>> shown_value("https://hooks.example.com/services/T0/B0/xyz", "--notify")
    'https://hooks.example.com/<redacted>'
    >>> shown_value("resnet50", "--model"), shown_value("some-long-value", "--note")
    ('resnet50', '<redacted>')
    >>> shown_value("0.1", "--lr")
    '0.1'
"""

from __future__ import annotations

import re
from typing import Optional

__all__ = [
    "is_number",
    "SHORT",
    "SHOWN_OPTIONS",
    "random_looking",
    "mask_random",
    "strip_urls",
    "is_path",
    "shown_value",
    "credential_file",
    "redact_diff",
]

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
_WORD_VALUES = {
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
}
_REDACTED = "<redacted>"
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
    return _CHUNK.sub(lambda m: _REDACTED if random_looking(m.group(0)) else m.group(0), text)


def strip_urls(text: str) -> str:
    """``text`` with each URL reduced to its scheme and host (credentials, path and query replaced).

    >>> strip_urls("post to https://user:pw@hooks.example.com:8443/services/T0/B0/x?sig=1 now")
    'post to https://hooks.example.com:8443/<redacted> now'
    """
    return _URL.sub(
        lambda m: m.group("head") + m.group("host") + ("/" + _REDACTED if m.group("rest") else ""),
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
    if len(value) <= SHORT or value.strip().lower() in _WORD_VALUES:
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


def _option_words(option: str) -> list[str]:
    return re.findall(
        r"[a-z0-9]+", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", option.lstrip("-")).lower()
    )


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
    words = _option_words(option) if option else []
    stripped = strip_urls(value)
    if stripped != value:
        return mask_random(stripped)
    if _harmless(value) or is_path(value) or (words and words[-1] in SHOWN_OPTIONS):
        return mask_random(value)
    return _REDACTED


def credential_file(path: str) -> bool:
    """Whether a file's name says it holds credentials, so that a diff shows none of its lines.

    >>> [credential_file(p) for p in (".netrc", "home/.pgpass", "prod.env", ".env.local", "c.yaml",
    ...                               "model.py")]
    [True, True, True, True, False, False]
    """
    return _CREDENTIAL_NAMES.match(path.rsplit("/", 1)[-1]) is not None


def redact_diff(diff: str) -> str:
    """A unified diff (``git diff``) showing no line of a credential file's change, and in others
    no random-looking chunk, URL path or value after a ``password``/``secret``/``token`` word.

    >>> print(redact_diff("diff --git a/.netrc b/.netrc\\n@@ -0,0 +1 @@\\n+machine h password pw\\n"
    ...                   "diff --git a/c.yaml b/c.yaml\\n@@ -1 +1 @@\\n-lr: 1\\n+lr: 2"))
    diff --git a/.netrc b/.netrc
    @@ -0,0 +1 @@
    +<redacted>
    diff --git a/c.yaml b/c.yaml
    @@ -1 +1 @@
    -lr: 1
    +lr: 2
    """
    out, hidden, in_hunk = [], False, False
    for line in diff.splitlines(keepends=True):
        header = _DIFF_FILE.match(line.rstrip("\n"))
        if header is not None:
            hidden = credential_file(header.group("a")) or credential_file(header.group("b"))
            in_hunk = False
        elif line.startswith("@@"):
            in_hunk = True
        elif in_hunk and line[:1] in ("+", "-", " "):
            end = "\n" if line.endswith("\n") else ""
            body = line[1 : len(line) - len(end)]
            if hidden:
                body = _REDACTED if body.strip() else body
            else:
                body = _SPACED_SECRET.sub(
                    lambda m: m.group("key") + m.group("sep") + _REDACTED, body
                )
                body = mask_random(strip_urls(body))
            line = line[0] + body + end
        out.append(line)
    return "".join(out)
