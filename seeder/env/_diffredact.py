"""What a ``git diff`` shows, when a snapshot records one (``seeder env snapshot --diff``).

A snapshot records the changed files and the sha256 of the change, not its text; with
``diff=True`` the text is written, through :func:`redact_diff`: no line of a credential
file's change (:func:`seeder.env._secretnames.credential_file`: ``.netrc``, ``.pgpass``,
``*.env``, keys), and in other files no random-looking chunk, URL path, value after a
``password``/``secret``/``token`` word or line of a YAML block scalar under a key with a
secret word (``password_block: |``). Removed and unchanged lines are read as the file has
them, so a changed secret's old value (``-password: OLD``) goes too.

Example:
    >>> print(redact_diff("@@ -1 +1 @@\\n-password old-pw\\n+lr: 2"))
    @@ -1 +1 @@
    -password <redacted>
    +lr: 2
"""

from __future__ import annotations

import re
from typing import Callable, Optional

from seeder.env._argv import mask_random, strip_urls
from seeder.env._secretnames import REDACTED, SECRET_KEY_WORDS, credential_file, key_words

__all__ = ["redact_diff"]

_SPACED_SECRET = re.compile(
    r"(?i)(?<![A-Za-z0-9_])(?P<key>password|passwd|passphrase|secret|token|apikey)"
    r"(?P<sep>\s+)(?P<value>[^\s<=:\"'][^\s]*)"
)  # ``password X`` (.netrc)
_DIFF_FILE = re.compile(r"^diff --git a/(?P<a>.*) b/(?P<b>.*)$")
_BLOCK_SCALAR = re.compile(
    r"^(?P<indent>[ \t]*)(?:-[ \t]+)?[\"']?(?P<name>[A-Za-z_][A-Za-z0-9_.\-]*)[\"']?[ \t]*:[ \t]*"
    r"[|>][-+0-9]*[ \t]*(?:#.*)?$"
)


def _names_secret(name: str) -> bool:
    """Whether any word of a key names a secret (``password_block``, ``ssh_key_pem``)."""
    words = key_words(name)
    return any(
        w in SECRET_KEY_WORDS or a + b in SECRET_KEY_WORDS
        for w, a, b in zip(words, words, words[1:] + [""])
    )


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


class _Diff:
    """The state of one pass over a diff: the file's kind, the hunk, the open block scalars."""

    def __init__(self, text: Optional[Callable[[str], str]]) -> None:
        self.text = text
        self.hidden = False  # a credential file's change
        self.in_hunk = False
        self.block: dict[str, int] = {}  # per side ("+", "-"): the indent of a secret block's key

    def line(self, line: str) -> str:
        header = _DIFF_FILE.match(line.rstrip("\n"))
        if header is not None:
            self.hidden = credential_file(header.group("a")) or credential_file(header.group("b"))
            self.in_hunk = False
            self.block.clear()
        elif line.startswith("@@"):
            self.in_hunk = True
            self.block.clear()
        elif self.in_hunk and line[:1] in ("+", "-", " "):
            end = "\n" if line.endswith("\n") else ""
            sides = ("+", "-") if line[0] == " " else (line[0],)
            return line[0] + self.body(line[1 : len(line) - len(end)], sides) + end
        return self.text(line) if self.text is not None else line

    def body(self, body: str, sides: tuple[str, ...]) -> str:
        """One line of a hunk without its mark, as the file has it on ``sides``."""
        inside = [
            s
            for s in sides
            if s in self.block and (not body.strip() or _indent(body) > self.block[s])
        ]
        for s in sides:
            if s not in inside:
                self.block.pop(s, None)
        scalar = _BLOCK_SCALAR.match(body)
        if scalar is not None and _names_secret(scalar.group("name")):
            self.block.update({s: _indent(body) for s in sides})
        if not body.strip():
            return body
        if self.hidden:
            return REDACTED
        if inside:  # a line of a secret's block scalar: its indent only
            return body[: _indent(body)] + REDACTED
        body = _SPACED_SECRET.sub(lambda m: m.group("key") + m.group("sep") + REDACTED, body)
        body = mask_random(strip_urls(body))
        return self.text(body) if self.text is not None else body


def redact_diff(diff: str, text: Optional[Callable[[str], str]] = None) -> str:
    """A unified diff (``git diff``) as a snapshot writes it (see above); ``text`` (a
    :meth:`seeder.env._redact.Redactor.text`) applies to each line without its ``+``/``-``/`` ``
    mark.

    Args:
        diff: the diff's text.
        text: the redaction of the snapshot's other text, or ``None``.

    Returns:
        The diff, line for line.

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
    state = _Diff(text)
    return "".join(state.line(line) for line in diff.splitlines(keepends=True))
