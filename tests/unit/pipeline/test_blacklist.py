"""The blacklist stage: Megatron's rules and lists, normalised spellings, compressed files, duplicates across
files and partitions."""

import bz2
import gzip
import json
import lzma
import re

import pyarrow.parquet as pq
import pytest
import tldextract

from textmill.pipeline.blacklist import BlacklistConfig, UrlRules, check_url, normalize_url
from textmill.pipeline.shards import list_shards
from textmill.workflows.commands import run_stage

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
        ("http://example.com/a\x00b", "control_character"),
        ("http://example.com/\x7f", "control_character"),
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


def test_a_line_too_long_for_a_url_is_rejected_keeping_its_start(tmp_path):
    """A 2 MB line (a URL list someone concatenated without newlines) is no URL: rejected before it is decoded
    or parsed, its first 200 bytes kept; the URL beside it is kept."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_bytes(b"https://example.com/" + b"x" * 2_000_000 + b"\nhttps://example.com/ok\n")
    [manifest] = run_stage("blacklist", [tmp_path / "in"], tmp_path / "out", {"blacklist": BlacklistConfig()}).manifests
    assert manifest["reasons"] == {"too_long": 1} and manifest["counts"]["kept"] == 1
    [reject] = pq.read_table(tmp_path / "out" / ".rejects" / "a-00000.parquet").to_pylist()
    assert reject["url"] == "https://example.com/" + "x" * 180


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
    assert [m["output"] for m in manifests] == ["a-00000.parquet", "b-00000.parquet", "c-00000.parquet",
                                                "d-00000.parquet"]
    assert pq.read_table(tmp_path / "out" / "a-00000.parquet").column("url").to_pylist() == [
        "https://example.com/1",
        "https://example.com/2",
    ]
    assert pq.read_table(tmp_path / "out" / "b-00000.parquet").column("url").to_pylist() == ["https://example.com/3"]
    rejects = pq.read_table(tmp_path / "out" / ".rejects" / "c-00000.parquet").to_pylist()
    assert rejects[0]["reason"] == "undecodable" and rejects[0]["source"] == "c.bz2:2"
    assert manifests[0]["counts"] == {"input": 4, "kept": 2, "rejected": 2, "output_rows": 2}
    assert manifests[0]["blank_lines"] == 1
    assert manifests[1]["reasons"] == {"duplicate": 1}
    for m in manifests:
        assert m["counts"]["kept"] + m["counts"]["rejected"] == m["counts"]["input"]


def test_a_json_lines_list_keeps_each_urls_other_fields_as_its_metadata(tmp_path):
    """LIST.jsonl (what `textmill reddit-urls` writes), compressed or not, beside a plain list: each record's `url`
    is checked as a plain line's is, its other fields kept as the URL's metadata; a line that is no such record is
    a reject with its reason; a URL from a plain list has no metadata."""
    (tmp_path / "in").mkdir()
    records = [{"url": "https://example.com/1", "submission_id": "a1", "score": 5, "subreddit": "news ☃"},
               {"url": "http://imgur.com/x", "score": 9}, {"url": "https://example.com/2"},
               {"url": "https://example.com/1", "score": 7}]
    lines = [json.dumps(r, ensure_ascii=False) for r in records] + ["{broken", '["https://example.com/3"]',
                                                                   '{"link": "https://example.com/4"}',
                                                                   '{"url": "https://example.com/\\udc00"}']
    with gzip.open(tmp_path / "in" / "RS_2011-01.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    (tmp_path / "in" / "z.txt").write_text("https://example.com/9\n")
    manifests = run_stage("blacklist", [tmp_path / "in"], tmp_path / "out", {"blacklist": BlacklistConfig()}).manifests
    assert [m["output"] for m in manifests] == ["RS_2011-01-00000.parquet", "z-00000.parquet"]
    kept = pq.read_table(tmp_path / "out" / "RS_2011-01-00000.parquet").to_pylist()
    assert [(r["url"], r["source"]) for r in kept] == [("https://example.com/1", "RS_2011-01.jsonl.gz:1"),
                                                        ("https://example.com/2", "RS_2011-01.jsonl.gz:3")]
    assert [json.loads(r["metadata"]) if r["metadata"] else None for r in kept] == [
        {"submission_id": "a1", "score": 5, "subreddit": "news ☃"}, None]
    rejects = pq.read_table(tmp_path / "out" / ".rejects" / "RS_2011-01-00000.parquet").to_pylist()
    assert [r["reason"] for r in rejects] == ["domain_blacklisted=imgur", "duplicate", "invalid_json", "no_url",
                                              "no_url", "invalid_unicode"]
    assert json.loads(rejects[1]["metadata"]) == {"score": 7}
    assert pq.read_table(tmp_path / "out" / "z-00000.parquet").column("metadata").to_pylist() == [None]


def test_user_lists_extend_bundled_ones(tmp_path):
    (tmp_path / "domains.txt").write_text("# mine\nexample\n")
    (tmp_path / "ext.txt").write_text("php\n")
    rules = UrlRules.with_extra(BlacklistConfig((tmp_path / "domains.txt",), (tmp_path / "ext.txt",)))
    assert check_url("https://www.example.org/a", rules)[1] == "domain_blacklisted=example"
    assert check_url("https://other.org/index.php", rules)[1] == "extension_blacklisted=.php"
    assert check_url("https://youtube.com/x", rules)[1] == "domain_blacklisted=youtube"


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
        outputs[partitions] = {str(p.relative_to(out)): p.read_bytes() for p in [*out.glob("*.parquet"),
                                                                                *out.glob(".rejects/*.parquet")]}
        assert list_shards([out]) == [out / f"RS_{k}-00000.parquet" for k in range(4)]  # the steps' files lie elsewhere
    assert outputs[1] == outputs[3] == outputs[16] and len(outputs[1]) == 8
    kept = [u for k in range(4) for u in pq.read_table(tmp_path / "p3" / f"RS_{k}-00000.parquet").column("url").to_pylist()]
    assert len(kept) == len(set(kept)) == len(set(lines[:270]))  # every distinct URL once, where it is first seen


def rows_in_order(out, column: str) -> list:
    """A column of every shard of a blacklist output, the shards in order, and of its rejects likewise."""
    return [v for shard in list_shards([out]) for v in pq.read_table(shard).column(column).to_pylist()]


@pytest.mark.parametrize("urls_per_shard", [1, 7, 50, 130])
def test_a_list_cut_into_units_keeps_what_one_pass_over_it_keeps(tmp_path, urls_per_shard):
    """Units of any size give the kept and rejected URLs of one unit a list, in the same order: the first
    occurrence wins across units of one list and across lists; a unit never holds more lines than asked."""
    lines = [f"https://site{i % 7}.example.com/page/{i % 40}" for i in range(120)] + ["", "ftp://x.org/a", "bad"]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "big.txt").write_text("\n".join(lines) + "\n")
    (tmp_path / "in" / "later.txt").write_text("https://site1.example.com/page/1\nhttps://new.example.com/\n")
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    run_stage("blacklist", [tmp_path / "in"], whole, {"blacklist": BlacklistConfig(urls_per_shard=1000)})
    manifests = run_stage("blacklist", [tmp_path / "in"], cut,
                          {"blacklist": BlacklistConfig(urls_per_shard=urls_per_shard, duplicate_partitions=3)}).manifests
    big_units = -(-len(lines) // urls_per_shard)
    assert [m["output"] for m in manifests][: big_units + 1] == [f"big-{n:05d}.parquet" for n in range(big_units)] + [
        "later-00000.parquet"]
    assert all(m["counts"]["input"] + m["blank_lines"] <= urls_per_shard for m in manifests)
    assert rows_in_order(cut, "url") == rows_in_order(whole, "url") == list(dict.fromkeys(lines[:120])) + [
        "https://new.example.com/"]
    rejects = [pq.read_table(p).to_pylist() for p in sorted((cut / ".rejects").glob("*.parquet"))]
    whole_rejects = pq.read_table(whole / ".rejects" / "big-00000.parquet").to_pylist()
    assert sorted((r["source"], r["reason"]) for unit in rejects for r in unit) == sorted(
        (r["source"], r["reason"])
        for r in [*whole_rejects, *pq.read_table(whole / ".rejects" / "later-00000.parquet").to_pylist()])
    first = manifests[0]["unit"]
    assert first == {"list": "big.txt", "number": 0, "first_line": 1, "lines": min(urls_per_shard, len(lines)),
                     "sha256": first["sha256"]}


# -- fidelity to Megatron-LM's blacklist_urls.py ----------------------------------------------------------
# Its lists at commit 7608f27e49, typed out here so that the bundled files are checked against them.
MEGATRON_DOMAINS = frozenset("""
500px aapks akamaihd amazon apple artifactfire artstation awwni bandcamp battleforthenet coinscalendar
dailymotion deviantart discord discordapp dlapkandroid dropbox e621 ebay edealinfo erome eroshare explosm
facebook fbcdn flickr furaffinity futhead gatopardo gfycat gifsound gifsoup giphy github google gunprime gyazo
horsefucker hotdealstar imagefap imageshack imgflip imgur instagram karmadecay kryptocal kym-cdn liveleak
livememe lmgtfy magaimg memegenerator minorplanetcenter minus mobafire morejpeg nocookie pcpartpicker
photobucket pinimg pinterest pixiv pornhub prntscr puu qkme quickmeme radd redd reddit reddit-stream redditlog
redditmedia reddituploads redtube reupp reverb roanoke rollingstone sli soundcloud soundgasm spankbang spotify
strawpoll streamable timeanddate tinypic touhouradio tumblr twimg twitch twitter vid vimeo vine vkaao vocaroo
voyagefusion walmart wciu wikimedia wikipedia xhamster xkcd xvideos youtu youtube youtubedoubler ytimg
zillexplorer""".split())


# As its tuple runs: a missing comma joins ".7z" and ".ai" into ".7z.ai".
MEGATRON_EXTENSIONS = tuple("""
.3gp .7z.ai .aif .apk .app .avi .bin .bmp .bz2 .css .csv .dat .deb .dmg .doc .docx .exe .gif .gifv .gz .iso .jar
.jpeg .jpg .js .log .mid .midi .mkv .mov .mp3 .mp4 .mpeg .mpg .ogg .ogv .otf .pdf .pkg .png .pps .ppt .pptx .psd
.py .qt .ram .rar .sql .svg .swf .tar.gz .tar .tgz .tiff .ttf .txt .wav .webm .wma .wmv .xls .xlsx .xml .xz
.zip""".split())


MEGATRON_URL = re.compile(r"^https?://(?:(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+(?:[a-z]{2,6}\.?|[a-z0-9-]{2,}\.?)"
                          r"|(?:\d{1,3}\.){3}\d{1,3})(?::\d+)?(?:/?|[/?]\S+)$", re.IGNORECASE)


def megatron_kept(lines: list[str]) -> list[str]:
    """The URLs blacklist_urls.py keeps, its checks in its order: domain label (tldextract, as written),
    extension (the URL up to '?', lower-cased), length <= 8, its URL pattern, exact duplicates."""
    extract = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)
    kept: dict[str, None] = {}
    for line in lines:
        url = line.strip()
        if (extract(url).domain in MEGATRON_DOMAINS or url.split("?")[0].lower().endswith(MEGATRON_EXTENSIONS)
                or len(url) <= 8 or not MEGATRON_URL.match(url) or url in kept):
            continue
        kept[url] = None
    return list(kept)


# Where textmill decides otherwise, on purpose (docs/fidelity.md lists them).
DELIBERATE = {
    "https://example.com/clip.mp4#t=30": "the extension is the path's: a fragment does not hide it",
    "http://example.zip": "a host is not a file: only the path's extension counts",
    "http://WWW.YOUTUBE.COM/watch?v=2": "domain labels match whatever their case",
    "http://127.0.0.999/page": "an address with a part over 255 is no address",
    "http://example.123/page": "a top-level domain is letters (or punycode)",
    "http://example.com:99999/page": "a port is at most 65535",
    "http://b\u00fccher.example.de/buch": "an internationalised host name is a host name",
    "https://example.com/x.7z": "Megatron's .7z and .ai, joined by a missing comma, are blocked",
}


def varied_urls() -> list[str]:
    """Kept pages, every bundled domain and extension under varied spellings, and the edge cases."""
    urls = [f"https://news{i}.example.org/story/{i}" for i in range(5)]
    urls += [f"https://{label}.com/p" for label in sorted(MEGATRON_DOMAINS)]
    urls += [f"http://m.{label}.co.uk/x?y=1" for label in sorted(MEGATRON_DOMAINS)[::7]]
    urls += [f"https://files.example.net/a{ext}" for ext in MEGATRON_EXTENSIONS if ext != ".7z.ai"]
    urls += [f"https://files.example.net/b{ext.upper()}?download=1" for ext in MEGATRON_EXTENSIONS[::5]]
    urls += ["https://example.com/view?file=report.pdf", "https://example.com/dir.zip/", "http://a.co",
             "http://ab.co/", "ftp://example.com/file", "example.com/no-scheme", "http://exa mple.com/",
             "http://user@example.com/", "http://my_site.example.com/", "http://example.com./dot",
             "http://127.0.0.2/page", "https://example.photography/gallery", "HTTPS://EXAMPLE.COM/Upper",
             "https://goo.ne.jp/news", "https://bit.org/about", "https://www.linkedin.com/in/x",
             "https://news0.example.org/story/0", "https://news1.example.org/story/1#comments",
             "https://NEWS2.example.org:443/story/2", *DELIBERATE]
    return urls


def test_the_bundled_lists_are_megatrons(tmp_path):
    assert RULES.domains == MEGATRON_DOMAINS
    assert set(RULES.extensions) == set(MEGATRON_EXTENSIONS) - {".7z.ai"} | {".7z", ".ai"}
    broader = UrlRules.with_extra(BlacklistConfig(broader_lists=True))
    assert broader.domains > RULES.domains and set(broader.extensions) > set(RULES.extensions)
    assert {"t", "bit", "goo", "ask", "last", "mega"}.isdisjoint(broader.domains)


def test_the_kept_urls_are_megatrons_but_for_the_documented_differences(tmp_path):
    lines = varied_urls()
    (tmp_path / "urls.txt").write_text("\n".join(lines) + "\n")
    run_stage("blacklist", [tmp_path / "urls.txt"], tmp_path / "out", {"blacklist": BlacklistConfig()})
    ours = pq.read_table(tmp_path / "out" / "urls-00000.parquet").column("url").to_pylist()
    theirs = megatron_kept(lines)
    for url, why in DELIBERATE.items():  # each differs, as said
        assert (url in theirs) != (normalize_url(url)[0] in ours), why
    # Megatron's other decisions, its kept URLs in textmill's normal form: the first spelling of a URL
    # wins (textmill counts http://A.com:80/x#f and http://a.com/x as one URL; Megatron keeps both).
    expected = dict.fromkeys(normalize_url(u)[0] for u in theirs if u not in DELIBERATE)
    assert [u for u in ours if u not in {normalize_url(d)[0] for d in DELIBERATE}] == list(expected)
    assert len(theirs) - len(expected) >= 2  # the spellings Megatron kept twice
