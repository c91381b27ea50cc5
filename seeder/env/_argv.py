"""What a command line shows: the one rule every seeder tool applies to every command line it
writes or prints (``seeder run``, ``seeder env``, ``seeder verify``, ``compare``, ``locate``).

Record less rather than redact more. A word is shown only when seeder can tell it is harmless;
every other value is replaced whole by :data:`HIDDEN`:

* the program (the first word) and every flag's name (``--lr``, ``-v``);
* an option's value (``--opt X``, ``--opt=X``, a Hydra override ``trainer.devices=4``) when it
  is a number (or numbers separated by commas), a word such as ``true``/``none`` or, for an
  option on :data:`SHOWN_OPTIONS` (``--seed``, ``--model``, ``--data-dir``, ``--config``, ...),
  any value; never the value of an option whose name says secret (``--api-key``, ``--pass``);
* a positional word, and any option's value, that is a number, names an existing file or
  folder (the script, its data) or a new one in an existing folder, a command on ``PATH``
  (``python``, ``torchrun``) or one of seeder's subcommands (:data:`COMMAND_WORDS`).

In what is shown, a URL keeps its scheme and host only, and a random-looking chunk (a token
pasted into a path) is replaced by ``<redacted>``.

Example:
    >>> command_line(["python", "train.py", "--lr", "0.1", "--note", "abc", "--api-key=1234"])
    ['python', '<hidden>', '--lr', '0.1', '--note', '<hidden>', '--api-key=<hidden>']
    >>> command_line(["seeder", "run", "--", "python", "-m", "pkg.train", "--seed", "7"])
    ['seeder', 'run', '--', 'python', '-m', 'pkg.train', '--seed', '7']
    >>> command_line(["t", "--data", "https://u:pw@host/x", "--model", "resnet50", "fit"])
    ['t', '--data', 'https://host/<redacted>', '--model', 'resnet50', '<hidden>']
"""

from __future__ import annotations

import functools
import os
import re
import shutil
from collections.abc import Sequence
from typing import Any, Optional

from seeder.env._secretnames import NOT_SECRET_VALUES, REDACTED, is_secret_key, key_words

__all__ = [
    "HIDDEN",
    "COMMAND_WORDS",
    "SHOWN_OPTIONS",
    "argv_items",
    "command_line",
    "is_number",
    "mask_random",
    "random_looking",
    "shown_value",
    "strip_urls",
]

