"""A stage's one-line summary gives its throughput."""

from support.files import write_jsonl


def test_a_stage_summary_gives_its_throughput(tmp_path):
    from textmill.pipeline.stage_configs import ShuffleConfig
    from textmill.report.lines import stage_summary
    from textmill.workflows.commands import run_stage

    write_jsonl(tmp_path / "in" / "d.jsonl", [{"id": str(i), "text": "some words " * 50} for i in range(400)])
    manifests = run_stage("shuffle", [tmp_path / "in" / "d.jsonl"], tmp_path / "out",
                          {"shuffle": ShuffleConfig(num_shards=2, seed=1)}).manifests
    written = sum((tmp_path / "out" / f"part-{b:05d}.parquet").stat().st_size for b in range(2))
    s = stage_summary("shuffle", manifests, tmp_path / "out", 2.0)
    assert s.records_per_s == 200 and s.mb_per_s == round(written / 2**20 / 2.0, 3)
    assert stage_summary("shuffle", manifests, tmp_path / "out", 0.0).records_per_s is None


def test_a_reason_that_loses_wanted_pages_is_warned_about_early():
    """Half of a stage's input rejected for one reason is worth a warning; pages lost to the extraction limit
    are worth one from 2%."""
    from textmill.report.lines import reject_warning
    from textmill.report.record import StageCounts

    def scrape(reasons: dict) -> StageCounts:
        rejected = sum(reasons.values())
        return StageCounts(stage="scrape", shards=1, input=100, kept=100 - rejected, rejected=rejected,
                           rows_out=100 - rejected, reasons=reasons, output="o", seconds=1.0)

    assert reject_warning(scrape({"status=404": 40, "extraction_timeout": 2})) is None
    warned = reject_warning(scrape({"status=404": 40, "extraction_timeout": 3}))
    assert warned.startswith("warning: scrape rejected 3 of 100 (3%) as extraction_timeout: pages needed more CPU")
    assert "as status=404" in reject_warning(scrape({"status=404": 51, "extraction_timeout": 3}))


def test_a_summary_names_the_largest_reasons_and_counts_the_rest():
    from textmill.report.lines import reasons_text

    reasons = {f"reason_{i:02d}": i + 1 for i in range(11)}  # 11 reasons rejecting 1 .. 11 records
    text = reasons_text(reasons)
    assert text.startswith("reason_10 11, reason_09 10, reason_08 9")
    assert text.endswith(", reason_03 4, and 3 more reason(s) rejecting 6")  # reason_02, 01, 00: 3 + 2 + 1
    assert reasons_text({}) == "none" and reasons_text({"a": 1}) == "a 1"


def test_a_stage_line_says_what_its_tasks_cost_this_run():
    from pathlib import Path

    from textmill.report.lines import stage_line, stage_summary

    manifests = [{"output": f"s{i}.parquet", "bytes": 10, "counts": {"input": 5, "kept": 5, "rejected": 0},
                  "reasons": {}} for i in range(3)]
    counts = stage_summary("clean", manifests, Path("/w/4-clean/k"), 1.0, {"made": 1, "taken": 2, "earlier": 0})
    assert stage_line(counts) == ("clean: 3 shard(s), 15 in, 15 kept, 0 rejected (none) -> /w/4-clean/k [1.0s; tasks: "
                                  "1 made, 2 taken from earlier output, 0 done before this run]")
    # a record of an older textmill, which did not count them
    assert stage_line(stage_summary("clean", manifests, Path("/w/4-clean/k"), 1.0)).endswith("-> /w/4-clean/k [1.0s]")
