"""Reading other tools' documents (pipeline/documents.py): fields textmill does not read never cost a document."""

import json

import pyarrow as pa
import pyarrow.parquet as pq

from textmill.pipeline.documents import iter_documents

# Issue 62: each ended dedup, clean, quality and shuffle (a 5,000-digit number: ValueError, Python's limit on
# reading an int; metadata given as JSON text holding an escaped lone surrogate: UnicodeEncodeError writing the
# shard). Neither field is one textmill reads.
HUGE = "1" * 5000
LINES = [
    '{"id": "a", "text": "first words", "n": ' + HUGE + '}',
    '{"id": "b", "text": "second words", "metadata": ' + json.dumps(json.dumps({"k": "\ud800"}, ensure_ascii=True)) + '}',
    '{"id": "c", "text": "third words", "metadata": {"depth": -' + HUGE + '}}',
]


def test_a_huge_number_or_an_escaped_surrogate_in_a_field_textmill_does_not_read_is_carried_not_fatal(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(line + "\n" for line in LINES))
    rows = list(iter_documents(path))
    assert [(row["id"], reason) for row, reason in rows] == [("a", None), ("b", None), ("c", None)]
    metadata = [json.loads(row["metadata"]) for row, _ in rows]
    assert metadata[0] == {"n": HUGE}  # the digits kept, as a string: no Python int holds them
    assert metadata[1] == {"metadata": json.dumps({"k": "\ud800"}, ensure_ascii=True)}  # the text, as given
    assert metadata[2] == {"depth": "-" + HUGE}
    for row, _ in rows:
        row["metadata"].encode("utf-8")  # a shard can hold it
    table = pa.Table.from_pylist([{"id": "d", "text": "fourth", "metadata": json.dumps({"k": "\ud800"})}])
    pq.write_table(table, tmp_path / "other.parquet")  # another tool's Parquet, its metadata JSON text
    [(row, reason)] = list(iter_documents(tmp_path / "other.parquet"))
    assert reason is None and json.loads(row["metadata"]) == {"metadata": json.dumps({"k": "\ud800"})}
