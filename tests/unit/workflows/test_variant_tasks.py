"""The variants of an ablation (textmill/variants.py, workflows/variant_tasks.py): each is the run file with its
overrides; a stage a variant does not change is one task in every variant's graph, run once."""

import pytest

from support.runs import ABLATION, write_config
from textmill.errors import TextmillError
from textmill.run_file import load_config
from textmill.variants import variant_config
from textmill.workflows import CleanShard, DedupShard, MergeDataset, ScrapeShard, TrainGPT
from textmill.workflows.run_records import run_graph


def ablation_run(root) -> str:
    (root / "urls").mkdir(parents=True)
    for k in range(2):
        (root / "urls" / f"RS_{k}.txt").write_text("".join(f"http://127.0.0.1:9/article/{k}-{i}.html\n" for i in range(5)))
    (root / "eval.jsonl").write_text('{"text": "the old sailor repaired the boat"}\n')
    path = write_config(root, work="work", min_tokens=32, vocab_size=600, train="true", train_iters=20)
    path.write_text(path.read_text() + ABLATION)
    return str(path)


def test_a_variant_is_the_run_file_with_its_overrides_and_its_seed(tmp_path):
    config = ablation_run(tmp_path)
    long = load_config(variant_config(config, "long-documents", 2))
    assert (long.clean.min_tokens, long.trainer.seed, long.variant) == (600, 2, "long-documents@2")
    assert load_config(config).clean.min_tokens == 32 and load_config(config).ablation.names == ["default", "long-documents"]
    with pytest.raises(TextmillError, match="no variant 'short'"):
        load_config(variant_config(config, "short", 1))
    with pytest.raises(TextmillError, match="seed 3 is not one of"):
        load_config(variant_config(config, "default", 3))


def test_a_stage_a_variant_does_not_change_is_one_task_in_every_variants_graph(tmp_path):
    config = ablation_run(tmp_path)
    default1, default2, long1, long2 = (variant_config(config, name, seed)
                                        for name in ("default", "long-documents") for seed in (1, 2))
    for variant in (default2, long1, long2):  # before cleanup: the baseline's first seed's tasks
        assert ScrapeShard(variant, 1) is ScrapeShard(default1, 1)
        assert DedupShard(variant, 0).config == default1
    assert MergeDataset(default2).config == default1  # the seed changes the model, not the corpus
    assert CleanShard(long2, 0).config == long1 != default1  # a changed stage is the variant's own, once
    assert MergeDataset(long2).config == long1
    trained = {TrainGPT(variant).config for variant in (default1, default2, long1, long2)}
    assert trained == {default1, default2, long1, long2}  # each variant's model, each seed's
    graphs = [run_graph(variant) for variant in (default1, default2, long1, long2)]
    ids = [{task.task_id for task in graph} for graph in graphs]
    every, shared = set().union(*ids), set.intersection(*ids)
    assert len(every) < sum(len(i) for i in ids)
    assert {task.task_family for graph in graphs for task in graph if task.task_id in shared} >= {
        "BlacklistShard", "ScrapeShard", "DedupShard"}
    scrapes = {task.task_id for graph in graphs for task in graph if task.task_family == "ScrapeShard"}
    assert len(scrapes) == 2  # two units, scraped once for all four


def test_every_variant_trains_the_same_model_on_the_same_number_of_tokens(tmp_path):
    """A variant changes the corpus's chain, never the proxy model or its token budget: [train] (and what
    measures it) is the run file's for every variant, but for the seed."""
    config = ablation_run(tmp_path)
    trainers = [load_config(variant_config(config, name, seed)).trainer for name in ("default", "long-documents")
                for seed in (1, 2)]
    budget = {(t.model_preset, t.train_iters, t.global_batch_size, t.seq_length) for t in trainers}
    assert budget == {("tiny", 20, 8, 64)} and [t.seed for t in trainers] == [1, 2, 1, 2]
    text = (tmp_path / "run.toml").read_text()
    for table, overrides in (("train", "train_iters = 40"), ("evaluate", "strict = false"), ("ablation", "seeds = [3]")):
        (tmp_path / "run.toml").write_text(text + f"[ablation.variants.other.{table}]\n{overrides}\n")
        with pytest.raises(TextmillError, match=rf"\[ablation.variants.other\] cannot change \[{table}\]"):
            load_config(config)
