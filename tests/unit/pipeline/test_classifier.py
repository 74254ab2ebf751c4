"""The quality classifier (pipeline/classifier.py): sampling that no order changes, GPT-3's Pareto rule drawn per
document, AUC against a hand count, a model that loads without running code, and the stage over a shard."""

import json
import random

import numpy as np
import pytest

from support.files import write_jsonl
from textmill.demo import synthweb
from textmill.pipeline import classifier
from textmill.pipeline.stage_configs import ClassifyConfig


def test_sampling_by_hash_takes_the_same_texts_whatever_their_order():
    texts = [f"document {i}" for i in range(500)]
    chosen = classifier.sample_texts(texts, 50, seed=3)
    shuffled = texts[:]
    random.Random(1).shuffle(shuffled)
    assert chosen == classifier.sample_texts(shuffled, 50, seed=3) and len(set(chosen)) == 50
    assert chosen != classifier.sample_texts(texts, 50, seed=4)
    assert sorted(classifier.sample_texts(texts[:10], 50, seed=3)) == sorted(texts[:10])  # fewer than asked: all


def test_the_pareto_rule_is_gpt3s_drawn_once_per_document_text():
    cfg = ClassifyConfig(rule="pareto", pareto_alpha=9.0)
    texts = [f"page {i}" for i in range(2000)]
    scores = np.linspace(0, 1, len(texts))
    kept = classifier.keeps(scores, texts, cfg, seed=7)
    # By hand: np.random.pareto(9) > 1 - score, the draw's generator seeded by the seed and the text's hash.
    by_hand = [np.random.default_rng([7, classifier.text_hash(t, 7)]).pareto(9.0) > 1 - s
               for t, s in zip(texts, scores, strict=True)]
    assert kept.tolist() == by_hand
    assert (classifier.keeps(scores[::-1], texts[::-1], cfg, seed=7) == kept[::-1]).all()  # order does not matter
    # A low score keeps few, a high one nearly all: P(Pareto(9) > 1 - s) = (2 - s)^-9 for s < 1.
    assert kept[scores < 0.2].mean() < 0.05 and kept[scores > 0.9].mean() > 0.5
    assert (classifier.keeps(np.array([0.5, 0.49]), ["a", "b"], ClassifyConfig(rule="threshold"), 7) == [True, False]).all()


def test_auc_is_the_share_of_positive_negative_pairs_in_order_ties_half():
    # Pairs (positive, negative): (0.35, 0.1) yes, (0.35, 0.4) no, (0.8, 0.1) yes, (0.8, 0.4) yes: 3 of 4.
    assert classifier.auc(np.array([0.1, 0.4, 0.35, 0.8]), np.array([0, 0, 1, 1])) == 0.75
    assert classifier.auc(np.array([0.5, 0.5]), np.array([0, 1])) == 0.5
    assert np.isnan(classifier.auc(np.array([0.5, 0.6]), np.array([1, 1])))


def documents(seed: int, count: int, english: bool) -> list[str]:
    rng = random.Random(seed)
    if english:
        return ["\n\n".join(synthweb.prose(rng, 2)) for _ in range(count)]
    return [synthweb.foreign_paragraph(rng, ("fr", "de", "es")[i % 3], 60) for i in range(count)]


def test_a_trained_model_separates_what_it_was_shown_and_loads_back_without_pickle(tmp_path):
    cfg = ClassifyConfig(positives=(tmp_path,), max_per_class=300, held_out=0.2, hash_bits=16)
    model, evaluation, counts = classifier.train(documents(1, 300, True), documents(2, 400, False), cfg, seed=5)
    assert counts == {"trained_positives": 240, "trained_negatives": 240}  # balanced: the smaller kind's count
    assert evaluation.positives == evaluation.negatives == 60 and evaluation.auc == 1.0
    model.save(tmp_path / "model")
    loaded = classifier.LinearClassifier.load(tmp_path / "model")
    texts = documents(3, 5, True) + documents(4, 5, False)
    assert np.array_equal(loaded.scores(texts), model.scores(texts))
    assert (loaded.scores(texts)[:5] > 0.5).all() and (loaded.scores(texts)[5:] < 0.5).all()
    again, _, _ = classifier.train(documents(1, 300, True), documents(2, 400, False), cfg, seed=5)
    assert np.array_equal(again.weights, model.weights)  # deterministic

    np.save(tmp_path / "model" / "weights.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="allow_pickle"):  # an object array would need pickle: refused, not run
        classifier.LinearClassifier.load(tmp_path / "model")
    (tmp_path / "model" / "model.json").write_text(json.dumps({"kind": "other"}))
    with pytest.raises(ValueError, match="not a textmill classifier"):
        classifier.LinearClassifier.load(tmp_path / "model")
    with pytest.raises(ValueError, match="too few documents"):
        classifier.train(["one"], ["two"], cfg, seed=5)


def test_the_stage_keeps_by_score_and_writes_each_score_into_the_metadata(tmp_path):
    cfg = ClassifyConfig(positives=(tmp_path,), rule="threshold", hash_bits=16, max_per_class=200)
    model, _, _ = classifier.train(documents(1, 200, True), documents(2, 200, False), cfg, seed=5)
    model.save(tmp_path / "model")
    rows = [{"id": f"en-{i}", "text": t, "metadata": json.dumps({"source": "x"})} for i, t in enumerate(documents(6, 4, True))]
    rows += [{"id": f"fr-{i}", "text": t} for i, t in enumerate(documents(7, 3, False))]
    manifest = classifier.classify_shard(write_jsonl(tmp_path / "in.jsonl", rows), tmp_path / "out.parquet", cfg,
                                         tmp_path / "model")
    assert (manifest["counts"]["input"], manifest["counts"]["kept"], manifest["counts"]["rejected"]) == (7, 4, 3)
    assert manifest["reasons"] == {"low_score": 3} and sum(manifest["score_histogram"]) == 7

    import pyarrow.parquet as pq

    kept = pq.read_table(tmp_path / "out.parquet").to_pylist()
    meta = [json.loads(r["metadata"]) for r in kept]
    assert [r["id"] for r in kept] == [f"en-{i}" for i in range(4)] and all(m["source"] == "x" for m in meta)
    assert all(m[classifier.SCORE_KEY] >= 0.5 for m in meta)


def test_a_score_joins_whatever_metadata_the_document_had():
    assert json.loads(classifier.with_score(None, 0.25)) == {"classifier_score": 0.25}
    assert json.loads(classifier.with_score('{"lang": "en"}', 1)) == {"classifier_score": 1.0, "lang": "en"}
    assert json.loads(classifier.with_score('[1, 2]', 0.5)) == {"classifier_score": 0.5, "metadata": [1, 2]}
    assert json.loads(classifier.with_score("not json", 0.5)) == {"classifier_score": 0.5, "metadata": "not json"}


def test_what_a_classifier_is_keyed_by():
    trained = ClassifyConfig(positives=("p",), rule="threshold")
    assert set(trained.params()) == {"rule", "threshold", "max_per_class", "held_out", "hash_bits", "ngrams",
                                     "regularization", "seed"}
    given = ClassifyConfig(model="m.bin", label="__label__hq")
    assert set(given.params()) == {"label", "rule", "pareto_alpha", "seed"} and given.enabled
    assert not ClassifyConfig().enabled
