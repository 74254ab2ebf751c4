import itertools
import random

import pyarrow.parquet as pq

from textmill.demo import synthweb
from textmill.pipeline.dedup import DedupConfig, dedup_shards, shingles

from conftest import write_jsonl


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
        for r in pq.read_table(tmp_path / "out" / f"{name}.rejects.parquet").to_pylist():
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
    assert sum(m["counts"]["rejected"] for m in manifests) == len(rejected) == sum(clusters["cluster_sizes"]) - len(clusters["cluster_sizes"])


def test_signatures_are_reused_and_output_is_deterministic(tmp_path):
    docs, _ = near_duplicate_corpus(seed=5, families=5, singles=5)
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"id": f"d{i}", "text": t} for i, t in enumerate(docs)])
    cfg = DedupConfig()
    dedup_shards([tmp_path / "in" / "a.jsonl"], tmp_path / "out", cfg)
    sig = tmp_path / "out" / "a.minhash.parquet"
    mtime = sig.stat().st_mtime_ns
    first = (tmp_path / "out" / "a.parquet").read_bytes()
    dedup_shards([tmp_path / "in" / "a.jsonl"], tmp_path / "out", cfg)
    assert sig.stat().st_mtime_ns == mtime
    assert (tmp_path / "out" / "a.parquet").read_bytes() == first
    dedup_shards([tmp_path / "in" / "a.jsonl"], tmp_path / "out", DedupConfig(num_perm=64, bands=8))
    assert sig.stat().st_mtime_ns != mtime  # other parameters: recomputed


def test_char_shingles_like_megatron():
    assert shingles("Abcdef", 5, "char") == {b"abcde", b"bcdef"}
    assert shingles("ab", 5, "char") == {b"ab"}
    assert shingles("One two, three!", 2, "word") == {b"one two", b"two three"}
