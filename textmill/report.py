"""What a run did, for people: one-line stage summaries, the table of the last runs' results side by side,
and report.html (charts as PNGs embedded in one file).

A run is described by its record (runs/<name>/run.json, built by textmill.workflows.runner.run_record):
plain JSON with the funnel, the dedup clusters, the corpus, training, evaluation and the seconds per stage.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

from textmill.io.files import atomic_path, read_json_record

from textmill.pipeline.shards import summarize

# -- lines -------------------------------------------------------------------------------------------------


def stage_summary(stage: str, manifests: list[dict], output: Path, seconds: float) -> dict:
    """The counts of one stage over its shards' manifests."""
    total = summarize(manifests)
    c = total["counts"]
    return {"stage": stage, "shards": total["shards"], "input": c.get("input", 0), "kept": c.get("kept", 0),
            "rejected": c.get("rejected", 0), "rows_out": c.get("output_rows", c.get("kept", 0)),
            "reasons": total["reasons"], "output": str(output), "seconds": seconds}


def stage_line(s: dict) -> str:
    reasons = ", ".join(f"{k} {v}" for k, v in list(s["reasons"].items())[:8]) or "none"
    extra = f", {s['rows_out']} rows out" if s["rows_out"] != s["kept"] else ""
    return (f"{s['stage']}: {s['shards']} shard(s), {s['input']} in, {s['kept']} kept, {s['rejected']} rejected "
            f"({reasons}){extra} -> {s['output']} [{s['seconds']:.1f}s]")


def dedup_line(clusters: dict) -> str:
    sizes = clusters["cluster_sizes"]
    return (f"  {len(sizes)} duplicate cluster(s), largest {sizes[0] if sizes else 0}; "
            f"{clusters['candidate_pairs']} candidate pairs, {clusters['confirmed_pairs']} confirmed")


def decontaminate_line(info: dict, key_threshold: int) -> str:
    return (f"  {info['eval_ngrams']} evaluation n-grams, {info['seen_in_training']} seen in training, {info['used']} used "
            f"(seen < {key_threshold} times); {info['documents_touched']} document(s) touched, "
            f"{info['characters_removed']} characters removed")


def seconds_tag(seconds: float) -> str:
    """How commands end their summaries: the wall time in brackets."""
    return f"[{seconds:.1f}s]"


def tokenize_line(m: dict, datasets: list[str], rejects: Path, seconds: float) -> str:
    """`textmill tokenize`'s summary from its manifest; `datasets` are the PREFIX_KEY_document prefixes."""
    c = m["counts"]
    reasons = ", ".join(f"{k} {v}" for k, v in m["reasons"].items()) or "none"
    where = f"; first: {m['first_rejects'][0]} (all in {rejects})" if c["rejected"] else ""
    tokens = ", ".join(f"{d}.bin/.idx {n:,} tokens" for d, n in zip(datasets, c["tokens"].values()))
    return (f"tokenize: {len(m['inputs'])} file(s), {c['input']} documents in, {c['kept']} written, "
            f"{c['rejected']} rejected ({reasons}{where})\n  {tokens} ({m['params']['dtype']}), "
            f"{m['mb_per_s']} MB/s {seconds_tag(seconds)}")


def trained_tokenizer_line(tokenizer) -> str:
    return f"train-tokenizer: {tokenizer.vocab_size}-token byte-level BPE -> {tokenizer.files[0]}, {tokenizer.files[1]}"


def merged_line(documents: int, tokens: int, parts: int, output_prefix, seconds: float) -> str:
    return (f"merge-datasets: {parts} dataset(s), {documents:,} documents, {tokens:,} tokens -> {output_prefix}.bin/.idx "
            f"{seconds_tag(seconds)}")


