"""The model tasks: training on the merged token files, the LAMBADA evaluation and the Hugging Face export,
and the run as a whole.

    MergeDataset -> TrainGPT -> EvaluateLambada
                             -> ExportHF
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import luigi

from textmill.errors import RunFailed, TextmillError
from textmill.io.files import read_json
from textmill.io.store import files_under, local_path, shown
from textmill.pipeline.shards import record_path
from textmill.run_file import trainer_key
from textmill.workflows.framework import RunTask
from textmill.workflows.memos import run_config
from textmill.workflows.targets import ModelTarget, WorkTarget
from textmill.workflows.token_tasks import Corpus, ImportHF, MergeDataset, tokenizer_task


class TrainGPT(RunTask):
    """`textmill train` on the merged token files, as a subprocess (under torchrun with nproc_per_node > 1)
    whose log is streamed to this process's output and to train.log. A run killed part-way resumes from
    its newest checkpoint, which gives the same result as an uninterrupted one.

    With [train] resume = "latest" the model starts from the weights of the newest model trained on
    another corpus with the same vocabulary (a retrain on a grown corpus); that model's key is part of
    this one's, so the same corpus is not trained again the next day."""

    stage = "10-train"

    def requires(self):
        required = {"dataset": MergeDataset(self.config), "tokenizer": tokenizer_task(self.config)}
        return {**required, "model": ImportHF(self.config)} if self.settings.train.init_from else required

    def own_settings(self) -> tuple:
        start = self.start_from()
        return trainer_key(self.settings.trainer), start and start["key"]

    def start_from(self) -> dict | None:
        """The record (.task.json) of the model this one starts from, or None to start from scratch."""
        if self.settings.train.resume != "latest":
            return None
        dataset, vocabulary = self.requires()["dataset"].key(), self.requires()["tokenizer"].key()
        earlier = [read_json(p) for p in files_under(self.work / self.stage) if p == record_path(p.parent, "task.json")]
        earlier = [e for e in earlier if e.get("dataset_key") != dataset and e.get("tokenizer_key") == vocabulary]
        return max(earlier, key=lambda e: e["finished"], default=None)

    def target(self) -> ModelTarget:
        folder = self.folder()
        return ModelTarget(folder, record_path(folder, "task.json"), folder / "ckpt",
                           self.input()["tokenizer"].tokenizer, folder / "train.log", folder / "train.json")

    def make(self):
        import subprocess
        import sys

        from textmill.tokenizers.files import tokenizer_settings
        from textmill.trainer.checkpoint import TRACKER
        from textmill.trainer.metrics import read_metrics

        given, output = self.input(), self.output()
        checkpoints, start = output.trees["checkpoints"], self.start_from()
        load = {"load": output.local_tree("checkpoints")}  # a run killed part-way resumes
        begun = (checkpoints / TRACKER).exists()
        if start and not begun:  # start from the earlier model
            earlier = WorkTarget(None, None, trees={"checkpoints": local_path(start["checkpoints"])})
            load = {"load": earlier.local_tree("checkpoints"), "finetune": True}
        if self.settings.train.init_from:  # the imported model, its shape with it, until a checkpoint of our own
            imported = {"load": given["model"].local_tree("checkpoints"), "finetune": True}
            load = {**(load if begun else imported), "use_checkpoint_args": True}
        trainer = dataclasses.replace(self.settings.trainer, data_path=given["dataset"].data_path(),
                                      save=checkpoints, **load,
                                      **tokenizer_settings(given["tokenizer"].local_tokenizer()))
        command = [sys.executable, "-m", "textmill.cli.train_process", str(trainer.write(output.files["settings"]))]
        self.folder().mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        cause = ""  # the first error line of the trainer (of any of its processes under torchrun)
        with open(output.files["log"], "a", encoding="utf-8") as log:
            log.write(f"$ {' '.join(command)}  # textmill train {' '.join(trainer.to_argv())}\n")
            proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
            for line in proc.stdout:
                print(line, end="", flush=True)
                log.write(line)
                if not cause and line.startswith("textmill: error: "):
                    cause = line.strip().removeprefix("textmill: error: ")
            code = proc.wait()
        if code == 2:  # bad settings or input, which a retry would not change
            raise TextmillError(f"textmill train: {cause}")
        if code != 0:
            raise RunFailed(f"textmill train exited with status {code}: {cause or 'no error line'} (log: "
                            f"{output.files['log']})")
        records = read_metrics(checkpoints)
        valid = [r for r in records if "valid_loss" in r]
        self.finish(iterations=records[-1]["iteration"], lm_loss=records[-1].get("lm_loss"),
                    valid_loss=valid[-1]["valid_loss"] if valid else None, checkpoints=shown(checkpoints),
                    started_from=start and start["checkpoints"], dataset_key=self.requires()["dataset"].key(),
                    tokenizer_key=self.requires()["tokenizer"].key(), finished=time.time(),
                    seconds=time.perf_counter() - started)


