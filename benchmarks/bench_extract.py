"""Main-text extraction measured on real pages: newspaper3k and trafilatura, each as the scrape stage runs it
(textmill.pipeline.extract, after the page is decoded as scrape decodes it).

    python benchmarks/bench_extract.py --eval-dir EVAL_DIR [--limit N]

The evaluation set is saved web pages, each with snippets its main text must hold (`with`) and boilerplate
it must not (`without`), from trafilatura's evaluation (its SOURCES.md says where from). Scored as that
project scores extractors: whitespace collapsed, a `with` snippet found is a true positive and one
missing a false negative, a `without` snippet found a false positive and one absent a true negative;
recall, false-positive rate, precision and F1 from the counts over all pages. English pages are those
whose `with` snippets langdetect (seeded) reads as English. Speed: pages a second on one core, each
extractor in this process, one page at a time; newspaper3k is the baseline of the ratio.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXTRACTORS = ("newspaper", "trafilatura")


def collapse(text: str) -> str:
    return " ".join(text.split())


def is_english(snippets: list[str]) -> bool:
    from langdetect import DetectorFactory, LangDetectException, detect

    DetectorFactory.seed = 0
    try:
        return detect(" ".join(snippets)) == "en"
    except LangDetectException:
        return False


def score(rows: list[dict]) -> dict:
    """Counts over the pages, and the rates and F1 from them."""
    tp = sum(r["found"] for r in rows)
    fn = sum(r["missed"] for r in rows)
    fp = sum(r["boilerplate"] for r in rows)
    tn = sum(r["clean"] for r in rows)
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    return {"pages": len(rows), "recall": recall, "fp_rate": fp / (fp + tn) if fp + tn else 0.0,
            "precision": precision, "f1": 2 * precision * recall / (precision + recall) if precision + recall else 0.0,
            "empty": sum(r["empty"] for r in rows)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--eval-dir", type=Path, required=True,
                    help="folder with expected.json and pages/ (the team's extraction-eval data)")
    ap.add_argument("--limit", type=int, default=0, help="only the first N pages (0: all)")
    args = ap.parse_args()
    if not (args.eval_dir / "expected.json").is_file():
        raise SystemExit(f"bench_extract: no expected.json in {args.eval_dir}; give --eval-dir")
    sys.path.insert(0, str(ROOT))
    from textmill.pipeline.charset import decode_html
    from textmill.pipeline.extract import extract

    expected = json.loads((args.eval_dir / "expected.json").read_text(encoding="utf-8"))
    pages = sorted(expected.items())[: args.limit or None]
    english = {url: is_english(item["with"]) for url, item in pages}
    print(f"Machine: {platform.processor() or platform.machine()}, Python {platform.python_version()}; "
          f"{len(pages)} pages, {sum(english.values())} English\n")
    results, seconds = {}, {}
    for name in EXTRACTORS:
        rows, started = [], time.perf_counter()
        for url, item in pages:
            html = decode_html((args.eval_dir / "pages" / item["file"]).read_bytes())[0]
            try:
                text = collapse(extract(url.split("::")[-1], html, name)[1])
            except Exception:  # the page is a miss for this extractor, as scrape rejects it
                text = ""
            found = sum(collapse(s) in text for s in item["with"])
            boilerplate = sum(collapse(s) in text for s in item["without"])
            rows.append({"url": url, "found": found, "missed": len(item["with"]) - found, "boilerplate": boilerplate,
                         "clean": len(item["without"]) - boilerplate, "empty": not text})
        seconds[name] = time.perf_counter() - started
        results[name] = rows
    print("| extractor | pages | recall | false positives | precision | F1 | English recall | English F1 | empty "
          "| pages/s (one core) | speed vs newspaper3k |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in EXTRACTORS:
        whole = score(results[name])
        en = score([r for r in results[name] if english[r["url"]]])
        rate = len(pages) / seconds[name]
        print(f"| {name} | {whole['pages']} | {whole['recall']:.3f} | {whole['fp_rate']:.3f} | {whole['precision']:.3f} "
              f"| {whole['f1']:.3f} | {en['recall']:.3f} | {en['f1']:.3f} | {whole['empty']} | {rate:.1f} "
              f"| {rate / (len(pages) / seconds['newspaper']):.2f}x |")


if __name__ == "__main__":
    main()
