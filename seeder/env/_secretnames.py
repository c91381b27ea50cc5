"""Which names say their value is secret: environment variables, flags and keys, files.

The vocabulary every redaction of :mod:`seeder.env` shares: :func:`is_secret_name` (an
environment variable's name), :func:`is_secret_key` (a flag or key: its last word),
:func:`hides_value` (whether a value under such a key is removed) and :func:`credential_file`
(a file whose name says it holds credentials).

Example:
    >>> is_secret_name("HF_TOKEN"), is_secret_key("--db-password"), credential_file(".netrc")
    (True, True, True)
"""

from __future__ import annotations

import re

__all__ = [
    "REDACTED",
    "SECRET_NAME_PARTS",
    "SECRET_NAME_WORDS",
    "SECRET_KEY_WORDS",
    "NOT_SECRET_VALUES",
    "is_secret_name",
    "is_secret_key",
    "key_words",
    "hides_value",
    "credential_file",
]

#: What replaces a secret in every file seeder writes.
REDACTED = "<redacted>"

#: Parts of variable names whose values are secret (matched anywhere in the upper-cased name).
SECRET_NAME_PARTS = tuple(
    (
        "TOKEN SECRET PASSWORD PASSWD PASSPHRASE PASS KEY CREDENTIAL CREDS AUTH COOKIE PRIVATE "
        "SIGNATURE DSN WEBHOOK CONNECTION_STRING SAS_"
    ).split()
)
#: Whole words (split at ``_`` and other non-alphanumerics) that make a variable name secret:
#: ``MYSQL_PWD``, ``DB_PW``.
SECRET_NAME_WORDS = ("PWD", "PW", "JWT", "SAS", "OTP")
#: Last words of flag and key names whose value is secret (``--db-password``, ``db_pass:``,
#: ``Pwd=``, ``--api-key``).
SECRET_KEY_WORDS = tuple(
    (
        "password passwd passphrase pwd pw pass secret token apikey key credential credentials "
        "creds jwt cookie dsn webhook signature sas accountkey sharedaccesskey auth authorization"
    ).split()
)
#: Words that are never a secret value (``--secret false``).
NOT_SECRET_VALUES = frozenset(
    ("auto default disabled enabled false no none null off on true unset yes").split()
)

_CREDENTIAL_LIKE = re.compile(r"[A-Za-z0-9_\-+/=.~]{8,}")
_HIGH_ENTROPY = re.compile(
    r"(?=[A-Za-z0-9_\-+/=.]*\d)(?=[A-Za-z0-9_\-+/=.]*[A-Za-z])[A-Za-z0-9_\-+/=.]{16,}"
)
_WORDS = re.compile(r"[a-z0-9]+")
_CREDENTIAL_NAMES = re.compile(
    r"(?i)^(?:[._]?netrc|\.pgpass|\.pypirc|\.npmrc|\.yarnrc|\.git-credentials|\.htpasswd"
    r"|\.dockercfg|\.s3cfg|\.boto|\.vault-token|kubeconfig|\.my\.cnf"
    r"|id_(?:rsa|dsa|ecdsa|ed25519)(?:\.pub)?|\.?env(?:\..*)?|.*\.env"
    r"|.*(?:credential|secret|password|passwd|pgpass|netrc).*"
    r"|.*\.(?:pem|key|p12|pfx|jks|keystore|asc|gpg))$"
)


def credential_file(path: str) -> bool:
    """Whether a file's name says it holds credentials, so that a diff shows none of its lines.

    >>> [credential_file(p) for p in (".netrc", "home/.pgpass", "prod.env", ".env.local", "c.yaml",
    ...                               "model.py")]
    [True, True, True, True, False, False]
    """
    return _CREDENTIAL_NAMES.match(path.rsplit("/", 1)[-1]) is not None


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


def key_words(name: str) -> list[str]:
    """The lower-case words of a flag or key name (split at ``-``, ``_``, dots and camel case).

    >>> key_words("--db-Password"), key_words("apiKey")
    (['db', 'password'], ['api', 'key'])
    """
    return _WORDS.findall(re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name.lstrip("-")).lower())


def is_secret_key(name: str) -> bool:
    """Whether a flag or key name (``--db-password``, ``db_pass``, ``Pwd``, ``apiKey``) names a
    secret: its last word.

    >>> keys = ("--db-password", "db_pass", "Pwd", "apiKey", "--max-tokens", "--password-file")
    >>> [is_secret_key(n) for n in keys]
    [True, True, True, True, False, False]
    """
    words = key_words(name)
    return bool(words) and (
        words[-1] in SECRET_KEY_WORDS or "".join(words[-2:]) in SECRET_KEY_WORDS
    )


_STRONG_KEY = frozenset(
    (
        "access account api app auth client encryption license master private secret session "
        "shared signing"
    ).split()
)
_NOT_A_TOKEN = frozenset(("bos cls end eos mask max num pad sep special start stop unk").split())


def hides_value(name: str, value: str, flag: bool = False) -> bool:
    """Whether ``value`` under the secret key ``name`` is removed.

    A flag's value always is (but ``true``/``false``); a key named only ``key``, ``*_key``
    (``sort_key``) or ``eos_token``-like, only when the value looks like a credential (long, letters
    and digits).

    >>> hides_value("db_pass", "hunter2"), hides_value("sort_key", "name"), hides_value("pwd", "/x")
    (True, False, False)
    """
    if not value or value == REDACTED or value.startswith("<"):
        return False
    words = key_words(name)
    if not words:  # ``_``, ``__``: no name of a secret
        return False
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
    return value.lower() not in NOT_SECRET_VALUES
