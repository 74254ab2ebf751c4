"""The run's TOML file through `textmill run`: the documented example is the defaults, and a bad file stops before any work."""

from support.cli import run_cli
from textmill.run_file import RunConfig, example_config, load_config


def test_the_documented_example_is_the_defaults(tmp_path):
    printed = run_cli("run", "--example-config")
    assert printed.returncode == 0 and printed.stdout == example_config()
    (tmp_path / "run.toml").write_text(example_config())
    settings = load_config(tmp_path / "run.toml")
    defaults = RunConfig(path=tmp_path / "run.toml")
    for section in ("blacklist", "scrape", "dedup", "clean", "shuffle", "decontaminate", "tokenize", "evaluate", "export",
                    "schedule"):
        assert getattr(settings, section) == getattr(defaults, section), section
    assert settings.run.work_dir == tmp_path / "work" and settings.run.results_runs == defaults.run.results_runs
    assert settings.train.resume == "fresh" and settings.trainer.train_iters == 300
    assert settings.schedule.hour_minute() == (3, 0)


def test_run_refuses_a_bad_config_before_any_work(tmp_path):
    (tmp_path / "run.toml").write_text("[train]\ntrain_iters = 5\nseq_length = 1024\n")
    r = run_cli("run", str(tmp_path / "run.toml"))
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        f"textmill: error: {tmp_path / 'run.toml'}: [train] --seq-length 1024 is longer than --max-position-embeddings 256"]
    assert not (tmp_path / "work").exists()
