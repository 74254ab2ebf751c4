import bz2
import gzip
import lzma

import pyarrow.parquet as pq
import pytest

from textmill.pipeline.blacklist import BlacklistConfig, UrlRules, check_url, normalize_url
from textmill.pipeline.shards import list_shards
from textmill.workflows.commands import run_stage

from conftest import run_cli

RULES = UrlRules()


@pytest.mark.parametrize(
    "url, reason",
    [
        ("https://www.example.com/story/1", None),
        ("http://news.example.co.uk/a?b=1", None),
        ("http://127.0.0.1:8000/page", None),
        ("https://m.youtube.co.uk/watch?v=1", "domain_blacklisted=youtube"),
        ("https://youtube.de/x", "domain_blacklisted=youtube"),
        ("https://en.wikipedia.org/wiki/X", "domain_blacklisted=wikipedia"),
        ("https://example.com/photo.JPG", "extension_blacklisted=.jpg"),
        ("https://example.com/a.tar.gz?dl=1", "extension_blacklisted=.gz"),
        ("https://example.com/video.mp4#t=3", "extension_blacklisted=.mp4"),
        ("ftp://example.com/file", "bad_scheme"),
        ("mailto:someone@example.com", "bad_scheme"),
        ("javascript:alert(1)", "bad_scheme"),
        ("example.com/no-scheme", "malformed"),
        ("http://", "too_short"),
        ("http://x.c/page", "malformed"),
        ("http://exa mple.com/", "malformed"),
        ("http://-bad-.com/", "malformed"),
        ("http://example/", "malformed"),
        ("http://example.com:99999/", "malformed"),
        ("http:example.com", "malformed"),
    ],
)
def test_rules(url, reason):
    assert check_url(url, RULES)[1] == reason


def test_normalisation_makes_spellings_equal():
    a = normalize_url("HTTP://Example.COM:80/a?x=1#frag")[0]
    b = normalize_url("http://example.com/a?x=1")[0]
    assert a == b == "http://example.com/a?x=1"
    assert normalize_url("https://example.com")[0] == "https://example.com/"
    assert normalize_url("https://example.com:8443/")[0] == "https://example.com:8443/"


def test_files_compressed_duplicates_and_order(tmp_path):
    urls = ["https://example.com/1", "https://example.com/2", "http://imgur.com/a", "https://example.com/1#x"]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("\n".join(urls) + "\n\n")
    with gzip.open(tmp_path / "in" / "b.txt.gz", "wt") as f:
        f.write("https://example.com/2\nhttps://example.com/3\n")
    with bz2.open(tmp_path / "in" / "c.bz2", "wb") as f:
        f.write(b"https://example.com/4\n\xff\xfe bad bytes\n")
    with lzma.open(tmp_path / "in" / "d.xz", "wt") as f:
        f.write("https://example.com/5\n")
    manifests = run_stage("blacklist", [tmp_path / "in"], tmp_path / "out",
                          {"blacklist": BlacklistConfig(duplicate_partitions=3)}).manifests
    assert [m["output"] for m in manifests] == ["a.parquet", "b.parquet", "c.parquet", "d.parquet"]
    assert pq.read_table(tmp_path / "out" / "a.parquet").column("url").to_pylist() == [
        "https://example.com/1",
        "https://example.com/2",
    ]
    assert pq.read_table(tmp_path / "out" / "b.parquet").column("url").to_pylist() == ["https://example.com/3"]
    rejects = pq.read_table(tmp_path / "out" / "c.rejects.parquet").to_pylist()
    assert rejects[0]["reason"] == "undecodable" and rejects[0]["source"] == "c.bz2:2"
    assert manifests[0]["counts"] == {"input": 4, "kept": 2, "rejected": 2, "output_rows": 2}
    assert manifests[0]["blank_lines"] == 1
    assert manifests[1]["reasons"] == {"duplicate": 1}
    for m in manifests:
        assert m["counts"]["kept"] + m["counts"]["rejected"] == m["counts"]["input"]


def test_user_lists_extend_bundled_ones(tmp_path):
    (tmp_path / "domains.txt").write_text("# mine\nexample\n")
    (tmp_path / "ext.txt").write_text("php\n")
    rules = UrlRules.with_extra(BlacklistConfig((tmp_path / "domains.txt",), (tmp_path / "ext.txt",)))
    assert check_url("https://www.example.org/a", rules)[1] == "domain_blacklisted=example"
    assert check_url("https://other.org/index.php", rules)[1] == "extension_blacklisted=.php"
    assert check_url("https://youtube.com/x", rules)[1] == "domain_blacklisted=youtube"


def test_cli_summary_and_errors(tmp_path):
    (tmp_path / "urls.txt").write_text("https://example.com/1\nnot a url\n")
    ok = run_cli("blacklist", str(tmp_path / "urls.txt"), "--output", str(tmp_path / "out"))
    assert ok.returncode == 0, ok.stderr
    assert "2 in, 1 kept, 1 rejected (malformed 1)" in ok.stdout
    missing = run_cli("blacklist", str(tmp_path / "missing.txt"), "--output", str(tmp_path / "out"))
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [f"textmill: error: input not found: {tmp_path / 'missing.txt'}"]


def test_the_duplicate_check_is_the_same_with_any_number_of_partitions(tmp_path):
    lines = [f"https://site{i % 7}.example.com/page/{i % 40}" for i in range(300)]  # 280 distinct, then repeats
    (tmp_path / "in").mkdir()
    for k in range(4):  # each file repeats URLs of the others and its own
        mine = lines[k * 50 : k * 50 + 120]
        (tmp_path / "in" / f"RS_{k}.txt").write_text("\n".join(mine + mine[:10]) + "\n")
    outputs = {}
    for partitions in (1, 3, 16):
        out = tmp_path / f"p{partitions}"
        run_stage("blacklist", [tmp_path / "in"], out, {"blacklist": BlacklistConfig(duplicate_partitions=partitions)})
        outputs[partitions] = {p.name: p.read_bytes() for p in out.glob("*.parquet")}
        assert list_shards([out]) == [out / f"RS_{k}.parquet" for k in range(4)]  # the steps' files lie elsewhere
    assert outputs[1] == outputs[3] == outputs[16] and len(outputs[1]) == 8
    kept = [u for k in range(4) for u in pq.read_table(tmp_path / "p3" / f"RS_{k}.parquet").column("url").to_pylist()]
    assert len(kept) == len(set(kept)) == len(set(lines[:270]))  # every distinct URL once, where it is first seen
