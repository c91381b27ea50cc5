"""Causes of a failed resume that seeder's step records show (:mod:`seeder._run.steps`).

* :func:`discarded_batches`: the resumed run trained fewer steps of the resumed epoch than were
  left (a skip loop over a loader that resumes by itself);
* :func:`prefetched`: a global RNG restored exactly, yet the resumed run's first step drew more
  from it than the uninterrupted run's did (a batch drawn ahead, across the checkpoint);

:mod:`seeder.verify._diagnose` asks them in its order.

Example:
    >>> full = [{"step": s, "loss": 0.0, "draws": {"torch": 24}, "rngs": {"torch": f"t{s}"}}
    ...         for s in (4, 5, 6)]
    >>> resumed = [{"seeder_verify": "loaded", "at_step": 4, "rngs": {"torch": "t4"}},
    ...            {"step": 5, "loss": 0.0, "draws": {"torch": 36}},
    ...            {"step": 6, "loss": 0.0, "draws": {"torch": 24}}]
    >>> state, message = prefetched(full, resumed)
    >>> state, message.split(",")[1].split(" than")[0]
    ('prefetch', " yet the resumed run's first step drew 12 number(s) more from it")
"""

from __future__ import annotations

from typing import Any, Optional

from seeder.verify._contract import Metrics

__all__ = ["discarded_batches", "prefetched", "MSG_DISCARDED", "MSG_PREFETCH", "MSG_ITER_SEED"]

Records = list[dict[str, Any]]
#: The global RNGs in the order they are looked at: torch's first, where nanoGPT-style loops draw.
RNG_ORDER = ("torch", "numpy", "python")
LABEL = {
    "python": "Python's global random",
    "numpy": "NumPy's global RNG",
    "torch": "torch's global RNG",
}

MSG_DISCARDED = (
    "the resumed run {resumed} trained {got} of the {left} step(s) left of epoch {epoch} "
    "({stopped} had trained {done} of its {total}): the loader handed it the rest of the epoch, "
    "from where the checkpoint left it, and the loop discarded batches without training on them. "
    "A skip loop (`for i, batch in enumerate(loader): if i < done: continue`) does this to a "
    "loader that resumes by itself: count from the loader instead, `for i, batch in "
    "enumerate(loader, start=loader.batches_done)`, and skip nothing"
)


def discarded_batches(
    full: Metrics,
    stopped: Metrics,
    resumed: Metrics,
    warning: Optional[str] = None,
    labels: tuple[str, str] = ("(3b)", "(2b)"),
) -> Optional[str]:
    """Why the resumed run trained fewer steps of the resumed epoch than were left, or ``None``.

    Args:
        full: run (1)'s metrics (with epochs).
        stopped: run (2)'s, stopped inside an epoch.
        resumed: run (3)'s.
        warning: a line of the resumed run's log that says batches were discarded (seeder warns
            so); quoted in the message.
        labels: how the message names the resumed and the stopped run.

    Returns:
        The message, or ``None`` when the resumed run trained every step left of the epoch
        (or the runs have no epochs, or the stop was at an epoch's end).

    >>> import numpy as np
    >>> m = lambda keys, epochs: Metrics([(k,) for k in keys], np.zeros(len(keys)), epochs)
    >>> d = discarded_batches(m(range(1, 9), [0] * 4 + [1] * 4), m([1, 2, 3, 4, 5], [0] * 4 + [1]),
    ...                       m([6, 7], [2, 2]))
    >>> d.split(":")[0]
    'the resumed run (3b) trained 0 of the 3 step(s) left of epoch 1 ((2b) had trained 1 of its 4)'
    """
    if (
        not len(stopped)
        or not len(resumed)
        or stopped.epochs[-1] is None
        or len(set(full.epochs)) < 2
    ):
        return None
    epoch = stopped.epochs[-1]
    total = sum(1 for e in full.epochs if e == epoch)
    done = sum(1 for e in stopped.epochs if e == epoch)
    got = sum(1 for e in resumed.epochs if e == epoch)
    if not 0 < done < total or done + got >= total:
        return None
    msg = MSG_DISCARDED.format(
        resumed=labels[0],
        stopped=labels[1],
        got=got,
        left=total - done,
        epoch=epoch,
        done=done,
        total=total,
    )
    if warning:  # from the warning's own words on (warnings print "FILE:LINE: SeederWarning: ...")
        text = warning.strip()
        text = text[text.find("SeederWarning") :] if "SeederWarning" in text else text
        msg += f" (its log: {text[:400]}{'...' if len(text) > 400 else ''})"
    return msg


