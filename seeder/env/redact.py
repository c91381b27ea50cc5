"""Redaction: what keeps secrets out of every file of an environment snapshot.

Pattern-based and pure: credentials in URLs, secret query parameters, well-known
token formats, private-key blocks, ``password = ...`` assignments, and the literal
values of secret-named environment variables are replaced by :data:`REDACTED`.

Example:
    >>> redact_text("pip install -i https://alice:s3cret@pypi.example/simple x")
    'pip install -i https://<redacted>@pypi.example/simple x'
    >>> is_secret_name("HF_TOKEN"), is_secret_name("OMP_NUM_THREADS")
    (True, False)
"""
from __future__ import annotations

import os
import re
from typing import Dict, Mapping, Optional
from urllib.parse import unquote

__all__ = ["REDACTED", "SECRET_NAME_PARTS", "Redactor", "is_secret_name", "redact_text", "redact_environ"]

#: What replaces a secret in every file of a snapshot.
REDACTED = "<redacted>"

#: Parts of variable names whose values are secret (matched anywhere in the upper-cased name).
SECRET_NAME_PARTS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "PASS", "KEY", "CREDENTIAL", "CREDS",
                     "AUTH", "COOKIE", "PRIVATE", "SIGNATURE", "DSN", "WEBHOOK", "CONNECTION_STRING", "SAS_")

_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^\s/?#@'\"<>]+)@")
_QUERY_SECRET = re.compile(
    r"(?i)(?P<key>[?&;][^=&\s#]*?(?:token|secret|sig|signature|key|password|passwd|auth|credential)[^=&\s#]*=)"
    r"(?P<value>[^&\s#'\"]+)")
_CONDA_TOKEN = re.compile(r"/t/[A-Za-z0-9_\-]{8,}(?=/)")
_KNOWN_TOKENS = re.compile(
    r"\b(?:hf_[A-Za-z0-9]{30,}|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,}|glpat-[A-Za-z0-9_\-]{20,}"
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}|sk-[A-Za-z0-9_\-]{20,}|xox[abprs]-[A-Za-z0-9\-]{10,}|AIza[0-9A-Za-z_\-]{35})")
_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S)
_AUTH_HEADER = re.compile(r"(?i)(\bauthorization\s*[:=]\s*[\"']?(?:bearer|basic|token)?\s*)[^\s\"']+")
_ASSIGNMENT = re.compile(
    r"(?i)(?P<name>\b[A-Za-z0-9_.\-]*(?:token|secret|passw(?:or)?d|passphrase|api[_\-]?key|access[_\-]?key"
    r"|private[_\-]?key|secret[_\-]?key|credentials?))(?P<sep>[\"']?\s*[:=]\s*)(?P<q>[\"']?)(?P<value>[^\s\"',;)}\]]+)")
_CREDENTIAL_LIKE = re.compile(r"[A-Za-z0-9_\-+/=.]{16,}")


def is_secret_name(name: str) -> bool:
    """Whether an environment variable's value is treated as secret (by its name).

    >>> [is_secret_name(n) for n in ("AWS_SECRET_ACCESS_KEY", "WANDB_API_KEY", "PATH")]
    [True, True, False]
    """
    upper = name.upper()
    return any(part in upper for part in SECRET_NAME_PARTS)


def _assignment(match: "re.Match[str]") -> str:
    name, value = match.group("name").lower(), match.group("value")
    if name.endswith("token") and not (_CREDENTIAL_LIKE.fullmatch(value) and re.search(r"\d", value)):
        return match.group(0)  # eos_token = "</s>" and the like are not secrets
    return f"{match.group('name')}{match.group('sep')}{match.group('q')}{REDACTED}"


class Redactor:
    """Removes secrets from text: URL credentials, secret query parameters, known token formats,
    ``name = value`` assignments with secret names, and the literal values of secret variables.

    Built once per snapshot from the environment whose secret values it must also find as
    plain text anywhere (``environ``); :meth:`text` and :meth:`environ` then do the work.

    >>> r = Redactor({"MY_SECRET": "s3cr3t-value-long"})
    >>> r.text("echo s3cr3t-value-long")
    'echo <redacted>'
    """

    def __init__(self, environ: Mapping[str, str]):
        literals = set()
        for name, value in environ.items():
            if is_secret_name(name) and len(value) >= 8:
                literals.add(value)
            for m in _URL_USERINFO.finditer(value):
                password = m.group("userinfo").partition(":")[2]
                for candidate in (password, unquote(password)):
                    if len(candidate) >= 8:
                        literals.add(candidate)
        self.literals = sorted(literals, key=len, reverse=True)

    def text(self, text: str, assignments: bool = True) -> str:
        """``text`` with every secret replaced; ``assignments=False`` leaves ``name = value`` pairs alone."""
        text = _PRIVATE_KEY.sub(REDACTED, text)
        text = _URL_USERINFO.sub(lambda m: m.group("scheme") + REDACTED + "@", text)
        text = _QUERY_SECRET.sub(lambda m: m.group("key") + REDACTED, text)
        text = _CONDA_TOKEN.sub("/t/" + REDACTED, text)
        text = _KNOWN_TOKENS.sub(REDACTED, text)
        text = _AUTH_HEADER.sub(lambda m: m.group(1) + REDACTED, text)
        if assignments:
            text = _ASSIGNMENT.sub(_assignment, text)
        for literal in self.literals:  # last: the patterns above must still see whole URLs
            text = text.replace(literal, REDACTED)
        return text

    def environ(self, environ: Mapping[str, str]) -> Dict[str, str]:
        """A sorted copy of ``environ``: secret-named variables redacted whole, the others' values scrubbed."""
        return {k: (REDACTED if is_secret_name(k) and v else self.text(v, assignments=False))
                for k, v in sorted(environ.items())}


def redact_text(text: str, environ: Optional[Mapping[str, str]] = None) -> str:
    """``text`` with secrets replaced by ``<redacted>``.

    Credentials in URLs, secret query parameters, well-known token formats (``hf_``,
    ``ghp_``, ``AKIA``, ``sk-``, ...), private-key blocks, ``password = ...``-style
    assignments, and any literal value of a secret-named variable of ``environ``
    (``os.environ`` by default) are removed. Pattern-based: review a snapshot before
    publishing it.

    >>> redact_text("git+https://ghp_abcdefghijklmnopqrstuvwxyz0123456789@github.com/o/r")
    'git+https://<redacted>@github.com/o/r'
    """
    return Redactor(os.environ if environ is None else environ).text(text)


def redact_environ(environ: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """A sorted copy of ``environ`` (``os.environ`` by default) with secret values redacted.

    >>> redact_environ({"HF_TOKEN": "hf_x", "PIP_INDEX_URL": "https://u:p@h/simple", "A": "1"})
    {'A': '1', 'HF_TOKEN': '<redacted>', 'PIP_INDEX_URL': 'https://<redacted>@h/simple'}
    """
    env = os.environ if environ is None else environ
    return Redactor(env).environ(env)
