"""Which of verify's flags a training command takes: the rest is left to seeder inside the run.

A script need not speak verify's contract. For each flag whose template is the default
(not set with ``--arg``), the command's ``.py`` files are searched for the option word and,
for the options not found there, ``COMMAND --help`` runs once; a flag found in neither is
left out (its template emptied):

* ``--seed``: the seed goes through ``$SEEDER_SEED``, which ``seeder.init`` reads;
* ``--epochs``: the script runs its own number of epochs (verify learns it from run (1));
* ``--ckpt-dir``: the run's own directory holds what the script saves;
* ``--stop-after-epochs`` / ``--stop-after-steps``: seeder stops the run
  (:mod:`seeder.stepwatch`, with ``seeder.Checkpoint``, ``SeederCallback`` or ``SeederTrainer``);
* ``--resume``: seeder's helpers resume through ``$SEEDER_RESUME``; a script that offers
  ``--ckpt_path`` (LightningCLI) resumes with ``--ckpt_path {ckpt_dir}/seeder-stop.ckpt``;
* ``--metrics``: seeder records the steps.

Example:
    >>> c, notes = adapt_contract(["python", "-c", "pass"], Contract(), help_text="usage: x [--seed SEED]")
    >>> c.seed, c.epochs, c.resume
    ('--seed {seed}', '', '')
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from ..stepwatch import STOP_CKPT
from .contract import TEMPLATE_NAMES, Contract
from .midepoch import HELP_TIMEOUT, flag_word, has_flag, help_output, mentions

__all__ = ["adapt_contract", "LIGHTNING_RESUME"]
#: The resume template for a command that offers LightningCLI's ``--ckpt_path``.
LIGHTNING_RESUME = "--ckpt_path {ckpt_dir}/" + STOP_CKPT


def adapt_contract(command: Sequence[str], contract: Contract, *, cwd: Optional[Path] = None,
                   env: Optional[Dict[str, str]] = None, help_text: Optional[str] = None,
                   timeout: float = HELP_TIMEOUT) -> Tuple[Contract, List[str]]:
    """``contract`` with the default flags the command does not take left out, and notes saying which."""
    default = Contract()
    unknown = {}
    for name in TEMPLATE_NAMES:
        template = getattr(contract, name)
        flag = flag_word(template) if template else None
        if template == getattr(default, name) and flag is not None and mentions(command, flag, cwd) is None:
            unknown[name] = flag
    if not unknown:
        return contract, []
    if help_text is None:
        import os

        help_text, problem = help_output(command, env or dict(os.environ), cwd, timeout)
        if help_text is None or problem:
            return contract, [f"could not read `{' '.join(command)} --help` ({problem}); the contract's flags are kept"]
    dropped = {name: "" for name, flag in unknown.items() if not has_flag(help_text, flag)}
    if "resume" in dropped and has_flag(help_text, "--ckpt_path"):
        dropped["resume"] = LIGHTNING_RESUME
    notes = [f"the command takes no {unknown[n]}: " + (f"it resumes with {v}" if v else _WHO[n])
             for n, v in dropped.items()]
    return dataclasses.replace(contract, **dropped), notes


_WHO = {"seed": "the seed goes through $SEEDER_SEED", "epochs": "the script runs its own number of epochs",
        "ckpt_dir": "each run's directory holds its checkpoints", "resume": "seeder's helpers resume ($SEEDER_RESUME)",
        "stop_after_epochs": "seeder stops the run", "stop_after_steps": "seeder stops the run",
        "metrics": "seeder records each optimizer step (the sum of squared parameters, unless the script's output "
                   "logs JSON losses)"}
