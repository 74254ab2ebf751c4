"""The run's TOML file: the documented example is what the defaults are, and bad values are one error."""

import pytest

from textmill.config import EXAMPLE, RunConfig, load_config
from textmill.errors import TextmillError

from conftest import run_cli


def test_the_documented_example_is_the_defaults(tmp_path):
    printed = run_cli("run", "--example-config")
    assert printed.returncode == 0 and printed.stdout == EXAMPLE
    (tmp_path / "run.toml").write_text(EXAMPLE)
    cfg = load_config(tmp_path / "run.toml")
    defaults = RunConfig(path=tmp_path / "run.toml")
    for section in ("blacklist", "scrape", "dedup", "clean", "shuffle", "decontaminate", "evaluate", "export", "schedule"):
        assert getattr(cfg, section) == getattr(defaults, section), section
    assert cfg.run.work_dir == tmp_path / "work" and cfg.run.results_runs == defaults.run.results_runs
    assert cfg.train.resume == "fresh" and "--train-iters" in cfg.train.options
    assert cfg.schedule.hour_minute() == (3, 0)


@pytest.mark.parametrize("text, error", [
    ('[train]\nresume = "sometimes"', '[train] resume must be "fresh" or "latest", not \'sometimes\''),
    ('[train]\nresume = "latest"', '[train] resume = "latest" needs [tokenize] vocab_file'),
    ('[schedule]\nat = "3am"', "[schedule] at: '3am' is not a time of day HH:MM"),
    ('[schedule]\nat = "12:5"', "[schedule] at: '12:5' is not a time of day HH:MM"),
    ("[run]\nresults_runs = 0", "[run] results_runs must be at least 1"),
    ("[train]\nsave = \"x\"", "[train] save: the workflow sets --save itself"),
    ("[train]\nno_such_option = 1", "[train] no_such_option: `textmill train` has no option --no-such-option"),
])
def test_a_bad_value_is_one_error_naming_the_field(tmp_path, text, error):
    (tmp_path / "run.toml").write_text(text + "\n")
    with pytest.raises(TextmillError) as raised:
        load_config(tmp_path / "run.toml")
    assert error in str(raised.value)