def lambada_lines(r: dict, seconds: float) -> list[str]:
    """Megatron's closing line of a LAMBADA evaluation, then textmill's."""
    truncated = f", {r['truncated']} passage(s) cut to the model's positions" if r["truncated"] else ""
    return [f"number correct: {r['correct']} | total examples: {r['total']} | avg accuracy: {r['accuracy']:.4E}",
            f"evaluate lambada{' (strict)' if r['strict'] else ''}: iteration {r['iteration']}, accuracy "
            f"{r['accuracy']:.2%} ({r['correct']}/{r['total']}), last-word perplexity {r['perplexity']:.2f}{truncated} "
            f"-> {r['output']} {seconds_tag(seconds)}"]


def export_line(r: dict, seconds: float) -> str:
    return (f"export hf: {r['family']} model, {r['parameters']:,} parameters, vocabulary {r['vocab_size']}, "
            f"iteration {r['iteration']} -> {r['output']} {seconds_tag(seconds)}")


def import_line(r: dict, seconds: float) -> str:
    return (f"import hf: {r['family']} model, {r['parameters']:,} parameters, vocabulary {r['vocab_size']} padded to "
            f"{r['padded_vocab_size']} -> {r['output']}/release {seconds_tag(seconds)}")


def convert_line(r: dict) -> str:
    return (f"checkpoint convert: {r['parameters']:,} parameters from {r['from']} -> {r['to']} (tensor parallel "
            f"{r['tp']}, pipeline parallel {r['pp']}, {r['format']}; weights only) {seconds_tag(r['seconds'])}")


def failed_run_lines(record: dict, folder: Path) -> list[str]:
    """The end of a failed `textmill run`; the last line names what failed and why."""
    failed = record.get("failed") or ["no task failed here, but the graph is not finished (see the summary above)"]
    more = f" (and {len(failed) - 1} more: textmill status)" if len(failed) > 1 else ""
    return [f"textmill run: failed after {record['seconds']:.1f}s (recorded in {folder}); `textmill run` again redoes "
            "only what is not finished", f"textmill run: failed: {failed[0]}{more}"]


def serve_banner(info: dict, host: str, port: int) -> str:
    return (f"serve: {info['checkpoint']} (iteration {info['iteration']}, {info['parameters']:,} parameters) on "
            f"http://{host}:{port}  PUT /api, POST /v1/completions, GET /health; Ctrl-C stops")


def served_line(stats: dict, seconds: float) -> str:
    return (f"serve: stopped after {stats['requests']} request(s), {stats['errors']} answered with an error "
            f"{seconds_tag(seconds)}")


def funnel_lines(record: dict) -> list[str]:
    """The corpus stages of a run record, one line each (dedup and decontamination with a second line),
    then the token count."""
    lines = []
    for s in record["funnel"]:
        lines.append(stage_line(s))
        if s["stage"] == "dedup":
            lines.append(dedup_line(record["dedup"]))
        if s["stage"] == "decontaminate":
            lines.append(decontaminate_line(record["decontaminate"], record["decontaminate"]["key_threshold"]))
    corpus = record.get("corpus")
    if corpus:
        lines.append(f"tokenize: {corpus['documents']:,} documents, {corpus['tokens']:,} tokens -> "
                     f"{corpus['dataset']}.bin/.idx")
    return lines


def read_runs(runs: Path) -> list[dict]:
    """Every run record under WORK/runs, oldest first; a damaged one is left out, with a note."""
    records = (read_json_record(p, "that run is left out of results.md and the report")
               for p in sorted(runs.glob("*/run.json")))
    return [r for r in records if r and "run" in r]


