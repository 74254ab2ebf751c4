"""The stages from Python (textmill.api): a Pipeline runs each stage as its command does, a DocumentFilter of
one's own among them keeps or rejects documents with its reasons, and a rerun redoes only what changed."""

import dataclasses
import random

import pyarrow.parquet as pq
import pytest

from support.files import write_jsonl
from textmill.api import DocumentFilter, Pipeline
from textmill.demo import synthweb
from textmill.errors import TextmillError
from textmill.pipeline.shards import read_rows


@dataclasses.dataclass
class LongWords(DocumentFilter):
    """Rejects a document whose words are, on average, longer than `most` letters."""

    most: float = 6.0
    name = "long-words"
    reasons = {"long_words": "words longer than `most` letters on average"}

    def reject(self, document: dict) -> str | None:
        words = document["text"].split()
        return "long_words" if words and sum(map(len, words)) / len(words) > self.most else None


class Unguarded(LongWords):
    """LongWords as docs/python.md first had it: a blank text divides by zero."""

    def reject(self, document: dict) -> str | None:
        words = document["text"].split()
        return "long_words" if sum(map(len, words)) / len(words) > self.most else None


def documents(tmp_path):
    rng = random.Random(3)
    rows = [{"id": f"prose-{i}", "text": "\n\n".join(synthweb.prose(rng, 3))} for i in range(40)]
    long_words = ["incomprehensibilities", "institutionalization", "counterrevolutionaries", "electroencephalogram",
                  "uncharacteristically", "interdisciplinarity", "disproportionateness", "overcompensation"]
    rows += [{"id": f"jargon-{i}", "text": " ".join(rng.choice(long_words) for _ in range(80))} for i in range(5)]
    write_jsonl(tmp_path / "docs.jsonl", rows)
    return tmp_path / "docs.jsonl"


def test_a_pipeline_with_a_filter_of_ones_own_keeps_counts_and_reruns_what_changed(tmp_path, capsys):
    pipeline = (Pipeline(tmp_path / "work", inputs=[documents(tmp_path)])
                .dedup().filter(LongWords()).clean(min_tokens=16).shuffle(num_shards=2))
    dedup, filtered, clean, shuffled = pipeline.run()
    assert [c.stage for c in (dedup, filtered, clean, shuffled)] == ["dedup", "long-words", "clean", "shuffle"]
    assert dedup.input == 45 and filtered.input == dedup.kept and filtered.reasons == {"long_words": 5}
    assert clean.input == filtered.kept == dedup.kept - 5 and shuffled.kept == clean.kept
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith(f"long-words: 1 shard(s), {dedup.kept} in, {dedup.kept - 5} kept, 5 rejected (long_words 5)")
    rejects = pq.read_table(tmp_path / "work" / "2-long-words" / ".rejects" / "docs.parquet").to_pylist()
    assert sorted(r["id"] for r in rejects) == [f"jargon-{i}" for i in range(5)]
    assert {r["reason"] for r in rejects} == {"long_words"}
    kept = [row["id"] for shard in (tmp_path / "work" / "4-shuffle").glob("*.parquet") for row in read_rows(shard)]
    assert len(kept) == shuffled.kept and all(i.startswith("prose-") for i in kept)

    # Run again: nothing is redone; with other params, the filter's shard is, and what follows it.
    filtered_shard = tmp_path / "work" / "2-long-words" / "docs.parquet"
    before = filtered_shard.stat().st_mtime_ns
    assert [c.kept for c in pipeline.run(verbose=False)] == [dedup.kept, filtered.kept, clean.kept, shuffled.kept]
    assert filtered_shard.stat().st_mtime_ns == before
    again = Pipeline(tmp_path / "work", inputs=[documents(tmp_path)]).dedup().filter(LongWords(most=100.0))
    assert again.run(verbose=False)[-1].rejected == 0 and filtered_shard.stat().st_mtime_ns != before


def test_a_filter_that_raises_names_itself_the_shard_and_the_document_or_rejects_it_as_filter_error(tmp_path):
    write_jsonl(tmp_path / "docs.jsonl", [{"id": "prose", "text": "words of a page"}, {"id": "blank", "text": "  \n "}])
    with pytest.raises(TextmillError) as failed:
        Pipeline(tmp_path / "work", inputs=[tmp_path / "docs.jsonl"]).filter(Unguarded()).run(verbose=False)
    assert str(failed.value).startswith(f"filter 'long-words' raised ZeroDivisionError: division by zero on document "
                                        f"'blank' of {tmp_path / 'docs.jsonl'}")
    assert not (tmp_path / "work" / "1-long-words" / "docs.parquet").exists()  # nothing half-written looks finished

    rejecting = dataclasses.replace(Unguarded())
    rejecting.on_error = "reject"
    [counts] = Pipeline(tmp_path / "work", inputs=[tmp_path / "docs.jsonl"]).filter(rejecting).run(verbose=False)
    assert (counts.kept, counts.reasons) == (1, {"filter_error": 1})
    [guarded] = Pipeline(tmp_path / "again", inputs=[tmp_path / "docs.jsonl"]).filter(LongWords()).run(verbose=False)
    assert (guarded.kept, guarded.rejected) == (2, 0)  # the documented filter takes a blank text


def test_a_step_with_a_setting_it_does_not_have_is_one_error():
    with pytest.raises(TextmillError, match=r"clean has no setting 'min_token' \(its settings: \[clean\] in docs/"):
        Pipeline("work", inputs=["docs.jsonl"]).clean(min_token=3)
    with pytest.raises(TextmillError, match="filter\\(\\) takes a DocumentFilter, not function"):
        Pipeline("work").filter(lambda d: None)


def test_two_workers_filter_the_shards_to_the_same_bytes_as_one(tmp_path):
    """A filter's step over several shards by forked processes (which inherit the filter)."""
    import json

    lines = documents(tmp_path).read_text().splitlines()
    (tmp_path / "in").mkdir()
    for k in range(3):
        (tmp_path / "in" / f"part{k}.jsonl").write_text("\n".join(lines[k::3]) + "\n")
    written = {}
    for workers in (1, 2):
        work = tmp_path / f"work{workers}"
        [counts] = Pipeline(work, inputs=[tmp_path / "in"]).filter(LongWords()).run(workers=workers, verbose=False)
        assert counts.shards == 3 and counts.reasons == {"long_words": 5}
        written[workers] = {p.name: p.read_bytes() for p in (work / "1-long-words").glob("*.parquet")}
        assert all(json.loads(m.read_text())["params"]["most"] == 6.0 for m in (work / "1-long-words" / ".manifests").iterdir())
    assert written[1] == written[2] and len(written[1]) == 3

    # An input gone: its shard goes too, so that the next step does not read it.
    (tmp_path / "in" / "part2.jsonl").unlink()
    [counts] = Pipeline(tmp_path / "work1", inputs=[tmp_path / "in"]).filter(LongWords()).run(verbose=False)
    assert counts.shards == 2 and sorted(p.name for p in (tmp_path / "work1" / "1-long-words").glob("*.parquet")) == [
        "part0.parquet", "part1.parquet"]
    assert len(list((tmp_path / "work1" / "1-long-words" / ".manifests").iterdir())) == 2
