"""report.html of a run: one file, its charts drawn by matplotlib and embedded as PNGs; and the length
histograms of the corpus that the run record keeps for it."""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

from textmill.io.files import atomic_path
from textmill.report.results import cell, columns_of, results_rows


def png(fig) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight", metadata={"Software": None})
    return '<img alt="chart" src="data:image/png;base64,' + base64.b64encode(buffer.getvalue()).decode() + '">'


def figure(width: float = 7.0, height: float = 3.2):
    from matplotlib.figure import Figure  # no pyplot: no global state, no display backend

    fig = Figure(figsize=(width, height))
    return fig, fig.subplots()


def funnel_chart(funnel: list[dict]) -> str:
    fig, ax = figure(7.0, 0.5 + 0.45 * len(funnel))
    names = [s["stage"] for s in funnel][::-1]
    kept = [s["kept"] for s in funnel][::-1]
    rejected = [s["rejected"] for s in funnel][::-1]
    ax.barh(names, kept, color="#4c72b0", label="kept")
    ax.barh(names, rejected, left=kept, color="#dd8452", label="rejected")
    for y, (k, r) in enumerate(zip(kept, rejected)):
        ax.text(k + r, y, f" {k:,} kept / {r:,} rejected", va="center", fontsize=8)
    ax.set_xlabel("records")
    ax.set_xlim(0, max(k + r for k, r in zip(kept, rejected)) * 1.45 or 1)
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


def cluster_chart(sizes: list[int]) -> str:
    from collections import Counter

    counts = sorted(Counter(sizes).items())
    fig, ax = figure(5.0, 2.8)
    ax.bar([str(size) for size, _ in counts], [n for _, n in counts], color="#55a868")
    ax.set_xlabel("documents in the cluster")
    ax.set_ylabel("clusters")
    return png(fig)


def loss_chart(metrics: list[dict]) -> str:
    fig, ax = figure()
    train = [(m["iteration"], m["lm_loss"]) for m in metrics if m.get("lm_loss") is not None]
    valid = [(m["iteration"], m["valid_loss"]) for m in metrics if m.get("valid_loss") is not None]
    if train:
        ax.plot(*zip(*train), marker=".", label="training loss")
    if valid:
        ax.plot(*zip(*valid), marker="o", label="validation loss")
    ax.set_xlabel("iteration")
    ax.set_ylabel("cross-entropy (nats per token)")
    ax.legend(fontsize=8)
    return png(fig)


def times_chart(seconds: dict[str, float]) -> str:
    fig, ax = figure(6.0, 0.5 + 0.35 * len(seconds))
    names = list(seconds)[::-1]
    ax.barh(names, [seconds[n] for n in names], color="#8172b3")
    for y, name in enumerate(names):
        ax.text(seconds[name], y, f" {seconds[name]:.1f}s", va="center", fontsize=8)
    ax.set_xlabel("seconds (the stage's tasks, when they last ran)")
    ax.set_xlim(0, max(seconds.values()) * 1.25 or 1)
    return png(fig)


def table(rows: list[list], header: list[str]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(cell(v))}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def histogram(values) -> dict:
    """40 bins and the median, mean and maximum: what the report draws, small enough for run.json."""
    import numpy as np

    values = np.asarray(values, dtype=np.int64)
    if not len(values):
        values = np.zeros(1, np.int64)
    counts, edges = np.histogram(values, bins=40)
    return {"documents": int(len(values)), "median": float(np.median(values)), "mean": float(values.mean()),
            "max": int(values.max()), "counts": counts.tolist(), "edges": edges.tolist()}


def corpus_histograms(document_shards: list[str], dataset: str) -> dict:
    """Characters per document (the final document shards) and tokens per document (the token files)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from textmill.megatron.indexed import IndexedDataset

    characters = []
    for shard in document_shards:  # one column of one shard at a time
        characters += pc.utf8_length(pq.read_table(shard, columns=["text"])["text"]).to_pylist()
    return {"characters": histogram(characters), "tokens": histogram(IndexedDataset(dataset).lengths)}


STYLE = """body{font-family:sans-serif;max-width:60em;margin:2em auto;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:.2em .6em;text-align:right}
th{background:#eee}td:first-child{text-align:left}.bad{color:#b00}img{max-width:100%}"""


def render_report(record: dict, history: list[dict]) -> str:
    """report.html of one run: what each section shows is only what the run got to."""
    title = f"textmill run {record['run']}"
    parts = [f"<h1>{html.escape(title)}</h1>",
             f"<p>{html.escape(record['config'])}: <b>{record['status']}</b> in {record['seconds']:.0f}s, started "
             f"{html.escape(record['started'])}.</p>"]
    if record.get("failed"):
        parts.append('<p class="bad">Failed: ' + "<br>".join(html.escape(f) for f in record["failed"]) + "</p>")
    funnel = record.get("funnel") or []
    if funnel:
        parts += ["<h2>Corpus funnel</h2>", funnel_chart(funnel),
                  table([[s["stage"], s["input"], s["kept"], s["rejected"],
                          ", ".join(f"{k} {v}" for k, v in s["reasons"].items()) or "-",
                          s.get("records_per_s"), s.get("mb_per_s")] for s in funnel],
                        ["stage", "in", "kept", "rejected", "rejected because", "records/s per worker",
                         "MB/s per worker"])]
    if record.get("dedup"):
        sizes = record["dedup"]["cluster_sizes"]
        parts.append("<h2>Near-duplicate clusters</h2>")
        parts.append(f"<p>{len(sizes)} cluster(s) of {record['dedup']['documents']:,} documents; "
                     f"{sum(sizes) - len(sizes)} removed (one kept per cluster).</p>")
        if sizes:
            parts.append(cluster_chart(sizes))
    corpus = record.get("corpus")
    if corpus:
        parts += ["<h2>Documents</h2>", histogram_chart(corpus["histograms"]["characters"], "characters per document"),
                  histogram_chart(corpus["histograms"]["tokens"], "tokens per document"),
                  f"<p>{corpus['documents']:,} documents, {corpus['tokens']:,} tokens in "
                  f"{html.escape(corpus['dataset'])}.bin/.idx</p>"]
    train = record.get("train")
    if train:
        from textmill.trainer.metrics import read_metrics

        metrics = read_metrics(Path(train["checkpoints"]))
        started = f", starting from {train['started_from']}" if train.get("started_from") else ""
        parts += ["<h2>Training</h2>",
                  f"<p>{train['iterations']} iterations{html.escape(started)}; final training loss "
                  f"{cell(train['lm_loss'])}, validation loss {cell(train['valid_loss'])}.</p>"]
        if metrics:
            parts.append(loss_chart(metrics))
    if record.get("evaluate"):
        parts += ["<h2>Evaluation</h2>",
                  table([[r["name"], f"{r['accuracy']:.2%}", f"{r['correct']}/{r['total']}", r["perplexity"]]
                         for r in record["evaluate"]], ["LAMBADA-format file", "accuracy", "correct", "perplexity"])]
    if record.get("seconds_per_stage"):
        parts += ["<h2>Time per stage</h2>", times_chart(record["seconds_per_stage"])]
    rows = results_rows(history)
    if rows:
        parts += ["<h2>This run beside the earlier ones</h2>",
                  table([[cell(row.get(c), c) for c in columns_of(rows)] for row in rows], columns_of(rows))]
    body = "\n".join(parts)
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style></head><body>\n{body}\n</body></html>\n")


def write_report(record: dict, history: list[dict], path: Path) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(render_report(record, history), encoding="utf-8")
    return path
