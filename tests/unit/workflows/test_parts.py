"""Which unit is in which part of a corpus of the parts form (workflows/parts.py)."""

import json

import pytest

from textmill.run_file import load_config
from textmill.workflows.memos import forget
from textmill.workflows.parts import corpus_parts, part_of_bucket, write_ledger


def settings_of(root, lists: list[str], form: str = "parts"):
    """A run over one URL list per name (a unit each), with GPT-2's vocabulary named as the parts form needs."""
    (root / "urls").mkdir(exist_ok=True)
    for stale in (root / "urls").iterdir():
        stale.unlink()
    for name in lists:
        (root / "urls" / f"{name}.txt").write_text(f"http://{name.lower()}.example/a\n")
    (root / "vocab.json").write_text("{}")
    (root / "merges.txt").write_text("#version: 0.2\n")
    (root / "run.toml").write_text(f'[run]\nwork_dir = "{root / "work"}"\nurls = ["urls"]\ncorpus_form = "{form}"\n'
                                   '[tokenize]\nvocab_file = "vocab.json"\nmerge_file = "merges.txt"\n[train]\nenabled = false\n')
    forget()
    return load_config(root / "run.toml")


def test_a_runs_new_units_form_one_new_part_after_the_listed_ones(tmp_path):
    day1 = settings_of(tmp_path, ["RS_0", "RS_1"])
    assert corpus_parts(day1) == ((0, 1),)  # nothing listed yet: every unit is new
    write_ledger(day1)
    assert json.loads((tmp_path / "work" / ".textmill" / "parts.json").read_text()) == \
        {"parts": [["RS_0-00000", "RS_1-00000"]]}

    day2 = settings_of(tmp_path, ["RS_0", "RS_1", "RS_2", "RS_3"])
    assert corpus_parts(day2) == ((0, 1), (2, 3))
    write_ledger(day2)
    # A list that sorts first is still new; a unit gone leaves its part; a part left empty is gone.
    day3 = settings_of(tmp_path, ["RS_00", "RS_1", "RS_2"])
    assert corpus_parts(day3) == ((1,), (2,), (0,))
    day4 = settings_of(tmp_path, ["RS_2", "RS_3"])
    assert corpus_parts(day4) == ((0, 1),)


def test_the_single_form_is_one_part_of_every_unit_and_writes_no_list(tmp_path):
    single = settings_of(tmp_path, ["RS_0", "RS_1", "RS_2"], form="single")
    assert corpus_parts(single) == ((0, 1, 2),)
    write_ledger(single)
    assert not (tmp_path / "work" / ".textmill" / "parts.json").exists()


def test_a_shuffled_shard_belongs_to_the_part_whose_shards_it_is_among():
    plan = {"num_shards": 7, "part_shards": [4, 1, 2]}
    assert [part_of_bucket(plan, b) for b in range(7)] == \
        [(0, 0, 4)] * 4 + [(1, 4, 1)] + [(2, 5, 2)] * 2
    assert part_of_bucket({"num_shards": 3}, 2) == (0, 0, 3)  # the single form's plan: one part
    with pytest.raises(IndexError):
        part_of_bucket(plan, 7)