def run_lines(record: dict, folder: Path) -> list[str]:
    """The end of `textmill run`: the corpus, the model, its evaluation, where the report is, and what got
    worse since the previous run."""
    corpus, train = record["corpus"], record.get("train")
    lines = [f"textmill run: done: {corpus['documents']:,} documents, {corpus['tokens']:,} tokens -> "
             f"{corpus['dataset']}.bin/.idx"]
    if train:
        valid = f", validation loss {train['valid_loss']:.4f}" if train["valid_loss"] is not None else ""
        start = f" (starting from {train['started_from']})" if train.get("started_from") else ""
        lines.append(f"  trained {train['iterations']} iterations{start}{valid} -> {train['checkpoints']}")
    lines += [f"  {Path(r['file']).name}: accuracy {r['accuracy']:.2%} ({r['correct']}/{r['total']}), "
              f"perplexity {r['perplexity']:.2f}" for r in record.get("evaluate") or []]
    if record.get("export"):
        lines.append(f"  Hugging Face {record['export']['family']} model -> {record['export']['output']}")
    lines.append(f"  report: {folder / 'report.html'}; the last runs side by side: {folder.parent.parent / 'results.md'}")
    history = read_runs(folder.parent)
    regressions = [row["regressions"] for row in results_rows(history) if row["run"] == record["run"]]
    if regressions and regressions[0]:
        lines.append(f"  {regressions[0]} (since the previous run)")
    return lines + [f"[{record['seconds']:.1f}s]"]


# -- the results of the last runs ----------------------------------------------------------------------------
def result_row(record: dict) -> dict:
    """The numbers of one run that the results table compares."""
    corpus, train = record.get("corpus") or {}, record.get("train") or {}
    row = {"run": record["run"], "status": record["status"],
           "urls": record["funnel"][0]["input"] if record.get("funnel") else None,
           "documents": corpus.get("documents"), "tokens": corpus.get("tokens"),
           "iterations": train.get("iterations"), "valid_loss": train.get("valid_loss")}
    for r in record.get("evaluate") or []:
        row[f"{r['name']} accuracy"] = r["accuracy"]
    row["seconds"] = record["seconds"]
    return row


def changes(row: dict, previous: dict | None) -> str:
    """What got worse since the previous finished run: validation loss up, an accuracy or the corpus down."""
    if previous is None or row["status"] != "done":
        return ""
    worse = []
    for key, value in row.items():
        before = previous.get(key)
        if not isinstance(value, (int, float)) or not isinstance(before, (int, float)) or key in ("seconds", "urls"):
            continue
        if key == "valid_loss" and value > before:
            worse.append(f"valid loss +{value - before:.4f}")
        elif key.endswith("accuracy") and value < before:
            worse.append(f"{key.removesuffix(' accuracy')} accuracy {100 * (value - before):+.1f} pts")
        elif key in ("documents", "tokens") and value < before:
            worse.append(f"{key} {value - before:+,}")
    return "REGRESSION: " + "; ".join(worse) if worse else ""


def results_rows(records: list[dict]) -> list[dict]:
    """A row per run, oldest first, each with what got worse since the run before it that finished."""
    rows, previous = [], None
    for record in records:
        row = result_row(record)
        row["regressions"] = changes(row, previous)
        if row["status"] == "done":
            previous = row
        rows.append(row)
    return rows


def cell(value, column: str = "") -> str:
    if value is None:
        return "-"
    if column.endswith("accuracy"):
        return f"{value:.2%}"
    if column == "seconds":
        return f"{value:.0f}"
    if isinstance(value, float):
        return f"{value:.4f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def columns_of(rows: list[dict]) -> list[str]:
    return list(dict.fromkeys(k for row in rows for k in row))


def results_markdown(rows: list[dict]) -> str:
    columns = columns_of(rows)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(c), c) for c in columns) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def write_results(work: Path, records: list[dict], keep: int) -> Path:
    """work/results.md: the last `keep` runs side by side; work/results.tsv: every run."""
    rows = results_rows(records)
    with atomic_path(work / "results.md") as tmp:
        tmp.write_text("# Results of the last runs (newest last)\n\n" + results_markdown(rows[-keep:]))
    columns = columns_of(rows)
    with atomic_path(work / "results.tsv") as tmp:
        tmp.write_text("\n".join("\t".join(map(str, r)) for r in
                                 [columns] + [["" if row.get(c) is None else row[c] for c in columns] for row in rows]) + "\n")
    return work / "results.md"


# -- report.html --------------------------------------------------------------------------------------------
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
                          ", ".join(f"{k} {v}" for k, v in s["reasons"].items()) or "-"] for s in funnel],
                        ["stage", "in", "kept", "rejected", "rejected because"])]
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
