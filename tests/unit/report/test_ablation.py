"""An ablation's answer (report/ablation.py): means over seeds, their spread, and a difference called real only
where the seeds do not overlap."""

from textmill.report.ablation import (
    AblationRecord,
    SeedResult,
    VariantResult,
    ablation_table,
    beats,
    verdict_lines,
    winner_lines,
)


def seed(seed: int, bpb: float, accuracy: float, documents: int = 100) -> SeedResult:
    return SeedResult(seed=seed, documents=documents, tokens=50_000, train_tokens=40_000, trained_tokens=80_000,
                      bits_per_byte={"lambada_passages": bpb}, lambada_accuracy={"lambada": accuracy})


RECORD = AblationRecord(config="run.toml", started="2026-11-28_120000", seconds=90.0, baseline="default", variants=[
    VariantResult("default", {}, [seed(1, 2.00, 0.10), seed(2, 2.02, 0.12)]),
    VariantResult("raw", {"clean": {"min_tokens": 0}}, [seed(1, 2.30, 0.05, 140), seed(2, 2.36, 0.06, 140)]),
    VariantResult("gopher", {"quality": {"preset": "gopher"}}, [seed(1, 1.99, 0.13, 80), seed(2, 2.03, 0.11, 80)]),
])


def test_a_difference_is_real_only_where_every_seed_of_one_beats_every_seed_of_the_other():
    assert beats([1.0, 1.1], [1.2, 1.3], lower_is_better=True) and not beats([1.0, 1.25], [1.2, 1.3], True)
    assert beats([0.5, 0.6], [0.3, 0.4], lower_is_better=False) and not beats([0.5, 0.35], [0.3, 0.4], False)


def test_the_table_gives_each_variants_means_spreads_and_differences_to_the_baseline():
    table = ablation_table(RECORD)
    assert table[0] == "| variant | documents | tokens | epochs | lambada_passages bits/byte | lambada LAMBADA accuracy |"
    assert table[2] == "| default (baseline) | 100 | 50,000 | 2.00 | 2.0100 (0.0200) | 0.1100 (0.0200) |"
    assert table[3] == "| raw | 140 | 50,000 | 2.00 | 2.3300 (0.0600) +0.3200* | 0.0550 (0.0100) -0.0550* |"
    assert table[4] == "| gopher | 80 | 50,000 | 2.00 | 2.0100 (0.0400) +0.0000 | 0.1200 (0.0200) +0.0100 |"
    assert AblationRecord.from_dict(RECORD.to_dict()) == RECORD


def test_the_verdicts_say_who_won_on_what_and_whether_it_is_more_than_seed_noise():
    assert verdict_lines(RECORD) == [
        "raw is worse than default on lambada_passages (bits/byte +0.3200, 2 seeds each)",
        "raw is worse than default on lambada (LAMBADA accuracy -0.0550, 2 seeds each)",
        "gopher is within the seeds' spread of default on lambada_passages (bits/byte +0.0000, 2 seeds each)",
        "gopher is within the seeds' spread of default on lambada (LAMBADA accuracy +0.0100, 2 seeds each)"]


def test_results_md_gives_the_last_ablations_answers_after_the_runs(tmp_path):
    from textmill.io.files import write_json
    from textmill.report.results import write_results

    write_json(RECORD.to_dict(), tmp_path / "ablations" / RECORD.started / "ablation.json")
    (tmp_path / "ablations" / "damaged").mkdir()
    (tmp_path / "ablations" / "damaged" / "ablation.json").write_text('{"config": ')
    text = write_results(tmp_path, [], keep=3).read_text()
    section = text[text.index("## Ablations"):].splitlines()
    assert section[2] == "### 2026-11-28_120000: run.toml"
    assert section[4:9] == ablation_table(RECORD) and section[10] == f"- {verdict_lines(RECORD)[0]}"


def test_the_ablations_report_page_shows_its_chart_table_and_verdicts():
    from textmill.report.page import render_ablation_report

    page = render_ablation_report(RECORD)
    assert page.count("data:image/png;base64,") == 1 and "<h2>Ablation</h2>" in page
    assert "<td>raw</td>" in page and "2.3300 (0.0600) +0.3200*" in page
    assert "<li>raw is worse than default on lambada_passages (bits/byte +0.3200, 2 seeds each)</li>" in page
    assert "<h2>Corpus funnel</h2>" not in page


def test_a_measure_a_variant_lacks_is_a_dash_and_no_verdict():
    """A variant whose own held-out split is empty (a corpus of three documents) has no figure for it."""
    import dataclasses

    first = RECORD.variants[0]
    own = [dataclasses.replace(s, bits_per_byte={**s.bits_per_byte, "own_held_out": 1.5}) for s in first.seeds]
    record = dataclasses.replace(RECORD, variants=[VariantResult("default", {}, own), *RECORD.variants[1:]])
    header, *_ = ablation_table(record)
    assert header.split(" | ")[5] == "own_held_out bits/byte"
    assert ablation_table(record)[3].split(" | ")[5] == "-"
    assert not any("own_held_out" in line for line in verdict_lines(record))
    from textmill.report.page import render_ablation_report

    assert render_ablation_report(record).count("data:image/png;base64,") == 1


def test_the_last_lines_say_which_variant_won_on_what_and_by_how_much():
    assert winner_lines(RECORD) == [
        "best on lambada_passages: none, default and gopher tie (bits/byte 2.0100)",
        "best on lambada: gopher (LAMBADA accuracy 0.1200), ahead of default by 0.0100, within the seeds' spread"]
