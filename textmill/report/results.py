"""The results of the runs: each run's record (runs/<name>/run.json, a report.record.RunRecord built by
textmill.workflows.run_records.run_record: the funnel, the dedup clusters, the corpus, training, evaluation
and the seconds per stage), the lines `textmill run` ends with, and work/results.md (the last
runs side by side, with what got worse) and results.tsv (every run)."""

from __future__ import annotations

from pathlib import Path

from textmill.io.files import atomic_path, read_json_record, report_damage
from textmill.io.store import files_under, shown
from textmill.report.ablation import AblationRecord, ablation_table, verdict_lines
from textmill.report.lines import funnel_lines, token_files
from textmill.report.record import RunRecord


def read_runs(runs: Path) -> list[RunRecord]:
    """Every run record under WORK/runs, oldest first; a damaged one is left out, with a note."""
    left_out = "that run is left out of results.md and the report"
    records = []
    for path in files_under(runs):
        raw = read_json_record(path, left_out) if path.name == "run.json" and path.parent.parent == runs else None
        if raw:
            try:
                records.append(RunRecord.from_dict(raw))
            except (TypeError, AttributeError):  # a field missing or of the wrong kind
                report_damage(path, "not a run record", left_out)
    return records


def run_lines(record: RunRecord, folder: Path) -> list[str]:
    """The end of `textmill run`: the corpus, the model, its evaluation, where the report is, and what got
    worse since the previous run."""
    corpus, train = record.corpus, record.train
    lines = ["textmill run: corpus funnel (in, kept and rejected at each stage, with reasons)", *funnel_lines(record),
             f"textmill run: done: {corpus.documents:,} documents, {corpus.tokens:,} tokens -> {token_files(corpus)}"]
    if train:
        valid = f", validation loss {train.valid_loss:.4f}" if train.valid_loss is not None else ""
        start = f" (starting from {train.started_from})" if train.started_from else ""
        lines.append(f"  trained {train.iterations} iterations{start}{valid} -> {train.checkpoints}")
    lines += [f"  {Path(r.file).name}: accuracy {r.accuracy:.2%} ({r.correct}/{r.total}), perplexity {r.perplexity:.2f}"
              for r in record.evaluate]
    if record.export:
        lines.append(f"  Hugging Face {record.export.family} model -> {record.export.output}")
    lines.append(f"  report: {shown(folder / 'report.html')}; the last runs side by side: "
                 f"{shown(folder.parent.parent / 'results.md')}")
    history = read_runs(folder.parent)
    regressions = [row["regressions"] for row in results_rows(history) if row["run"] == record.run]
    if regressions and regressions[0]:
        lines.append(f"  {regressions[0]} (since the previous run)")
    return lines + [f"[{record.seconds:.1f}s]"]


def result_row(record: RunRecord) -> dict:
    """The numbers of one run that the results table compares."""
    corpus, train = record.corpus, record.train
    row = {"run": record.run, "status": record.status, "urls": record.funnel[0].input if record.funnel else None,
           "documents": corpus and corpus.documents, "tokens": corpus and corpus.tokens,
           "iterations": train and train.iterations, "valid_loss": train and train.valid_loss}
    for r in record.evaluate:
        row[f"{r.name} accuracy"] = r.accuracy
    row["seconds"] = record.seconds
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


def results_rows(records: list[RunRecord]) -> list[dict]:
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


def read_ablations(folder: Path) -> list[AblationRecord]:
    """Every ablation's record under WORK/ablations, oldest first; a damaged one is left out, with a note."""
    left_out = "that ablation is left out of results.md"
    records = []
    for path in files_under(folder):
        raw = read_json_record(path, left_out) if path.name == "ablation.json" else None
        if raw:
            try:
                records.append(AblationRecord.from_dict(raw))
            except (TypeError, KeyError, AttributeError):
                report_damage(path, "not an ablation's record", left_out)
    return sorted(records, key=lambda r: r.started)


def ablations_markdown(records: list[AblationRecord]) -> str:
    """The ablations' section of results.md: each one's table and verdicts."""
    lines = ["## Ablations (newest last; `textmill ablate`, docs/ablations.md)"]
    for record in records:
        lines += ["", f"### {record.started}: {record.config}", "", *ablation_table(record), "",
                  *(f"- {line}" for line in verdict_lines(record))]
    return "\n" + "\n".join(lines) + "\n"


def write_results(work: Path, records: list[RunRecord], keep: int) -> Path:
    """work/results.md: the last `keep` runs side by side, and the last `keep` ablations' answers;
    work/results.tsv: every run."""
    rows = results_rows(records)
    ablations = read_ablations(work / "ablations")[-keep:]
    with atomic_path(work / "results.md") as tmp:
        tmp.write_text("# Results of the last runs (newest last)\n\n" + results_markdown(rows[-keep:])
                       + (ablations_markdown(ablations) if ablations else ""))
    columns = columns_of(rows)
    with atomic_path(work / "results.tsv") as tmp:
        tmp.write_text("\n".join("\t".join(map(str, r)) for r in
                                 [columns] + [["" if row.get(c) is None else row[c] for c in columns] for row in rows]) + "\n")
    return work / "results.md"
