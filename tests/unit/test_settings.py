"""Each setting is defined once, on a dataclass field: the command line, the run file's example and the
dataclass agree on every field of every table, old spellings still work with a note, and renaming a
field leaves the work-folder keys of existing runs as they were."""

import tomllib
from dataclasses import fields
from pathlib import Path

import pytest

from textmill.cli import build_parser
from textmill.errors import TextmillError
from textmill.pipeline.stage_configs import DecontaminateConfig, DedupConfig, ScrapeConfig
from textmill.run_file import TABLES, TRAINER_SET_BY_WORKFLOW, example_config, load_config
from textmill.settings import from_namespace, kind_of, table_value
from textmill.trainer.train_config import TrainConfig

# The command whose options each settings dataclass gives, and what that command needs besides.
COMMANDS = {
    "BlacklistConfig": ["blacklist", "in", "-o", "out"],
    "ScrapeConfig": ["scrape", "in", "-o", "out"],
    "DedupConfig": ["dedup", "in", "-o", "out"],
    "CleanConfig": ["clean", "in", "-o", "out"],
    "ShuffleConfig": ["shuffle", "in", "-o", "out"],
    "DecontaminateConfig": ["decontaminate", "in", "-o", "out"],
    "TokenizeConfig": ["tokenize", "--input", "in", "--output-prefix", "out"],
    "TrainConfig": ["train", "--data-path", "d", "--train-iters", "300"],
}


BASE = Path("/base")  # the folder of the run file the example is read as


def against_base(value):
    """A default as the run file gives it: relative paths are relative to the file's folder."""
    if isinstance(value, tuple):
        return tuple(against_base(v) for v in value)
    return BASE / value if isinstance(value, Path) else value


def tables():
    """(table, dataclass, fields the table may not set) for every table, [train]'s trainer keys included."""
    for name, table in TABLES.items():
        yield name, table.settings, table.workflow_sets
    yield "train", TrainConfig, TRAINER_SET_BY_WORKFLOW


@pytest.mark.parametrize("name, cls, skipped", list(tables()), ids=[f"{t[0]}-{t[1].__name__}" for t in tables()])
def test_command_line_example_config_and_dataclass_agree_on_every_field(name, cls, skipped):
    text = example_config()
    example = tomllib.loads(text)[name]
    section = text.split(f"\n[{name}]\n")[1].split("\n[")[0]
    given = {"train_iters": 300, "data_path": ("d",)} if cls is TrainConfig else {}
    default = cls(**given)
    for f in fields(cls):
        value = getattr(default, f.name)
        assert f.metadata.get("help"), f"{cls.__name__}.{f.name} has no help"
        if f.name in skipped:
            assert f.name not in example
        elif value is None and kind_of(cls, f).base is not Path:  # TOML has no null: shown commented out
            assert f"\n# {f.name} =" in "\n" + section, f.name
        else:
            read = table_value(kind_of(cls, f), example[f.name], f.name, BASE)
            assert read == against_base(value if f.metadata.get("example") is None else f.metadata["example"]), f.name
    if cls.__name__ in COMMANDS:  # the workflow's own tables have no command
        parsed = build_parser().parse_args(COMMANDS[cls.__name__])
        assert [f.name for f in fields(cls) if not hasattr(parsed, f.name)] == []
        assert from_namespace(cls, parsed) == default


def test_every_table_field_appears_in_the_example_once():
    text = example_config()
    for name, cls, skipped in tables():
        section = text.split(f"\n[{name}]\n")[1].split("\n[")[0]
        for f in fields(cls):
            lines = [line for line in section.splitlines() if line.split(" =")[0].lstrip("# ") == f.name]
            assert len(lines) == (0 if f.name in skipped else 1), (name, f.name)


@pytest.mark.parametrize("argv, field, value, old, new", [
    (["scrape", "in", "-o", "out", "--timeout", "5"], "timeout_s", 5.0, "--timeout", "--timeout-s"),
    (["scrape", "in", "-o", "out", "--extract-timeout", "2"], "extract_timeout_s", 2.0, "--extract-timeout",
     "--extract-timeout-s"),
    (["scrape", "in", "-o", "out", "--allow-network", "10.0.0.5"], "allow_networks", ["10.0.0.5"], "--allow-network",
     "--allow-networks"),
    (["decontaminate", "in", "-o", "out", "--ngram", "11"], "max_ngram", 11, "--ngram", "--max-ngram"),
    (["decontaminate", "in", "-o", "out", "--eval-set", "e.jsonl"], "eval_files", [Path("e.jsonl")], "--eval-set",
     "--eval-files"),
])
def test_an_old_flag_still_works_with_a_one_line_note(argv, field, value, old, new, capsys):
    parsed = build_parser().parse_args(argv)
    assert getattr(parsed, field) == value
    assert capsys.readouterr().err.splitlines() == [
        f"textmill: note: {old} is deprecated and goes in the next release; use {new}"]


