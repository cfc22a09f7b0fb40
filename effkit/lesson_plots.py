"""Plots several lessons drew with the same code: learning curves against a target.

**What it does.** `learning_curves()` draws one line per seed, one colour per recipe, and the
target accuracy as a dotted line, so that runs of the same recipe read as one band and the eye
finds where each crosses the target. (One bar per A/B is `effkit.lesson.plot_ab`.)

**Why.** Lessons 4 and 6 drew their curves with the same eight lines; one copy keeps them alike.
"""

from __future__ import annotations

from collections.abc import Sequence


def learning_curves(
    curves: dict[str, Sequence[Sequence[tuple[float, float]]]],
    target: float,
    colours: Sequence[str],
    *,
    xlabel: str,
    ylabel: str,
    title: str,
    ax=None,
):
    """``curves[name]``: one run per seed, each a list of (x, accuracy) points; ``colours``: one
    per name. Draws them (legend: one entry per name) and the ``target`` line; returns the axes."""
    import matplotlib.pyplot as plt

    if len(colours) != len(curves):
        raise ValueError(f"learning_curves: {len(curves)} recipes but {len(colours)} colours")
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3.6))
    for (name, runs), colour in zip(curves.items(), colours, strict=True):
        for k, run in enumerate(runs):
            ax.plot(
                *zip(*run, strict=True), color=colour, alpha=0.9, label=name if k == 0 else None
            )
    ax.axhline(target, color="black", lw=0.8, ls=":")
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.legend(fontsize=8)
    return ax
