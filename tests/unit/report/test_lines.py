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
