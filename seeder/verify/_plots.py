"""Figures of a verify/compare session, drawn with matplotlib (no pyplot state; saved with Agg).

Every ``plot_*`` function returns a :class:`matplotlib.figure.Figure`; notebooks
display it, :func:`write_figures` saves the set as PNG files.

Example:
    >>> config = {"epochs": 4, "repeats": 3, "seed": 42}
    >>> fig = plot_methodology({"kind": "verify", "config": config})
    >>> len(fig.axes)
    1
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Rectangle

from seeder.verify._contract import Metrics

__all__ = [
    "plot_methodology",
    "plot_loss_curves",
    "plot_overlay",
    "plot_spread",
    "plot_compare",
    "write_figures",
    "FIGURES",
    "COLORS",
]

#: Colour of each run kind.
COLORS = {
    "full": "tab:blue",
    "half": "tab:green",
    "resume": "tab:orange",
    "unseeded": "tab:red",
    "mid": "tab:olive",
    "resume-mid": "tab:purple",
    "a": "tab:blue",
    "b": "tab:orange",
}
#: File names written by :func:`write_figures`, per session kind.
FIGURES = {
    "verify": ("methodology.png", "loss_curves.png", "overlay.png", "spread.png"),
    "compare": ("compare_methodology.png", "compare.png"),
}
_LABELS = {
    "full": "(1) seeded, X epochs",
    "half": "(2) seeded, stopped at X/2",
    "resume": "(3) resumed from (2)",
    "mid": "(2b) seeded, stopped mid-epoch",
    "resume-mid": "(3b) resumed from (2b)",
    "unseeded": "(4) unseeded, X epochs",
}


def _x_of(metrics: dict[str, Metrics]) -> dict[tuple[int, ...], int]:
    """Step key -> x position: the order of all keys logged (keys sort chronologically)."""
    keys = sorted({k for m in metrics.values() for k in m.keys})
    return {k: i for i, k in enumerate(keys)}


def _xs(m: Metrics, xmap: dict[tuple[int, ...], int]) -> np.ndarray:
    return np.array([xmap[k] for k in m.keys])


def _runs(metrics: dict[str, Metrics], kind: str) -> list[tuple[int, Metrics]]:
    out = []
    for name, m in metrics.items():
        k, _, rep = name.rpartition("-")
        if k == kind and rep.isdigit():
            out.append((int(rep), m))
    return sorted(out, key=lambda t: t[0])


def _checkpoint_x(
    metrics: dict[str, Metrics], xmap: dict[tuple[int, ...], int], kind: str = "resume"
) -> Optional[float]:
    res = _runs(metrics, kind)
    if res and len(res[0][1]):
        return xmap[res[0][1].keys[0]] - 0.5
    return None


def plot_methodology(report: dict[str, Any]) -> Figure:
    """The methodology as a diagram: which runs, which seeds, where the checkpoint is."""
    fig = Figure(figsize=(8, 3.6), dpi=110)
    ax = fig.add_subplot()
    ax.set_axis_off()
    if report.get("kind") == "compare":
        _draw_compare(ax, report["config"])
    else:
        _draw_verify(ax, report)
    return fig


def _draw_compare(ax: Any, cfg: dict[str, Any]) -> None:
    """seeder compare's runs: A and B per seed, paired."""
    n = cfg.get("runs", 2)
    ax.set_xlim(-0.5, 10)
    ax.set_ylim(-0.9, 2.2)
    ax.set_title(
        f"seeder compare: A and B trained with the same {n} seeds, differences paired by seed",
        fontsize=10,
    )
    shown = min(n, 4)
    for i in range(shown):
        x0 = 0.3 + i * 2.4
        for cf, y in (("a", 1.3), ("b", 0.1)):
            ax.add_patch(Rectangle((x0, y), 1.8, 0.55, color=COLORS[cf], alpha=0.8))
            ax.text(
                x0 + 0.9,
                y + 0.27,
                f"{cf.upper()}, seed {cfg['seed'] + i}",
                ha="center",
                va="center",
                color="white",
                fontsize=8,
            )
        ax.add_patch(
            FancyArrowPatch((x0 + 0.9, 1.28), (x0 + 0.9, 0.7), arrowstyle="<->", mutation_scale=10)
        )
    if n > shown:
        ax.text(9.9, 0.9, f"... {n} seeds", ha="right", va="center", fontsize=9)
    ax.text(
        4.8,
        -0.5,
        "paired difference B - A per seed -> t interval (95%, 99%)",
        ha="center",
        fontsize=9,
    )


