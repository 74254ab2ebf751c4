"""The quality classifier's tasks ([classify]): thin tasks over textmill.pipeline.classifier.

    [QualityShard(i) or CleanShard(i), every i, when the run's own documents are the negatives]
      -> TrainClassifier -> ClassifyShard(i)                                 (then shuffle_tasks.py)

TrainClassifier is keyed by the files it reads (their bytes) and its settings; with a fastText model given it
trains nothing and records the model's fingerprint. ClassifyShard(i) scores shard i, keeps or rejects each
document by [classify] rule, and keeps the score in the document's metadata.
"""

from __future__ import annotations

from pathlib import Path

from textmill.io.files import LOOSE_JSON_SUFFIXES, file_fingerprint, given_files
from textmill.pipeline.shards import record_path
from textmill.workflows.corpus_tasks import CleanShard, MapShard, QualityShard
from textmill.workflows.framework import RunTask, every_unit
from textmill.workflows.memos import run_config
from textmill.workflows.targets import WorkTarget

DOCUMENT_SUFFIXES = (".parquet", *LOOSE_JSON_SUFFIXES)


def filtered(config: str, shard: int) -> CleanShard | QualityShard:
    """The shard the classifier reads: cleanup's, or the quality filters' when [quality] has a preset."""
    return (QualityShard if run_config(config).quality.preset != "none" else CleanShard)(config, shard)


def document_files(given: tuple[Path, ...], kind: str) -> list[Path]:
    return given_files(given, DOCUMENT_SUFFIXES, kind)


class TrainClassifier(RunTask):
    """The classifier: trained on [classify] positives against negatives (the run's own documents when none are
    named), with its held-out evaluation in its record; or the fastText model given, checked and recorded."""

    stage = "4-classifier"

    def requires(self):
        cfg = self.settings.classify
        if cfg.model is not None or cfg.negatives:
            return []
        return every_unit(filtered, self.config)

    def own_settings(self) -> tuple:
        cfg = self.settings.classify
        if cfg.model is not None:
            return cfg.params(), file_fingerprint(cfg.model)["sha256"]
        positives = document_files(cfg.positives, "positive documents")
        negatives = document_files(cfg.negatives, "negative documents")
        return cfg.params(), len(positives), [file_fingerprint(p)["sha256"] for p in (*positives, *negatives)]

    def target(self) -> WorkTarget:
        return WorkTarget(self.folder(), record_path(self.folder(), "task.json"),
                          files={"model": self.folder() / "model.json", "weights": self.folder() / "weights.npy"})

    def make(self):
        from textmill.pipeline import classifier

        cfg, limit = self.settings.classify, self.settings.input.max_document_bytes
        if cfg.model is not None:
            scorer = classifier.FastTextScorer(cfg.model, cfg.label)  # a model without the label fails here
            self.finish(model=str(cfg.model), label=cfg.label, sha256=file_fingerprint(cfg.model)["sha256"],
                        labels=len(scorer.labels))
            return
        negatives = (document_files(cfg.negatives, "negative documents") if cfg.negatives
                     else [shard.local() for shard in self.input()])
        model, evaluation, counts = classifier.train(
            classifier.texts_of(document_files(cfg.positives, "positive documents"), limit),
            classifier.texts_of(negatives, limit), cfg, cfg.seed)
        model.save(self.folder())
        self.finish(**counts, **evaluation.to_dict())


class ClassifyShard(MapShard):
    """One shard scored by the classifier, each document kept or rejected by [classify] rule."""

    stage, command, table = "4-classify", "classify", "classify"
    reads = QualityShard  # in a run: `filtered`, which reads CleanShard when [quality] has no preset

    @staticmethod
    def stage_function():
        from textmill.pipeline.classifier import classify_shard

        return classify_shard

    def requires(self):
        return {"shard": filtered(self.config, self.shard), "classifier": TrainClassifier(self.config)}

    def arguments(self) -> tuple:
        cfg = self.settings.classify
        if cfg.model is not None:
            return (None,)
        given = self.input()["classifier"]
        given.local_file("model")
        return (given.local_file("weights").parent,)
