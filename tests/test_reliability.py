"""Bad input meets one clear answer (docs/RELIABILITY.md): a counted reject with its reason, or one
`textmill: error:` line and a non-zero exit; never a traceback, never something half-written that looks
finished. Each test drives the real `textmill` command."""

import json
import random

import pyarrow.parquet as pq

from textmill import synthweb

from conftest import TEST_DATA, run_cli, write_jsonl


def one_error_line(r, code=2) -> str:
    assert r.returncode == code, r.stdout[-2000:] + r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("textmill: error: "), r.stderr[-3000:]
    assert "Traceback" not in r.stdout + r.stderr
    return lines[0]


# -- lone surrogates ---------------------------------------------------------------------------------------
def docs_with_a_lone_surrogate(path):
    """Three documents; the second holds JSON's escape for a lone surrogate, which parses but is no text."""
    rng = random.Random(5)
    good = [json.dumps({"text": " ".join(synthweb.prose(rng, 3))}) for _ in range(2)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(good[0] + "\n" + '{"text": "broken \\ud800 half of a pair"}\n' + good[1] + "\n")
    return path


def test_a_lone_surrogate_is_a_counted_reject_in_every_document_stage(tmp_path):
    docs = docs_with_a_lone_surrogate(tmp_path / "in" / "docs.jsonl")
    lambada = str(TEST_DATA / "lambada_test.jsonl")
    for stage, extra in [("dedup", []), ("clean", ["--min-tokens", "1"]), ("shuffle", ["--num-shards", "1"]),
                         ("decontaminate", ["--eval-set", lambada])]:
        out = tmp_path / stage
        r = run_cli(stage, str(docs), "-o", str(out), *extra)
        assert r.returncode == 0, r.stderr[-3000:]
        assert "invalid_unicode 1" in r.stdout, r.stdout
        if stage != "shuffle":  # shuffle keeps no rejects shard of its own: its input is a stage's output
            [reject] = pq.read_table(out / "docs.rejects.parquet").to_pylist()
            assert reject["id"] == "docs.jsonl:2" and reject["reason"] == "invalid_unicode"


def test_a_lone_surrogate_is_a_counted_reject_in_tokenize(tmp_path):
    docs = docs_with_a_lone_surrogate(tmp_path / "docs.jsonl")
    r = run_cli("tokenize", "--input", str(docs), "--output-prefix", str(tmp_path / "owt"),
                "--vocab-file", str(TEST_DATA / "gpt2-vocab.json"), "--merge-file", str(TEST_DATA / "gpt2-merges.txt"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "3 documents in, 2 written, 1 rejected (invalid_unicode 1; first: docs.jsonl:2" in r.stdout, r.stdout
    [reject] = [json.loads(line) for line in (tmp_path / "owt.rejects.jsonl").read_text().splitlines()]
    assert reject["where"] == "docs.jsonl:2" and reject["reason"] == "invalid_unicode"


def test_a_lone_surrogate_in_an_evaluation_set_is_one_error_line(tmp_path, gpt2_ckpt):
    docs = write_jsonl(tmp_path / "docs.jsonl", [{"text": "plain words " * 20}])
    bad = docs_with_a_lone_surrogate(tmp_path / "eval.jsonl")
    line = one_error_line(run_cli("decontaminate", str(docs), "-o", str(tmp_path / "out"), "--eval-set", str(bad)))
    assert f"{bad}:2: a lone surrogate escape" in line
    line = one_error_line(run_cli("evaluate", "lambada", "--load", str(gpt2_ckpt), "--valid-data", str(bad)))
    assert f"{bad}:2: a lone surrogate escape" in line


# -- a clone runs on its own -----------------------------------------------------------------------------
def test_the_repository_is_self_contained():
    """Tests and benchmarks read nothing outside the repository, and every reference note the code cites
    is in docs/REFERENCE.md."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    code = [p for d in ("tests", "benchmarks", "textmill") for p in (root / d).rglob("*.py")]
    outside = ("../" + "shared", "parents" + "[2]")  # spelt in two parts so that this file does not match itself
    for path in code:
        assert not any(word in path.read_text() for word in outside), path
    headings = set(re.findall(r"^#+ (\d+(?:\.\d+)?)\.? ", (root / "docs" / "REFERENCE.md").read_text(), re.M))
    cited = {(p.name, n) for p in code for n in re.findall(r"REFERENCE\.md section (\d+(?:\.\d+)?)", p.read_text())}
    assert cited and all(n in headings for _, n in cited), sorted(cited)
