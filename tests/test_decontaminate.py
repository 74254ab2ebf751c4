import random

import pyarrow.parquet as pq
import pytest

from textmill.demo import synthweb
from textmill.errors import TextmillError
from textmill.pipeline.decontaminate import (DecontaminateConfig, count_matches, decontaminate_shard, eval_ngrams,
                                             read_selected, select_from_counts, summary, words_with_spans, write_counts)
from textmill.workflows.commands import run_stage

from conftest import TEST_DATA, write_jsonl


def decontaminate_shards(shards, output, cfg):
    """`textmill decontaminate` as its tasks run it: the output shards' manifests and its summary."""
    return run_stage("decontaminate", shards, output, {"decontaminate": cfg})


def test_cuts_eval_passages_and_counts(tmp_path):
    rng = random.Random(4)
    evals = [synthweb.paragraph(rng, 4) for _ in range(12)]
    write_jsonl(tmp_path / "eval.jsonl", [{"text": t} for t in evals])
    clean = lambda n: " ".join(synthweb.prose(rng, n))  # noqa: E731
    rows = [
        {"id": "untouched", "text": clean(4)},
        {"id": "middle", "text": clean(3) + " " + evals[0] + " " + clean(3)},
        {"id": "only", "text": evals[1]},
        {"id": "many", "text": " ".join(clean(2) + " " + e for e in evals[:12]) + " " + clean(2)},
    ]
    # the same eval passage in 10 training documents is a common phrase there: not used for cutting
    rows += [{"id": f"common{i}", "text": clean(2) + " " + evals[11] + " " + clean(2)} for i in range(10)]
    write_jsonl(tmp_path / "in" / "d.jsonl", rows)
    [m], info = decontaminate_shards([tmp_path / "in" / "d.jsonl"], tmp_path / "out", DecontaminateConfig(eval_files=(tmp_path / "eval.jsonl",)))
    kept = pq.read_table(tmp_path / "out" / "d.parquet").to_pylist()
    rejects = {r["id"]: r["reason"] for r in pq.read_table(tmp_path / "out" / "d.rejects.parquet").to_pylist()}
    assert rejects == {"only": "contaminated_no_clean_fragment", "many": "contaminated_too_many_pieces"}
    pieces = [r for r in kept if r["id"].startswith("middle-")]
    assert [p["id"] for p in pieces] == ["middle-0", "middle-1"]
    eval_words = " ".join(w for w, _, _ in words_with_spans(evals[0]))
    for p in pieces:
        assert len(p["text"]) > 200
        assert eval_words[:60] not in " ".join(w for w, _, _ in words_with_spans(p["text"]))
    assert {r["id"] for r in kept} >= {"untouched"} | {f"common{i}" for i in range(10)}
    assert m["counts"]["input"] == len(rows) and m["counts"]["kept"] + m["counts"]["rejected"] == len(rows)
    assert m["documents_touched"] == info["documents_touched"] == 3
    assert info["characters_removed"] > len(evals[0]) + len(evals[1])


def test_bad_eval_set_is_a_clear_error(tmp_path):
    write_jsonl(tmp_path / "in" / "d.jsonl", [{"id": "a", "text": "hello"}])
    (tmp_path / "eval.jsonl").write_text('{"text": "fine text here"}\n{oops\n')
    with pytest.raises(TextmillError, match="eval.jsonl:2: not valid JSON"):
        decontaminate_shards([tmp_path / "in" / "d.jsonl"], tmp_path / "out", DecontaminateConfig(eval_files=(tmp_path / "eval.jsonl",)))


def test_real_lambada_passage_is_removed(tmp_path):
    import json

    lines = (TEST_DATA / "lambada_test.jsonl").read_text().splitlines()
    passage = json.loads(lines[17])["text"]
    rng = random.Random(8)
    filler = " ".join(synthweb.prose(rng, 3))
    write_jsonl(tmp_path / "in" / "d.jsonl", [{"id": "x", "text": filler + " " + passage + " " + filler}])
    [m], _ = decontaminate_shards([tmp_path / "in" / "d.jsonl"], tmp_path / "out", DecontaminateConfig(eval_files=(TEST_DATA / "lambada_test.jsonl",)))
    assert m["documents_touched"] == 1
    text = " ".join(r["text"] for r in pq.read_table(tmp_path / "out" / "d.parquet").to_pylist())
    assert passage[:100] not in text


def test_per_shard_steps_give_what_one_pass_gives(tmp_path):
    # The "seen fewer than key_threshold times" rule is over the whole corpus: a passage common across
    # shards (5 + 5 copies, threshold 8) is not cut, though no single shard holds 8 of them.
    rng = random.Random(6)
    evals = [synthweb.paragraph(rng, 4) for _ in range(4)]
    write_jsonl(tmp_path / "eval.jsonl", [{"text": t} for t in evals])
    clean = lambda n: " ".join(synthweb.prose(rng, n))  # noqa: E731
    for s in range(2):
        rows = [{"id": f"{s}-rare", "text": clean(3) + " " + evals[s] + " " + clean(3)}]
        rows += [{"id": f"{s}-common{i}", "text": clean(2) + " " + evals[3] + " " + clean(2)} for i in range(5)]
        write_jsonl(tmp_path / "in" / f"s{s}.jsonl", rows + [{"id": f"{s}-plain", "text": clean(4)}])
    shards = sorted((tmp_path / "in").iterdir())
    cfg = DecontaminateConfig(eval_files=(tmp_path / "eval.jsonl",), key_threshold=8)
    manifests, info = decontaminate_shards(shards, tmp_path / "whole", cfg)

    ngrams = eval_ngrams(cfg.eval_files, cfg)
    counts = [tmp_path / "steps" / f"{s.stem}.counts.json" for s in shards]
    for shard, path in reversed(list(zip(shards, counts))):
        write_counts(count_matches(shard, ngrams), path)
    selected = select_from_counts(counts, cfg, tmp_path / "steps" / "selected.json")
    chosen = read_selected(tmp_path / "steps" / "selected.json")
    steps = [decontaminate_shard(s, tmp_path / "steps" / f"{s.stem}.parquet", chosen, cfg) for s in shards]
    for s in shards:
        for name in (f"{s.stem}.parquet", f"{s.stem}.rejects.parquet"):
            assert (tmp_path / "steps" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes()
    assert summary(selected, steps).items() <= info.items() and info["documents_touched"] == 2
    assert sum(m["counts"]["kept"] for m in manifests) == 14  # the 10 common ones untouched, the 2 rare ones cut