def _verify_rows(
    report: dict[str, Any], x: int, top: float, mid: bool
) -> list[tuple[str, float, float, float]]:
    """seeder verify's runs as ``(kind, y, first epoch, last epoch)``, top to bottom."""
    half = x / 2 if x >= 2 else None
    rows: list[tuple[str, float, float, float]] = [("full", top, 0, x)]
    if half is not None:
        rows += [("half", top - 1, 0, half), ("resume", top - 2, half, x)]
    if mid:
        mid_x = _mid_stop_x(report, x)
        rows += [("mid", 2.2, 0, mid_x), ("resume-mid", 1.2, mid_x, x)]
    rows.append(("unseeded", 0.2, 0, x))
    return rows


def _draw_checkpoints(ax: Any, rows: list[tuple[str, float, float, float]]) -> None:
    """A diamond and an arrow where each stopped run saves the checkpoint its resumed run loads."""
    for stop_kind, label in (
        ("half", "checkpoint (epoch boundary)"),
        ("mid", "checkpoint (mid-epoch)"),
    ):
        stop_row = next((rw for rw in rows if rw[0] == stop_kind), None)
        if stop_row is None:
            continue
        ck, y = stop_row[3], stop_row[1]
        ax.plot([ck], [y + 0.3], marker="D", color="black", markersize=7)
        ax.text(ck + 0.08, y + 0.75, label, fontsize=8, va="bottom")
        ax.add_patch(
            FancyArrowPatch(
                (ck, y + 0.25), (ck, y - 0.35), arrowstyle="->", mutation_scale=12, color="black"
            )
        )


def _draw_verify(ax: Any, report: dict[str, Any]) -> None:
    """seeder verify's runs over the epochs, with their checkpoints."""
    cfg = report["config"]
    x, r = cfg["epochs"], cfg.get("repeats", 1)
    mid_check = next((c for c in report.get("checks", []) if c["name"] == "resume-mid-epoch"), None)
    mid = cfg.get("mid_epoch", False) and (mid_check is None or mid_check["status"] != "SKIP")
    top = 5.2 if mid else 3.2
    ax.set_xlim(-2.6, x + 1.9)
    ax.set_ylim(-1.2, top + 1.1)
    rr = cfg.get("resume_repeats")
    fewer = f" (2, 3: {rr})" if rr is not None and rr != r else ""
    ax.set_title(
        f"seeder verify: one seed ({cfg['seed']}) for runs 1-3, none for run 4; each repeated {r} "
        f"times{fewer}",
        fontsize=10,
    )
    rows = _verify_rows(report, x, top, mid)
    for kind, y, a, b in rows:
        ax.add_patch(
            Rectangle(
                (a, y),
                b - a,
                0.6,
                color=COLORS[kind],
                alpha=0.85,
                hatch="//" if kind == "unseeded" else None,
                fill=True,
            )
        )
        ax.text(-0.15, y + 0.3, _LABELS[kind], ha="right", va="center", fontsize=8)
    _draw_checkpoints(ax, rows)
    for e in range(x + 1):
        ax.plot([e, e], [-0.05, top + 0.75], color="0.85", lw=0.6, zorder=0)
        ax.text(e, -0.35, str(e), ha="center", fontsize=8)
    ax.text(x / 2, -0.8, "epoch", ha="center", fontsize=8)
    ax.text(
        x + 0.15,
        top / 2 + 0.3,
        "losses of 1 and 3" + (", 3b" if mid else "") + ":\nbit for bit equal\n\n"
        "spread of 1 vs 4:\nseeded < unseeded",
        fontsize=8,
        va="center",
    )


