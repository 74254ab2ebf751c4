"""`textmill inspect --sort FIELD`: the records with the highest (or lowest) values of a column or metadata key."""

import json

from support.files import write_jsonl
from textmill.report.inspect import Selection, inspect


def test_sort_shows_the_highest_scores_first_and_skips_records_without_one(tmp_path):
    scores = [0.3, 0.9, None, 0.1, 0.7, 0.9]
    rows = [{"id": f"d{i}", "text": f"document {i}", **({"metadata": json.dumps({"classifier_score": s})} if s is not None
                                                         else {})} for i, s in enumerate(scores)]
    path = write_jsonl(tmp_path / "scored.jsonl", rows)

    def shown(selection):
        return [line.split(" | ")[0][3:] for line in inspect(path, selection) if line.startswith("id ")]

    assert shown(Selection(3, sort="classifier_score")) == ["d1", "d5", "d4"]  # a tie: file order
    assert shown(Selection(2, sort="classifier_score", ascending=True)) == ["d3", "d0"]
    assert shown(Selection(10, sort="classifier_score")) == ["d1", "d5", "d4", "d0", "d3"]  # d2 has no score
    assert "5 record(s) shown, highest classifier_score first" in inspect(path, Selection(10, sort="classifier_score"))
    assert shown(Selection(2, sort="word_count")) == []  # a field no record has
