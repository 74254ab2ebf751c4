"""Work-folder keys, computed without running a task: made of settings and file contents, never of where the
folder lies; a changed setting changes its stage's key and those after it only; a URL list added at the end
leaves the earlier shards' keys as they were; the trained model is keyed by what [train] means, not by how
it is written."""

import shutil
from pathlib import Path

from support.runs import CONFIG, write_config
from textmill.workflows import (
    BlacklistShard,
    CleanShard,
    DedupShard,
    MergeDataset,
    ScrapeShard,
    Shuffle,
    TokenizeShard,
    TrainGPT,
    TrainTokenizer,
)

SETTINGS = dict(work="work", min_tokens=32, vocab_size=600, train="false", train_iters=20)


def run_folder(root: Path, lists: int = 3, **settings) -> str:
    """A run file with `lists` URL lists (no server: keys read the lists, they fetch nothing); its path."""
    (root / "urls").mkdir(parents=True)
    for k in range(lists):
        (root / "urls" / f"RS_{k}.txt").write_text("".join(f"http://127.0.0.1:9/article/{k}-{i}.html\n" for i in range(5)))
    (root / "eval.jsonl").write_text('{"text": "the old sailor repaired the boat"}\n')
    return str(write_config(root, **{**SETTINGS, **settings}))


def keys(config: str) -> dict[str, str]:
    tasks = {**{f"BlacklistShard{i}": BlacklistShard(config, i) for i in range(3)}, "ScrapeShard2": ScrapeShard(config, 2),
             "DedupShard0": DedupShard(config, 0), "CleanShard1": CleanShard(config, 1), "Shuffle": Shuffle(config),
             "TrainTokenizer": TrainTokenizer(config), "TokenizeShard0": TokenizeShard(config, 0),
             "MergeDataset": MergeDataset(config)}
    return {name: task.key() for name, task in tasks.items()}


def changed(a: dict, b: dict) -> list[str]:
    return [name for name in a if a[name] != b[name]]


def test_a_work_folders_keys_do_not_depend_on_where_it_lies(tmp_path):
    config = run_folder(tmp_path / "here")
    shutil.copytree(tmp_path / "here", tmp_path / "elsewhere")
    assert keys(config) == keys(str(tmp_path / "elsewhere" / "run.toml"))


def test_a_changed_setting_changes_the_keys_of_its_stage_and_those_after_it_only(tmp_path):
    base = keys(run_folder(tmp_path / "base"))
    cleanup = keys(run_folder(tmp_path / "cleanup", min_tokens=64))
    assert changed(base, cleanup) == ["CleanShard1", "Shuffle", "TrainTokenizer", "TokenizeShard0", "MergeDataset"]
    tokenizer = keys(run_folder(tmp_path / "tokenizer", vocab_size=700))
    assert changed(base, tokenizer) == ["TrainTokenizer", "TokenizeShard0", "MergeDataset"]


def test_the_stages_after_dedup_keep_one_folder_each(tmp_path):
    """Every shard of dedup, cleanup and the shuffle's scatter has the same key: one folder per stage, which
    datasets.load_dataset reads whole (the scrape's shards are keyed each by its own URL list)."""
    from textmill.workflows import ShuffleScatter

    config = run_folder(tmp_path / "run")
    for kind in (DedupShard, CleanShard, ShuffleScatter):
        assert len({kind(config, i).key() for i in range(3)}) == 1, kind.__name__
        assert len({kind(config, i).folder() for i in range(3)}) == 1, kind.__name__
    assert len({ScrapeShard(config, i).key() for i in range(3)}) == 3


def test_a_url_list_added_at_the_end_keeps_the_earlier_shards_keys(tmp_path):
    three = keys(run_folder(tmp_path / "three"))
    four = keys(run_folder(tmp_path / "four", lists=4))
    assert changed(three, four) == ["DedupShard0", "CleanShard1", "Shuffle", "TrainTokenizer", "TokenizeShard0",
                                    "MergeDataset"]


