"""Documents from datatrove and Dolma (JSON lines, gzipped or not, or Parquet with `id`, `text`, `metadata`)
keep their metadata through every stage, and `--output-format jsonl.gz` writes what datatrove reads back."""

import gzip
import json
import random

import pyarrow.parquet as pq

from support.cli import run_cli
from support.stages import load_with_datasets
from textmill.demo import synthweb
from textmill.pipeline.documents import iter_documents
from textmill.pipeline.shards import list_shards


def datatrove_documents(count: int, rng: random.Random):
    from datatrove.data import Document

    return [Document(text="\n\n".join(synthweb.prose(rng, 4)), id=f"dt{i}",
                     metadata={"url": f"http://127.0.0.1/dt/{i}", "dump": "CC-MAIN-2024-10", "score": round(i / 7, 4)})
            for i in range(count)]


def write_inputs(folder) -> dict[str, dict]:
    """datatrove's own JSONL (gzip) and Parquet writers, and a Dolma-style .json.gz file; the metadata each
    document should keep, by id."""
    from datatrove.pipeline.writers import JsonlWriter, ParquetWriter

    rng = random.Random(11)
    docs = datatrove_documents(24, rng)
    docs[5].text = docs[3].text  # an exact duplicate, for dedup to reject
    with JsonlWriter(str(folder), output_filename="dt-${rank}.jsonl.gz") as writer:
        for doc in docs[:12]:
            writer.write(doc, rank=0)
    with ParquetWriter(str(folder), output_filename="dt-${rank}.parquet") as writer:
        for doc in docs[12:]:
            writer.write(doc, rank=0)
    expected = {d.id: {k: v for k, v in d.metadata.items() if k != "url"} for d in docs}
    with gzip.open(folder / "dolma.json.gz", "wt", encoding="utf-8") as f:
        for i in range(6):
            record = {"id": f"dolma{i}", "text": "\n\n".join(synthweb.prose(rng, 2)), "source": "common-crawl",
                      "added": "2024-03-01T00:00:00Z", "metadata": {"lang": "en", "warc": f"w{i}"}}
            f.write(json.dumps(record) + "\n")
            expected[record["id"]] = {"lang": "en", "warc": f"w{i}", "source": "common-crawl",
                                      "added": "2024-03-01T00:00:00Z"}
    return expected


def test_metadata_survives_every_stage_and_jsonl_gz_reads_back_in_datatrove(tmp_path):
    from datatrove.pipeline.readers import JsonlReader

    expected = write_inputs(tmp_path / "in")
    (tmp_path / "eval.jsonl").write_text("")  # decontaminate needs an evaluation set; one overlap is made below
    steps = [("clean", tmp_path / "in", ["--min-tokens", "8"]), ("quality", None, ["--preset", "c4"]),
             ("dedup", None, []), ("shuffle", None, ["--num-shards", "2"]),
             ("decontaminate", None, ["--eval-files", str(tmp_path / "eval.jsonl"), "--output-format", "jsonl.gz"])]
    previous = None
    for stage, given, options in steps:
        if stage == "decontaminate":  # a 13-gram of one document is an evaluation text: it is cut in pieces
            some = pq.read_table(list_shards([previous])[0]).to_pylist()[0]
            (tmp_path / "eval.jsonl").write_text(json.dumps({"text": " ".join(some["text"].split()[40:60])}) + "\n")
        r = run_cli(stage, str(given or previous), "-o", str(tmp_path / stage), *options)
        assert r.returncode == 0, r.stderr
        previous = tmp_path / stage

    final = tmp_path / "decontaminate"
    shards = list_shards([final])
    assert [p.name for p in shards] == ["part-00000.jsonl.gz", "part-00001.jsonl.gz"]  # in place of the Parquet shards
    rows = [row for shard in shards for row, bad in iter_documents(shard) if not bad]
    base_ids = {row["id"] if row["id"] in expected else row["id"].rsplit("-", 1)[0] for row in rows}
    assert any(row["id"] not in expected for row in rows)  # a document was cut (into pieces <id>-<k>)
    assert "dt5" not in base_ids and len(base_ids) >= 20
    for row in rows:
        base = row["id"] if row["id"] in expected else row["id"].rsplit("-", 1)[0]
        assert json.loads(row["metadata"]) == expected[base], row["id"]
        assert row["url"] == (f"http://127.0.0.1/dt/{base[2:]}" if base.startswith("dt") else None)

    assert load_with_datasets(final, tmp_path / "hf", "json") == sorted(row["id"] for row in rows)
    read = {doc.id: doc for doc in JsonlReader(str(final), glob_pattern="*.jsonl.gz")()}
    assert sorted(read) == sorted(row["id"] for row in rows)
    for row in rows:
        doc = read[row["id"]]
        assert doc.text == row["text"]
        assert {k: v for k, v in doc.metadata.items() if k != "file_path"} == {
            **json.loads(row["metadata"]), **{k: v for k, v in row.items() if k not in ("id", "text", "metadata")
                                             and v is not None}}

    parquet = run_cli("decontaminate", str(tmp_path / "shuffle"), "-o", str(final), "--eval-files",
                      str(tmp_path / "eval.jsonl"))  # the same stage back to Parquet: nothing runs again
    assert parquet.returncode == 0 and "done in" not in parquet.stderr, parquet.stderr
    assert [p.name for p in list_shards([final])] == ["part-00000.parquet", "part-00001.parquet"]
    assert not list(final.glob("*.jsonl.gz"))
    assert [r for s in list_shards([final]) for r in pq.read_table(s).to_pylist()] == rows
