"""A run's record (runs/<name>/run.json), typed: what workflows/run_records.py builds from the stage records and
the model's tasks, and what the report, the results table and the summaries render. Every part has to_dict() (the
JSON written) and from_dict() (which reads what an older textmill wrote: a part it lacks is absent, a key it does
not know is left out). The stages' own figures (dedup's clusters, decontamination's n-grams, the examples, the
documents' histograms) stay the dictionaries their algorithms write."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


def known(cls: type, raw: dict) -> dict:
    """The entries of `raw` that are fields of the dataclass `cls`."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {name: value for name, value in raw.items() if name in names}


class Part:
    """to_dict/from_dict for a dataclass of JSON values (TypeError when `raw` lacks a field without a default)."""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: dict):
        return cls(**known(cls, raw))


@dataclass(frozen=True)
class StageCounts(Part):
    """One corpus stage over its shards: records in, kept and rejected (by reason), rows written (a stage that
    cuts documents may write more rows than it kept), its folder, the seconds its tasks ran (added up over
    workers), and what it wrote per second of that."""

    stage: str
    shards: int
    input: int
    kept: int
    rejected: int
    rows_out: int
    reasons: dict[str, int]
    output: str
    seconds: float
    bytes: int | None = None
    records_per_s: int | None = None
    mb_per_s: float | None = None
    # its tasks (shards' and steps'): made by the run, taken from an earlier task's output made from the same input
    # bytes (workflows/reuse.py), done by an earlier run; none in a record of an older textmill
    tasks: dict[str, int] | None = None


@dataclass(frozen=True)
class CorpusTokens(Part):
    """The merged token files: their prefix, documents and tokens, and the documents' length histograms."""

    dataset: str  # the merged files' prefix, or the folder of the parts form's blend
    documents: int
    tokens: int
    histograms: dict | None = None  # none for token files an older textmill merged
    parts: int | None = None  # the parts of a corpus of the parts form ([run] corpus_form); None: one merged file
    tasks: dict[str, int] | None = None  # tokenization's (with the tokenizer's), counted as StageCounts.tasks


@dataclass(frozen=True)
class Training(Part):
    iterations: int
    lm_loss: float | None
    valid_loss: float | None
    checkpoints: str
    started_from: str | None = None
    seconds: float | None = None


@dataclass(frozen=True)
class Evaluation(Part):
    """One LAMBADA-format file's result."""

    name: str
    file: str
    accuracy: float
    correct: int
    total: int
    perplexity: float


@dataclass(frozen=True)
class Export(Part):
    family: str
    output: str


@dataclass
class RunRecord(Part):
    run: str  # its folder's name under WORK/runs
    config: str
    started: str
    seconds: float | None  # None: not known (a killed run)
    status: str  # "done", "failed", "interrupted" (Ctrl-C), "running", or "killed" (found so by a later run)
    failed: list[str] = field(default_factory=list)  # "task: why", for a failed run
    funnel: list[StageCounts] = field(default_factory=list)  # the corpus stages it finished, in graph order
    samples: dict[str, Any] = field(default_factory=dict)  # per stage: examples of kept and rejected documents
    seconds_per_stage: dict[str, float] = field(default_factory=dict)
    dedup: dict | None = None  # the clusters' record
    duplicate_pairs: list | None = None
    classifier: dict | None = None  # the classifier's record (its held-out evaluation, or the model given) and histogram
    decontaminate: dict | None = None
    corpus: CorpusTokens | None = None
    train: Training | None = None
    evaluate: list[Evaluation] = field(default_factory=list)
    export: Export | None = None
    process: str | None = None  # "host:pid" of a running run, to tell a killed one from one still running

    @classmethod
    def from_dict(cls, raw: dict) -> RunRecord:
        typed = {"funnel": [StageCounts.from_dict(s) for s in raw.get("funnel") or []],
                 "corpus": CorpusTokens.from_dict(raw["corpus"]) if raw.get("corpus") else None,
                 "train": Training.from_dict(raw["train"]) if raw.get("train") else None,
                 "evaluate": [Evaluation.from_dict(r) for r in raw.get("evaluate") or []],
                 "export": Export.from_dict(raw["export"]) if raw.get("export") else None}
        return cls(**known(cls, {**raw, **typed}))
