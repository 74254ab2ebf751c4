"""Every reason a corpus stage rejects a record for, and what it means: the one list. ShardOutput refuses a
reason its stage does not list here (a new reason fails the tests that reach it until it is written down),
and the reject-reason table of docs/corpus.md is generated from it (`python -m textmill.pipeline.reasons`;
a test compares the two).

A reason may carry a detail after `=` (`status=404`, `near_duplicate_of=<id>`); `<n>` stands for a number.
"""

from __future__ import annotations

import re
from functools import lru_cache

from textmill.io.files import JSON_LINE_REASONS

# What a document stage rejects among the records it reads, before it decides anything about a document.
READ = {
    **{reason: f"the line is {says}" if reason != "too_large" else
       "a line, or a Parquet row's text, longer than [input] max_document_bytes (its first 200 characters kept)"
       for reason, says in JSON_LINE_REASONS.items()},
    "missing_text": "a record without a string `text` field",
}

EXTRACTION = {
    "empty_extraction": "the extractor found no text",
    "extraction_timeout": "the extractor took more than --extract-timeout-s of CPU time",
    "extraction_failed=<error>": "the extractor raised an error",
}

REASONS: dict[str, dict[str, str]] = {
    "reddit-urls": {
        **{reason: f"the line is {says}" for reason, says in JSON_LINE_REASONS.items() if reason != "too_large"},
        "too_large": "a line longer than 1 MiB (Pushshift's are a few KB)",
        "not_an_object": "the line is JSON but not an object",
        "self_post": "a text post (`is_self`), which links nowhere",
        "no_link": "no `url`, or one that is not http(s)",
        "no_score": "no `score`",
        "bad_score": "a `score` that is not a whole number of at most 64 bits (a float, a string, 10**30)",
        "low_score": "a score under --min-score",
        "subreddit_not_listed": "a subreddit not among --subreddits",
        "subreddit_excluded": "a subreddit among --exclude-subreddits",
        "nsfw": "marked over 18, without --nsfw",
        "bad_time": "a `created_utc` that is a number but no time: infinite, NaN, or past 64 bits",
    },
    "blacklist": {
        "undecodable": "the line is not UTF-8",
        "too_long": "a URL longer than 8,192 bytes, or a JSON-lines list's line longer than 64 KiB (its first 200 "
                    "kept)",
        "invalid_json": "a JSON-lines list's line that is not JSON",
        "invalid_unicode": "a JSON-lines list's line with a lone surrogate escape (\\ud800-\\udfff), which is not text",
        "no_url": "a JSON-lines list's record without a string `url`",
        "too_short": "8 characters or fewer",
        "malformed": "not a URL: no host, a bad port or address, a numeric top-level domain",
        "control_character": "a control character (NUL, DEL, ...) in the URL",
        "bad_scheme": "neither http nor https",
        "domain_blacklisted=<label>": "a label of the host is on the domain block list",
        "extension_blacklisted=<ext>": "the path ends in a blocked file extension",
        "duplicate": "the same URL (after normalisation) came earlier, in file order",
    },
    "scrape": {
        "timeout": "no complete answer within --timeout-s, nothing for --read-timeout-s, or no connection within "
                   "--connect-timeout-s (not tried again)",
        "connection_error": "no connection, or it broke (after --retries)",
        "host_down": "not fetched: --host-give-up URLs of its host in a row found the host down",
        "blocked_address": "the host resolves to a private or loopback address (--allow-networks lets one through)",
        "bad_url": "the URL cannot be fetched as written",
        "bad_scheme": "a redirect to a scheme other than http or https",
        "robots_disallowed": "with --robots-txt, the host's robots.txt disallows the page (RFC 9309), or the host "
                             "failed to give its robots.txt (5xx, no connection), which disallows every page",
        "not_in_archive": "with --archive-index and --no-archive-fallback, the archive has no capture of the URL",
        "archive_error=<what>": "the archive's capture of the URL could not be read (its file missing or outside "
                                "--archive-prefix, cut short, not gzip, no response record there, the WARC host "
                                "answering an error after every try), or, with --no-archive-fallback, its index gave "
                                "no usable answer (unreachable or an error status after every try, not JSON, a capture "
                                "whose fields do not have their shapes)",
        "status=<code>": "the server answered with this HTTP status",
        "content_type=<type>": "not HTML (`missing`: no Content-Type)",
        "too_large": "more than --max-bytes",
        "binary_content": "the body is not text, whatever its Content-Type says",
        "redirect_loop": "a redirect back to a URL already visited",
        "too_many_redirects": "more than --max-redirects",
        "redirect_without_location": "a redirect status without a Location header",
        "bad_redirect": "a redirect whose Location is not a URL",
        "broken_response": "a response the HTTP client could not parse",
        **EXTRACTION,
    },
    "dedup": {
        **READ,
        "exact_duplicate_of=<id>": "the same lower-cased words as the kept document <id>",
        "near_duplicate_of=<id>": "MinHash Jaccard similarity of at least --threshold with the kept document <id>",
    },
    "clean": {
        **READ,
        "empty": "no text",
        "language=<code>": "detected as another language than --language",
        "language_undetectable": "no language detected with confidence",
        "too_short": "fewer than --min-tokens tokens",
    },
    "quality": {
        **READ,
        "empty": "no text left (after C4's line rules)",
        **{reason: "Gopher's quality rules" for reason in (
            "too_few_words", "too_many_words", "no_words", "short_words", "long_words", "hash_symbols", "ellipses",
            "bullet_lines", "ellipsis_lines", "few_alphabetic_words", "few_stop_words")},
        **{reason: "Gopher's repetition rules" for reason in (
            "duplicate_paragraphs", "duplicate_paragraph_chars", "duplicate_lines", "duplicate_line_chars",
            "top_<n>gram_chars", "duplicate_<n>gram_chars")},
        **{reason: "C4's page rules (lines dropped are counted per rule in the manifest)"
           for reason in ("lorem_ipsum", "curly_bracket", "too_few_sentences")},
        **{reason: "FineWeb's rules" for reason in ("line_punctuation", "short_lines", "repeated_line_chars", "list_like")},
    },
    "classify": {
        **READ,
        "low_score": "the classifier's verdict: a score under [classify] threshold, or GPT-3's Pareto draw not past 1 - "
                     "score (the score is in the reject's metadata)",
    },
    "shuffle": READ,
    "decontaminate": {
        **READ,
        "contaminated_no_clean_fragment": "every piece left after cutting the evaluation n-grams is under "
                                          "--min-fragment-chars",
        "contaminated_too_many_pieces": "cutting the evaluation n-grams leaves more than --max-pieces pieces",
    },
}
# Extracting again from a kept crawl keeps what the scrape rejected, for the same reasons.
REASONS["extract"] = REASONS["scrape"]
# A page read from a web archive is rejected for what would reject it once fetched.
REASONS["warc"] = {
    "bad_url": "the record's WARC-Target-URI is not an http(s) URL",
    "broken_response": "the record holds no HTTP response that can be read: its status line does not parse, its "
                       "headers pass 64 KiB, or its body's Content-Encoding breaks part-way",
    **{reason: says for reason, says in REASONS["scrape"].items()
       if reason in ("status=<code>", "content_type=<type>", "too_large", "binary_content")},
    **EXTRACTION,
}


@lru_cache(maxsize=None)
def _patterns(stage: str) -> re.Pattern:
    names = (re.escape(reason.partition("=")[0]).replace(re.escape("<n>"), r"\d+") for reason in REASONS.get(stage, {}))
    return re.compile("|".join(f"(?:{name})" for name in names) or "(?!)")


@lru_cache(maxsize=4096)
def is_listed(stage: str, name: str) -> bool:
    """Whether `name` (a reason without its detail) is one of `stage`'s."""
    return _patterns(stage).fullmatch(name) is not None


def reasons_table() -> str:
    """docs/corpus.md's table: each stage, each reason and what it means."""
    lines = ["| stage | reason | meaning |", "|---|---|---|"]
    for stage, reasons in REASONS.items():
        if stage == "extract":
            lines.append("| extract | the scrape's | a record the scrape rejected stays rejected; extracting again "
                         "rejects for the scrape's extraction reasons |")
            continue
        for reason, meaning in reasons.items():
            lines.append(f"| {stage} | `{reason}` | {meaning} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(reasons_table(), end="")
