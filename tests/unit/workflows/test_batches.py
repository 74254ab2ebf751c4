"""The graph the scheduler is handed (workflows/batches.py): each stage's tasks cut into at most [run]
tasks_per_stage batches of consecutive tasks, every task in exactly one; so the graph's size is set by that
setting, not by the input's units. (That a batch's failed task stops none of the others, and that a batch
run again redoes only its unfinished tasks: tests/integration/test_workflow.py.)"""

from collections import Counter
from pathlib import Path

from support.runs import write_config
from textmill.workflows import DedupBand, EndToEnd, ScrapeShard
from textmill.workflows.batches import Batch, GivenBatch, batch_of, batched
from textmill.workflows.framework import GivenFile, graph

SETTINGS = dict(work="work", min_tokens=32, vocab_size=600, train="false", train_iters=20)


def run_of(root: Path, units: int, per_stage: int) -> str:
    """A run file with one URL list of `units` lines, one a unit, and `per_stage` tasks per stage at most."""
    (root / "urls").mkdir(parents=True)
    (root / "urls" / "clean_urls.txt").write_text("".join(f"http://127.0.0.1:9/article/{i}.html\n" for i in range(units)))
    (root / "eval.jsonl").write_text('{"text": "the old sailor repaired the boat"}\n')
    config = write_config(root, **SETTINGS)
    config.write_text(config.read_text().replace("[run]\n", f"[run]\ntasks_per_stage = {per_stage}\n")
                      .replace("[scrape]", "[blacklist]\nurls_per_shard = 1\n[scrape]"))
    return str(config)


def test_each_task_of_a_stage_is_in_one_batch_of_consecutive_tasks(tmp_path):
    config = run_of(tmp_path, units=10, per_stage=4)
    spans = [(b.first, b.stop) for b in (batch_of(ScrapeShard(config, i), 4) for i in range(10))]
    assert spans == [(0, 2)] * 2 + [(2, 5)] * 3 + [(5, 7)] * 2 + [(7, 10)] * 3  # as even as 10 in 4 can be
    batch = batch_of(ScrapeShard(config, 4), 4)
    assert batch.tasks == [ScrapeShard(config, i) for i in range(2, 5)] and type(batch) is Batch
    assert {(b.first, b.stop) for b in (batch_of(ScrapeShard(config, i), 16) for i in range(10))} == {
        (i, i + 1) for i in range(10)}  # more batches allowed than tasks: a task each
    assert type(batch_of(GivenFile(config, 0), 4)) is GivenBatch  # given units are there or not: never run
    bands = DedupBand(config, 0).fan_count()
    assert len({b.task_id for b in batched([DedupBand(config, n) for n in range(bands)], 4)}) == 4
    assert batch_of(EndToEnd(config), 4).tasks == [EndToEnd(config)]  # a task that fans out by nothing: alone


def test_the_scheduled_graph_grows_with_tasks_per_stage_not_with_the_units(tmp_path):
    sizes = {}
    for units in (20, 200):
        config = run_of(tmp_path / str(units), units=units, per_stage=8)
        batches = graph(batched([EndToEnd(config)], 8))  # what Luigi is handed before anything ran
        per_family = Counter(b.family for b in batches)
        assert max(per_family.values()) <= 8, per_family
        # Every task of the graph, as far as it is known before anything ran, is in one of them.
        tasks = [t for t in graph([EndToEnd(config)])]
        held = Counter(t.task_id for b in batches for t in b.tasks)
        assert set(held) == {t.task_id for t in tasks} and set(held.values()) == {1}
        sizes[units] = len(tasks), len(batches)
    assert sizes[200][0] > 8 * sizes[20][0]  # a task per unit and stage...
    assert sizes[200][1] <= sizes[20][1] + len(per_family)  # ...but at most 8 batches per stage
