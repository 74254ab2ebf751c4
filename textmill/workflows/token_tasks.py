"""The tasks from the finished documents to the training set: the run's tokenizer and the token files.

    corpus_task -> [TrainTokenizer | GivenTokenizer | ImportHF] -> TokenizeShard(j) -> MergeDataset -> Corpus

The tokenizer is [tokenize] vocab_file's (GivenTokenizer), a byte-level BPE trained on the corpus
(TrainTokenizer), or the one of the model [train] init_from imports (ImportHF, which imports the model
with it); whichever it is, the tasks after it read its files through self.input().
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import luigi

from textmill.io.files import file_fingerprint, local_fingerprint
from textmill.io.store import local_path, shown
from textmill.pipeline.shards import record_path
from textmill.workflows.framework import RunTask, key_of
from textmill.workflows.memos import given_tokenizer, run_config
from textmill.workflows.parts import corpus_parts, in_parts
from textmill.workflows.records import stage_tasks
from textmill.workflows.shuffle_tasks import PerShuffledShard, corpus_task, finished_count
from textmill.workflows.targets import DatasetTarget, TokenizerTarget


class GivenTokenizer(luigi.ExternalTask):
    """[tokenize] vocab_file and merge_file: GPT-2's tokenizer, or another the user gives."""

    config = luigi.Parameter(description="the run's TOML file")

    def files(self) -> tuple[Path, Path]:
        settings = run_config(self.config).tokenize
        return settings.vocab_file, settings.merge_file

    def key(self) -> str:
        return key_of([file_fingerprint(p)["sha256"] for p in self.files()])

    def output(self) -> TokenizerTarget:
        return TokenizerTarget(None, None, self.files())


class TrainTokenizer(RunTask):
    """A byte-level BPE trained on the finished corpus, when the config names no vocabulary."""

    stage = "7-tokenizer"

    def requires(self):
        return corpus_task(self.config)

    def own_settings(self) -> tuple:
        t = self.settings.tokenize
        return t.vocab_size, t.min_frequency, t.bpe_sample_documents, t.bpe_sample_seed

    def prefix(self) -> Path:
        return self.folder() / "bpe"

    def target(self) -> TokenizerTarget:
        prefix = self.prefix()  # the files train_bpe_on_files writes
        return TokenizerTarget(self.folder(), record_path(self.folder(), "task.json"),
                               (Path(f"{prefix}-vocab.json"), Path(f"{prefix}-merges.txt")))

    def make(self):
        from textmill.tokenizers.train import train_bpe_on_files

        corpus = self.input()
        shards = [corpus.local_shard(j) for j in range(len(corpus.shards))]
        tokenizer = train_bpe_on_files(shards, self.prefix(), self.settings.tokenize)
        self.finish(vocab_size=tokenizer.vocab_size, vocab_file=shown(tokenizer.files[0]),
                    merge_file=shown(tokenizer.files[1]))


class ImportHF(RunTask):
    """[train] init_from's Hugging Face model as a release checkpoint, with its tokenizer beside it."""

    stage = "7-import"

    def source(self) -> Path:
        return self.settings.train.hf_folder(self.settings.path.parent)

    def own_settings(self) -> tuple:
        files = sorted(p for p in self.source().iterdir() if p.is_file() and not p.name.startswith("."))
        return ([(p.name, file_fingerprint(p)["sha256"]) for p in files],)

    def target(self) -> TokenizerTarget:
        """The checkpoints, and the model's tokenizer kept in them: its Hugging Face files, or GPT-2's two."""
        from textmill.tokenizers.hf import TOKENIZER_FILES, is_hf_tokenizer_folder

        checkpoints = self.folder() / "ckpt"
        kept = checkpoints / "tokenizer"
        if is_hf_tokenizer_folder(self.source()):
            files = tuple(kept / name for name in TOKENIZER_FILES if (self.source() / name).is_file())
        else:
            files = kept / "vocab.json", kept / "merges.txt"
        return TokenizerTarget(self.folder(), record_path(self.folder(), "task.json"), files,
                               trees={"checkpoints": checkpoints})

    def make(self):
        from textmill.interop.hf import import_hf

        checkpoints = self.output().trees["checkpoints"]
        imported = import_hf(self.source(), checkpoints)
        self.finish(**{k: v for k, v in imported.items() if k != "output"}, checkpoints=shown(checkpoints))


def tokenizer_task(config: str) -> ImportHF | GivenTokenizer | TrainTokenizer:
    """What gives the run its tokenizer's files."""
    settings = run_config(config)
    if settings.train.init_from:
        return ImportHF(config)
    return GivenTokenizer(config) if settings.tokenize.vocab_file else TrainTokenizer(config)


