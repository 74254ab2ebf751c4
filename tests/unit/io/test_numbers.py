"""One reading of whole numbers from outside: ASCII digits, at most 18 of them; and each place that read numbers
with str.isdigit() then int() (a traceback for `²`, `٣` or 5,000 digits) now says what is wrong in one line."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from textmill.errors import TextmillError
from textmill.io.numbers import whole_number

NOT_NUMBERS = ["", " ", "²", "0²", "٣", "１８", "-1", "+1", "1.0", "1e3", "9" * 19, "9" * 5000, "1 2"]


def test_a_whole_number_is_ascii_digits_and_not_too_many():
    assert whole_number(" 42\n") == 42 and whole_number("0") == 0 and whole_number("9" * 18) == 10**18 - 1
    assert all(whole_number(text) is None for text in NOT_NUMBERS)


@given(st.text(max_size=30))
def test_any_text_is_a_number_or_none_never_an_error(text):
    number = whole_number(text)
    assert number is None or number == int(text.strip())


@pytest.mark.parametrize("said", ["²", "9" * 5000, "٣", "0"])
def test_a_tracker_file_that_is_no_iteration_is_one_line(tmp_path, said):
    from textmill.interop.megatron import checkpoint_folder
    from textmill.trainer.checkpoint import TRACKER, read_tracker

    (tmp_path / TRACKER).write_text(said)
    with pytest.raises(TextmillError, match="iteration"):
        read_tracker(tmp_path)
    with pytest.raises(TextmillError, match="neither 'release' nor an iteration"):
        checkpoint_folder(tmp_path)


@pytest.mark.parametrize("at", ["0²:00", "٣:00", "03:0²", "9" * 5000 + ":00", "24:00", "03:5"])
def test_a_schedule_time_that_is_no_time_is_one_line(at):
    from textmill.run_file import ScheduleSection

    with pytest.raises(TextmillError, match="is not a time of day"):
        ScheduleSection(at=at).hour_minute()
    assert ScheduleSection(at="03:07").hour_minute() == (3, 7)
