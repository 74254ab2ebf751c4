"""Bad input meets one clear answer (docs/RELIABILITY.md): a counted reject with its reason, or one
`textmill: error:` line and a non-zero exit; never a traceback, never something half-written that looks
finished. Each test drives the real `textmill` command."""

import json
import random
import subprocess

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from support.cli import run_cli
from support.files import TEST_DATA, write_jsonl
from textmill.demo import synthweb


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
                         ("decontaminate", ["--eval-files", lambada])]:
        out = tmp_path / stage
        r = run_cli(stage, str(docs), "-o", str(out), *extra)
        assert r.returncode == 0, r.stderr[-3000:]
        assert "invalid_unicode 1" in r.stdout, r.stdout
        if stage != "shuffle":  # shuffle keeps no rejects shard of its own: its input is a stage's output
            [reject] = pq.read_table(out / ".rejects" / "docs.parquet").to_pylist()
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
    line = one_error_line(run_cli("decontaminate", str(docs), "-o", str(tmp_path / "out"), "--eval-files", str(bad)))
    assert f"{bad}:2: a lone surrogate escape" in line
    line = one_error_line(run_cli("evaluate", "lambada", "--load", str(gpt2_ckpt), "--valid-data", str(bad)))
    assert f"{bad}:2: a lone surrogate escape" in line


def test_fields_textmill_does_not_read_never_end_a_stage(tmp_path):
    """Issue 62: an extra field holding a 5,000-digit number ended blacklist, dedup, clean, quality, shuffle,
    decontaminate and tokenize (ValueError: Python's limit on reading an int), on every rerun; metadata given as
    JSON text holding an escaped lone surrogate ended dedup, clean, quality and shuffle (UnicodeEncodeError).
    Every document is kept now, and every URL."""
    rng = random.Random(6)
    huge = "1" * 5000
    surrogate = json.dumps(json.dumps({"k": "\ud800"}, ensure_ascii=True))
    docs = tmp_path / "in" / "docs.jsonl"
    docs.parent.mkdir()
    docs.write_text("".join('{"id": "d%d", "text": %s, "n": %s, "metadata": %s}\n'
                            % (i, json.dumps(" ".join(synthweb.prose(rng, 3))), huge, surrogate) for i in range(4)))
    lambada = str(TEST_DATA / "lambada_test.jsonl")
    for stage, extra in [("dedup", []), ("clean", ["--min-tokens", "1"]), ("quality", ["--preset", "c4"]),
                         ("shuffle", ["--num-shards", "1"]), ("decontaminate", ["--eval-files", lambada])]:
        r = run_cli(stage, str(docs), "-o", str(tmp_path / stage), *extra)
        assert r.returncode == 0 and "Traceback" not in r.stderr, (stage, r.stderr[-3000:])
        rows = pq.read_table(tmp_path / stage).to_pylist()
        assert len(rows) == 4 and json.loads(rows[0]["metadata"])["n"] == huge, (stage, r.stdout)
    r = run_cli("tokenize", "--input", str(docs), "--output-prefix", str(tmp_path / "owt"),
                "--vocab-file", str(TEST_DATA / "gpt2-vocab.json"), "--merge-file", str(TEST_DATA / "gpt2-merges.txt"))
    assert r.returncode == 0 and "4 documents in, 4 written" in r.stdout, r.stdout + r.stderr[-3000:]
    urls = tmp_path / "urls.jsonl"
    urls.write_text('{"url": "http://a.example/long-enough", "n": %s}\n{"url": "http://b.example/page"}\n' % huge)
    r = run_cli("blacklist", str(urls), "-o", str(tmp_path / "blacklist"))
    assert r.returncode == 0 and "2 kept" in r.stdout, r.stdout + r.stderr[-3000:]


# -- one error line, not a traceback ---------------------------------------------------------------------
def some_docs(path, n=40):
    rng = random.Random(9)
    return write_jsonl(path, [{"id": f"d{i}", "text": " ".join(synthweb.prose(rng, 2))} for i in range(n)])


def assert_nothing_finished(folder):
    assert not list(folder.glob(".manifests/*.json")) if folder.exists() else True


def test_bad_settings_on_the_command_line_are_one_line(tmp_path):
    docs = some_docs(tmp_path / "docs.jsonl")
    (tmp_path / "urls.txt").write_text("http://example.com/a-page.html\n")
    assert run_cli("blacklist", str(tmp_path / "urls.txt"), "-o", str(tmp_path / "urls")).returncode == 0
    line = one_error_line(run_cli("scrape", str(tmp_path / "urls"), "-o", str(tmp_path / "pages"), "--concurrency", "0"))
    assert line == "textmill: error: concurrency must be at least 1, not 0"
    line = one_error_line(run_cli("dedup", str(docs), "-o", str(tmp_path / "dd"), "--bands", "0"))
    assert line == "textmill: error: bands must be at least 1, not 0"
    assert_nothing_finished(tmp_path / "pages")
    assert_nothing_finished(tmp_path / "dd")


