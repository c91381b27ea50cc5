"""The training-command contract: how ``seeder verify`` talks to a training script.

A training command is driven through a handful of flags (seed, epochs, checkpoint
directory, resume, stop point, metrics file) and reports one loss per optimizer
step. The flag spellings are templates, so a script with other names can be
adapted without editing it; a flag the command does not take is left to seeder
(:mod:`seeder.verify._flags`).

Metrics are read from the metrics file (``--metrics FILE``, or the
``SEEDER_METRICS`` environment variable when the metrics template is empty), and
when that file is missing or empty, from the run's output. Two formats are
accepted, line by line:

* JSON lines: ``{"step": 12, "epoch": 1, "loss": 0.53}`` and a final ``{"digest": "..."}``;
* NVIDIA DLLogger lines: ``DLLL {"type": "LOG", "step": [1, 12], "data": {"train_loss": 0.53}}``
  (prefix ``DLL`` or ``DLLL``).

Example:
    >>> c = Contract()
    >>> c.args(seed=3, epochs=4, ckpt_dir="ck", resume=True, metrics="m.jsonl")
    ['--seed', '3', '--epochs', '4', '--ckpt-dir', 'ck', '--resume', '--metrics', 'm.jsonl']
    >>> m = parse_metrics(['{"step": 0, "epoch": 0, "loss": 1.5}',
    ...                    'DLLL {"step": [0, 1], "data": {"train_loss": 1.25}}'])
    >>> m.keys, m.losses.tolist(), m.epochs
    ([(0,), (0, 1)], [1.5, 1.25], [0, 0])
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import string
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np

__all__ = [
    "Contract",
    "check_template",
    "TEMPLATE_FIELDS",
    "Metrics",
    "parse_metrics",
    "read_metrics",
    "default_command",
    "format_step_key",
    "METRICS_ENV",
    "TEMPLATE_NAMES",
    "StepKey",
]

#: Environment variable through which a run receives its metrics file.
METRICS_ENV = "SEEDER_METRICS"

#: The templates a :class:`Contract` holds, in the order their arguments are appended.
TEMPLATE_NAMES = (
    "seed",
    "epochs",
    "ckpt_dir",
    "resume",
    "stop_after_epochs",
    "stop_after_steps",
    "metrics",
)

StepKey = tuple[int, ...]


@dataclass(frozen=True)
class Contract:
    """Argument templates for one training command, and where its losses are found.

    Each template is split like a shell line and its words formatted with the
    run's values (``{seed}``, ``{epochs}``, ``{ckpt_dir}``, ``{steps}``, ``{metrics}``);
    an empty template means the script has no such flag. ``loss_keys`` are dotted
    paths tried in order in each metrics object; ``step_key`` names the step.

    Raises:
        TypeError, ValueError: a template is not a string, names a field it is not formatted
            with, or ``loss_keys`` is empty.

    Example:
        >>> Contract(seed="--random-seed={seed}").args(seed=5)
        ['--random-seed=5']
    """

    seed: str = "--seed {seed}"
    epochs: str = "--epochs {epochs}"
    ckpt_dir: str = "--ckpt-dir {ckpt_dir}"
    resume: str = "--resume"
    stop_after_epochs: str = "--stop-after-epochs {epochs}"
    stop_after_steps: str = "--stop-after-steps {steps}"
    metrics: str = "--metrics {metrics}"
    metrics_env: str = METRICS_ENV
    step_key: str = "step"
    loss_keys: tuple[str, ...] = ("loss", "data.train_loss")

    def __post_init__(self) -> None:
        for name in TEMPLATE_NAMES + ("metrics_env", "step_key"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(
                    f"Contract.{name} must be a string, got {type(getattr(self, name)).__name__}"
                )
        if (
            isinstance(self.loss_keys, str)
            or not self.loss_keys
            or not all(isinstance(k, str) and k for k in self.loss_keys)
        ):
            raise TypeError(
                f"Contract.loss_keys must be a non-empty tuple of dotted keys, got "
                f"{self.loss_keys!r}"
            )
        for name in TEMPLATE_NAMES:
            check_template(name, getattr(self, name))

    def with_overrides(self, overrides: dict[str, str]) -> Contract:
        """A copy with some fields replaced (``seeder verify --arg NAME=TEMPLATE``).

        Args:
            overrides: field name (``-`` or ``_``) to its new template; ``loss_keys``
                comma-separated.

        Returns:
            The new contract.

        Raises:
            ValueError: a name is not a field, or a template is not valid.

        Example:
            >>> Contract().with_overrides({"resume": "--resume-from {ckpt_dir}/last.pt"}).resume
            '--resume-from {ckpt_dir}/last.pt'
        """
        known = set(TEMPLATE_NAMES) | {"metrics_env", "step_key", "loss_keys"}
        values: dict[str, Any] = {}
        for name, value in overrides.items():
            key = name.replace("-", "_")
            if key not in known:
                raise ValueError(
                    f"unknown contract field {name!r}; known: {', '.join(sorted(known))}"
                )
            values[key] = (
                tuple(v.strip() for v in value.split(",") if v.strip())
                if key == "loss_keys"
                else value
            )
        return dataclasses.replace(self, **values)

    def args(
        self,
        *,
        seed: Optional[int] = None,
        epochs: Optional[int] = None,
        ckpt_dir: Optional[str] = None,
        resume: bool = False,
        stop_after_epochs: Optional[int] = None,
        stop_after_steps: Optional[int] = None,
        metrics: Optional[str] = None,
    ) -> list[str]:
        """The arguments that ask the script for one run.

        Args:
            seed, epochs, ckpt_dir, stop_after_epochs, stop_after_steps, metrics: the run's
                values; ``None`` leaves the flag out, and so does an empty template.
            resume: pass the ``resume`` template.

        Returns:
            The words to append to the command.

        Raises:
            ValueError: a resume or a stop is asked for and its template is empty.

        Example:
            >>> Contract().args(seed=1, epochs=4, ckpt_dir="ck", resume=True)
            ['--seed', '1', '--epochs', '4', '--ckpt-dir', 'ck', '--resume']
        """
        # No seed / epochs / ckpt_dir flag: $SEEDER_SEED, the script's epochs, the run's directory.
        out: list[str] = []
        if seed is not None and self.seed:
            out += _words(self.seed, {"seed": seed})
        if epochs is not None and self.epochs:
            out += _words(self.epochs, {"epochs": epochs})
        if ckpt_dir is not None and self.ckpt_dir:
            out += _words(self.ckpt_dir, {"ckpt_dir": ckpt_dir})
        if resume:
            out += self._need("resume", {"ckpt_dir": ckpt_dir})
        if stop_after_epochs is not None:
            out += self._need("stop_after_epochs", {"epochs": stop_after_epochs})
        if stop_after_steps is not None:
            out += self._need("stop_after_steps", {"steps": stop_after_steps})
        if metrics is not None and self.metrics:
            out += _words(self.metrics, {"metrics": metrics})
        return out

    def env(self, metrics: Optional[str]) -> dict[str, str]:
        """Environment additions for a run: the metrics file through ``metrics_env``.

        Args:
            metrics: the run's metrics file, or ``None``.

        Returns:
            ``{metrics_env: metrics}``, or nothing without a file or a variable name.

        Example:
            >>> Contract().env("m.jsonl")
            {'SEEDER_METRICS': 'm.jsonl'}
        """
        return {self.metrics_env: str(metrics)} if metrics is not None and self.metrics_env else {}

    def _need(self, name: str, values: dict[str, Any]) -> list[str]:
        template = getattr(self, name)
        if not template:
            raise ValueError(
                f"this run needs the {name!r} argument but its template is empty; "
                f"set it with --arg {name}=TEMPLATE"
            )
        return _words(template, values)


#: The fields each template is formatted with (what :meth:`Contract.args` passes it), with a sample
#: value each.
TEMPLATE_FIELDS: dict[str, dict[str, Any]] = {
    "seed": {"seed": 0},
    "epochs": {"epochs": 0},
    "ckpt_dir": {"ckpt_dir": "d"},
    "resume": {"ckpt_dir": "d"},
    "stop_after_epochs": {"epochs": 0},
    "stop_after_steps": {"steps": 0},
    "metrics": {"metrics": "m"},
}


def check_template(name: str, template: str) -> None:
    """Raise ``ValueError`` naming ``name``, ``template`` and its allowed fields unless every
    placeholder is one of them.

    A placeholder is a bare field (``{seed}``), optionally with a conversion or format spec
    (``{seed:08d}``); attribute and index lookups (``{seed.real}``, ``{ckpt_dir[0]}``) are refused.

    >>> check_template("seed", "--seed={seed:04d}")
    >>> check_template("seed", "--seed={seed.nope}")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: --arg seed='--seed={seed.nope}': {seed.nope} is not a field of this template; ...
    """
    fields = TEMPLATE_FIELDS[name]
    allowed = ", ".join("{" + f + "}" for f in fields)
    try:
        words = shlex.split(template)
        for word in words:
            for _, field, spec, conversion in string.Formatter().parse(word):
                if field is not None and field not in fields:
                    shown = (
                        "{"
                        + field
                        + ("!" + conversion if conversion else "")
                        + (":" + spec if spec else "")
                        + "}"
                    )
                    raise ValueError(
                        f"--arg {name}={template!r}: {shown} is not a field of this template; its "
                        f"placeholders are {allowed} (bare names, optionally with :format)"
                    )
        _words(template, fields)
    except (ValueError, KeyError, IndexError, AttributeError, TypeError) as exc:
        if str(exc).startswith(f"--arg {name}="):
            raise
        raise ValueError(
            f"--arg {name}={template!r} is not a valid template ({exc}); its placeholders are "
            f"{allowed}, "
            "with {{ and }} for literal braces"
        ) from None


def _words(template: str, values: dict[str, Any]) -> list[str]:
    # Split first, format after: a value with spaces (a path) stays one word.
    return [w.format(**values) for w in shlex.split(template)]


@dataclass
class Metrics:
    """The per-step losses of one run, in the order logged, and its final digest if any.

    Attributes:
        keys: step keys as int tuples (``(12,)`` for ``"step": 12``, ``(1, 12)`` for a DLLogger
            ``[1, 12]``).
        losses: one value per step, float64.
        epochs: the epoch of each step, or ``None``.
        digest: the digest of the weights and optimizer the run ended with, if reported.

    Example:
        >>> import numpy as np
        >>> m = Metrics([(0,), (1,), (2,)], np.array([3.0, 2.0, 1.5]), [0, 1, 1])
        >>> len(m), m.as_dict()[(2,)], m.summary_mask().tolist()
        (3, 1.5, [False, True, True])
    """

    keys: list[StepKey] = field(default_factory=list)
    losses: np.ndarray = field(default_factory=lambda: np.zeros(0))
    epochs: list[Optional[int]] = field(default_factory=list)
    digest: Optional[str] = None
    #: What the values are: ``"loss"``, or the ``"value"`` the records name (seeder's own records of
    #: a script that reports no loss: ``"sum of squared parameters"``).
    quantity: str = "loss"

    def __len__(self) -> int:
        return len(self.keys)

    def as_dict(self) -> dict[StepKey, float]:
        """The values by step key.

        Returns:
            ``{step key: value}``.
        """
        return dict(zip(self.keys, self.losses.tolist()))

    def summary_mask(self) -> np.ndarray:
        """The steps a run is summarised by (the variance check, compare's pairs).

        Returns:
            A bool mask: the last epoch's steps, or the last quarter of steps when epochs are
            unknown.
        """
        n = len(self.keys)
        known = [e for e in self.epochs if e is not None]
        if n and len(known) == n:
            last = max(known)
            return np.array([e == last for e in self.epochs])
        mask = np.zeros(n, dtype=bool)
        if n:
            mask[n - max(1, n // 4) :] = True
        return mask


def _get(obj: dict[str, Any], dotted: str) -> Any:
    cur: Any = obj
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def _step_key(value: Any) -> Optional[StepKey]:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return (value,)
    if (
        isinstance(value, (list, tuple))
        and value
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        return tuple(value)
    return None


def parse_metrics(
    lines: Iterable[str],
    contract: Optional[Contract] = None,
    *,
    source: str = "<metrics>",
    strict: bool = False,
) -> Metrics:
    """Parse JSON-lines and DLLogger metrics.

    A step logged twice is an error: each run writes a fresh file, so a repeat means
    the script logged from two processes or replayed steps.

    Args:
        lines: the lines of a metrics file or a log.
        contract: where the step and the loss are found (:class:`Contract`'s defaults).
        source: the name the errors give the lines.
        strict: reject lines that are not metrics instead of skipping them.

    Returns:
        The steps in the order logged.

    Raises:
        ValueError: a step is logged twice, or (``strict``) a line is not a metrics record.

    Example:
        >>> lines = ['{"step": 0, "loss": 1.5}', "epoch done", '{"step": 1, "loss": 1.25}']
        >>> m = parse_metrics(lines)
        >>> m.keys, m.losses.tolist()
        ([(0,), (1,)], [1.5, 1.25])
    """
    c = contract or Contract()
    keys: list[StepKey] = []
    losses: list[float] = []
    epochs: list[Optional[int]] = []
    digest: Optional[str] = None
    quantity = "loss"
    seen: dict[StepKey, int] = {}
    for lineno, raw in enumerate(lines, 1):
        obj = _record_of(raw, f"{source}:{lineno}", strict)
        if obj is None:
            continue
        if isinstance(obj.get("digest"), str):
            digest = obj["digest"]
            continue
        key = _step_key(_get(obj, c.step_key))
        loss = next((v for v in (_get(obj, k) for k in c.loss_keys) if v is not None), None)
        if key is None or isinstance(loss, bool) or not isinstance(loss, (int, float)):
            continue
        if key in seen:
            raise ValueError(
                f"{source}:{lineno}: step {format_step_key(key)} already logged on line "
                f"{seen[key]}; each step must be logged once per run (rank 0 only under torchrun)"
            )
        seen[key] = lineno
        if isinstance(obj.get("value"), str) and obj["value"]:
            quantity = obj["value"]
        keys.append(key)
        losses.append(float(loss))
        epochs.append(_epoch_of(obj, key))
    return Metrics(keys, np.asarray(losses, dtype=np.float64), epochs, digest, quantity)


def _record_of(raw: str, where: str, strict: bool) -> Optional[dict[str, Any]]:
    """The JSON object of one metrics line (a DLLogger prefix taken off), or ``None`` for a line
    that holds none (``strict``: a ``ValueError`` saying ``where``, for a line that is not empty
    and is no JSON object)."""
    line = raw.strip()
    if not line:
        return None
    body = line
    for prefix in ("DLLL ", "DLL "):
        if line.startswith(prefix):
            body = line[len(prefix) :].strip()
            break
    if not body.startswith("{"):
        if strict:
            raise ValueError(f"{where}: not a JSON object or DLLogger line: {line[:80]!r}")
        return None
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as exc:
        if strict:
            raise ValueError(f"{where}: invalid JSON ({exc.msg}): {line[:80]!r}") from None
        return None
    return obj if isinstance(obj, dict) else None


def _epoch_of(obj: dict[str, Any], key: StepKey) -> Optional[int]:
    """A record's epoch: its ``epoch`` (an int), else the first part of a step key of several."""
    epoch = obj.get("epoch")
    if not isinstance(epoch, int) or isinstance(epoch, bool):
        return key[0] if len(key) > 1 else None
    return epoch


def format_step_key(key: StepKey) -> str:
    """A step key as people write it: ``12`` for ``(12,)``, ``(1, 12)`` for a DLLogger ``[1, 12]``.

    >>> format_step_key((12,)), format_step_key((1, 12))
    ('12', '(1, 12)')
    """
    return str(key[0]) if len(key) == 1 else "(" + ", ".join(map(str, key)) + ")"


def read_metrics(
    metrics_file: Optional[Path],
    log_file: Optional[Path],
    contract: Optional[Contract] = None,
    steps_file: Optional[Path] = None,
) -> Metrics:
    """The metrics of one run: the metrics file if it has steps, else the run's log, else seeder's
    own records.

    Args:
        metrics_file: the file the script wrote its metrics to, or ``None``.
        log_file: the run's output, or ``None``.
        contract: where the step and the loss are found.
        steps_file: what seeder recorded after each optimizer step, or ``None``.

    Returns:
        The first of them that holds a step, with the run's digest from the log or seeder's
        records when the metrics carry none.

    Raises:
        ValueError: none holds a step (the message names every place and what to log).

    Example:
        >>> import pathlib, tempfile
        >>> log = pathlib.Path(tempfile.mkdtemp()) / "log.txt"
        >>> _ = log.write_text('{"step": 0, "loss": 2.0}\\nDIGEST abc\\n')
        >>> m = read_metrics(None, log)
        >>> m.losses.tolist(), m.digest
        ([2.0], 'abc')
    """
    tried = []
    for path, strict in ((metrics_file, True), (log_file, False), (steps_file, False)):
        if path is None:
            continue
        tried.append(str(path))
        if not Path(path).is_file():
            continue
        with open(path, encoding="utf-8", errors="replace") as fh:
            m = parse_metrics(fh, contract, source=str(path), strict=strict)
        if len(m):
            if m.digest is None and log_file is not None and Path(log_file).is_file():
                m.digest = _digest_from_log(Path(log_file))
            if m.digest is None and steps_file is not None and path != steps_file:
                m.digest = _steps_digest(
                    Path(steps_file)
                )  # seeder's digest of weights and optimizer at exit
            return m
    raise ValueError(
        f"no per-step values found in {' or '.join(tried) or 'nothing'}: the command logged no "
        f"step seeder could read. {_missing(steps_file)}, or write JSON lines "
        '{"step": N, "loss": X} to the metrics file (--metrics FILE or $SEEDER_METRICS) or to its '
        "output"
    )


def _missing(steps_file: Optional[Path]) -> str:
    """What the run's step records say is missing for seeder to record its steps."""
    from seeder._run.steps import read_steps  # the command line's import needs no torch

    marks = {
        r.get("seeder_run")
        for r in (read_steps(steps_file) if steps_file is not None else [])
        if isinstance(r, dict)
    }
    if "checkpoint" in marks:
        return (
            "The script calls seeder.init() and makes a seeder.Checkpoint, but never calls its "
            "step(): call ckpt.step() after each training step (seeder then records each step "
            "under seeder verify, and stops the run there)"
        )
    if "init" in marks:
        return (
            "The script calls seeder.init(), but steps no torch optimizer and no "
            "seeder.Checkpoint: call ckpt.step() of a seeder.Checkpoint after each training step "
            "(a loop with a hand-written update too; seeder then records each step under seeder "
            "verify)"
        )
    return (
        "The script never called seeder.init() of the module-level seeder under seeder verify: "
        "call it (import seeder; seeder.init()) before training, and ckpt.step() of a "
        "seeder.Checkpoint after each step or step a torch optimizer (seeder then records each "
        "step under seeder verify)"
    )


def _steps_digest(steps_file: Path) -> Optional[str]:
    """The digest seeder wrote at exit into its per-step records, or ``None``."""
    try:
        with open(steps_file, encoding="utf-8", errors="replace") as fh:
            return parse_metrics(fh, source=str(steps_file)).digest
    except (OSError, ValueError):
        return None


def _digest_from_log(log: Path) -> Optional[str]:
    digest = None
    with open(log, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if line.startswith("DIGEST "):
                digest = line.split(None, 1)[1].strip() or None
    return digest


def default_command() -> list[str]:
    """The bundled example: ``python examples/train.py`` next to the installed package.

    Returns:
        The command, with this interpreter.

    Raises:
        FileNotFoundError: the checkout has no ``examples/train.py``.

    Example:
        >>> default_command()[1].endswith("train.py")
        True
    """
    script = Path(__file__).resolve().parent.parent.parent / "examples" / "train.py"
    if not script.is_file():
        raise FileNotFoundError(
            f"the bundled example {script} is not there (seeder installed without its examples?); "
            "give your own training command after --, e.g. seeder verify -- python train.py"
        )
    return [sys.executable, str(script)]


def split_command(command: Sequence[str]) -> list[str]:
    """A command given as one shell string or as words.

    >>> split_command(["python train.py --lr 0.1"])
    ['python', 'train.py', '--lr', '0.1']
    """
    words = list(command)
    if len(words) == 1 and " " in words[0] and not os.path.exists(words[0]):
        return shlex.split(words[0])
    return words