class TokenizeShard(RunTask):
    """One finished shard as Megatron token files (tools/preprocess_data.py)."""

    stage = "8-tokenize"
    part = luigi.IntParameter(description="shard number after the shuffle")
    fanned_by = "part"
    reusable = True

    def fan_count(self) -> int:
        return MergeDataset(self.config).shard_count()

    def requires(self):
        return {"corpus": corpus_task(self.config), "tokenizer": tokenizer_task(self.config)}

    def own_settings(self) -> tuple:
        return (self.settings.tokenize.append_eod,)

    def prefix(self) -> Path:
        return self.folder() / f"part-{self.part:05d}"

    def target(self) -> DatasetTarget:
        from textmill.tokenizers.preprocess import dataset_prefix, manifest_file

        prefix = self.prefix()  # tokenize_files writes PREFIX_text_document.bin/.idx and PREFIX.manifest.json
        return DatasetTarget(self.folder(), manifest_file(prefix), dataset_prefix(prefix, "text"),
                             pattern=f"{prefix.name}[._]*")

    def reuse_inputs(self) -> list[Path]:
        given = self.input()
        return [given["corpus"].local_shard(self.part), *given["tokenizer"].local_tokenizer()]

    def reuse_settings(self) -> tuple:
        return *self.own_settings(), self.settings.tokenize.endoftext

    def make(self):
        from textmill.tokenizers.files import tokenizer_settings
        from textmill.tokenizers.preprocess import tokenize_files
        from textmill.tokenizers.tokenize_config import TokenizeConfig

        given = self.input()
        tokenizer = given_tokenizer(TokenizeConfig(**tokenizer_settings(given["tokenizer"].local_tokenizer()),
                                                   endoftext=self.settings.tokenize.endoftext))  # once per process
        tokenize_files([given["corpus"].local_shard(self.part)], self.prefix(), tokenizer,
                       dataclasses.replace(self.settings.tokenize, workers=1))


class MergeDataset(PerShuffledShard):
    """The training set: the token files of every shard concatenated in shard order (Megatron's
    tools/merge_datasets.py); in the parts form ([run] corpus_form, parts.py), no copy: a blend of every shard's token
    files, each weighted by its tokens, which the trainer reads as Megatron reads --data-path w1 p1 w2 p2 ...."""

    stage = "9-dataset"

    def requires(self):
        return {"corpus": corpus_task(self.config), "tokenizer": tokenizer_task(self.config)}

    def shard_count(self) -> int | None:
        return finished_count(self.input()["corpus"])

    def fan_out(self, count: int) -> list:
        return [TokenizeShard(self.config, j) for j in range(count)]

    def own_settings(self) -> tuple:
        return (self.settings.tokenize.append_eod, *(("parts",) if in_parts(self.settings) else ()))

    def target(self) -> DatasetTarget:
        blend = in_parts(self.settings)
        return DatasetTarget(self.folder(), record_path(self.folder(), "task.json"),
                             None if blend else self.folder() / "corpus_text_document")

    def make(self):
        from textmill.report.samples import corpus_histograms

        started, output, corpus = time.perf_counter(), self.output(), self.input()["corpus"]
        made = self.blend() if output.prefix is None else self.merge()
        seconds = time.perf_counter() - started
        # For the run's record, once: the documents' sizes (in characters, only where every shard is read anyway:
        # the parts form reads an old part's token index, never its text), and the steps' time from the documents on.
        if output.prefix is None:
            histograms = corpus_histograms([], [str(local_path(prefix)) for _, prefix in made["blend"]])
        else:
            histograms = corpus_histograms([str(corpus.local_shard(j)) for j in range(len(corpus.shards))],
                                           [str(output.prefix)])
        tokenizer = self.requires()["tokenizer"]
        steps, tasks = stage_tasks([*self.requires_later(), *([tokenizer] if isinstance(tokenizer, RunTask) else [])])
        self.finish(**made, tokenizer_files=[shown(p) for p in self.input()["tokenizer"].tokenizer], seconds=seconds,
                    histograms=histograms, seconds_per_stage={**steps, "dataset": seconds}, tasks=tasks)

    def merge(self) -> dict:
        from textmill.megatron.indexed import merge_datasets

        output = self.output()
        merged = merge_datasets([part.local_dataset() for part in self.input_later()], output.prefix)
        return {"dataset": shown(output.prefix), "documents": merged.num_documents, "tokens": int(merged.lengths.sum()),
                "files": {p.name: local_fingerprint(p) for p in output.token_files()}}

    def blend(self) -> dict:
        """Every shard's token files with its tokens (an empty shard left out: a blend weighs by tokens), and the
        files' sizes and sha256 as their tasks recorded them."""
        blend, files, documents = [], {}, 0
        for shard in self.input_later():
            manifest = shard.record()
            tokens = manifest["counts"]["tokens"].get("text", 0)
            documents += manifest["counts"]["kept"]
            files.update({name: {**recorded, "path": shown(shard.folder / name)}
                          for name, recorded in manifest.get("files", {}).items()})
            if tokens:
                blend.append([tokens, shown(shard.local_dataset())])
        parts, folder = len(corpus_parts(self.settings)), self.input_later()[0].folder  # every shard's files lie there
        return {"dataset": shown(folder), "documents": documents, "tokens": sum(t for t, _ in blend),
                "blend": blend, "parts": parts, "files": files}


class Corpus(luigi.WrapperTask):
    """Everything up to the merged token files."""

    config = luigi.Parameter(description="the run's TOML file")

    def requires(self):
        return MergeDataset(self.config)
