"""The scrape's trafilatura extraction (pipeline/extract.py): the title read with trafilatura's own metadata steps
but its date search, so the same titles and texts as trafilatura's whole metadata step gives, on real pages."""

import base64
import gzip
import json

import pytest

from support.files import TEST_DATA
from textmill.pipeline.charset import decode_html
from textmill.pipeline.extract import extract_trafilatura

PAGES = [json.loads(line) for line in gzip.open(TEST_DATA / "extraction-pages.jsonl.gz")]


@pytest.mark.parametrize("page", PAGES, ids=[p["file"][:40] for p in PAGES])
def test_titles_and_texts_are_those_of_trafilaturas_whole_metadata_step(page):
    import trafilatura

    html = decode_html(base64.b64decode(page["html_base64"]), None)[0]
    whole = trafilatura.bare_extraction(html, url="https://example.com/page", with_metadata=True, include_comments=False)
    title, text = extract_trafilatura("https://example.com/page", html)
    if whole is None:
        assert (title, text) == ("", "")
        return
    assert title == (whole.title or "")
    assert text == "\n\n".join(line for line in (whole.text or "").split("\n") if line.strip())


@pytest.mark.parametrize("setting, module", [("extractor", "newspaper"), ("language_detector", "langdetect")])
def test_an_optional_library_not_installed_is_one_line_naming_the_extra(monkeypatch, setting, module):
    """newspaper3k and langdetect are the megatron-fidelity extra: choosing either without it installed is one
    error when the settings are made, before any work, naming what to install; the defaults need neither."""
    import importlib.util

    from textmill.errors import TextmillError
    from textmill.pipeline.stage_configs import CleanConfig, ScrapeConfig

    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == module else found(name, *a))
    config = ScrapeConfig if setting == "extractor" else CleanConfig
    with pytest.raises(TextmillError, match=r"needs .*: pip install 'textmill\[megatron-fidelity\]'$"):
        config(**{setting: module})
    config()  # the default (trafilatura, fastText) needs neither
