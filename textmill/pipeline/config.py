"""The settings of the corpus stages, one dataclass per stage: the one definition from which the stage's
command-line options and its table of the run's TOML file are generated (textmill.settings). Kept apart
from the stages so that building the command line imports none of their libraries."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from textmill.errors import TextmillError
from textmill.settings import SEED_MAX, Settings, key_params, setting


@dataclass(frozen=True)
class StageConfig(Settings):
    """A stage's settings."""

    def params(self) -> dict:
        """What the stage's output depends on: its manifest records it and its work folder is keyed by it."""
        return key_params(self)


@dataclass(frozen=True)
class BlacklistConfig(StageConfig):
    domain_blacklist: tuple[Path, ...] = setting((), "extra files of domain labels to block, one a line (added to the bundled list)")
    extension_blacklist: tuple[Path, ...] = setting((), "extra files of file extensions to block, one a line (added to the bundled list)")
    broader_lists: bool = setting(False, "also block textmill's broader lists (35 more media, shop and social sites; "
                                  "23 more file types) beside Megatron-LM's, which are the default")
    duplicate_partitions: int = setting(16, "partitions of the URL ids for the duplicate check, each a task of its own "
                                        "(does not change the output)", least=1, keyed=False)


@dataclass(frozen=True)
class ScrapeConfig(StageConfig):
    concurrency: int = setting(32, "URLs fetched at once per shard (does not change the output)", least=1, keyed=False)
    extractor: Literal["newspaper", "trafilatura"] = setting(
        "trafilatura", "what finds a page's title and main text: newspaper3k (as OpenWebText was built) or trafilatura "
        "(finds more of the main text; benchmarks/README.md has both measured)")
    extract_workers: int = setting(2, "extraction processes (does not change the output; 0: threads of this process, "
                                   "with no extraction deadline: for trusted pages only)", least=0, keyed=False)
    timeout_s: float = setting(30.0, "hard wall-clock limit in seconds on one URL's fetch (DNS, redirects and body "
                               "included)", above=0, old=("--timeout",))
    extract_timeout_s: float = setting(10.0, "hard limit in seconds on extracting one page; a page over it is rejected "
                                       "(extraction_timeout) and its extraction process replaced", above=0,
                                       old=("--extract-timeout",))
    max_bytes: int = setting(5 * 1024 * 1024, "largest page body accepted, after decompression", least=1)
    max_redirects: int = setting(5, "redirects followed per URL", least=0)
    allow_private_addresses: bool = setting(False, "fetch from private, loopback and link-local addresses (the demo's "
                                            "local web needs it)", key_name="allow_private")
    allow_networks: tuple[str, ...] = setting((), "non-public addresses or networks (CIDR) fetched all the same, e.g. a "
                                              "mirror at 10.0.0.5 (narrower than allow_private_addresses)",
                                              old=("--allow-network",))
    keep_html: bool = setting(False, "also write NAME.html.parquet with the raw HTML of each page, so text can be "
                              "extracted again without fetching")
    retries: int = setting(2, "tries again of a fetch that failed in a way that may pass (a connection error, a timeout, "
                           "a broken response, 429, 502, 503, 504) before it is a reject", least=0, keyed=False)
    retry_wait_s: float = setting(1.0, "wait before the first retry, doubled for each next one, plus up to half again "
                                  "at random (seeded by the URL); a Retry-After header is waited for instead, up to "
                                  "timeout_s", least=0, keyed=False)
    per_host_concurrency: int = setting(4, "URLs of one host fetched at once, so a list dominated by one site does not "
                                        "hammer it (does not change the output)", least=1, keyed=False)
    robots_txt: bool = setting(False, "skip pages the host's robots.txt disallows for user_agent (rejected as "
                               "robots_disallowed; a robots.txt that cannot be fetched allows everything)")
    user_agent: str = setting("textmill/0.1 (corpus builder)", "the User-Agent header sent")

    def __post_init__(self) -> None:
        super().__post_init__()
        for network in self.allow_networks:
            try:
                ipaddress.ip_network(network, strict=False)
            except ValueError:
                raise TextmillError(f"allow_networks: {network!r} is not an address or network (CIDR)") from None

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
    language: str = setting("en", "keep documents langdetect (seeded) calls this language")
    min_tokens: int = setting(128, "drop documents with fewer tokens, end-of-document token included (GPT-2 "
                              "pre-tokenizer pieces + 1, a lower bound; BPE tokens when a vocabulary is given)", least=0)
    langdetect_chars: int = setting(4000, "characters of each document the language detector reads", least=1)
    seed: int = setting(0, "langdetect seed", least=0, most=SEED_MAX)
    language_detector: Literal["langdetect", "fasttext"] = setting(
        "langdetect", "langdetect (seeded; as Megatron's cleanup) or fastText's compressed lid.176 model, many times "
        "faster (pip install 'textmill[fasttext]'; its agreement with langdetect is in benchmarks/README.md)")


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