def test_an_old_toml_key_still_works_with_a_one_line_note(tmp_path, capsys):
    (tmp_path / "run.toml").write_text('[dedup]\nunit = "char"\n[train]\nenabled = false\n')
    assert load_config(tmp_path / "run.toml").dedup.shingle_unit == "char"
    assert capsys.readouterr().err.splitlines() == [
        "textmill: note: [dedup] unit is deprecated and goes in the next release; use shingle_unit"]


def test_renamed_fields_keep_the_work_folder_keys_of_earlier_versions():
    # What textmill 0.1 keyed these stages' folders by (dataclasses.asdict of its configs, scrape without
    # its concurrency): a rename must not make every existing run scrape and deduplicate again. The
    # extractor and the robots.txt check, added since, change what scrape writes, so they are keyed too, as
    # the exact-duplicate check is for dedup (it names rejects exact_duplicate_of).
    assert ScrapeConfig().params() == {
        "timeout_s": 30.0, "extract_timeout_s": 10.0, "max_bytes": 5242880, "max_redirects": 5, "allow_private": False,
        "allow_networks": (), "keep_html": False, "user_agent": "textmill/0.1 (corpus builder)",
        "extractor": "trafilatura", "robots_txt": False}
    assert DedupConfig().params() == {"shingle_size": 5, "unit": "word", "num_perm": 128, "bands": 16, "threshold": 0.7,
                                      "seed": 1, "exact_duplicates": True}
    assert DecontaminateConfig().params() == {"max_ngram": 13, "min_ngram": 8, "cut_chars": 200,
                                              "min_fragment_chars": 200, "max_pieces": 10, "key_threshold": 10}


def test_train_config_round_trips_through_its_command_line():
    config = TrainConfig(data_path=("0.3", "a", "0.7", "b"), train_iters=7, overlap_grad_reduce=False, bf16=True,
                         save=Path("ckpt"), recompute_granularity="full", lr=1e-3)
    parsed = build_parser().parse_args(["train", *config.to_argv()])
    assert from_namespace(TrainConfig, parsed) == config


def test_every_repeatable_option_starts_empty():
    # argparse appends a repeated option's values to its default list: a non-empty default would stay.
    for _, cls, _ in tables():
        for f in fields(cls):
            kind = kind_of(cls, f)
            if kind.many and not f.metadata.get("nargs") and cls.__name__ in COMMANDS:
                assert f.default == (), f"{cls.__name__}.{f.name}"


GPT3_175B_SH = """--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --num-layers 2 --hidden-size 64
    --num-attention-heads 4 --seq-length 64 --max-position-embeddings 64 --micro-batch-size 1 --global-batch-size 16
    --train-samples 146484 --lr-decay-samples 126953 --lr-warmup-samples 183 --lr 6.0e-5 --min-lr 6.0e-6
    --lr-decay-style cosine --log-interval 10 --eval-iters 40 --eval-interval 1000 --data-path 0.2 a 0.3 b 0.5 c
    --vocab-file v.json --merge-file m.txt --save-interval 1000 --save ckpt --load ckpt --split 98,2,0
    --clip-grad 1.0 --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95 --init-method-std 0.006
    --tensorboard-dir tb --fp16 --checkpoint-activations --use-flash-attn --tokenizer-type GPT2BPETokenizer"""


def test_megatrons_example_flag_lines_parse_and_mean_what_they_mean_there():
    config = from_namespace(TrainConfig, build_parser().parse_args(["train", *GPT3_175B_SH.split()]))
    # Megatron's sample-based schedule, in iterations of the global batch.
    assert (config.train_iters, config.lr_decay_iters, config.lr_warmup_iters) == (146484 // 16, 7935, 11)
    assert config.recompute == "full" and config.use_flash_attn and config.data_path == ("0.2", "a", "0.3", "b", "0.5", "c")
    assert (config.adam_beta2, config.init_method_std, config.weight_decay) == (0.95, 0.006, 0.1)
    # The config reads one way: what it gives back to a command line is iterations, and parses to itself.
    assert "--train-samples" not in config.to_argv()
    assert from_namespace(TrainConfig, build_parser().parse_args(["train", *config.to_argv()])) == config
    ramp = build_parser().parse_args(["train", *GPT3_175B_SH.split(), "--rampup-batch-size", "16", "16", "5859375"])
    with pytest.raises(TextmillError, match="--rampup-batch-size is not supported"):
        from_namespace(TrainConfig, ramp)
    both = build_parser().parse_args(["train", *GPT3_175B_SH.split(), "--train-iters", "5"])
    with pytest.raises(TextmillError, match="--train-samples and --train-iters exclude each other"):
        from_namespace(TrainConfig, both)
