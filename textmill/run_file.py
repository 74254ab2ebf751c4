"""The run configuration: one TOML file describes a run from URL lists to an evaluated model.

Each table is a dataclass of settings: the corpus stages' own (textmill.pipeline.stage_configs), the tokenize
stage's, the trainer's TrainConfig in [train], and the workflow's few below. The example, which `textmill run
--example-config` prints, is generated from them: every field, its default and what it does. Relative
paths are relative to the TOML file's folder. Unknown tables or fields, values of the wrong type or out
of range are errors naming the field.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Literal, NamedTuple

from textmill.errors import TextmillError
from textmill.io.numbers import whole_number
from textmill.io.store import configure, fetch_file_or_tree, url_of
from textmill.pipeline.stage_configs import (
    BlacklistConfig,
    ClassifyConfig,
    CleanConfig,
    DecontaminateConfig,
    DedupConfig,
    InputConfig,
    QualityConfig,
    RedditConfig,
    ScrapeConfig,
    ShuffleConfig,
    WarcConfig,
)
from textmill.settings import SEED_MAX, Settings, example_table, from_table, key_params, reference_table, setting
from textmill.tokenizers.tokenize_config import TokenizeConfig
from textmill.trainer.train_config import TrainConfig
from textmill.variants import Ablation, read_ablation, split_variant, with_variant


@dataclass(frozen=True)
class RunSection(Settings):
    work_dir: Path = setting(Path("work"), "every stage's output, in folders keyed by the settings that made it: a "
                             "folder, or a URL in a store (s3://bucket/prefix) that every worker machine reaches")
    urls: tuple[Path, ...] = setting((Path("urls"),), "URL list files (.txt, or .jsonl with a url field; .gz, .bz2, "
                                     ".xz) or folders of them, local "
                                     "or in a store (s3://bucket/urls/); each cut into shards of [blacklist] "
                                     "urls_per_shard URLs")
    reddit_dumps: tuple[Path, ...] = setting((), "Pushshift submission dumps (RS_YYYY-MM.zst, .gz, .bz2, .xz, or JSON "
                                             "lines) or folders of them, local or in a store: when given, the run "
                                             "starts from them, its URL lists being their links by [reddit]'s rules "
                                             "(urls is not read)")
    warcs: tuple[Path, ...] = setting((), "web archives (.warc.gz or .warc: Common Crawl's, a crawler's) or folders "
                                      "of them, local or in a store: when given, the run starts from the pages they "
                                      "hold, extracted by [scrape]'s extractor, with no URL list and no fetch (urls "
                                      "is not read)")
    seed: int = setting(1234, "seed of the shuffle", least=0, most=SEED_MAX)
    corpus_form: Literal["single", "parts"] = setting(
        "single", '"single": every document shuffled with every other and tokenized into one .bin/.idx, the same bytes '
        'as a run that had every input from the start. "parts": the units a run adds to an earlier run\'s form a part '
        "of their own, shuffled and tokenized alone, and the earlier parts' token files are kept; training blends "
        "every part in proportion to its tokens (a run grown by 1% shuffles and tokenizes 1%). Needs [tokenize] "
        "vocab_file. See docs/running.md")
    results_runs: int = setting(10, "runs side by side in work_dir/results.md (every run is kept in work_dir/runs/)",
                                least=1)
    tasks_per_stage: int = setting(0, "the most tasks the scheduler hands out for one stage: its units (or bands, or "
                                   "shuffled shards) are batched into at most this many, each unit committed on its "
                                   "own. 0: four per worker process (--workers) when the run schedules its own work, "
                                   "128 with a central scheduler (whose machines must all cut the stages alike). A "
                                   "scheduler looks at every task of the graph each time a worker asks for one, so "
                                   "more tasks spread a stage over more worker processes but slow every hand-out; "
                                   "about twice the worker processes of all machines together is enough. Changes no "
                                   "output", least=0, keyed=False)


@dataclass(frozen=True)
class TrainSection(Settings):
    """The workflow's own keys of [train]; every other key is a TrainConfig setting (`textmill train`'s)."""

    enabled: bool = setting(True, "false: stop at the token files")
    resume: Literal["fresh", "latest"] = setting("fresh", '"latest": start from the weights of the newest model '
                                                 "trained on an earlier corpus (fresh optimizer and schedule, as "
                                                 "--finetune); needs [tokenize] vocab_file")
    init_from: str = setting("", '"hf:PATH": fine-tune a Hugging Face model folder (PATH relative to this file) '
                             "instead of training from scratch: it is imported, the corpus is tokenized with its own "
                             "tokenizer, and the model's shape comes from it (the shape settings here are unused)")

    def hf_folder(self, base: Path) -> Path | None:
        """The Hugging Face folder of init_from, resolved against the run file's folder; None without one."""
        if not self.init_from:
            return None
        if not self.init_from.startswith("hf:") or len(self.init_from) == 3:
            raise TextmillError(f'[train] init_from {self.init_from!r}: give "hf:PATH", a Hugging Face model folder')
        return (base / self.init_from[3:]).resolve()


