"""report.html of a run: one file, its charts drawn by matplotlib and embedded as PNGs; and the length
histograms of the corpus that the run record keeps for it."""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path
from typing import Iterator

from textmill.io.files import atomic_path
from textmill.report.record import RunRecord, StageCounts
from textmill.report.results import cell, columns_of, results_rows


def png(fig) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight", metadata={"Software": None})
    return '<img alt="chart" src="data:image/png;base64,' + base64.b64encode(buffer.getvalue()).decode() + '">'


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


class Markup(str):
    """A table cell that is HTML already (a link), not text to escape."""


def table(rows: list[list], header: list[str], text: bool = False) -> str:
    """An HTML table; `text`: its cells are text, aligned left (numbers are aligned right)."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{v if isinstance(v, Markup) else html.escape(cell(v))}</td>" for v in row)
                   + "</tr>" for row in rows)
    kind = ' class="text"' if text else ""
    return f"<table{kind}><tr>{head}</tr>{body}</table>"


def link(location: str | None, text: str | None = None) -> Markup:
    """A link to a local file or folder, or to a web page; other locations (a store's URLs) as text."""
    if not location:
        return Markup("-")
    shown_text = html.escape(text or location)
    if location.startswith(("http://", "https://")):
        return Markup(f'<a href="{html.escape(location)}">{shown_text}</a>')
    if location.startswith("/"):
        return Markup(f'<a href="{html.escape(Path(location).as_uri())}">{shown_text}</a>')
    return Markup(shown_text)


def examples_section(samples: dict) -> list[str]:
    """Per stage, a few documents it kept and a few it rejected for each reason."""
    parts = ["<h2>Examples</h2>", "<p>A few records each stage kept, and a few it rejected for each reason "
             "(the first of its first shards).</p>"]
    for stage, found in samples.items():
        rows = [["kept", link(e["url"], e["url"] or e["id"]), e["text"] or ""] for e in found["kept"]]
        rows += [[reason_cell(e), link(e["url"], e["url"] or e["id"]), e["text"] or ""]
                 for examples in found["rejected"].values() for e in examples]
        parts += [f"<h3>{html.escape(stage)}</h3>", table(rows, ["", "URL (or id)", "text, first lines"], text=True)]
    return parts


def document_cell(e: dict) -> Markup:
    """A document's link and the first lines of its text, in one cell."""
    return Markup(f"{link(e['url'], e['url'] or e['id'])}<br>{html.escape(e['text'] or '')}")


def reason_cell(e: dict) -> Markup:
    """A reject's reason, and the URL of the document it names (the kept one a duplicate repeats)."""
    named = f"<br>(kept: {link(e['named_url'])})" if e.get("named_url") else ""
    return Markup(html.escape(e["reason"]) + named)


def pairs_section(pairs: list[dict]) -> list[str]:
    rows = [[document_cell(p["duplicate"]), document_cell(p["kept"]), "exact" if p["exact"] else "near"] for p in pairs]
    return ["<h3>Duplicates beside the documents they repeat</h3>",
            table(rows, ["removed", "kept", "duplicate"], text=True)]


def histogram(values) -> dict:
    """40 bins and the median, mean and maximum: what the report draws, small enough for run.json."""
    import numpy as np

    values = np.asarray(values, dtype=np.int64)
    if not len(values):
        values = np.zeros(1, np.int64)
    counts, edges = np.histogram(values, bins=40)
    return {"documents": int(len(values)), "median": float(np.median(values)), "mean": float(values.mean()),
            "max": int(values.max()), "counts": counts.tolist(), "edges": edges.tolist()}


KEPT_EXAMPLES, REJECTED_EXAMPLES, SCANNED_SHARDS = 3, 2, 8  # per stage; per reason; the shards read for them
EXCERPT_CHARS = 160


def excerpt(text: str | None) -> str | None:
    """The first lines of a text, at most EXCERPT_CHARS characters."""
    if text is None:
        return None
    lines = " / ".join(line.strip() for line in text.splitlines() if line.strip())
    return lines if len(lines) <= EXCERPT_CHARS else lines[:EXCERPT_CHARS] + " ..."


def example(row: dict) -> dict:
    return {"id": row.get("id"), "url": row.get("url"), "text": excerpt(row.get("text"))}


def json_lines(path: Path) -> Iterator[dict]:
    """The records of a JSON-lines shard (reddit-urls' URL lists)."""
    with open(path, "rb") as f:
        for line in f:
            yield json.loads(line)


def stage_examples(shards: list[Path], reasons: list[str]) -> dict:
    """A few records a stage kept, and a few it rejected for each reason, from its first shards (local); a
    reject that names another document (`near_duplicate_of=<id>`) with that document's URL."""
    from textmill.pipeline.shards import earlier_or_current, read_rows, reason_key, rejects_path
    from textmill.report.inspect import named_documents, urls_of

    kept: list[dict] = []
    for shard in shards[:SCANNED_SHARDS]:
        for row in json_lines(shard) if shard.suffix == ".jsonl" else read_rows(shard):
            if len(kept) == KEPT_EXAMPLES:
                break
            kept.append(example(row))
    rejected: dict[str, list[dict]] = {reason: [] for reason in reasons}
    for shard in shards[:SCANNED_SHARDS]:
        full = all(len(rows) == REJECTED_EXAMPLES for rows in rejected.values())
        if full or not earlier_or_current(rejects_path(shard)).exists():
            continue
        for row in read_rows(earlier_or_current(rejects_path(shard))):
            rows = rejected.get(reason_key(row["reason"]))
            if rows is not None and len(rows) < REJECTED_EXAMPLES:
                rows.append({**example(row), "reason": row["reason"]})
    found = [e for rows in rejected.values() for e in rows]
    urls = urls_of(named_documents(found), shards[:SCANNED_SHARDS])
    for e in found:
        if e["reason"].partition("=")[2] in urls:
            e["named_url"] = urls[e["reason"].partition("=")[2]]
    return {"kept": kept, "rejected": {reason: rows for reason, rows in rejected.items() if rows}}


def duplicate_pairs(duplicates: dict[str, str], exact: set[str], shards: list[Path], count: int = 3) -> list[dict]:
    """The first `count` duplicates with the documents they duplicate, read from dedup's shards (the kept
    document) and their rejects (the duplicate)."""
    from textmill.pipeline.shards import earlier_or_current, read_rows, rejects_path

    wanted = dict(list(duplicates.items())[:count])
    ids = set(wanted) | set(wanted.values())
    found: dict[str, dict] = {}
    for shard in shards:
        for path in (shard, earlier_or_current(rejects_path(shard))):
            if path.exists() and len(found) < len(ids):
                found.update({row["id"]: example(row) for row in read_rows(path, columns=["id", "url", "text"])
                              if row["id"] in ids})
    return [{"duplicate": found[d], "kept": found[k], "exact": d in exact}
            for d, k in wanted.items() if d in found and k in found]


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
th{background:#eee}td:first-child{text-align:left}.bad{color:#b00}img{max-width:100%}
table.text td{text-align:left;vertical-align:top;font-size:90%}"""


def render_report(record: RunRecord, history: list[RunRecord]) -> str:
    """report.html of one run: what each section shows is only what the run got to."""
    title = f"textmill run {record.run}"
    parts = [f"<h1>{html.escape(title)}</h1>",
             f"<p>{html.escape(record.config)}: <b>{record.status}</b> in {record.seconds:.0f}s, started "
             f"{html.escape(record.started)}.</p>"]
    if record.failed:
        parts.append('<p class="bad">Failed: ' + "<br>".join(html.escape(f) for f in record.failed) + "</p>")
    funnel = record.funnel
    if funnel:
        parts += ["<h2>Corpus funnel</h2>", funnel_chart(funnel),
                  table([[link(s.output, s.stage), s.input, s.kept, s.rejected,
                          ", ".join(f"{k} {v}" for k, v in s.reasons.items()) or "-",
                          s.records_per_s, s.mb_per_s,
                          round(s.bytes / 2**20, 2) if s.bytes is not None else None] for s in funnel],
                        ["stage (its folder)", "in", "kept", "rejected", "rejected because", "records/s per worker",
                         "MB/s per worker", "MB written"])]
    if record.samples:
        parts += examples_section(record.samples)
    if record.dedup:
        sizes = record.dedup["cluster_sizes"]
        parts.append("<h2>Near-duplicate clusters</h2>")
        parts.append(f"<p>{len(sizes)} cluster(s) of {record.dedup['documents']:,} documents; "
                     f"{sum(sizes) - len(sizes)} removed (one kept per cluster).</p>")
        if sizes:
            parts.append(cluster_chart(sizes))
        if record.duplicate_pairs:
            parts += pairs_section(record.duplicate_pairs)
    decontaminated = record.decontaminate
    if decontaminated:
        parts += ["<h2>Decontamination</h2>",
                  f"<p>{decontaminated['used']:,} of {decontaminated['eval_ngrams']:,} evaluation n-grams used; "
                  f"{decontaminated['documents_touched']:,} document(s) cut, {decontaminated['characters_removed']:,} "
                  "characters removed.</p>"]
        if decontaminated.get("touched"):
            parts.append(table([[link(d["url"], d["url"] or d["id"]), d["pieces"], d["characters_removed"]]
                                for d in decontaminated["touched"]],
                               ["document cut", "pieces left", "characters removed"]))
    corpus = record.corpus
    if corpus:
        shapes = corpus.histograms  # made with the token files: none for those an older textmill merged
        parts += ["<h2>Documents</h2>", *([histogram_chart(shapes["characters"], "characters per document"),
                                           histogram_chart(shapes["tokens"], "tokens per document")] if shapes else []),
                  f"<p>{corpus.documents:,} documents, {corpus.tokens:,} tokens in "
                  f"{link(corpus.dataset + '.bin', corpus.dataset + '.bin')}/.idx</p>"]
    train = record.train
    if train:
        from textmill.trainer.metrics import read_metrics

        metrics = read_metrics(Path(train.checkpoints))
        started = f", starting from {train.started_from}" if train.started_from else ""
        parts += ["<h2>Training</h2>",
                  f"<p>{train.iterations} iterations{html.escape(started)}; final training loss "
                  f"{cell(train.lm_loss)}, validation loss {cell(train.valid_loss)}; checkpoints in "
                  f"{link(train.checkpoints)}.</p>"]
        if metrics:
            parts.append(training_chart(metrics))
    if record.evaluate:
        parts += ["<h2>Evaluation</h2>",
                  table([[r.name, f"{r.accuracy:.2%}", f"{r.correct}/{r.total}", r.perplexity]
                         for r in record.evaluate], ["LAMBADA-format file", "accuracy", "correct", "perplexity"])]
    if record.seconds_per_stage:
        parts += ["<h2>Time per stage</h2>", times_chart(record.seconds_per_stage)]
    rows = results_rows(history)
    if rows:
        parts += ["<h2>This run beside the earlier ones</h2>",
                  table([[cell(row.get(c), c) for c in columns_of(rows)] for row in rows], columns_of(rows))]
    body = "\n".join(parts)
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style></head><body>\n{body}\n</body></html>\n")


def write_report(record: RunRecord, history: list[RunRecord], path: Path) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(render_report(record, history), encoding="utf-8")
    return path
