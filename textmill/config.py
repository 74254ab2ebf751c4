"""The run configuration: one TOML file describes a run from URL lists to an evaluated model.

Every field, its default and what it does is in EXAMPLE below (`textmill run --example-config` prints
it). Relative paths are relative to the TOML file's folder. Unknown sections or fields, and values of
the wrong type, are errors naming the field.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Literal

from textmill.errors import TextmillError
from textmill.pipeline.clean import CleanConfig
from textmill.pipeline.decontaminate import DecontaminateConfig
from textmill.pipeline.dedup import DedupConfig
from textmill.settings import SEED_MAX, check_ranges, ranged

EXAMPLE = """\
# A textmill run: `textmill run run.toml`. Relative paths are relative to this file.

[run]
work_dir = "work"            # every stage's output, keyed by the settings that made it
urls = ["urls"]              # URL list files (.txt, .gz, .bz2, .xz) or folders of them; one shard per file
seed = 1234                  # seed of the shuffle (and of the trainer unless [train] sets one)
results_runs = 10            # runs side by side in work_dir/results.md (every run is kept in work_dir/runs/)

[blacklist]
domain_blacklist = []        # extra files of blacklisted domains, one a line (added to the bundled list)
extension_blacklist = []     # extra files of blacklisted file extensions

[scrape]
concurrency = 32             # URLs fetched at once per shard (does not change the output)
extract_workers = 2          # newspaper3k processes (does not change the output; 0: threads, no extraction deadline)
timeout_s = 30.0             # hard wall-clock limit per URL's fetch
extract_timeout_s = 10.0     # hard limit on extracting one page; over it the page is rejected (extraction_timeout)
max_bytes = 5242880          # largest page accepted
max_redirects = 5
allow_private_addresses = false  # fetch from private/loopback addresses (the demo's local web needs true)
allow_networks = []          # non-public addresses or networks (CIDR) fetched all the same, e.g. ["10.0.0.5"]
keep_html = false            # keep the raw HTML beside each shard

[dedup]
shingle_size = 5             # n of the shingles
unit = "word"                # "word" n-grams, or "char" (Megatron's find_duplicates.py)
num_perm = 128               # MinHash permutations
bands = 16                   # LSH bands (num_perm must divide by it)
threshold = 0.7              # estimated Jaccard at or above which two documents are duplicates
seed = 1                     # MinHash seed

[clean]
language = "en"              # keep documents langdetect (seeded) calls this language
min_tokens = 128             # drop documents shorter than this (GPT-2 pieces + 1; BPE tokens with a vocabulary)
langdetect_chars = 4000      # characters of each document langdetect reads
seed = 0                     # langdetect seed

[shuffle]
num_shards = 4               # shards after the global shuffle (and token files before the merge)

[decontaminate]
eval_files = []              # JSON-lines evaluation sets ({"text": ...}) whose 13-grams are cut from the corpus
max_ngram = 13
min_ngram = 8
cut_chars = 200
min_fragment_chars = 200
max_pieces = 10
key_threshold = 10

[tokenize]
vocab_file = ""              # GPT-2 vocab.json; empty: train a byte-level BPE on the corpus
merge_file = ""              # GPT-2 merges.txt (with vocab_file)
vocab_size = 50257           # size of the trained BPE (when no vocab_file)
append_eod = true            # end every document with <|endoftext|>

[train]
enabled = true               # false: stop at the token files
nproc_per_node = 1           # processes on this machine (torchrun), as textmill train --nproc-per-node
resume = "fresh"             # "latest": start from the weights of the newest model trained on an earlier
                             # corpus (fresh optimizer and schedule, as --finetune); needs [tokenize] vocab_file
# Any other key is an option of `textmill train` (see its --help), with _ for -; true/false for flags.
# The workflow gives --data-path, --vocab-file, --merge-file, --save and --load itself.
model_preset = "tiny"
seq_length = 128
micro_batch_size = 8
global_batch_size = 16
train_iters = 300
lr = 0.003
lr_warmup_iters = 20
eval_interval = 100
eval_iters = 4
split = "95,5,0"

[evaluate]
lambada = []                 # LAMBADA-format files ({"text": ...} a line) to score the trained model on
strict = true                # the whole last word is the target (Megatron's --strict-lambada)

[export]
hf = true                    # write the trained model as a Hugging Face folder

