"""report.html rendered from a fixed run record: what each section shows is what the run got to, text from the
web is escaped, and the time chart draws any record."""

import warnings

from textmill.report.charts import times_chart
from textmill.report.page import render_report
from textmill.report.samples import histogram
from textmill.report.record import RunRecord


def finished_record() -> RunRecord:
    return RunRecord.from_dict({"run": "2026-11-25T10-00-00", "config": "run.toml", "status": "done", "seconds": 42.0,
            "started": "2026-11-25 10:00:00",
            "funnel": [{"stage": "blacklist", "shards": 1, "input": 10, "kept": 8, "rejected": 2, "rows_out": 8,
                        "reasons": {"duplicate": 2}, "output": "/w/1-blacklist/k", "seconds": 0.1,
                        "records_per_s": 100.0, "mb_per_s": 1.0, "bytes": 2048}],
            "dedup": {"cluster_sizes": [2, 3], "documents": 8},
            "decontaminate": {"used": 5, "eval_ngrams": 9, "documents_touched": 1, "characters_removed": 40,
                              "touched": [{"url": "http://127.0.0.1/<script>alert(1)</script>", "id": "a", "pieces": 2,
                                           "characters_removed": 40}]},
            "corpus": {"documents": 5, "tokens": 500, "dataset": "/w/9-dataset/k/corpus_text_document",
                       "histograms": {"characters": histogram([900, 1200, 4000, 350, 2200]),
                                      "tokens": histogram([200, 260, 900, 80, 500])}},
            "seconds_per_stage": {"blacklist": 0.5, "scrape": 12.0}})


def test_a_corpus_run_shows_its_funnel_clusters_cuts_documents_and_times_and_no_training():
    page = render_report(finished_record(), [])
    for section in ("Corpus funnel", "Near-duplicate clusters", "Decontamination", "Documents", "Time per stage"):
        assert f"<h2>{section}</h2>" in page, section
    assert "<h2>Training</h2>" not in page and "<h2>Evaluation</h2>" not in page
    assert page.count("data:image/png;base64,") == 5  # funnel, clusters, two histograms, times
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "2 cluster(s) of 8 documents; 3 removed (one kept per cluster)." in page


def test_a_failed_run_shows_what_failed_and_only_what_it_got_to():
    record = RunRecord(run="r", config="run.toml", status="failed", seconds=3.0, started="s",
                       failed=["ScrapeShard(RS_1): IsADirectoryError <x>"])
    page = render_report(record, [])
    assert "Failed: ScrapeShard(RS_1): IsADirectoryError &lt;x&gt;" in page and "<h2>" not in page


def test_the_time_chart_draws_stages_that_took_no_measurable_time_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for seconds in ({"blacklist": 0.0}, {"blacklist": 0.0, "scrape": 3.5}, {"train": 7200.0, "blacklist": 0.01}):
            assert times_chart(seconds).startswith("data:image/png;base64,")


def test_a_run_with_a_classifier_shows_its_held_out_figures_and_its_scores():
    import dataclasses

    from textmill.report.lines import classifier_line

    trained = {"trained_positives": 90, "trained_negatives": 90, "held_out_positives": 10, "held_out_negatives": 10,
               "auc": 0.97, "held_out_kept_fraction": 0.45, "precision_at_kept_fraction": 0.9,
               "score_histogram": [5, 1, 0, 0, 0, 0, 0, 1, 2, 30]}
    assert classifier_line(trained) == (
        "  classifier: trained on 90 positives and 90 negatives; held out 10 + 10: AUC 0.970, its rule keeps 45.0% at "
        "precision 0.900; documents by score in tenths: 5 1 0 0 0 0 0 1 2 30")
    page = render_report(dataclasses.replace(finished_record(), classifier=trained), [])
    assert "<h2>Quality classifier</h2>" in page and "AUC 0.970" in page
    assert page.count("data:image/png;base64,") == 6  # the scores' chart beside the five others
    given = {"model": "dclm.bin", "labels": 2, "label": "__label__hq", "score_histogram": [0] * 9 + [3]}
    assert classifier_line(given).startswith("  classifier: fastText model dclm.bin (2 labels), score = P(__label__hq)")
