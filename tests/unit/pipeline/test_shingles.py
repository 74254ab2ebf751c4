"""Shingle hashes made on arrays, many texts at a time, against their definition: zlib.crc32 of each shingle
as one bytes object, the shingles made from the whole text at once; and the signatures of a batch against
datasketch's, text by text."""

import contextlib
import hashlib
import random
import re
import zlib

from hypothesis import given, settings
from hypothesis import strategies as st

from textmill.demo import synthweb
from textmill.pipeline import minhash, shingles as shingling
from textmill.pipeline.minhash import MinHasher
from textmill.pipeline.shingles import ShingleHashes, unit_runs
from textmill.pipeline.stage_configs import DedupConfig

SMALL = {(shingling, "_TEXT_PIECE"): 2, (minhash, "_UNITS_PER_BATCH"): 3, (minhash, "_HASH_CHUNK"): 3}
ALPHABET = list("ab cD\n\t\u3000\x1c\xa0é日 ,.") + ["\U0001f600"]  # spaces of several kinds, 1- to 4-byte characters


@contextlib.contextmanager
def sizes(small: bool):
    """The pieces, batches and chunks cut tiny, so that every boundary is crossed, or left as they are."""
    saved = {key: getattr(*key) for key in SMALL}
    try:
        for (module, name), value in (SMALL.items() if small else ()):
            setattr(module, name, value)
        yield
    finally:
        for (module, name), value in saved.items():
            setattr(module, name, value)


def defined_shingles(text: str, size: int, unit: str) -> set[bytes]:
    """The definition, with the whole text at once and re's \\w+ for words."""
    if unit == "word":
        words = re.findall(r"\w+", text.lower())
        return {" ".join(words[i : i + size]).encode() for i in range(max(len(words) - size + 1, 1))}
    text = " ".join(text.lower().split())
    return {text[i : i + size].encode() for i in range(max(len(text) - size + 1, 1))}


def hashes_of(text: str, size: int, unit: str, hasher: ShingleHashes) -> set[int]:
    runs = list(unit_runs(text, size, unit))
    if len(runs) == 1 and len(runs[0]) < size:
        return {zlib.crc32(hasher.separator.join(u.encode() for u in runs[0]))}
    return set(hasher.of_runs(runs, size).tolist())


@settings(max_examples=400, deadline=None)
@given(text=st.text(st.sampled_from(ALPHABET), max_size=80), size=st.integers(1, 6),
       unit=st.sampled_from(["word", "char"]), small=st.booleans())
def test_shingle_hashes_are_crc32_of_the_defined_shingles(text, size, unit, small):
    """Every hash is zlib.crc32 of a shingle as the definition makes it, and every shingle has its hash, with the
    text cut into pieces of any size; the shingles themselves and the words hash are the definition's too."""
    with sizes(small):
        defined = defined_shingles(text, size, unit)
        assert shingling.shingles(text, size, unit) == defined
        hasher = ShingleHashes(" " if unit == "word" else "")
        assert hashes_of(text, size, unit, hasher) == {zlib.crc32(s) for s in defined}
        assert shingling.words_hash(text) == hashlib.blake2b(" ".join(re.findall(r"\w+", text.lower())).encode(),
                                                             digest_size=16).digest()


def test_the_vocabulary_starts_again_and_the_hashes_stay(monkeypatch):
    """A vocabulary past its bound is forgotten between batches; what it gives is the same."""
    rng = random.Random(3)
    texts = [" ".join(synthweb.prose(rng, 2)) for _ in range(30)]
    hasher = ShingleHashes(" ")
    before = [hashes_of(t, 5, "word", hasher) for t in texts]
    monkeypatch.setattr(shingling, "_VOCABULARY", 10)
    assert [hashes_of(t, 5, "word", hasher) for t in texts] == before
    assert len(hasher.index) < 200


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), unit=st.sampled_from(["word", "char"]), small=st.booleans())
def test_a_batch_of_texts_gets_each_texts_datasketch_signature(seed, unit, small):
    """Texts added one after another (long and short, empty, copies) get the signatures datasketch gives each
    alone, whether their shingles are hashed in one batch or across many."""
    from datasketch import MinHash

    rng = random.Random(seed)
    texts = [" ".join(synthweb.prose(rng, rng.randint(0, 3))) for _ in range(12)] + ["", "one", "Ünïcode wörds ☃ 日本"]
    texts += [texts[0].upper()]
    rng.shuffle(texts)
    cfg = DedupConfig(shingle_unit=unit, num_perm=32, seed=seed % 1000)
    with sizes(small):
        hasher = MinHasher(cfg)
        for text in texts:
            hasher.add(text)
        got = hasher.take()
        hasher.add(texts[0])  # a take starts the next batch afresh
        again = hasher.take()
    assert got.shape == (len(texts), cfg.num_perm) and again.tolist() == got[:1].tolist()
    for text, values in zip(texts, got.tolist(), strict=True):
        reference = MinHash(num_perm=cfg.num_perm, seed=cfg.seed, hashfunc=zlib.crc32, scheme="affine32")
        reference.update_batch(list(defined_shingles(text, cfg.shingle_size, unit)))
        assert values == reference.hashvalues.tolist()
