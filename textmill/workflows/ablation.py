"""`textmill ablate`: every variant of a run file's [ablation] (textmill.variants), each with every seed, built
as one Luigi graph in which what the variants share is one task (variant_tasks.py), then compared.

Each variant's model is the same trainer settings ([train]: preset, iterations, batch, sequence length) on its own
corpus, so every model is trained on the same number of tokens whatever its corpus's size: a small corpus is
repeated, a large one is not seen whole, and the record says which (epochs). Each is measured in bits per byte of
held-out text (LAMBADA's passages, shipped; [ablation] held_out), which does not depend on the tokenizer each
variant trains, and in LAMBADA accuracy on [evaluate] lambada's files. The record is written to
WORK/ablations/<date_time>/ (ablation.json, ablation.md).
"""

from __future__ import annotations

import time
from pathlib import Path

import luigi

from textmill.errors import Interrupted, RunFailed, TextmillError
from textmill.io.files import atomic_path, read_json, write_json
from textmill.io.store import listed_folders, publish
from textmill.report.ablation import (
    AblationRecord,
    SeedResult,
    VariantResult,
    ablation_table,
    conclusions,
)
from textmill.workflows.memos import forget, run_config
from textmill.workflows.model_tasks import EvaluateHeldOut, EvaluateLambada, TrainGPT
from textmill.workflows.stages import StageRecord, run_stages
from textmill.workflows.token_tasks import MergeDataset

ABLATIONS = "ablations"


def ablation_targets(config: str) -> list[luigi.Task]:
    """What a variant makes: its model, evaluated, and its corpus stages' records."""
    settings = run_config(config)
    targets = [TrainGPT(config), EvaluateHeldOut(config)]
    if settings.evaluate.lambada:
        targets.append(EvaluateLambada(config))
    return targets + [StageRecord(config, stage.name) for stage in run_stages(settings)]


class AblationTargets(luigi.WrapperTask):
    """Every variant's targets: one task the whole ablation's is, so that a worker on a central scheduler stays
    while the last of them runs on another machine (a worker leaves when nothing it could take is pending)."""

    config = luigi.Parameter(description="the run's TOML file, with its [ablation] table")

    def requires(self):
        return [task for variant in variant_configs(Path(self.config)) for task in ablation_targets(variant)]


def variant_configs(config: Path) -> list[str]:
    """Every variant of the run file with every seed, each checked (one error line before any work)."""
    settings = run_config(str(config))
    if settings.ablation is None:
        raise TextmillError(f"{config} has no [ablation] table: name its variants in [ablation.variants.NAME] "
                            "tables (docs/ablations.md)")
    variants = settings.ablation.configs(config)
    for variant in variants:
        if not run_config(variant).train.enabled:
            raise TextmillError(f"{variant}: an ablation compares the models its variants train: [train] enabled "
                                "must be true")
    return variants


def run_ablation(config: Path, workers: int = 1, scheduler_url: str | None = None) -> tuple[AblationRecord, Path]:
    """Build every variant's graph and compare them: the record and the folder it was written to."""
    from textmill.io.progress import progress_interval
    from textmill.workflows.runner import build_graphs, configure_luigi, upgrade_work_layout, work_lock

    config = Path(config).resolve()
    forget()
    progress_interval()
    variants = variant_configs(config)
    work = run_config(str(config)).run.work_dir
    started_at, started = time.strftime("%Y-%m-%d_%H%M%S"), time.perf_counter()
    configure_luigi()
    try:
        def targets() -> list[luigi.Task]:
            return [AblationTargets(str(config))]

        if scheduler_url:
            ok, summary = build_graphs(variants, targets, workers, scheduler_url)
        else:
            with work_lock(work):
                upgrade_work_layout(work)
                ok, summary = build_graphs(variants, targets, workers, None)
    except KeyboardInterrupt:
        raise Interrupted("finished tasks are kept; `textmill ablate` again goes on from them") from None
    if not ok:
        raise RunFailed(f"the ablation did not finish; `textmill status` on a variant ({variants[0]}) lists its "
                        f"tasks, and `textmill ablate` again redoes only what is not finished\n{summary}")
    from textmill.report.results import read_runs, write_results
    from textmill.workflows.run_records import RUNS

    record = ablation_record(config, variants, started_at, time.perf_counter() - started)
    folder = write_ablation(record, work / ABLATIONS / started_at)
    results = write_results(work, read_runs(work / RUNS), run_config(str(config)).run.results_runs)
    publish([folder / "ablation.json", folder / "ablation.md", folder / "report.html", results,
             results.with_suffix(".tsv")])
    return record, folder


def ablation_record(config: Path, variants: list[str], started_at: str, seconds: float) -> AblationRecord:
    """The finished variants' results, read from their tasks' records."""
    ablation = run_config(str(config)).ablation
    with listed_folders(run_config(str(config)).run.work_dir):
        results = {variant: seed_result(variant) for variant in variants}
    return AblationRecord(
        config=str(config), started=started_at, seconds=round(seconds, 1), baseline=ablation.baseline,
        variants=[VariantResult(name, ablation.overrides(name),
                                [results[v] for v in variants if run_config(v).variant.partition("@")[0] == name])
                  for name in ablation.names])


def seed_result(variant: str) -> SeedResult:
    """One variant's model with one seed: its corpus, what it trained on, and its evaluations."""
    from textmill.megatron.indexed import IndexedDataset
    from textmill.trainer.checkpoint import newest_meta
    from textmill.trainer.data import split_ranges

    settings = run_config(variant)
    corpus = read_json(MergeDataset(variant).output().done)
    train = TrainGPT(variant)
    trained = read_json(train.output().done)
    meta = newest_meta(train.output().local_checkpoints())
    train_tokens = 0  # each dataset of a blend (the parts form's) is split on its own, as Megatron splits them
    for _, prefix in MergeDataset(variant).output().checked_blend():
        lengths = IndexedDataset(prefix).lengths
        train_split = split_ranges(len(lengths), settings.trainer.split)[0]
        train_tokens += int(lengths[train_split].sum()) if train_split is not None else 0
    held_out = read_json(EvaluateHeldOut(variant).output().done)["results"]
    lambada = (read_json(EvaluateLambada(variant).output().done)["results"] if settings.evaluate.lambada else [])
    return SeedResult(
        seed=settings.trainer.seed, documents=corpus["documents"], tokens=corpus["tokens"],
        train_tokens=train_tokens,
        trained_tokens=trained["iterations"] * settings.trainer.global_batch_size * int(meta["seq_length"]),
        bits_per_byte={r["name"]: r["bits_per_byte"] for r in held_out},
        lambada_accuracy={Path(r["valid_data"]).stem: r["accuracy"] for r in lambada})


def write_ablation(record: AblationRecord, folder: Path) -> Path:
    """ablation.json, ablation.md (the table and the verdicts) and report.html (with its chart) in `folder`."""
    from textmill.report.page import render_ablation_report

    folder.mkdir(parents=True, exist_ok=True)
    write_json(record.to_dict(), folder / "ablation.json")
    with atomic_path(folder / "report.html") as tmp:
        tmp.write_text(render_ablation_report(record), encoding="utf-8")
    with atomic_path(folder / "ablation.md") as tmp:
        tmp.write_text("\n".join([f"# Ablation of {record.config}", "", *ablation_table(record), "",
                                  *(f"- {line}" for line in conclusions(record))]) + "\n")
    return folder
