"""Dedup: MinHash precision and recall, reused signatures, band steps in any order, exact duplicates first."""

import dataclasses
import itertools
import json
import random
import zlib

import pyarrow.parquet as pq
import pytest

from support.files import write_jsonl
from textmill.demo import synthweb
from textmill.errors import TextmillError
from textmill.pipeline import dedup, minhash
from textmill.pipeline.shingles import shingles
from textmill.pipeline.dedup import (
    DedupConfig,
    band_keys_shard,
    band_pairs,
    cluster_pairs,
    signature_shard,
    write_pairs,
)
from textmill.workflows.commands import run_stage


def dedup_shards(shards, output, cfg):
    """`textmill dedup` as its tasks run it: the output shards' manifests and the clusters' record."""
    return run_stage("dedup", shards, output, {"dedup": cfg})


def jaccard(a: str, b: str, cfg: DedupConfig) -> float:
    x, y = shingles(a, cfg.shingle_size, cfg.shingle_unit), shingles(b, cfg.shingle_size, cfg.shingle_unit)
    return len(x & y) / len(x | y)


def near_duplicate_corpus(seed: int, families: int, singles: int):
    """Families of a base text plus lightly edited copies (true duplicates), heavily edited copies
    (not duplicates), and unrelated singles. Returns the documents and each one's family."""
    rng = random.Random(seed)
    docs, family = [], []
    for f in range(families + singles):
        base = " ".join(synthweb.prose(rng, 5))
        docs.append(base)
        family.append(f)
        if f < families:
            for _ in range(rng.randint(1, 3)):
                docs.append(synthweb.mutate(rng, base, rng.choice([0.005, 0.01, 0.02])))
                family.append(f)
            docs.append(synthweb.mutate(rng, base, 0.3))  # same topic, mostly rewritten
            family.append(f)
    order = list(range(len(docs)))
    rng.shuffle(order)
    return [docs[i] for i in order], [family[i] for i in order]


def test_precision_and_recall_on_generated_near_duplicates(tmp_path):
    cfg = DedupConfig()
    docs, family = near_duplicate_corpus(seed=11, families=60, singles=140)
    half = len(docs) // 2
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"id": f"d{i}", "text": t} for i, t in enumerate(docs[:half])])
    write_jsonl(tmp_path / "in" / "b.jsonl", [{"id": f"d{i}", "text": t} for i, t in enumerate(docs) if i >= half])
    manifests, clusters = dedup_shards([tmp_path / "in" / "a.jsonl", tmp_path / "in" / "b.jsonl"], tmp_path / "out", cfg)

    rejected = {}
    for name in ("a", "b"):
        for r in pq.read_table(tmp_path / "out" / ".rejects" / f"{name}.parquet").to_pylist():
            rejected[int(r["id"][1:])] = int(r["reason"].split("=d")[1])
    root = {i: rejected.get(i, i) for i in range(len(docs))}
    predicted = {(i, j) for i, j in itertools.combinations(range(len(docs)), 2) if root[i] == root[j]}
    truth = {
        (i, j)
        for i, j in itertools.combinations(range(len(docs)), 2)
        if family[i] == family[j] and jaccard(docs[i], docs[j], cfg) >= cfg.threshold
    }
    precision = len(predicted & truth) / len(predicted)
    recall = len(predicted & truth) / len(truth)
    print(f"dedup on {len(docs)} docs: {len(truth)} true pairs, precision {precision:.3f}, recall {recall:.3f}")
    assert precision >= 0.95 and recall >= 0.9
    # the keeper is the first document of its cluster in corpus order
    assert all(keeper < i for i, keeper in rejected.items())
    rejected_by_clusters = sum(clusters["cluster_sizes"]) - len(clusters["cluster_sizes"])
    assert sum(m["counts"]["rejected"] for m in manifests) == len(rejected) == rejected_by_clusters


@pytest.mark.parametrize("unit, num_perm, seed", [("word", 128, 42), ("char", 256, 7), ("word", 64, 0)])
def test_signature_is_datasketch_minhash(unit, num_perm, seed):
    """textmill's MinHash is datasketch's (scheme affine32, crc32 as the hash), value for value: datasketch stays
    the reference, and a worker does not import it (nor scipy with it)."""
    from datasketch import MinHash

    rng = random.Random(seed)
    long_page = " ".join(synthweb.prose(rng, 400))  # more shingles than one hashed chunk
    texts = ["", "one", "Short words, short page.", long_page, *(" ".join(synthweb.prose(rng, 3)) for _ in range(20))]
    cfg = DedupConfig(shingle_unit=unit, num_perm=num_perm, seed=seed)
    for text in texts:
        reference = MinHash(num_perm=num_perm, seed=seed, hashfunc=zlib.crc32, scheme="affine32")
        reference.update_batch(list(shingles(text, cfg.shingle_size, unit)))
        assert minhash.signature(text, cfg).tolist() == reference.hashvalues.tolist()