def _mid_stop_x(report: dict[str, Any], epochs: int) -> float:
    """Where run (2b) stopped, in epochs (for the diagram); half an epoch before X/2 when
    unknown."""
    mid = next((c for c in report.get("checks", []) if c["name"] == "resume-mid-epoch"), None)
    reps = (mid or {}).get("details", {}).get("repeats") or []
    stop = reps[0].get("stopped_at", {}) if reps else {}
    if stop.get("epoch") is not None and stop.get("epoch_steps"):
        return stop["epoch"] + stop["into_epoch"] / stop["epoch_steps"]
    return max(0.5, epochs / 2 - 0.5)


def _curves_axes(
    ax: Axes,
    runs: Sequence[tuple[int, Metrics]],
    kind: str,
    xmap: dict[tuple[int, ...], int],
    label_once: bool = True,
    **kw: Any,
) -> None:
    style = {"color": COLORS[kind], "lw": 1.0, "alpha": 0.75, **kw}
    for i, (_rep, m) in enumerate(runs):
        ax.plot(
            _xs(m, xmap),
            m.losses,
            label=_LABELS[kind] if (i == 0 and label_once) else None,
            **style,
        )


def plot_loss_curves(report: dict[str, Any], metrics: dict[str, Metrics]) -> Figure:
    """One panel per run type, every repeat drawn (NVIDIA seeder's test 1)."""
    xmap = _x_of(metrics)
    panels = [
        (("full",), "(1) seeded, X epochs"),
        (("half", "resume"), "(2) stopped + (3) resumed, seeded"),
        (("mid", "resume-mid"), "(2b) stopped mid-epoch + (3b) resumed"),
        (("unseeded",), "(4) unseeded, X epochs"),
    ]
    panels = [p for p in panels if any(_runs(metrics, k) for k in p[0])]
    fig = Figure(figsize=(4 * len(panels), 3.6), dpi=110, layout="constrained")
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    for ax, (kinds, title) in zip(axes, panels):
        for kind in kinds:
            _curves_axes(
                ax, _runs(metrics, kind), kind, xmap, ls="--" if kind.startswith("resume") else "-"
            )
        ck = _checkpoint_x(metrics, xmap, kinds[-1]) if kinds[-1].startswith("resume") else None
        if ck is not None:
            ax.axvline(ck, color="black", lw=0.8, ls=":", label="checkpoint")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        ax.legend(fontsize=7, loc="upper right")
    axes[0].set_ylabel("train loss")
    fig.suptitle(
        f"{report.get('verdict', '')}  loss per step, "
        f"{report['config'].get('repeats', '')} repeats",
        fontsize=11,
    )
    return fig


def plot_overlay(report: dict[str, Any], metrics: dict[str, Metrics]) -> Figure:
    """All runs on one axes (NVIDIA seeder's test 2): seeded runs lie on one line, unseeded ones
    spread."""
    xmap = _x_of(metrics)
    fig = Figure(figsize=(8, 4.5), dpi=110, layout="constrained")
    ax = fig.add_subplot()
    for kind, kw in (
        ("unseeded", {}),
        ("full", {"lw": 2.5}),
        ("half", {}),
        ("resume", {"ls": "--"}),
        ("mid", {}),
        ("resume-mid", {"ls": "--"}),
    ):
        _curves_axes(ax, _runs(metrics, kind), kind, xmap, **kw)
    for kind, ls in (("resume", ":"), ("resume-mid", "-.")):
        ck = _checkpoint_x(metrics, xmap, kind)
        if ck is not None:
            ax.axvline(
                ck,
                color="black",
                lw=0.8,
                ls=ls,
                label="checkpoint" + (" (mid-epoch)" if kind != "resume" else ""),
            )
    ax.set_xlabel("step")
    ax.set_ylabel("train loss")
    ax.set_title(
        "all runs overlaid: seeded runs (1), (2), (3), (2b), (3b) coincide; unseeded runs "
        "(4) spread",
        fontsize=10,
    )
    ax.legend(fontsize=8)
    return fig