def test_a_shard_of_the_wrong_kind_is_one_line_saying_what_it_holds(tmp_path):
    (tmp_path / "urls.txt").write_text("http://example.com/a-page.html\nhttp://example.org/another-page.html\n")
    assert run_cli("blacklist", str(tmp_path / "urls.txt"), "-o", str(tmp_path / "urls")).returncode == 0
    line = one_error_line(run_cli("dedup", str(tmp_path / "urls"), "-o", str(tmp_path / "x")))
    assert "urls-00000.parquet holds URL rows, not document rows" in line and "`textmill scrape`" in line
    assert_nothing_finished(tmp_path / "x")
    docs = some_docs(tmp_path / "docs.jsonl")
    assert run_cli("clean", str(docs), "-o", str(tmp_path / "clean"), "--min-tokens", "1").returncode == 0
    line = one_error_line(run_cli("scrape", str(tmp_path / "clean"), "-o", str(tmp_path / "y")))
    assert "docs.parquet holds document rows, not URL rows" in line
    pq.write_table(pa.table({"title": ["a"], "body": [1]}), tmp_path / "odd.parquet")
    line = one_error_line(run_cli("clean", str(tmp_path / "odd.parquet"), "-o", str(tmp_path / "z")))
    assert "odd.parquet holds columns title, body, not document rows" in line
    assert_nothing_finished(tmp_path / "z")


def test_a_parquet_shard_damaged_in_the_middle_is_one_line(tmp_path):
    docs = some_docs(tmp_path / "docs.jsonl", n=3000)  # several row groups
    assert run_cli("clean", str(docs), "-o", str(tmp_path / "clean"), "--min-tokens", "1").returncode == 0
    shard = tmp_path / "clean" / "docs.parquet"
    data = bytearray(shard.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 4096] = bytes(4096)  # zeros over a stretch of column data
    damaged = tmp_path / "damaged" / "docs.parquet"
    damaged.parent.mkdir()
    damaged.write_bytes(bytes(data))
    line = one_error_line(run_cli("dedup", str(damaged), "-o", str(tmp_path / "dd")))
    assert f"{damaged} is damaged" in line and "re-running the stage that made it" in line
    assert_nothing_finished(tmp_path / "dd")
    assert not list((tmp_path / "dd").glob("*.parquet")) if (tmp_path / "dd").exists() else True


def test_a_manifest_that_is_not_json_is_one_line(tmp_path):
    docs = some_docs(tmp_path / "docs.jsonl")
    assert run_cli("clean", str(docs), "-o", str(tmp_path / "clean"), "--min-tokens", "1").returncode == 0
    (tmp_path / "clean" / ".manifests" / "docs.json").write_text('{"stage": "clean", "counts": {"inp')
    r = run_cli("dedup", str(tmp_path / "clean"), "-o", str(tmp_path / "dd"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines[0] == f"textmill: {tmp_path / 'clean' / '.manifests' / 'docs.json'} is damaged (not a whole JSON object); " \
                       "its shard counts as unfinished"
    assert lines[1:] == [f"textmill: error: {tmp_path / 'clean'}: shard(s) docs.parquet have no whole manifest (an "
                         "interrupted run, or a damaged file); re-run the stage that writes them"]


def test_a_config_file_that_is_not_utf8_is_one_line(tmp_path):
    (tmp_path / "run.toml").write_bytes(b'[run]\nwork_dir = "w\xe9rk"\n')
    line = one_error_line(run_cli("run", str(tmp_path / "run.toml")))
    assert line == f"textmill: error: {tmp_path / 'run.toml'}: not UTF-8 text (byte 19); save the file as UTF-8"
    assert not (tmp_path / "w").exists()


def test_a_malformed_hugging_face_config_is_one_line(tmp_path):
    folder = tmp_path / "hf"
    folder.mkdir()
    for text, expected in [("{not json", "config.json: Expecting property name"),
                           ('["a", "list"]', "config.json: not a Hugging Face model config"),
                           ('{"model_type": "gpt2", "vocab_size": 100}', "config.json: malformed, it has no 'n_layer'"),
                           ('{"model_type": "gpt2", "vocab_size": 100, "n_layer": "two", "n_embd": 8, "n_head": 2, '
                            '"n_positions": 16}', "num_layers must be a positive whole number, not 'two'")]:
        (folder / "config.json").write_text(text)
        line = one_error_line(run_cli("import", "hf", str(folder), "--save", str(tmp_path / "ckpt")))
        assert expected in line, line
        assert not (tmp_path / "ckpt" / "latest_checkpointed_iteration.txt").exists()


@pytest.fixture()
def read_only_folder(tmp_path):
    """A folder on a read-only mount (root ignores file permissions, so chmod would prove nothing)."""
    folder = tmp_path / "ro"
    folder.mkdir()
    (folder / "inside").mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here: {r.stderr.strip()}")
    yield folder
    subprocess.run(["umount", str(folder)], check=True)


def test_a_read_only_output_folder_is_one_line(tmp_path, read_only_folder):
    docs = some_docs(tmp_path / "docs.jsonl")
    line = one_error_line(run_cli("clean", str(docs), "-o", str(read_only_folder / "clean"), "--min-tokens", "1"))
    assert line.startswith(f"textmill: error: {read_only_folder / 'clean'}: Read-only file system; free space or fix")
    (tmp_path / "run.toml").write_text(f'[run]\nwork_dir = "{read_only_folder / "work"}"\n[train]\nenabled = false\n')
    line = one_error_line(run_cli("run", str(tmp_path / "run.toml")))
    assert line == (f"textmill: error: {read_only_folder / 'work'}: cannot write there (Read-only file system); give "
                    "[run] work_dir a folder this user can write")
