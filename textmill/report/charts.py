"""The charts of report.html, drawn by matplotlib (no pyplot: no global state, no display backend), each a PNG
in a data: URI."""

from __future__ import annotations

import base64
import io

from textmill.report.record import StageCounts


def png(fig) -> str:
    """The figure as a PNG in a data: URI, for an <img> of a page that is one file."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight", metadata={"Software": None})
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def figure(width: float = 7.0, height: float = 3.2):
    from matplotlib.figure import Figure  # no pyplot: no global state, no display backend

    fig = Figure(figsize=(width, height))
    return fig, fig.subplots()


def funnel_chart(funnel: list[StageCounts]) -> str:
    fig, ax = figure(7.0, 0.5 + 0.45 * len(funnel))
    names = [s.stage for s in funnel][::-1]
    kept = [s.kept for s in funnel][::-1]
    rejected = [s.rejected for s in funnel][::-1]
    ax.barh(names, kept, color="#4c72b0", label="kept")
    ax.barh(names, rejected, left=kept, color="#dd8452", label="rejected")
    for y, (k, r) in enumerate(zip(kept, rejected, strict=True)):
        ax.text(k + r, y, f" {k:,} kept / {r:,} rejected", va="center", fontsize=8)
    ax.set_xlabel("records")
    ax.set_xlim(0, max(k + r for k, r in zip(kept, rejected, strict=True)) * 1.45 or 1)
    ax.legend(loc="lower right", fontsize=8)
    return png(fig)


def histogram_chart(h: dict, xlabel: str) -> str:
    fig, ax = figure()
    ax.stairs(h["counts"], h["edges"], fill=True, color="#4c72b0")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("documents")
    ax.set_title(f"{h['documents']:,} documents; median {h['median']:,.0f}, mean {h['mean']:,.0f}, max {h['max']:,}",
                 fontsize=9)
    return png(fig)


def score_chart(tenths: list[int]) -> str:
    """The documents by the classifier's score, in tenths from 0 to 1."""
    fig, ax = figure(5.0, 2.8)
    ax.stairs(tenths, [i / 10 for i in range(11)], fill=True, color="#8172b2")
    ax.set_xlabel("classifier score")
    ax.set_ylabel("documents")
    return png(fig)


def cluster_chart(sizes: list[int]) -> str:
    from collections import Counter

    counts = sorted(Counter(sizes).items())
    fig, ax = figure(5.0, 2.8)
    ax.bar([str(size) for size, _ in counts], [n for _, n in counts], color="#55a868")
    ax.set_xlabel("documents in the cluster")
    ax.set_ylabel("clusters")
    return png(fig)


def training_chart(metrics: list[dict]) -> str:
    """The loss, and beside it the learning rate and the throughput, against the iteration."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9.0, 3.0))
    loss, lr, speed = fig.subplots(1, 3)
    train = [(m["iteration"], m["lm_loss"]) for m in metrics if m.get("lm_loss") is not None]
    valid = [(m["iteration"], m["valid_loss"]) for m in metrics if m.get("valid_loss") is not None]
    if train:
        loss.plot(*zip(*train, strict=True), marker=".", label="training loss")
    if valid:
        loss.plot(*zip(*valid, strict=True), marker="o", label="validation loss")
    loss.set_ylabel("cross-entropy (nats per token)")
    loss.legend(fontsize=8)
    for ax, key, label in ((lr, "lr", "learning rate"), (speed, "tokens_per_s", "tokens/s")):
        points = [(m["iteration"], m[key]) for m in metrics if m.get(key) is not None]
        if points:
            ax.plot(*zip(*points, strict=True), color="#55a868")
        ax.set_ylabel(label)
    for ax in (loss, lr, speed):
        ax.set_xlabel("iteration")
    fig.tight_layout()
    return png(fig)


def times_chart(seconds: dict[str, float]) -> str:
    fig, ax = figure(6.0, 0.5 + 0.35 * len(seconds))
    names = list(seconds)[::-1]
    ax.barh(names, [seconds[n] for n in names], color="#8172b3")
    for y, name in enumerate(names):
        ax.text(seconds[name], y, f" {seconds[name]:.1f}s", va="center", fontsize=8)
    positive = [v for v in seconds.values() if v > 0]
    if positive:
        # Log scale: the corpus stages take seconds where training takes hours, and both stay readable.
        ax.set_xscale("log")
        ax.set_xlabel("seconds, log scale (the stage's tasks, when they last ran)")
        ax.set_xlim(min(0.05, *positive), max(max(positive) * 3, 1))
    else:  # no task took a measurable time: a log scale would have nothing to show (and matplotlib warns)
        ax.set_xlabel("seconds (the stage's tasks, when they last ran)")
        ax.set_xlim(0, 1)
    return png(fig)


def ablation_chart(record) -> str:
    """An ablation (report.ablation.AblationRecord): a panel per evaluation, each variant's seeds as dots and
    their mean as a bar, so the spread is seen beside the difference."""
    from textmill.report.ablation import UNITS, mean_and_spread

    from matplotlib.figure import Figure

    measures = record.measures()
    fig = Figure(figsize=(3.2 * len(measures), 3.2))
    for i, (measure, name, lower) in enumerate(measures):
        ax = fig.add_subplot(1, len(measures), i + 1)
        for x, variant in enumerate(record.variants):
            values = variant.values(measure, name)
            if not values:  # none for this variant (an empty held-out split)
                continue
            mean = mean_and_spread(values)[0]
            ax.hlines(mean, x - 0.3, x + 0.3, color="#4c72b0" if variant.name != record.baseline else "#222")
            ax.scatter([x] * len(values), values, s=14, color="#dd8452", zorder=3)
        ax.set_xticks(range(len(record.variants)), [v.name for v in record.variants], rotation=30, ha="right",
                      fontsize=8)
        ax.set_title(f"{name}: {UNITS[measure]} ({'lower' if lower else 'higher'} is better)", fontsize=8)
    fig.tight_layout()
    return png(fig)
