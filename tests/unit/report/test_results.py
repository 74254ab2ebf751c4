"""The results table of the last runs, and what it calls a regression."""

import json

from textmill.report.record import RunRecord
from textmill.report.results import read_runs, results_markdown, results_rows, run_lines, write_results


def record(run, status="done", documents=100, valid_loss=3.0, accuracy=0.5) -> RunRecord:
    r = {"run": run, "status": status, "seconds": 12.3, "config": "run.toml", "started": run}
    if status == "done":
        r.update(funnel=[{"stage": "blacklist", "shards": 1, "input": 120, "kept": 100, "rejected": 20, "rows_out": 100,
                          "reasons": {"duplicate": 20}, "output": "/w/1-blacklist", "seconds": 1.0}],
                 corpus={"documents": documents, "tokens": 10 * documents, "dataset": "/w/corpus"},
                 train={"iterations": 10, "valid_loss": valid_loss, "lm_loss": 3.1, "checkpoints": "/w/ckpt"},
                 evaluate=[{"name": "lambada_test", "file": "/d/lambada_test.jsonl", "accuracy": accuracy,
                            "correct": int(accuracy * 10), "total": 10, "perplexity": 50.0}])
    return RunRecord.from_dict(r)


def test_a_worse_loss_accuracy_or_corpus_is_flagged_against_the_previous_finished_run():
    rows = results_rows([record("d1"), record("d2", valid_loss=2.9, accuracy=0.6), record("d3", status="failed"),
                         record("d4", documents=90, valid_loss=2.95, accuracy=0.4)])
    assert [r["regressions"] for r in rows[:3]] == ["", "", ""]
    # d4 is compared with d2 (d3 failed): loss up 0.05, accuracy down 20 points, 10 documents fewer.
    assert rows[3]["regressions"] == ("REGRESSION: documents -10; tokens -100; valid loss +0.0500; "
                                      "lambada_test accuracy -20.0 pts")
    table = results_markdown(rows).splitlines()
    assert table[0] == ("| run | status | urls | documents | tokens | iterations | valid_loss | lambada_test accuracy | "
                        "seconds | regressions |")
    assert table[2] == "| d1 | done | 120 | 100 | 1,000 | 10 | 3.0000 | 50.00% | 12 |  |"
    assert table[4] == "| d3 | failed | - | - | - | - | - | - | 12 |  |"


def test_results_keep_the_last_runs_and_the_run_summary_names_the_regression(tmp_path):
    records = [record(f"d{i}", valid_loss=3.0 - 0.1 * i) for i in range(5)] + [record("d5", valid_loss=3.5)]
    for r in records:
        (tmp_path / "runs" / r.run).mkdir(parents=True)
        (tmp_path / "runs" / r.run / "run.json").write_text(json.dumps(r.to_dict()))
    write_results(tmp_path, records, keep=3)
    md = (tmp_path / "results.md").read_text().splitlines()
    assert [line.split(" | ")[0] for line in md[-3:]] == ["| d3", "| d4", "| d5"]
    tsv = (tmp_path / "results.tsv").read_text().splitlines()
    assert len(tsv) == 7 and tsv[1].split("\t")[:4] == ["d0", "done", "120", "100"]  # every run, raw numbers
    lines = run_lines(records[-1], tmp_path / "runs" / "d5")
    assert "  REGRESSION: valid loss +0.9000 (since the previous run)" in lines
    # The funnel first, then what the run made.
    assert lines[:2] == ["textmill run: corpus funnel (in, kept and rejected at each stage, with reasons)",
                         "blacklist: 1 shard(s), 120 in, 100 kept, 20 rejected (duplicate 20) -> /w/1-blacklist [1.0s]"]
    assert "textmill run: done: 100 documents, 1,000 tokens -> /w/corpus.bin/.idx" in lines


def test_a_run_record_reads_back_what_it_wrote_and_what_an_older_textmill_wrote(tmp_path, capsys):
    finished = record("d1")
    assert RunRecord.from_dict(json.loads(json.dumps(finished.to_dict()))) == finished
    # An older record: no training, a key this textmill does not know; a record without its status is damaged.
    older = {"run": "d0", "status": "done", "seconds": 1.0, "config": "run.toml", "started": "d0", "funnel": [],
             "retired_key": 1}
    (tmp_path / "d0").mkdir()
    (tmp_path / "d0" / "run.json").write_text(json.dumps(older))
    (tmp_path / "d9").mkdir()
    (tmp_path / "d9" / "run.json").write_text(json.dumps({"run": "d9"}))
    [read] = read_runs(tmp_path)
    assert read.run == "d0" and read.train is None and read.evaluate == []
    assert "not a run record" in capsys.readouterr().err