#: What replaces a command-line value the rule does not show.
HIDDEN = "<hidden>"
#: Last words of option names whose values are shown whatever they are: the paths, names and
#: choices of training scripts.
SHOWN_OPTIONS = frozenset(
    (
        "accelerator arch backend cfg checkpoint ckpt conf config data dataset device devices dir "
        "dtype engine epochs experiment file folder format group kind level load loader log "
        "logdir loss m method metric mode model module monitor name optimizer out outdir output "
        "path policy precision prefix project resume root run save scheduler script seed split "
        "steps strategy suffix tag tags task template type weights"
    ).split()
)
#: seeder's own subcommands: shown where they stand as words of a command line.
COMMAND_WORDS = frozenset({"run", "env", "snapshot", "diff", "verify", "compare", "locate", "data"})
_HYDRA_KEY = re.compile(r"[+~]{0,2}[A-Za-z_][A-Za-z0-9_.\-/@]*")  # overrides: trainer.devices=4
_URL = re.compile(
    r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?:[^\s/?#@'\"<>]*@)?(?P<host>[^\s/?#'\"<>]+)"
    r"(?P<rest>[/?#][^\s'\"<>]*)?"
)
_CHUNK = re.compile(r"[A-Za-z0-9+]+")
_HEX = re.compile(r"[0-9a-fA-F]{32,}")


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


def _harmless(value: str) -> bool:
    """A number, numbers separated by commas, or a word such as ``true`` or ``none``."""
    return (
        is_number(value)
        or value.strip().lower() in NOT_SECRET_VALUES
        or ("," in value and all(is_number(v) for v in value.split(",")))
    )


def _known_word(value: str, cwd: Optional[str] = None) -> bool:
    """An existing file or folder, a new one in an existing folder (``runs/x``), a command on
    ``PATH`` (``python``) or one of seeder's :data:`COMMAND_WORDS`."""
    if not value or "\0" in value:
        return False
    path = os.path.join(cwd, value) if cwd else value
    parent = os.path.dirname(path) if os.path.dirname(value) else ""
    return (
        value in COMMAND_WORDS
        or os.path.exists(path)
        or bool(parent and os.path.isdir(parent))
        or ("/" not in value and _on_path(value))
    )


@functools.lru_cache(maxsize=512)
def _on_path(word: str) -> bool:
    """A command on ``PATH`` (looked up once per process: every log record builds a redactor)."""
    return shutil.which(word) is not None


def shown_value(value: str, option: Optional[str] = None, cwd: Optional[str] = None) -> str:
    """What a command line shows of ``value``, the value of ``option`` (or a positional word when
    ``None``); see above.

    Args:
        value: the value as given.
        option: the option it is the value of (``--out-dir``, a Hydra override's
            ``trainer.devices``), or ``None``.
        cwd: the folder relative paths are read from (``None``: the working directory).

    Returns:
        ``value`` (URLs reduced, random-looking chunks replaced) where the rule shows it, else
        :data:`HIDDEN`.

    >>> shown_value("/", None), shown_value("my-run", "--run-name"), shown_value("4417", "--pin")
    ('/', 'my-run', '4417')
    >>> shown_value("hunter2", None), shown_value("4417", "--password"), shown_value("x", "--note")
    ('<hidden>', '<hidden>', '<hidden>')
    """
    words = key_words(option) if option else []
    if option and is_secret_key(option):
        return value if value.strip().lower() in NOT_SECRET_VALUES else HIDDEN
    if _harmless(value):
        return value
    if (words and words[-1] in SHOWN_OPTIONS) or _known_word(value, cwd):
        return mask_random(strip_urls(value))
    return HIDDEN


def argv_items(args: Sequence[str]) -> list[tuple[str, Optional[str], str]]:
    """``(kind, option, text)`` of each element of a command line: ``flag`` (``--lr``), ``value``
    (the one after a flag, unless it reads as a flag itself: after a secret-named flag, only a
    ``--`` word does; ``option`` is the flag), ``pair`` (``--lr=0.1``, ``trainer.devices=4``;
    ``option`` is the name, ``text`` the value) or ``positional``.

    >>> [k for k, _, _ in argv_items(["t.py", "--lr", "0.1", "a.b=1", "x"])]
    ['positional', 'flag', 'value', 'pair', 'positional']
    """
    items: list[tuple[str, Optional[str], str]] = []
    option: Optional[str] = None  # the flag whose value comes next
    for a in args:
        name, eq, value = a.partition("=")
        flag_like = a.startswith("--") or (a.startswith("-") and not is_number(a))
        secret_value = is_secret_key(option or "") and not a.startswith("--")
        if option is not None and (not flag_like or secret_value):
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


def command_line(argv: Sequence[Any], cwd: Optional[str] = None) -> list[str]:
    """``argv`` as every seeder tool writes and prints it (see above): flags and the program
    kept, each value shown or :data:`HIDDEN`.

    Args:
        argv: a command line (its words are made strings).
        cwd: the folder its relative paths are read from (``None``: the working directory).

    Returns:
        The words to write, as many as ``argv`` has.

    >>> command_line(["train.py", "positional-secret", "--token", "t0k", "--lr=0.1"])
    ['train.py', '<hidden>', '--token', '<hidden>', '--lr=0.1']
    """
    out: list[str] = []
    for i, (kind, option, value) in enumerate(argv_items([str(a) for a in argv])):
        if i == 0 or kind == "flag":
            out.append(mask_random(strip_urls(value)))
        elif kind == "pair":
            out.append(f"{mask_random(option or '')}={shown_value(value, option, cwd)}")
        else:
            out.append(shown_value(value, option, cwd))
    return out