[schedule]
at = "03:00"                 # daily time (HH:MM, the machine's clock) of the crontab line `textmill schedule` writes
"""


@dataclass(frozen=True)
class Section:
    """A TOML table; its numeric fields are checked against their declared ranges when it is built."""

    def __post_init__(self) -> None:
        check_ranges(self)


@dataclass(frozen=True)
class RunSection(Section):
    work_dir: Path = Path("work")
    urls: tuple[Path, ...] = (Path("urls"),)
    seed: int = ranged(1234, least=0, most=SEED_MAX)
    results_runs: int = ranged(10, least=1)


@dataclass(frozen=True)
class BlacklistSection(Section):
    domain_blacklist: tuple[Path, ...] = ()
    extension_blacklist: tuple[Path, ...] = ()


@dataclass(frozen=True)
class ScrapeSection(Section):
    concurrency: int = 32
    extract_workers: int = ranged(2, least=0)
    timeout_s: float = 30.0
    extract_timeout_s: float = 10.0
    max_bytes: int = 5 * 1024 * 1024
    max_redirects: int = 5
    allow_private_addresses: bool = False
    allow_networks: tuple[str, ...] = ()
    keep_html: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        self.stage_config()  # the scrape stage's own checks, now rather than when the stage runs

    def stage_config(self):
        from textmill.pipeline.scrape import ScrapeConfig

        return ScrapeConfig(concurrency=self.concurrency, timeout_s=self.timeout_s, extract_timeout_s=self.extract_timeout_s,
                            max_bytes=self.max_bytes, max_redirects=self.max_redirects,
                            allow_private=self.allow_private_addresses, allow_networks=self.allow_networks,
                            keep_html=self.keep_html)


@dataclass(frozen=True)
class ShuffleSection(Section):
    num_shards: int = ranged(4, least=1)


@dataclass(frozen=True)
class DecontaminateSection(DecontaminateConfig):
    eval_files: tuple[Path, ...] = ()

    def params(self) -> dict:
        """The n-gram settings; the evaluation files are inputs, fingerprinted by the stage."""
        return {k: v for k, v in super().params().items() if k != "eval_files"}


@dataclass(frozen=True)
class TokenizeSection(Section):
    vocab_file: Path | None = None
    merge_file: Path | None = None
    vocab_size: int = ranged(50257, least=257)  # 256 bytes and <|endoftext|> at least
    append_eod: bool = True


@dataclass(frozen=True)
class TrainSection(Section):
    enabled: bool = True
    nproc_per_node: int = ranged(1, least=1)
    resume: Literal["fresh", "latest"] = "fresh"
    options: tuple[str, ...] = ()  # command-line options of `textmill train`, checked when the config is read


WORKFLOW_TRAIN_OPTIONS = ("--data-path", "--vocab-file", "--merge-file", "--save", "--load", "--nproc-per-node")


def train_parser():
    """`textmill train`'s argument parser, reporting a bad [train] as an error rather than exiting."""
    import argparse

    from textmill.trainer.config import add_train_arguments

    class Parser(argparse.ArgumentParser):
        def error(self, message):
            raise TextmillError(f"[train] {message.replace('arguments', 'options')}")

    parser = Parser()
    add_train_arguments(parser)
    return parser


def train_options(raw: dict) -> tuple[str, ...]:
    """`textmill train` options from the [train] keys that are not the section's own, each checked against
    the trainer's argument parser (name, flag or value, and the value's type)."""
    parser = train_parser()
    options: list[str] = []
    for key, value in raw.items():
        option = "--" + key.replace("_", "-")
        action = parser._option_string_actions.get(option)
        if action is None:
            raise TextmillError(f"[train] {key}: `textmill train` has no option {option}")
        if option in WORKFLOW_TRAIN_OPTIONS:
            raise TextmillError(f"[train] {key}: the workflow sets {option} itself")
        if action.nargs == 0:  # a flag
            if not isinstance(value, bool):
                raise TextmillError(f"[train] {key} is a flag: true or false")
            options += [option] if value else []
            continue
        values = value if isinstance(value, list) else [value]
        if any(isinstance(v, (dict, list)) for v in values):
            raise TextmillError(f"[train] {key}: expected a value or a list of values")
        texts = [str(v).lower() if isinstance(v, bool) else str(v) for v in values]
        for text in texts:
            try:
                if action.type is not None:
                    action.type(text)
            except (TypeError, ValueError):
                raise TextmillError(f"[train] {key}: {text!r} is not a valid value") from None
            if action.choices is not None and text not in [str(c) for c in action.choices]:
                raise TextmillError(f"[train] {key}: {text!r} is not one of {', '.join(map(str, action.choices))}")
        options += [option, *texts]
    return tuple(options)


@dataclass(frozen=True)
class EvaluateSection(Section):
    lambada: tuple[Path, ...] = ()
    strict: bool = True


@dataclass(frozen=True)
class ExportSection(Section):
    hf: bool = True


@dataclass(frozen=True)
class ScheduleSection(Section):
    at: str = "03:00"

    def hour_minute(self) -> tuple[int, int]:
        hour, _, minute = self.at.partition(":")
        if not (hour.isdigit() and minute.isdigit() and int(hour) < 24 and int(minute) < 60 and len(minute) == 2):
            raise TextmillError(f"[schedule] at: {self.at!r} is not a time of day HH:MM")
        return int(hour), int(minute)


