"""Where a store's objects live on this machine: a URL maps into the mirror under TEXTMILL_CACHE and back, and
a local path stays what it is."""

from pathlib import Path

import pytest

from textmill.io.store import is_url, local_path, shown, url_of


def test_urls_map_into_the_mirror_and_back(tmp_path, monkeypatch):
    monkeypatch.setenv("TEXTMILL_CACHE", str(tmp_path / "cache"))
    mirrored = local_path("s3://bucket/work/1-blacklist/RS_0.parquet")
    assert mirrored == tmp_path / "cache" / "s3" / "bucket" / "work" / "1-blacklist" / "RS_0.parquet"
    assert url_of(mirrored) == "s3://bucket/work/1-blacklist/RS_0.parquet" and shown(mirrored) == url_of(mirrored)
    assert is_url("gs://b/x") and not is_url("file:///tmp/x") and not is_url("/tmp/x")
    assert local_path("file:///tmp/x") == Path("/tmp/x") and url_of(Path("/tmp/x")) is None
    assert shown(tmp_path / "local") == str(tmp_path / "local")


@pytest.mark.parametrize("url", ["s3://bucket/../etc/passwd", "s3://bucket/a/./b", "s3://bucket/.."])
def test_a_url_that_climbs_out_of_its_bucket_is_refused(tmp_path, monkeypatch, url):
    monkeypatch.setenv("TEXTMILL_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ValueError, match="not a path in a store"):
        local_path(url)
