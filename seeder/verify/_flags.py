"""Which of verify's flags a training command takes, and with what arity: from the script's own
parser.

Before any run, :func:`probe_parser` runs the command's script once up to its argument parser
(:mod:`seeder.verify._probe`: the script stops when it asks its ``argparse`` parser to read the
command line, or at its first optimizer step, whichever comes first; nothing trains). The parser's
options and their arity decide each default flag of the contract (:func:`adapt_contract`); a flag
set with ``--arg`` is kept as given. A flag the parser does not
take as verify would pass it is left out, and seeder does that part inside the run:

* ``--seed``: the seed goes through ``$SEEDER_SEED``, which ``seeder.init`` reads;
* ``--epochs``: the script runs its own number of epochs (verify learns it from run (1));
* ``--ckpt-dir``: the run's own directory holds what the script saves;
* ``--stop-after-epochs`` / ``--stop-after-steps``: seeder stops the run
  (``$SEEDER_STOP_AFTER_STEP``, with ``seeder.Checkpoint``, ``SeederCallback`` or
  ``SeederTrainer``);
* ``--resume``: seeder's helpers resume through ``$SEEDER_RESUME``; a script that offers
  ``--ckpt_path`` (LightningCLI) resumes with ``--ckpt_path {ckpt_dir}/seeder-stop.ckpt``;
* ``--metrics``: seeder records the steps.

Where the parser cannot be known (no parser reached before the first optimizer step, a command that
is not a Python script, a probe that did not finish), every default flag is left out: the runs are
driven through seeder's environment variables only. The notes say which flag went which way.

Example:
    >>> actions = [{"options": ["--seed"], "nargs": None, "metavar": "SEED"},
    ...            {"options": ["--resume"], "nargs": None, "metavar": "PATH"}]
    >>> probe = ParserProbe(actions, "from its parser")
    >>> c, notes = adapt_contract(Contract(), probe)
    >>> c.seed, c.epochs, c.resume
    ('--seed {seed}', '', '')
    >>> [n for n in notes if n.startswith("--resume")]  # doctest: +ELLIPSIS
    ["--resume takes a value (PATH), not a bare flag: ... --arg resume='--resume {ckpt_dir}/FILE'"]
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from seeder._run.steps import STOP_CKPT
from seeder._safefile import open_log, write_file
from seeder.env._redact import command_text, file_redactor, redact_json
from seeder.verify._contract import TEMPLATE_NAMES, Contract

__all__ = [
    "ParserProbe",
    "probe_parser",
    "probe_argv",
    "adapt_contract",
    "flag_word",
    "LIGHTNING_RESUME",
    "PROBE_TIMEOUT",
    "PROBE_REPORT",
]

#: The resume template for a command that offers LightningCLI's ``--ckpt_path``.
LIGHTNING_RESUME = "--ckpt_path {ckpt_dir}/" + STOP_CKPT
#: Seconds the script may take to reach its parser or an optimizer step.
PROBE_TIMEOUT = 120.0
#: What the probe writes, in its folder.
PROBE_REPORT = "parser.json"
_PROBE = str(Path(__file__).with_name("_probe.py"))
#: Modules that launch a script rather than being one (``python -m torch.distributed.run ...
#: train.py``).
_LAUNCHERS = ("torch.distributed.", "accelerate", "deepspeed")
#: Python's options that take a value in the next word.
_PY_VALUE_OPTIONS = ("-W", "-X", "--check-hash-based-pycs")


@dataclass
class ParserProbe:
    """The options of a command's parser (``actions``: one dict per parser action, ``None`` where
    they are not known) and how they were learned, or why not (``how``)."""

    actions: Optional[list[dict[str, Any]]]
    how: str


def flag_word(template: str) -> Optional[str]:
    """The option a template passes (``--stop-after-steps`` of ``--stop-after-steps {steps}``), or
    ``None``.

    >>> flag_word("--stop-after-steps {steps}"), flag_word("--stop={steps}"), flag_word("{seed}")
    ('--stop-after-steps', '--stop', None)
    """
    for word in shlex.split(template):
        if word.startswith("-"):
            return word.split("=", 1)[0]
    return None


def _is_python(word: str) -> bool:
    return (
        word == sys.executable
        or re.fullmatch(r"python(\d+(\.\d+)*)?", os.path.basename(word)) is not None
    )


def probe_argv(command: Sequence[str], cwd: Path) -> tuple[Optional[list[str]], str]:
    """``(argv that runs the probe, report path placeholder {report})`` for ``command``, or ``(None,
    why not)``.

    ``python [options] SCRIPT ARGS`` and ``python -m MODULE ARGS`` run under that interpreter; a
    launcher (``torchrun ... SCRIPT.py ARGS``) has its first existing ``.py`` script run under this
    one.

    >>> argv, _ = probe_argv(["python", "-u", "train.py", "--lr", "1"], Path("."))
    >>> argv[2:]  # doctest: +ELLIPSIS
    ['.../_probe.py', '{report}', 'train.py', '--lr', '1']
    >>> probe_argv(["bash", "run.sh"], Path("."))[1]  # no file run.sh here: a word it hides
    'bash <hidden> is not a Python script or module verify can start up to its parser'
    """
    words = list(command)
    launcher = bool(words) and not _is_python(words[0])
    if words and not launcher:
        i = 1
        while i < len(words) and words[i].startswith("-") and words[i] not in ("-m", "-c", "-"):
            i += 2 if words[i] in _PY_VALUE_OPTIONS else 1
        if i + 1 < len(words) and words[i] == "-m":
            if not words[i + 1].startswith(_LAUNCHERS):
                return words[:i] + [_PROBE, "{report}", "-m"] + words[i + 1 :], ""
            launcher = True
        elif i < len(words) and words[i] not in ("-c", "-", "-m"):
            return words[:i] + [_PROBE, "{report}"] + words[i:], ""
    if launcher:  # its script, under this Python
        for i, word in enumerate(words[1:], 1):
            if word.endswith(".py") and (Path(cwd) / word).is_file():
                return [sys.executable, _PROBE, "{report}"] + words[i:], ""
    shown = command_text(words, cwd=str(cwd))
    return None, f"{shown} is not a Python script or module verify can start up to its parser"


def probe_parser(
    command: Sequence[str],
    cwd: Path,
    folder: Path,
    env: dict[str, str],
    timeout: float = PROBE_TIMEOUT,
) -> ParserProbe:
    """Run ``command``'s script in ``folder`` up to its parser (:mod:`seeder.verify._probe`) and
    read its options.

    ``cwd`` is where the command's relative paths are; ``folder`` (inside verify's output) is the
    probe's working directory and holds its report and log. Never raises for the script's sake: a
    script that cannot be probed gives ``actions=None`` and the reason.
    """
    folder.mkdir(parents=True, exist_ok=True)
    argv, why = probe_argv(command, cwd)
    if argv is None:
        return ParserProbe(None, why)
    report = folder / PROBE_REPORT
    report.unlink(missing_ok=True)  # never a link to follow (the probe writes it with open())
    argv = [str(report) if w == "{report}" else w for w in argv]
    redact = file_redactor([command])
    shown = command_text(command, redact, str(cwd))  # printed and written
    with os.fdopen(open_log(folder / "log.txt"), "wb") as log:
        try:
            proc = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=str(folder),
                start_new_session=True,
            )
        except OSError as exc:
            return ParserProbe(
                None, f"could not start {argv[0]!r} to read the parser of `{shown}` ({exc})"
            )
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            # the script's group: DataLoader workers or a launcher's children it may have started
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
    _rewrite(folder, "log.txt", lambda text: redact.text(text))
    try:
        record = json.loads(report.read_text(encoding="utf-8"))
        write_file(
            folder, PROBE_REPORT, (json.dumps(redact_json(record), indent=1) + "\n").encode(), 0o644
        )
    except (OSError, ValueError):
        record = None
    if (
        isinstance(record, dict)
        and record.get("reached") == "parser"
        and isinstance(record.get("actions"), list)
    ):
        return ParserProbe(
            record["actions"], f"the options of its parser, read by running `{shown}` up to it"
        )
    if isinstance(record, dict) and record.get("reached"):
        return ParserProbe(
            None, f"`{shown}` reached its first {record['reached']} before any argument parser"
        )
    if code is None:
        return ParserProbe(
            None, f"`{shown}` reached no argument parser or optimizer step within {timeout:g} s"
        )
    return ParserProbe(
        None,
        f"`{shown}` ended (status {code}) before any argument parser or optimizer step (its "
        f"output: {folder / 'log.txt'})",
    )


def _rewrite(folder: Path, name: str, change: Any) -> None:
    """Replace a file the probe wrote by ``change(its text)`` (secrets redacted), never through a
    link."""
    try:
        text = (folder / name).read_bytes().decode("utf-8", errors="surrogateescape")
    except OSError:
        return
    write_file(folder, name, change(text).encode("utf-8", errors="surrogateescape"), 0o644)


def _takes_value(action: dict[str, Any]) -> bool:
    return action.get("nargs") != 0


def _needs_value(template: str) -> bool:
    return "{" in template.replace("{{", "")


def _shown(action: dict[str, Any], flag: str) -> str:
    return (
        f"{flag} {action.get('metavar') or action.get('dest', '').upper()}".strip()
        if _takes_value(action)
        else flag
    )


def adapt_contract(contract: Contract, probe: ParserProbe) -> tuple[Contract, list[str]]:
    """``contract`` with each default flag kept where the parser takes it as verify passes it, and
    notes saying how the command is driven. A template set with ``--arg`` (not the default) is kept
    as given."""
    default = Contract()
    options = {o: a for a in (probe.actions or []) for o in a.get("options", [])}
    changed: dict[str, str] = {}
    notes: list[str] = []
    if probe.actions is None:
        notes.append(
            f"flags not known ({probe.how}): the runs are driven through seeder's environment "
            f"variables"
        )
    for name in TEMPLATE_NAMES:
        template = getattr(contract, name)
        flag = flag_word(template) if template else None
        if template != getattr(default, name) or flag is None:
            if template and template != getattr(default, name):
                notes.append(f"{flag or name}: passed as set with --arg ({template})")
            continue
        action = options.get(flag)
        if action is not None and _takes_value(action) == _needs_value(template):
            notes.append(f"{flag}: the script's parser takes {_shown(action, flag)}")
            continue
        if action is not None and name == "resume":
            changed[name] = ""
            notes.append(
                f"{flag} takes a value ({action.get('metavar') or 'a path'}), not a bare flag: "
                f"{_WHO[name]}; to resume through it instead, pass --arg resume='{flag} "
                f"{{ckpt_dir}}/FILE'"
                if _takes_value(action)
                else f"{flag} takes no value: {_WHO[name]}"
            )
            continue
        changed[name] = ""
        if action is not None:
            notes.append(
                f"{flag} takes {'a value' if _takes_value(action) else 'no value'}, not as verify "
                f"passes it: {_WHO[name]}"
            )
        elif probe.actions is not None:
            notes.append(f"the script's parser has no {flag}: {_WHO[name]}")
    if "resume" in changed and "--ckpt_path" in options and _takes_value(options["--ckpt_path"]):
        changed["resume"] = LIGHTNING_RESUME
        notes.append(f"--ckpt_path: the resumed runs pass {LIGHTNING_RESUME}")
    # Only template fields (str) change; mypy checks `**changed` against every field, loss_keys
    # (a tuple) included.
    return dataclasses.replace(contract, **changed), notes  # type: ignore[arg-type]


_WHO = {
    "seed": "the seed goes through $SEEDER_SEED",
    "epochs": "the script runs its own number of epochs",
    "ckpt_dir": "each run's folder holds its checkpoints",
    "resume": "seeder's helpers resume ($SEEDER_RESUME: seeder.Checkpoint.resume(), SeederTrainer)",
    "stop_after_epochs": "seeder stops the run ($SEEDER_STOP_AFTER_STEP)",
    "stop_after_steps": "seeder stops the run ($SEEDER_STOP_AFTER_STEP)",
    "metrics": "seeder records each optimizer step (the sum of squared parameters, unless the "
    "script's output logs JSON losses)",
}