WORKFLOW_TRAIN_KEYS = tuple(f.name for f in fields(TrainSection))


@dataclass(frozen=True)
class EvaluateSection(Settings):
    lambada: tuple[Path, ...] = setting((), 'LAMBADA-format files ({"text": ...} a line) to score the trained model on')
    strict: bool = setting(True, "the whole last word is the target (Megatron's --strict-lambada)")


@dataclass(frozen=True)
class ExportSection(Settings):
    hf: bool = setting(True, "write the trained model as a Hugging Face folder")


@dataclass(frozen=True)
class ScheduleSection(Settings):
    at: str = setting("03:00", "daily time (HH:MM, the machine's clock) of the crontab line `textmill schedule` writes")

    def hour_minute(self) -> tuple[int, int]:
        hour_text, _, minute_text = self.at.partition(":")
        hour, minute = whole_number(hour_text), whole_number(minute_text)
        if hour is None or minute is None or hour >= 24 or minute >= 60 or len(minute_text) != 2:
            raise TextmillError(f"[schedule] at: {self.at[:40]!r} is not a time of day HH:MM")
        return hour, minute


class Table(NamedTuple):
    """A table of the run file: its dataclass, and the fields the workflow sets itself, with the reason."""

    settings: type
    workflow_sets: dict[str, str] = {}


# Every table, in the order the example shows them. [train] is TrainSection's keys and TrainConfig's.
TABLES = {
    "run": Table(RunSection),
    "input": Table(InputConfig),
    "reddit": Table(RedditConfig),
    "warc": Table(WarcConfig),
    "blacklist": Table(BlacklistConfig),
    "scrape": Table(ScrapeConfig),
    "dedup": Table(DedupConfig),
    "clean": Table(CleanConfig),
    "quality": Table(QualityConfig),
    "classify": Table(ClassifyConfig, {"seed": "the classifier's seed is [run] seed"}),
    "shuffle": Table(ShuffleConfig, {"seed": "the shuffle's seed is [run] seed"}),
    "decontaminate": Table(DecontaminateConfig),
    "tokenize": Table(TokenizeConfig, {"json_keys": "the workflow tokenizes the documents' text",
                                       "workers": "the workflow tokenizes each shard in one thread (textmill run "
                                       "--workers sets how many at once)"}),
    "train": Table(TrainSection),
    "evaluate": Table(EvaluateSection),
    "export": Table(ExportSection),
    "schedule": Table(ScheduleSection),
}
TRAINER_SET_BY_WORKFLOW = {name: "the workflow sets it itself" for name in
                           ("data_path", "vocab_file", "merge_file", "vocab_size", "save", "load", "tokenizer_type",
                            "tokenizer_model")}