class EvaluateLambada(RunTask):
    """LAMBADA-format accuracy and perplexity of the trained model on each file of [evaluate] lambada."""

    stage = "11-evaluate"

    def requires(self):
        return TrainGPT(self.config)

    def own_settings(self) -> tuple:
        from textmill.io.files import file_fingerprint

        evaluate = self.settings.evaluate
        return [file_fingerprint(p)["sha256"] for p in evaluate.lambada], evaluate.strict

    def target(self) -> WorkTarget:
        folder, files = self.folder(), self.settings.evaluate.lambada
        return WorkTarget(folder, record_path(folder, "task.json"),
                          files={str(p): folder / f"lambada-{i}-{p.stem}.json" for i, p in enumerate(files)})

    def make(self):
        from textmill.evaluate.lambada import evaluate_lambada

        checkpoints, strict = self.input().local_checkpoints(), self.settings.evaluate.strict
        self.finish(results=[evaluate_lambada(checkpoints, path, strict, output=self.output().files[str(path)],
                                              progress=True) for path in self.settings.evaluate.lambada])


class EvaluateHeldOut(RunTask):
    """Bits per byte of the trained model on held-out text: LAMBADA's passages (shipped with textmill), the files
    [ablation] held_out names, and the held-out split of its own corpus (its first documents). Comparable between
    models whose tokenizers differ (an ablation's variants); the own split differs from variant to variant."""

    stage = "11-held-out"

    def requires(self):
        return {"model": TrainGPT(self.config), "dataset": MergeDataset(self.config)}

    def held_out(self) -> list[Path]:
        from textmill.evaluate import LAMBADA_PASSAGES

        ablation = self.settings.ablation
        return [LAMBADA_PASSAGES, *(ablation.held_out if ablation else ())]

    def own_settings(self) -> tuple:
        from textmill.io.files import file_fingerprint

        return tuple(file_fingerprint(p)["sha256"] for p in self.held_out())

    def make(self):
        from textmill.evaluate.bits_per_byte import evaluate_bits_per_byte

        given = self.input()
        own_split = (given["dataset"].checked_dataset(), self.settings.trainer.split)
        self.finish(results=evaluate_bits_per_byte(given["model"].local_checkpoints(), self.held_out(), own_split,
                                                   progress=True))


class ExportHF(RunTask):
    """The trained model as a Hugging Face folder."""

    stage = "12-export"

    def requires(self):
        return TrainGPT(self.config)

    def target(self) -> WorkTarget:
        return WorkTarget(self.folder(), record_path(self.folder(), "task.json"), trees={"hf": self.folder() / "hf"})

    def make(self):
        from textmill.interop.hf import export_hf

        hf = self.output().trees["hf"]
        self.finish(**{**export_hf(self.input().local_checkpoints(), hf), "output": shown(hf)})


class EndToEnd(luigi.WrapperTask):
    """The whole run: the corpus, and (when [train] is enabled) the trained model, its evaluation and its
    Hugging Face export."""

    config = luigi.Parameter(description="the run's TOML file")

    def requires(self):
        settings = run_config(self.config)
        tasks = [Corpus(self.config)]
        if settings.train.enabled:
            tasks.append(TrainGPT(self.config))
            if settings.evaluate.lambada:
                tasks.append(EvaluateLambada(self.config))
            if settings.export.hf:
                tasks.append(ExportHF(self.config))
        return tasks
