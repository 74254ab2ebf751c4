"""The corpus stages as a run reports them (workflows/stages.py): every task of the corpus part of the graph
belongs to one stage, whose record counts its time; a stage a run does not have is left out."""

from collections import Counter
from pathlib import Path

from support.runs import write_config
from textmill.demo.reddit import write_dumps
from textmill.workflows import EndToEnd
from textmill.workflows.framework import RunTask, graph
from textmill.workflows.memos import run_config
from textmill.workflows.stages import STAGES, run_stages

SETTINGS = dict(work="work", min_tokens=32, vocab_size=600, train="false", train_iters=20)
# The folders of the tasks after the corpus stages: the tokenizer, the token files, the model.
AFTER_THE_CORPUS = ("7-", "8-", "9-", "10-", "11-", "12-")


def run_file(root: Path, preset: str) -> str:
    (root / "urls").mkdir(parents=True)
    (root / "urls" / "RS_0.txt").write_text("".join(f"http://127.0.0.1:9/article/{i}.html\n" for i in range(6)))
    (root / "eval.jsonl").write_text('{"text": "the old sailor repaired the boat"}\n')
    config = write_config(root, **SETTINGS)
    tables = f"[blacklist]\nurls_per_shard = 2\n[quality]\npreset = \"{preset}\"\n[scrape]"
    config.write_text(config.read_text().replace("[scrape]", tables))
    return str(config)


def test_every_corpus_task_of_the_graph_belongs_to_one_stage(tmp_path):
    for preset in ("none", "gopher"):
        config = run_file(tmp_path / preset, preset)
        stages = run_stages(run_config(config))
        assert ("quality" in [s.name for s in stages]) == (preset != "none")
        tasks = [task for stage in stages for task in [*stage.shards(config), *stage.steps(config)]]
        counted = Counter(task.task_id for task in tasks)
        corpus = {task.task_id for task in graph([EndToEnd(config)])
                  if isinstance(task, RunTask) and not task.stage.startswith(AFTER_THE_CORPUS)}
        # The graph as known before anything ran (the scatters join it once the gathers are known: num_shards 2).
        assert corpus <= set(counted) and set(counted.values()) == {1}
        assert not any(task.stage.startswith(AFTER_THE_CORPUS) for task in tasks)


def test_the_stages_are_the_run_files_corpus_stages_in_order(tmp_path):
    """One list: the run file's stages (what a command may run, where its output lies) are the graph's, and each
    stage's shard tasks write into the folder the run file names."""
    from textmill.run_file import CORPUS_STAGES

    assert [stage.name for stage in STAGES] == list(CORPUS_STAGES)
    config = run_file(tmp_path, "gopher")
    from_dumps = tmp_path / "from-dumps.toml"  # the same run, started from Reddit's submission dumps
    from_dumps.write_text(Path(config).read_text().replace('urls = ["urls"]', 'reddit_dumps = ["dumps"]'))
    write_dumps([f"http://127.0.0.1:9/article/{i}.html" for i in range(6)], tmp_path / "dumps")
    for stage in STAGES:
        given = str(from_dumps) if stage.name == "reddit-urls" else config
        assert {task.stage for task in stage.shards(given)} == {CORPUS_STAGES[stage.name]}
