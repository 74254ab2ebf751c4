"""`textmill inspect`: records, reject reasons, the document a reject names, and token files decoded."""

from support.cli import run_cli
from support.files import TEST_DATA, write_jsonl

"""`textmill inspect`: a stage's shard, rejects, manifest and folder, and token files decoded back to text."""


TEXTS = ["The river runs past the old mill and on towards the sea, where the boats wait.",
         "Every morning the baker opens his shop before the sun is up and sells bread.",
         "Children walk to the school that stands at the end of the lane by the church."]


def inspect(*args: str) -> str:
    r = run_cli("inspect", *args)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_inspect_shows_records_reasons_and_the_document_a_reject_names(tmp_path):
    docs = [{"id": f"d{i}", "url": f"http://127.0.0.1/page-{i}", "text": t} for i, t in enumerate(TEXTS)]
    docs.append({"id": "d3", "url": "http://127.0.0.1/mirror", "text": TEXTS[0].upper()})
    write_jsonl(tmp_path / "docs.jsonl", docs)
    out = tmp_path / "dedup"
    assert run_cli("dedup", str(tmp_path / "docs.jsonl"), "-o", str(out)).returncode == 0

    kept = inspect(str(out / "docs.parquet"), "--head", "1")
    assert "Parquet, 3 rows; columns id (string), url (string)" in kept and "1 record(s) shown" in kept
    assert "id d0 | url http://127.0.0.1/page-0" in kept and f"text ({len(TEXTS[0])} characters):\n    {TEXTS[0]}" in kept
    assert "id d1" in inspect(str(out / "docs.parquet"), "--url", "http://127.0.0.1/page-1")
    assert "id d2 |" in inspect(str(out / "docs.parquet"), "--id", "d2")

    rejects = inspect(str(out / ".rejects" / "docs.parquet"))
    assert "rejected by reason: exact_duplicate_of 1" in rejects
    assert "rejected: exact_duplicate_of=d0 (kept: http://127.0.0.1/page-0)" in rejects
    assert "(none matches)" in inspect(str(out / ".rejects" / "docs.parquet"), "--reason", "near_duplicate_of")

    manifest = inspect(str(out / ".manifests" / "docs.json"))
    assert '"kept": 3' in manifest and "settings:" in manifest
    assert "all: 4 in, 3 kept, 1 rejected (exact_duplicate_of 1)" in inspect(str(out))
    assert "loose JSON lines, 4 records" in inspect(str(tmp_path / "docs.jsonl"))


def test_inspect_decodes_token_files_back_to_their_text(tmp_path):
    write_jsonl(tmp_path / "docs.jsonl", [{"text": t} for t in TEXTS])
    vocab = ("--vocab-file", str(TEST_DATA / "gpt2-vocab.json"), "--merge-file", str(TEST_DATA / "gpt2-merges.txt"))
    assert run_cli("tokenize", "--input", str(tmp_path / "docs.jsonl"), "--output-prefix", str(tmp_path / "tok"),
                   *vocab).returncode == 0
    prefix = tmp_path / "tok_text_document"
    decoded = inspect(str(prefix), *vocab, "--head", "2")
    assert "Megatron mmap token files, 3 documents, 3 sequences" in decoded
    assert f"    {TEXTS[0]}<|endoftext|>" in decoded and f"    {TEXTS[1]}<|endoftext|>" in decoded and TEXTS[2] not in decoded
    ids = inspect(f"{prefix}.bin", "--id", "2")
    assert "document 2:" in ids and "document 0:" not in ids and "--vocab-file and --merge-file decode" in ids
    for bad in (run_cli("inspect", str(tmp_path / "nothing")), run_cli("inspect", f"{prefix}.bin", "--id", "²"),
                run_cli("inspect", f"{prefix}.bin", "--id", "9" * 5000)):
        assert bad.returncode == 2 and bad.stderr.startswith("textmill: error:") and len(bad.stderr.splitlines()) == 1
