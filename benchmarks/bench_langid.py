"""Language identification for the clean stage: seeded langdetect (the baseline) and fastText's compressed
lid.176 model (`[clean] language_detector = "fasttext"`), each as textmill.pipeline.clean calls it.

    python benchmarks/bench_langid.py [--lambada N] [--eval-dir EVAL_DIR]

Documents: the first N LAMBADA passages (English book text, tests/data), generated English prose and
French, German and Spanish paragraphs (textmill.demo.synthweb), and, with --eval-dir, the main text of
the extraction-eval pages (real pages in many languages, extracted by trafilatura). Reports, per
detector, documents/s on one core, and how often the two agree on what the stage decides: English or
not (an undetectable document is not English).
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def documents(lambada: int, eval_dir: Path | None) -> dict[str, list[str]]:
    from textmill.demo import synthweb

    rng = random.Random(1)
    lines = (ROOT / "tests" / "data" / "lambada_test.jsonl").read_text(encoding="utf-8").splitlines()[:lambada]
    sets = {"LAMBADA (English)": [json.loads(line)["text"] for line in lines],
            "generated English": [" ".join(synthweb.prose(rng, 3)) for _ in range(300)],
            "generated fr/de/es": [synthweb.foreign_paragraph(rng, lang, 80) for lang in ("fr", "de", "es") for _ in range(100)]}
    if eval_dir:
        from textmill.pipeline.charset import decode_html
        from textmill.pipeline.extract import extract

        expected = json.loads((eval_dir / "expected.json").read_text(encoding="utf-8"))
        texts = [extract(url, decode_html((eval_dir / "pages" / item["file"]).read_bytes())[0], "trafilatura")[1]
                 for url, item in sorted(expected.items())]
        sets["extraction-eval pages"] = [t for t in texts if t.strip()]
    return sets


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lambada", type=int, default=2000, help="LAMBADA passages to include")
    ap.add_argument("--eval-dir", type=Path, help="the extraction-eval folder (expected.json, pages/), for real pages")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from textmill.pipeline.clean import detect_language
    from textmill.pipeline.stage_configs import CleanConfig

    sets = documents(args.lambada, args.eval_dir)
    print(f"Machine: {platform.processor() or platform.machine()}, Python {platform.python_version()}\n")
    print("| documents | count | langdetect docs/s | fasttext docs/s | speed-up | agreement (English or not) |")
    print("|---|---:|---:|---:|---:|---:|")
    totals = {"count": 0, "agree": 0, "langdetect": 0.0, "fasttext": 0.0}
    for name, texts in sets.items():
        answers, seconds = {}, {}
        for detector in ("langdetect", "fasttext"):
            cfg = replace(CleanConfig(), language_detector=detector)
            started = time.perf_counter()
            answers[detector] = [detect_language(t, cfg) == "en" for t in texts]
            seconds[detector] = time.perf_counter() - started
        agree = sum(a == b for a, b in zip(answers["langdetect"], answers["fasttext"], strict=True))
        totals["count"] += len(texts)
        totals["agree"] += agree
        for detector in seconds:
            totals[detector] += seconds[detector]
        print(f"| {name} | {len(texts)} | {len(texts) / seconds['langdetect']:,.0f} | {len(texts) / seconds['fasttext']:,.0f} "
              f"| {seconds['langdetect'] / seconds['fasttext']:.0f}x | {agree / len(texts):.4f} |")
    n = totals["count"]
    print(f"| all | {n} | {n / totals['langdetect']:,.0f} | {n / totals['fasttext']:,.0f} "
          f"| {totals['langdetect'] / totals['fasttext']:.0f}x | {totals['agree'] / n:.4f} |")


if __name__ == "__main__":
    main()