def test_signatures_are_reused_and_output_is_deterministic(tmp_path):
    docs, _ = near_duplicate_corpus(seed=5, families=5, singles=5)
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"id": f"d{i}", "text": t} for i, t in enumerate(docs)])
    cfg = DedupConfig()
    dedup_shards([tmp_path / "in" / "a.jsonl"], tmp_path / "out", cfg)
    [sig] = (tmp_path / "out" / ".textmill" / "3-minhash").glob("*/a.minhash.parquet")
    mtime, shard = sig.stat().st_mtime_ns, tmp_path / "out" / "a.parquet"
    first, first_mtime = shard.read_bytes(), shard.stat().st_mtime_ns
    dedup_shards([tmp_path / "in" / "a.jsonl"], tmp_path / "out", cfg)  # every step is done: none runs
    assert sig.stat().st_mtime_ns == mtime and shard.stat().st_mtime_ns == first_mtime
    dedup_shards([tmp_path / "in" / "a.jsonl"], tmp_path / "out", dataclasses.replace(cfg, threshold=0.95))
    assert sig.stat().st_mtime_ns == mtime  # the same MinHash settings: the signatures are kept
    assert shard.stat().st_mtime_ns != first_mtime and json.loads((tmp_path / "out" / ".clusters.json").read_text())[
        "params"]["threshold"] == 0.95  # the output folder holds what the new settings give
    dedup_shards([tmp_path / "in" / "a.jsonl"], tmp_path / "out", DedupConfig(num_perm=64, bands=8))
    assert len(list((tmp_path / "out" / ".textmill" / "3-minhash").glob("*/a.minhash.parquet"))) == 2  # recomputed
    dedup_shards([tmp_path / "in" / "a.jsonl"], tmp_path / "out", cfg)
    assert shard.read_bytes() == first


def test_char_shingles_like_megatron():
    assert shingles("Abcdef", 5, "char") == {b"abcde", b"bcdef"}
    assert shingles("ab", 5, "char") == {b"ab"}
    assert shingles("One two, three!", 2, "word") == {b"one two", b"two three"}


def test_band_steps_in_any_order_give_the_clusters_of_one_pass(tmp_path, monkeypatch):
    cfg = DedupConfig(num_perm=64, bands=16, threshold=0.5, exact_duplicates=False)
    docs, _ = near_duplicate_corpus(seed=3, families=30, singles=40)
    parts = [docs[i::3] for i in range(3)]  # a family's copies end up in different shards
    for k, part in enumerate(parts):
        write_jsonl(tmp_path / "in" / f"s{k}.jsonl", [{"id": f"s{k}-{i}", "text": t} for i, t in enumerate(part)])
    shards = sorted((tmp_path / "in").iterdir())
    _, whole = dedup_shards(shards, tmp_path / "whole", cfg)
    assert whole["cluster_sizes"]

    sigs = [signature_shard(s, tmp_path / "steps" / f"{s.stem}.minhash.parquet", cfg) for s in shards]
    bands = [tmp_path / "steps" / f"{s.stem}.bands.parquet" for s in shards]
    counts = [band_keys_shard(sig, out, cfg)["rows"] for sig, out in reversed(list(zip(sigs, bands, strict=True)))][::-1]
    pairs = [tmp_path / "steps" / f"band-{b}.parquet" for b in range(cfg.bands + 1)]
    for b in reversed(range(cfg.bands + 1)):
        write_pairs(band_pairs(bands, b), pairs[b])
    steps = cluster_pairs(pairs[:-1], pairs[-1:], [], sigs, counts, cfg)
    written = json.loads((tmp_path / "whole" / ".clusters.json").read_text())
    assert {k: v for k, v in written.items() if k != "params"} == steps
    listed = ("duplicates", "exact")  # in clusters.json only
    assert {k: v for k, v in steps.items() if k not in listed} == {k: whole[k] for k in steps if k not in listed}

    def position(doc_id):  # corpus order: shard, then row
        shard, row = doc_id.removeprefix("s").split("-")
        return int(shard), int(row)

    assert all(position(keeper) < position(doc) for doc, keeper in steps["duplicates"].items())
    assert len({position(d)[0] for d in steps["duplicates"]} | {position(k)[0] for k in steps["duplicates"].values()}) == 3

    # Sorted runs of 7 documents (an external sort; many runs a band per shard) give the same pairs.
    assert pq.ParquetFile(bands[0]).num_row_groups == cfg.bands + 1
    monkeypatch.setattr(dedup, "RUN_ROWS", 7)
    runs = [tmp_path / "steps" / f"{b.stem}.runs.parquet" for b in bands]
    for sig, out in zip(sigs, runs, strict=True):
        record = band_keys_shard(sig, out, cfg)
        assert record["runs"] == [7] * (record["rows"] // 7) + [record["rows"] % 7] * bool(record["rows"] % 7)
    for b in range(cfg.bands + 1):
        assert band_pairs(runs, b).tolist() == band_pairs(bands, b).tolist()


def test_the_same_id_in_two_shards_is_one_error(tmp_path):
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"id": "x", "text": "one text here"}, {"id": "y", "text": "two"}])
    write_jsonl(tmp_path / "in" / "b.jsonl", [{"id": "z", "text": "three"}, {"id": "x", "text": "four texts"}])
    with pytest.raises(TextmillError, match="duplicate document ids across shards"):
        dedup_shards(sorted((tmp_path / "in").iterdir()), tmp_path / "out", DedupConfig())