def example_config() -> str:
    """The documented example run file: every table and field at its default."""
    parts = ["# A textmill run: `textmill run run.toml`. Relative paths are relative to this file; any path may be a\n"
             "# URL in a store fsspec reaches (s3://bucket/key; credentials from the usual places, AWS_ENDPOINT_URL).\n"
             "# Options for a store's filesystem go in a table per protocol, e.g.\n"
             "# [storage.s3]\n# endpoint_url = \"https://s3.internal.example\"\n"]
    for name, table in TABLES.items():
        parts.append(example_table(name, table.settings, skip=tuple(table.workflow_sets)))
        if name == "train":
            parts.append(example_table("train", TrainConfig, skip=tuple(TRAINER_SET_BY_WORKFLOW), note=(
                "The options of `textmill train` (see its --help), with _ for -. Not set: data_path, vocab_file, "
                "merge_file,\nvocab_size, tokenizer_type, tokenizer_model, save and load, which the workflow "
                "gives.")).partition("\n")[2])
    return "\n".join(parts)


# The command whose options a table's settings also are.
COMMANDS = {"input": "every document stage", "reddit": "textmill reddit-urls", "warc": "textmill warc",
            "blacklist": "textmill blacklist", "scrape": "textmill scrape",
            "dedup": "textmill dedup", "clean": "textmill clean", "quality": "textmill quality",
            "shuffle": "textmill shuffle", "decontaminate": "textmill decontaminate", "tokenize": "textmill tokenize"}


def settings_reference() -> str:
    """docs/settings.md: every table of the run file, each key with its flag, default and meaning, made from
    the settings classes as example_config is."""
    parts = []
    for name, table in TABLES.items():
        command = COMMANDS.get(name)
        heading = f"## [{name}]" + (f" (the options of {command})" if command else " (run file only)")
        parts.append(reference_table(heading, table.settings, skip=tuple(table.workflow_sets), command=command))
        if name == "train":
            parts.append(reference_table("## [train]: the options of `textmill train`, with _ for - (the workflow "
                                         "sets data_path, vocab_file, merge_file, vocab_size, tokenizer_type, "
                                         "tokenizer_model, save and load)", TrainConfig,
                                         skip=tuple(TRAINER_SET_BY_WORKFLOW), command="textmill train"))
    return "\n".join(parts)


@dataclass(frozen=True)
class RunConfig:
    path: Path
    run: RunSection = field(default_factory=RunSection)
    input: InputConfig = field(default_factory=InputConfig)
    reddit: RedditConfig = field(default_factory=RedditConfig)
    warc: WarcConfig = field(default_factory=WarcConfig)
    blacklist: BlacklistConfig = field(default_factory=BlacklistConfig)
    scrape: ScrapeConfig = field(default_factory=ScrapeConfig)
    dedup: DedupConfig = field(default_factory=DedupConfig)
    clean: CleanConfig = field(default_factory=CleanConfig)
    quality: QualityConfig = field(default_factory=QualityConfig)
    classify: ClassifyConfig = field(default_factory=ClassifyConfig)
    shuffle: ShuffleConfig = field(default_factory=ShuffleConfig)
    decontaminate: DecontaminateConfig = field(default_factory=DecontaminateConfig)
    tokenize: TokenizeConfig = field(default_factory=TokenizeConfig)
    train: TrainSection = field(default_factory=TrainSection)
    # The trainer's settings [train] gives, typed: what the trained model is keyed by (trainer_key) and what
    # the trainer process is started with (as a table file, TrainConfig.write).
    trainer: TrainConfig | None = None
    evaluate: EvaluateSection = field(default_factory=EvaluateSection)
    export: ExportSection = field(default_factory=ExportSection)
    schedule: ScheduleSection = field(default_factory=ScheduleSection)
    # A stage command (`textmill dedup IN... -o OUT`) runs one corpus stage's tasks alone: its input files
    # are [run] urls, its output folder [run] work_dir. None for a run file's whole run.
    command: str | None = None
    ablation: Ablation | None = None  # the file's [ablation] table, read
    variant: str | None = None  # "NAME@SEED" when these are a variant's settings (textmill.variants)

    def __hash__(self) -> int:
        # Every task's memos are keyed by its run's settings, asked hundreds of thousands of times in a large graph's
        # walk: the hash of the nested tables is computed once (the fields are frozen).
        if "_hash" not in self.__dict__:
            object.__setattr__(self, "_hash", hash(tuple(getattr(self, f.name) for f in fields(self))))
        return self.__dict__["_hash"]

    def __getstate__(self) -> dict:
        return {name: value for name, value in self.__dict__.items() if name != "_hash"}  # a string's hash is per process