@dataclass(frozen=True)
class RunConfig:
    path: Path
    run: RunSection = field(default_factory=RunSection)
    blacklist: BlacklistSection = field(default_factory=BlacklistSection)
    scrape: ScrapeSection = field(default_factory=ScrapeSection)
    dedup: DedupConfig = field(default_factory=DedupConfig)
    clean: CleanConfig = field(default_factory=CleanConfig)
    shuffle: ShuffleSection = field(default_factory=ShuffleSection)
    decontaminate: DecontaminateSection = field(default_factory=DecontaminateSection)
    tokenize: TokenizeSection = field(default_factory=TokenizeSection)
    train: TrainSection = field(default_factory=TrainSection)
    evaluate: EvaluateSection = field(default_factory=EvaluateSection)
    export: ExportSection = field(default_factory=ExportSection)
    schedule: ScheduleSection = field(default_factory=ScheduleSection)


def section_values(name: str, cls, raw: dict, base: Path):
    """An instance of the section dataclass `cls` from its TOML table, each value checked against the
    type of the field's default; paths made absolute against `base`."""
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise TextmillError(f"[{name}] has no field {unknown[0]!r} (fields: {', '.join(known)})")
    values = {}
    for key, value in raw.items():
        default = known[key].default
        where = f"[{name}] {key}"
        if isinstance(default, tuple):
            paths = "Path" in str(known[key].type)
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise TextmillError(f"{where} must be a list of {'paths' if paths else 'strings'}")
            value = tuple(resolve(v, base) for v in value) if paths else tuple(value)
        elif isinstance(default, Path) or key in ("vocab_file", "merge_file"):
            if not isinstance(value, str):
                raise TextmillError(f"{where} must be a path (a string)")
            value = resolve(value, base) if value else None
        elif isinstance(default, bool):
            if not isinstance(value, bool):
                raise TextmillError(f"{where} must be true or false")
        elif isinstance(default, float):
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise TextmillError(f"{where} must be a number")
            value = float(value)
        elif isinstance(default, int):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TextmillError(f"{where} must be a whole number")
        elif isinstance(default, str) and not isinstance(value, str):
            raise TextmillError(f"{where} must be a string")
        values[key] = value
    try:
        return cls(**values)
    except TextmillError as exc:  # the range and stage checks name the field, not the table
        raise TextmillError(f"[{name}] {exc}") from None


def resolve(value: str, base: Path) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else (base / path).resolve()


def load_config(path: str | Path) -> RunConfig:
    path = Path(path).resolve()
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TextmillError(f"{path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise TextmillError(f"{path}: not UTF-8 text (byte {exc.start}); save the file as UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise TextmillError(f"{path}: not valid TOML ({exc})") from None
    sections = {f.name: f.default_factory for f in fields(RunConfig) if f.name != "path"}
    unknown = sorted(set(raw) - set(sections))
    if unknown:
        raise TextmillError(f"{path}: no section [{unknown[0]}] (sections: {', '.join(sections)})")
    values = {}
    for name, factory in sections.items():
        table = raw.get(name, {})
        if not isinstance(table, dict):
            raise TextmillError(f"{path}: {name} must be a [{name}] table")
        try:
            if name == "train":
                own = {k: v for k, v in table.items() if k in ("enabled", "nproc_per_node", "resume")}
                section = section_values(name, TrainSection, own, path.parent)
                options = train_options({k: v for k, v in table.items() if k not in own})
                values[name] = TrainSection(section.enabled, section.nproc_per_node, section.resume, options)
                continue
            values[name] = section_values(name, type(factory()), table, path.parent)
        except TextmillError as exc:
            raise TextmillError(f"{path}: {exc}") from None
    cfg = RunConfig(path=path, **values)
    if bool(cfg.tokenize.vocab_file) != bool(cfg.tokenize.merge_file):
        raise TextmillError(f"{path}: [tokenize] vocab_file and merge_file go together")
    if cfg.train.resume not in ("fresh", "latest"):
        raise TextmillError(f"{path}: [train] resume must be \"fresh\" or \"latest\", not {cfg.train.resume!r}")
    if cfg.train.resume == "latest" and not cfg.tokenize.vocab_file:
        raise TextmillError(f"{path}: [train] resume = \"latest\" needs [tokenize] vocab_file: a BPE trained on "
                            "each corpus gives each model its own vocabulary")
    try:
        cfg.schedule.hour_minute()
        if cfg.train.enabled:
            check_train(cfg)
    except TextmillError as exc:
        raise TextmillError(f"{path}: {exc}") from None
    return cfg


def check_train(cfg: RunConfig) -> None:
    """The trainer's own checks of its options (model, parallel layout, sequence length), with the
    vocabulary [tokenize] will give it, so that a bad [train] is refused before the corpus is built."""
    from textmill.trainer.config import check_args, unpadded_vocab_size

    args = train_parser().parse_args(["--data-path", "unused", *cfg.train.options])
    args.vocab_file, args.vocab_size = cfg.tokenize.vocab_file, cfg.tokenize.vocab_size
    try:
        check_args(args, cfg.train.nproc_per_node, unpadded_vocab_size(args))
    except TextmillError as exc:
        raise TextmillError(f"[train] {exc}") from None
