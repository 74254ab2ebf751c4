"""Whole numbers from outside textmill (a file, a header, a setting, a prompt), read one way.

`str.isdigit()` also takes `²`, `٣` and digits of every script, which `int()` refuses or reads as another
number, and `int()` refuses strings past 4,300 digits: checked with isdigit, then read with int, each of those
ended a command in a traceback. Here a number is ASCII digits and at most MAX_DIGITS of them (no count, size or
iteration textmill reads needs more), else it is not one.
"""

from __future__ import annotations

MAX_DIGITS = 18


def whole_number(text: str) -> int | None:
    """`text` (surrounding whitespace aside) as a non-negative int, or None when it is not ASCII digits alone or
    has more than MAX_DIGITS of them."""
    text = text.strip()
    if not text or len(text) > MAX_DIGITS or not (text.isascii() and text.isdigit()):
        return None
    return int(text)