# The corpus stages in graph order, each a command that runs it alone, with the folder of WORK its output is in
# (where the command writes straight into its output folder). workflows/stages.py gives each its tasks.
CORPUS_STAGES = {"reddit-urls": "0-reddit", "blacklist": "1-blacklist", "scrape": "2-scrape", "warc": "2-warc",
                 "extract": "2-extract", "dedup": "3-dedup", "clean": "4-clean", "quality": "4-quality",
                 "classify": "4-classify", "shuffle": "5-shuffle", "decontaminate": "6-decontaminate"}


def load_config(path: str | Path) -> RunConfig:
    """A run file (TOML), or the JSON file a stage command writes for its tasks: the same tables, and
    `command`, the stage it runs alone; or a variant of a run file (PATH#VARIANT@SEED: textmill.variants)."""
    path, variant, seed = split_variant(str(path))
    path = Path(path).resolve()
    try:
        text = path.read_text(encoding="utf-8")
        raw = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except OSError as exc:
        raise TextmillError(f"{path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise TextmillError(f"{path}: not UTF-8 text (byte {exc.start}); save the file as UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise TextmillError(f"{path}: not valid TOML ({exc})") from None
    except ValueError as exc:
        raise TextmillError(f"{path}: not valid JSON ({exc})") from None
    command = raw.pop("command", None) if path.suffix == ".json" else None
    ablation = read_ablation(raw.pop("ablation", None), path)
    if variant is not None:
        raw = with_variant(raw, ablation, path, variant, seed)
    if command is not None and command not in CORPUS_STAGES:
        raise TextmillError(f"{path}: command {command!r} is not a corpus stage ({', '.join(CORPUS_STAGES)})")
    configure(storage_options(path, raw.pop("storage", {})))
    unknown = sorted(set(raw) - set(TABLES))
    if unknown:
        raise TextmillError(f"{path}: no section [{unknown[0]}] (sections: {', '.join(TABLES)})")
    try:
        settings = checked(path, {**read_tables(path, raw), "command": command, "ablation": ablation,
                                  "variant": None if variant is None else f"{variant}@{seed}"})
        if settings.train.enabled:
            check_train({k: v for k, v in raw.get("train", {}).items() if k not in WORKFLOW_TRAIN_KEYS}, path,
                        settings.tokenize)
        fetch_inputs(settings)
        return settings
    except TextmillError as exc:
        where = path if variant is None else f"{path}, variant {variant} ([ablation.variants.{variant}])"
        raise TextmillError(f"{where}: {exc}") from None


def storage_options(path: Path, table) -> dict[str, dict]:
    """[storage.PROTOCOL] tables: fsspec options for that protocol's filesystem (s3fs's endpoint_url,
    profile, anon, ...); the standard places (AWS_ENDPOINT_URL, the credential chain) need none."""
    if not isinstance(table, dict) or not all(isinstance(v, dict) for v in table.values()):
        raise TextmillError(f"{path}: [storage] holds one table per protocol, e.g. [storage.s3] endpoint_url = \"...\"")
    return table


def fetch_inputs(settings: RunConfig) -> None:
    """The input files and folders the run file names in a store (URL lists, evaluation sets, vocabularies)
    made current in the local mirror; WORK, an output, is fetched task by task."""
    for name in TABLES:
        section = getattr(settings, name)
        for f in fields(section):
            value = getattr(section, f.name)
            for path in value if isinstance(value, tuple) else (value,):
                if isinstance(path, Path) and (name, f.name) != ("run", "work_dir") and url_of(path):
                    fetch_file_or_tree(path)


def read_tables(path: Path, raw: dict) -> dict:
    values: dict = {}
    for name, table in TABLES.items():
        given = raw.get(name, {})
        if not isinstance(given, dict):
            raise TextmillError(f"{name} must be a [{name}] table")
        extra = {"seed": values["run"].seed} if name in ("shuffle", "classify") else {}
        own = given if name != "train" else {k: v for k, v in given.items() if k in WORKFLOW_TRAIN_KEYS}
        values[name] = from_table(table.settings, name, own, path.parent, skip=table.workflow_sets, **extra)[0]
        if name == "train":
            trainer = {k: v for k, v in given.items() if k not in own}
            values["trainer"] = trainer_config(trainer, path, train_iters=1)  # whether it is needed is checked later
    return values


def trainer_config(table: dict, path: Path, **given) -> TrainConfig:
    """The TrainConfig of [train]'s trainer keys."""
    defaults = {"data_path": ("unused",), **given}
    if "train_samples" in table:  # Megatron's sample-based length, instead of train_iters
        defaults.pop("train_iters", None)
    return from_table(TrainConfig, "train", table, path.parent, skip=TRAINER_SET_BY_WORKFLOW,
                      **{k: v for k, v in defaults.items() if k not in table})[0]


def trainer_key(trainer: TrainConfig) -> dict:
    """What of [train]'s trainer settings changes the model: every field the workflow does not set itself, by
    value and defaults included, logging and intervals left out (fields marked keyed=False). The same table
    reordered, or with a default written out, or with 3 for 3.0, gives the same key."""
    return {k: v for k, v in key_params(trainer).items() if k not in TRAINER_SET_BY_WORKFLOW}


def checked(path: Path, values: dict) -> RunConfig:
    settings = RunConfig(path=path, **values)
    if settings.tokenize.tokenizer_type != "GPT2BPETokenizer":
        raise TextmillError("[tokenize] tokenizer_type: a run encodes with GPT-2 BPE files (vocab_file and merge_file, "
                            "or a BPE it trains), or with the model's own tokenizer when [train] init_from names one")
    hf_folder = settings.train.hf_folder(path.parent)
    if hf_folder is not None:
        if settings.tokenize.vocab_file or settings.train.resume == "latest":
            raise TextmillError("[train] init_from brings the model's own tokenizer and weights: leave out [tokenize] "
                                "vocab_file and [train] resume")
        if not (hf_folder / "config.json").is_file():
            raise TextmillError(f"[train] init_from: {hf_folder} holds no config.json (a Hugging Face model folder)")
    if settings.train.resume == "latest" and not settings.tokenize.vocab_file:
        raise TextmillError("[train] resume = \"latest\" needs [tokenize] vocab_file: a BPE trained on each corpus "
                            "gives each model its own vocabulary")
    if settings.run.corpus_form == "parts" and not (settings.tokenize.vocab_file or hf_folder):
        raise TextmillError('[run] corpus_form = "parts" needs [tokenize] vocab_file (or [train] init_from): a BPE '
                            "trained on the corpus changes as it grows, and every part would be tokenized again")
    if settings.run.reddit_dumps and settings.run.warcs:
        raise TextmillError("[run] reddit_dumps and warcs are two starts of a run: give one (a run from dumps fetches "
                            "their links; one from archives reads the pages they hold)")
    settings.schedule.hour_minute()
    return settings


def check_train(table: dict, path: Path, tokenize: TokenizeConfig) -> None:
    """The trainer's own checks of its settings (model, parallel layout, sequence length), with the
    vocabulary [tokenize] will give it, so that a bad [train] is refused before the corpus is built."""
    from textmill.trainer.train_config import check_config, unpadded_vocab_size

    config = trainer_config(table, path, vocab_file=tokenize.vocab_file, vocab_size=tokenize.vocab_size)
    try:
        check_config(config, config.nproc_per_node, unpadded_vocab_size(config))
    except TextmillError as exc:
        raise TextmillError(f"[train] {exc}") from None


SETTINGS_PAGE = """# Settings

Every setting of a run file (`textmill run run.toml`), table by table, and the flag that sets it on the
command of that stage: one field of the code each, so a key and its flag always mean the same. Generated
from the settings classes (`python -m textmill.run_file > docs/settings.md`; tests/unit/test_docs.py checks
it is current). `textmill run --example-config` prints the same settings as a run file.

"""

if __name__ == "__main__":
    print(SETTINGS_PAGE + settings_reference(), end="")