def big_list_run(root: Path, lines: list[str], urls_per_shard: int) -> str:
    """A run file with one URL list of `lines`, cut `urls_per_shard` a unit."""
    (root / "urls").mkdir(parents=True, exist_ok=True)
    (root / "urls" / "clean_urls.txt").write_text("".join(f"{line}\n" for line in lines))
    config = write_config(root, **SETTINGS)
    config.write_text(config.read_text().replace("[scrape]", f"[blacklist]\nurls_per_shard = {urls_per_shard}\n[scrape]"))
    return str(config)


def unit_keys(config: str) -> list[str]:
    from textmill.workflows.framework import num_shards
    from textmill.workflows.memos import run_config

    return [ScrapeShard(config, i).key() for i in range(num_shards(run_config(config)))]


def test_one_big_list_is_as_many_shards_as_its_units_and_lines_added_to_it_keep_the_earlier_keys(tmp_path):
    urls = [f"http://127.0.0.1:9/article/{i}.html" for i in range(45)]
    base = unit_keys(big_list_run(tmp_path / "base", urls[:25], 10))
    assert len(base) == 3 and len(set(base)) == 3
    assert [ScrapeShard(big_list_run(tmp_path / "base", urls[:25], 10), i).name() for i in range(3)] == [
        "clean_urls-00000", "clean_urls-00001", "clean_urls-00002"]
    grown = unit_keys(big_list_run(tmp_path / "grown", urls, 10))
    assert grown[:2] == base[:2] and grown[2] != base[2] and len(grown) == 5  # the last unit grew, two are new
    edited = unit_keys(big_list_run(tmp_path / "edited", urls[:12] + ["http://127.0.0.1:9/other.html"] + urls[13:25], 10))
    assert edited[0] == base[0] and edited[1] != base[1] and edited[2] != base[2]  # a first occurrence may move
    assert len(unit_keys(big_list_run(tmp_path / "fine", urls, 1))) == 45


def trained_key(root: Path, *train_lines: str) -> str:
    """The trained model's key for a run whose [train] table holds `train_lines`, in that order."""
    config = Path(run_folder(root, train="true"))
    corpus, _, rest = config.read_text().partition("[train]\n")
    config.write_text(corpus + "[train]\n" + "\n".join(train_lines) + "\n[evaluate]" + rest.partition("[evaluate]")[2])
    return TrainGPT(str(config)).key()


TRAIN = ['enabled = true', 'model_preset = "tiny"', "seq_length = 64", "micro_batch_size = 4", "global_batch_size = 8",
         "train_iters = 20", "lr = 0.003", "eval_iters = 2", 'split = "90,10,0"']


def test_the_same_train_table_written_otherwise_keys_the_same_model(tmp_path):
    assert "[train]\nenabled = {train}" in CONFIG  # the table trained_key replaces
    base = trained_key(tmp_path / "base", *TRAIN)
    assert trained_key(tmp_path / "reordered", *reversed(TRAIN)) == base
    assert trained_key(tmp_path / "defaults", *TRAIN, 'lr_decay_style = "cosine"', "seed = 1234", "min_lr = 0.0") == base
    assert trained_key(tmp_path / "int-for-float", *TRAIN, "min_lr = 0") == base
    assert trained_key(tmp_path / "logging", *TRAIN, "log_interval = 1", "eval_interval = 5", "save_interval = 10") == base
    # What changes the model changes the key: a model field, the schedule, the process count.
    assert trained_key(tmp_path / "dropout", *TRAIN, "hidden_dropout = 0.0") != base
    assert trained_key(tmp_path / "longer", *TRAIN[:5], "train_iters = 30", *TRAIN[6:]) != base
    assert trained_key(tmp_path / "processes", *TRAIN, "nproc_per_node = 2") != base