def plot_spread(report: dict[str, Any], metrics: Optional[dict[str, Metrics]] = None) -> Figure:
    """Standard deviation across repeats at each step, seeded vs unseeded."""
    ps = report["per_step"]
    x = np.arange(len(ps["keys"]))
    sd_s = np.array([np.nan if v is None else v for v in ps["std_seeded"]], dtype=float)
    sd_u = np.array([np.nan if v is None else v for v in ps["std_unseeded"]], dtype=float)
    fig = Figure(figsize=(8, 3.6), dpi=110, layout="constrained")
    ax = fig.add_subplot()
    ax.plot(x, sd_u, color=COLORS["unseeded"], label="unseeded runs (4)")
    ax.plot(x, sd_s, color=COLORS["full"], lw=2, label="seeded runs (1)")
    ax.set_xlabel("step")
    ax.set_ylabel("std of train loss across runs")
    var = next((c for c in report["checks"] if c["name"] == "variance"), None)
    sub = f": {var['summary']}" if var else ""
    ax.set_title("spread across repeats" + sub, fontsize=9)
    ax.legend(fontsize=8)
    return fig


def plot_compare(report: dict[str, Any], metrics: dict[str, Metrics]) -> Figure:
    """Mean loss of A and B, and the mean paired difference B - A with its 95% and 99% intervals."""
    ps = report["per_step"]
    x = np.arange(len(ps["keys"]))
    fig = Figure(figsize=(9, 6), dpi=110, layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True)
    xmap = {tuple(k): i for i, k in enumerate(ps["keys"])}
    for cf in ("a", "b"):
        for _i, (_rep, m) in enumerate(_runs(metrics, cf)):
            keep = [j for j, k in enumerate(m.keys) if k in xmap]
            top.plot(
                [xmap[m.keys[j]] for j in keep],
                m.losses[keep],
                color=COLORS[cf],
                lw=0.6,
                alpha=0.35,
            )
        top.plot(
            x,
            ps[f"mean_{cf}"],
            color=COLORS[cf],
            lw=2,
            label=f"{cf.upper()} mean of {report['pairs']} seeds",
        )
    first_a = _runs(metrics, "a")
    if first_a:
        m0 = first_a[0][1]
        last = [xmap[k] for k, keep in zip(m0.keys, m0.summary_mask()) if keep and k in xmap]
        if last:
            for ax in (top, bottom):
                ax.axvspan(
                    min(last) - 0.5,
                    max(last) + 0.5,
                    color="0.9",
                    zorder=0,
                    label="last epoch (the decision)" if ax is top else None,
                )
    top.set_ylabel("train loss")
    top.legend(fontsize=8)
    top.set_title(report["summary"], fontsize=9)
    for lv, alpha in (("0.99", 0.2), ("0.95", 0.35)):
        ci = ps["ci"].get(lv)
        if ci:
            lo = np.array([np.nan if v is None else v for v in ci["low"]], dtype=float)
            hi = np.array([np.nan if v is None else v for v in ci["high"]], dtype=float)
            bottom.fill_between(
                x, lo, hi, color="tab:purple", alpha=alpha, lw=0, label=f"{float(lv):.0%} interval"
            )
    bottom.plot(
        x, ps["mean_difference"], color="tab:purple", lw=1.5, label="mean paired difference B - A"
    )
    bottom.axhline(0, color="black", lw=0.8)
    bottom.set_xlabel("step")
    bottom.set_ylabel("B - A")
    bottom.legend(fontsize=8)
    return fig


def write_figures(
    report: dict[str, Any], metrics: dict[str, Metrics], directory: Path
) -> list[Path]:
    """Save the session's figures as PNG files in ``directory`` and return their paths."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    kind = report.get("kind", "verify")
    if kind == "compare":
        figs = [plot_methodology(report), plot_compare(report, metrics)]
    else:
        figs = [
            plot_methodology(report),
            plot_loss_curves(report, metrics),
            plot_overlay(report, metrics),
            plot_spread(report, metrics),
        ]
    paths = []
    for name, fig in zip(FIGURES[kind], figs):
        path = directory / name
        fig.savefig(path, bbox_inches="tight")
        paths.append(path)
    return paths