def test_exact_duplicates_are_found_by_their_words_before_minhash_and_named_as_such(tmp_path):
    """Mirrors that differ in case, punctuation or whitespace are exact duplicates, in one shard or two; an
    edited copy is a near duplicate; without exact_duplicates the same documents go, all as near duplicates
    (the same words give the same signature, so MinHash finds them too: the hash names them, and spares
    computing a mirror's signature within a shard)."""
    rng = random.Random(7)
    base = " ".join(synthweb.prose(rng, 6))
    other = " ".join(synthweb.prose(rng, 6))
    mirror = base.upper().replace(". ", " ... ").replace(" ", "  \n")
    edited = synthweb.mutate(rng, base, 0.01)
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"id": "a0", "text": base}, {"id": "a1", "text": other},
                                              {"id": "a2", "text": mirror}, {"id": "a3", "text": edited}])
    write_jsonl(tmp_path / "in" / "b.jsonl", [{"id": "b0", "text": other + "!"}, {"id": "b1", "text": "Short."},
                                              {"id": "b2", "text": "short"}])
    shards = sorted((tmp_path / "in").iterdir())

    def reasons(out):
        return {r["id"]: r["reason"]
                for name in ("a", "b") for r in pq.read_table(out / ".rejects" / f"{name}.parquet").to_pylist()}

    dedup_shards(shards, tmp_path / "out", DedupConfig())
    clusters = json.loads((tmp_path / "out" / ".clusters.json").read_text())
    assert reasons(tmp_path / "out") == {"a2": "exact_duplicate_of=a0", "a3": "near_duplicate_of=a0",
                                         "b0": "exact_duplicate_of=a1", "b2": "exact_duplicate_of=b1"}
    assert sorted(clusters["exact"]) == ["a2", "b0", "b2"] and clusters["exact_pairs"] == 3
    # The mirror's signature is its original's: the same words make the same word shingles.
    [sigs] = (tmp_path / "out" / ".textmill" / "3-minhash").glob("*/a.minhash.parquet")
    rows = pq.read_table(sigs).to_pylist()
    assert rows[2]["signature"] == rows[0]["signature"] and rows[2]["words_hash"] == rows[0]["words_hash"]
    assert len({r["words_hash"] for r in rows}) == 3
    dedup_shards(shards, tmp_path / "without", DedupConfig(exact_duplicates=False))
    without = json.loads((tmp_path / "without" / ".clusters.json").read_text())
    assert without["exact"] == [] and without["duplicates"] == clusters["duplicates"]
    assert set(reasons(tmp_path / "without").values()) == {"near_duplicate_of=a0", "near_duplicate_of=a1",
                                                           "near_duplicate_of=b1"}


