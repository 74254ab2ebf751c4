import random

import pyarrow.parquet as pq
import pytest

from textmill.demo import synthweb
from textmill.errors import TextmillError
from textmill.pipeline.decontaminate import DecontaminateConfig, decontaminate_shards, words_with_spans

from conftest import TEST_DATA, write_jsonl


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