MSG_PREFETCH = (
    "{label} was restored as it was after step {step}, yet the resumed run's first step drew "
    "{extra} number(s) more from it than step {next} of the uninterrupted run, and later steps as "
    "many as it: the loop draws something once before its first step and then one step ahead, a "
    "batch prefetched across the checkpoint (`X, Y = get_batch()` before the loop and again before "
    "the step ends, as nanoGPT's train.py does). The checkpoint, saved after the step, holds the "
    "RNG after the next batch was drawn, so the resumed run draws that batch again from there and "
    "trains on other batches from then on. Draw each step's batch at the start of the step, or "
    "save the prefetched batch with the checkpoint and train on it first after the resume"
)
MSG_ITER_SEED = (
    "torch's global RNG was restored as it was after step {step}, yet the resumed run's first step "
    "drew {extra} number(s) more from it than step {next} of the uninterrupted run: an iterator "
    "started after the resume drew its seed (a torch DataLoader without generator= draws its "
    "workers' base seed, a RandomSampler without generator= its shuffle seed, at each "
    "iter(loader)). Pass generator=seeder.data.dataloader_generator() to the DataLoader, or use "
    "seeder.DataLoader"
)


def _draws(record: Optional[dict[str, Any]], name: str) -> Any:
    return (record or {}).get("draws", {}).get(name)


def prefetched(full: Records, resumed: Records) -> Optional[tuple[str, str]]:
    """A global RNG that the resumed run's first step drew more from than the uninterrupted run's.

    Args:
        full: the step records of run (1) (:func:`seeder._run.steps.read_steps`): each step's
            numbers drawn per RNG (``draws``) and fingerprints (``rngs``).
        resumed: those of run (3), with its ``loaded`` line (the fingerprints of the RNG states
            the load put back).

    Returns:
        ``("prefetch", message)``, ``("iterator-seed", message)`` (2 to 4 more numbers of
        torch's: a seed drawn, not a batch), or ``None`` when no RNG was restored exactly and
        then drawn from once more at the start.
    """
    mark = next(
        (
            r
            for r in resumed
            if r.get("seeder_verify") == "loaded" and isinstance(r.get("rngs"), dict)
        ),
        None,
    )
    steps = {r["step"]: r for r in full if isinstance(r.get("step"), int) and "loss" in r}
    if mark is None or not isinstance(mark.get("at_step"), int):
        return None
    stop = mark["at_step"]
    after = [
        r for r in resumed if isinstance(r.get("step"), int) and "loss" in r and r["step"] > stop
    ]
    if not after or stop not in steps or stop + 1 not in steps or after[0]["step"] != stop + 1:
        return None
    for name in RNG_ORDER:
        restored = mark["rngs"].get(name)
        if restored is None or restored != steps[stop].get("rngs", {}).get(name):
            continue
        got, want = _draws(after[0], name), _draws(steps[stop + 1], name)
        if not isinstance(got, int) or not isinstance(want, int) or got <= want:
            continue
        later = [(_draws(r, name), _draws(steps.get(r["step"]), name)) for r in after[1:3]]
        if any(isinstance(a, int) and isinstance(b, int) and a != b for a, b in later):
            continue  # not one extra draw at the start: something else
        fields = {"label": LABEL[name], "step": stop, "next": stop + 1, "extra": got - want}
        if name == "torch" and got - want <= 4:  # 2 words a seed: an iterator's seed, not a batch
            return "iterator-seed", MSG_ITER_SEED.format(**fields)
        return "prefetch", MSG_PREFETCH.format(**fields)
    return None