def test_a_band_merge_of_more_runs_than_the_open_files_soft_limit_raises_it(tmp_path, monkeypatch):
    """Many units of a big input are many sorted runs, all open at once in a band's merge: more than the
    usual soft limit of 1,024 open files is no error while the hard limit allows it."""
    import resource

    cfg = DedupConfig(num_perm=16, bands=4, exact_duplicates=False)
    monkeypatch.setattr(dedup, "RUN_ROWS", 2)
    docs, _ = near_duplicate_corpus(seed=5, families=10, singles=20)
    bands = []
    for k in range(30):
        shard = tmp_path / "in" / f"s{k:02d}.jsonl"
        write_jsonl(shard, [{"id": f"s{k}-{i}", "text": t} for i, t in enumerate(docs[k::30])])
        sig = signature_shard(shard, tmp_path / f"s{k:02d}.minhash.parquet", cfg)
        bands.append(tmp_path / f"s{k:02d}.bands.parquet")
        band_keys_shard(sig, bands[-1], cfg)
    runs = sum(len(json.loads(b.with_suffix(".json").read_text())["runs"]) for b in bands)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < runs + 256:
        pytest.skip(f"the hard limit of open files ({hard}) is below what the test needs")
    resource.setrlimit(resource.RLIMIT_NOFILE, (runs // 2, hard))
    try:
        assert sum(len(band_pairs(bands, b)) for b in range(cfg.bands)) > 0
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= runs
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_shards_verdicts_digest_changes_only_with_what_the_clusters_decide_for_its_documents(tmp_path):
    """A grown run takes an old shard's filtered output again when its digest is the same (workflows/reuse.py): a
    cluster change that touches none of its documents leaves it; a new keeper, a new duplicate, or another kind does
    not."""
    import pyarrow as pa

    from textmill.pipeline.dedup import shard_verdicts

    shard = tmp_path / "RS_0-00000.parquet"
    pq.write_table(pa.table({"id": ["a", "b", "c"], "text": ["x", "y", "z"]}), shard)

    def digest(duplicates: dict, exact: list, name: str) -> str:
        clusters = tmp_path / f"{name}.clusters.json"
        clusters.write_text(json.dumps({"duplicates": duplicates, "exact": exact}))
        return shard_verdicts(shard, clusters)

    before = digest({"b": "a", "q": "p"}, [], "before")
    assert digest({"b": "a", "q": "p", "s": "r"}, ["s"], "elsewhere") == before  # another shard's new duplicate
    assert digest({"b": "a"}, [], "gone-elsewhere") == before
    assert digest({"b": "a", "c": "n"}, [], "new-duplicate") != before  # c now duplicates a new document
    assert digest({"b": "m"}, [], "new-keeper") != before
    assert digest({"b": "a"}, ["b"], "exact") != before  # the same keeper, another reason


@pytest.mark.parametrize("seed", range(12))
def test_the_merge_of_sorted_streams_is_their_sorted_union_in_blocks_that_never_split_a_key(seed):
    """merged_blocks against sorting everything at once: streams of few distinct keys (long runs of one key across
    many blocks, streams ending early, empty ones) in blocks of random sizes."""
    import numpy as np

    from textmill.pipeline.dedup import merged_blocks

    rng = np.random.default_rng(seed)
    streams, everything, first = [], [], 0
    for _ in range(rng.integers(1, 9)):
        size = int(rng.integers(0, 60))
        keys = np.sort(rng.integers(0, rng.integers(1, 12), size).astype(np.uint64))
        numbers = np.arange(first, first + size, dtype=np.int64)  # a shard's documents, after the earlier shards'
        first += size
        everything.append((keys, numbers))
        cuts = np.sort(rng.integers(0, size + 1, rng.integers(0, 6)))
        streams.append(iter([(k, n) for k, n in zip(np.split(keys, cuts), np.split(numbers, cuts), strict=True) if len(k)]))
    blocks = list(merged_blocks(streams))
    keys = np.concatenate([k for k, _ in blocks] or [np.zeros(0, np.uint64)])
    numbers = np.concatenate([n for _, n in blocks] or [np.zeros(0, np.int64)])
    all_keys = np.concatenate([k for k, _ in everything])
    all_numbers = np.concatenate([n for _, n in everything])
    order = np.lexsort((all_numbers, all_keys))
    assert keys.tolist() == all_keys[order].tolist() and numbers.tolist() == all_numbers[order].tolist()
    seen = [set(k.tolist()) for k, _ in blocks]
    assert all(not (a & b) for i, a in enumerate(seen) for b in seen[i + 1 :])  # no key in two blocks
