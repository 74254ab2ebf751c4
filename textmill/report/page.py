"""report.html of a run: one file, rendered from the Jinja2 template templates/report.html (autoescaped: text
from the web never becomes markup), its charts PNGs inside it (report.charts). What each section shows is only
what the run got to."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from textmill.io.files import atomic_path
from textmill.report.record import RunRecord
from textmill.report.results import cell, columns_of, results_rows


class Link(NamedTuple):
    """A link in the page: `href` None shows the text alone."""

    href: str | None
    text: str


def link(location: str | None, text: str | None = None) -> Link:
    """A link to a local file or folder, or to a web page; other locations (a store's URLs) as text."""
    if not location:
        return Link(None, "-")
    if location.startswith(("http://", "https://")):
        return Link(location, text or location)
    if location.startswith("/"):
        return Link(Path(location).as_uri(), text or location)
    return Link(None, text or location)


def table(rows: list[list], header: list[str], text: bool = False) -> dict:
    """A table for the template: each cell a list of lines, each line a list of pieces (text or Link); a
    value that is neither a Link nor lines is shown as results.cell writes it. `text`: the cells are text,
    aligned left (numbers are aligned right)."""
    def lines(value) -> list[list]:
        if isinstance(value, Link):
            return [[value]]
        if isinstance(value, list):
            return value
        return [[cell(value)]]

    return {"header": header, "rows": [[lines(v) for v in row] for row in rows], "text": text}


def document_cell(e: dict) -> list[list]:
    """A document's link and the first lines of its text, in one cell."""
    return [[link(e["url"], e["url"] or e["id"])], [e["text"] or ""]]


def reason_cell(e: dict) -> list[list]:
    """A reject's reason, and the URL of the document it names (the kept one a duplicate repeats)."""
    return [[e["reason"]], ["(kept: ", link(e["named_url"]), ")"]] if e.get("named_url") else [[e["reason"]]]


def examples_tables(samples: dict) -> dict[str, dict]:
    """Per stage, a few documents it kept and a few it rejected for each reason."""
    tables = {}
    for stage, found in samples.items():
        rows = [["kept", link(e["url"], e["url"] or e["id"]), e["text"] or ""] for e in found["kept"]]
        rows += [[reason_cell(e), link(e["url"], e["url"] or e["id"]), e["text"] or ""]
                 for examples in found["rejected"].values() for e in examples]
        tables[stage] = table(rows, ["", "URL (or id)", "text, first lines"], text=True)
    return tables


def funnel_section(record: RunRecord) -> dict | None:
    from textmill.report.charts import funnel_chart

    funnel = record.funnel
    if not funnel:
        return None
    rows = [[link(s.output, s.stage), s.input, s.kept, s.rejected, ", ".join(f"{k} {v}" for k, v in s.reasons.items()) or "-",
             *task_cells(s.tasks), s.records_per_s, s.mb_per_s, round(s.bytes / 2**20, 2) if s.bytes is not None else None]
            for s in funnel]
    return {"chart": funnel_chart(funnel),
            "table": table(rows, ["stage (its folder)", "in", "kept", "rejected", "rejected because", "tasks made",
                                  "tasks taken from earlier output", "tasks done before this run", "records/s per worker",
                                  "MB/s per worker", "MB written"])}


def task_cells(tasks: dict[str, int] | None) -> list:
    """A stage's tasks this run made, took from an earlier task's output, and found done (none: not counted)."""
    return [tasks[kind] if tasks else None for kind in ("made", "taken", "earlier")]


def dedup_section(record: RunRecord) -> dict | None:
    from textmill.report.charts import cluster_chart

    if not record.dedup:
        return None
    sizes = record.dedup["cluster_sizes"]
    pairs = [[document_cell(p["duplicate"]), document_cell(p["kept"]), "exact" if p["exact"] else "near"]
             for p in record.duplicate_pairs or []]
    return {"clusters": len(sizes), "documents": record.dedup["documents"], "removed": sum(sizes) - len(sizes),
            "chart": cluster_chart(sizes) if sizes else None,
            "pairs": table(pairs, ["removed", "kept", "duplicate"], text=True) if pairs else None}


def classifier_section(record: RunRecord) -> dict | None:
    from textmill.report.charts import score_chart
    from textmill.report.lines import classifier_line

    if not record.classifier:
        return None
    return {"line": classifier_line(record.classifier).strip(), "chart": score_chart(record.classifier["score_histogram"])}


def decontaminate_section(record: RunRecord) -> dict | None:
    d = record.decontaminate
    if not d:
        return None
    touched = [[link(t["url"], t["url"] or t["id"]), t["pieces"], t["characters_removed"]] for t in d.get("touched") or []]
    return {**d, "table": table(touched, ["document cut", "pieces left", "characters removed"]) if touched else None}


def corpus_section(record: RunRecord) -> dict | None:
    from textmill.report.charts import histogram_chart
    from textmill.report.lines import tasks_text

    corpus = record.corpus
    if not corpus:
        return None
    shapes = corpus.histograms or {}  # made with the token files: none for those an older textmill merged
    charts = [histogram_chart(shapes[name], f"{name} per document") for name in ("characters", "tokens") if name in shapes]
    where = corpus.dataset if corpus.parts else corpus.dataset + ".bin"  # the parts form's folder of shards
    return {"charts": charts, "documents": corpus.documents, "tokens": corpus.tokens, "link": link(where, where),
            "parts": corpus.parts, "tasks": tasks_text(corpus.tasks)}


def train_section(record: RunRecord) -> dict | None:
    from textmill.report.charts import training_chart
    from textmill.trainer.metrics import read_metrics

    train = record.train
    if not train:
        return None
    metrics = read_metrics(Path(train.checkpoints))
    return {"iterations": train.iterations, "started_from": train.started_from, "lm_loss": cell(train.lm_loss),
            "valid_loss": cell(train.valid_loss), "checkpoints": link(train.checkpoints),
            "chart": training_chart(metrics) if metrics else None}


def template_environment():
    """templates/ of this package, autoescaped, an undefined name an error."""
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    return Environment(loader=PackageLoader("textmill.report"), autoescape=select_autoescape(["html"]),
                       undefined=StrictUndefined, keep_trailing_newline=True)


def render_report(record: RunRecord, history: list[RunRecord]) -> str:
    """report.html of one run."""
    from textmill.report.charts import times_chart

    environment = template_environment()
    rows = results_rows(history)
    evaluation = [[r.name, f"{r.accuracy:.2%}", f"{r.correct}/{r.total}", r.perplexity] for r in record.evaluate or []]
    return environment.get_template("report.html").render(
        title=f"textmill run {record.run}", record=record, funnel=funnel_section(record),
        examples=examples_tables(record.samples or {}), dedup=dedup_section(record),
        classifier=classifier_section(record), decontaminated=decontaminate_section(record),
        corpus=corpus_section(record), train=train_section(record),
        evaluation=table(evaluation, ["LAMBADA-format file", "accuracy", "correct", "perplexity"]) if evaluation else None,
        times=times_chart(record.seconds_per_stage) if record.seconds_per_stage else None, ablation=None,
        history=table([[cell(row.get(c), c) for c in columns_of(rows)] for row in rows], columns_of(rows)) if rows else None)


def render_ablation_report(ablation) -> str:
    """report.html of an ablation (report.ablation.AblationRecord): its chart, table and verdicts."""
    from textmill.report.ablation import ablation_rows, conclusions
    from textmill.report.charts import ablation_chart

    environment = template_environment()
    header, rows = ablation_rows(ablation)
    return environment.get_template("report.html").render(
        title=f"textmill ablation {ablation.started}", record=None, funnel=None, examples={}, dedup=None,
        classifier=None, decontaminated=None, corpus=None, train=None, evaluation=None, times=None, history=None,
        ablation={"record": ablation, "chart": ablation_chart(ablation), "table": table(rows, header),
                  "verdicts": conclusions(ablation)})


def write_report(record: RunRecord, history: list[RunRecord], path: Path) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(render_report(record, history), encoding="utf-8")
    return path
