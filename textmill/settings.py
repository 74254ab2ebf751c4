"""Ranges of numeric settings, declared on the dataclass field that defines the setting, and checked when
the dataclass is built: a bad value is one error line before any work, whether it came from a flag or from
the run's TOML file."""

from __future__ import annotations

from dataclasses import field, fields

from textmill.errors import TextmillError

SEED_MAX = 2**32 - 1  # numpy's RandomState, which the shuffle, MinHash and the data index use, takes no more


def ranged(default, *, least=None, most=None, above=None):
    """A dataclass field whose value must be >= `least`, <= `most` and > `above` (each where given)."""
    return field(default=default, metadata={"least": least, "most": most, "above": above})


def check_ranges(obj) -> None:
    """Raise TextmillError naming the first field of the dataclass `obj` outside its declared range (NaN is
    outside every range)."""
    for f in fields(obj):
        value = getattr(obj, f.name)
        least, most, above = (f.metadata.get(k) for k in ("least", "most", "above"))
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if least is not None and not value >= least:
            raise TextmillError(f"{f.name} must be at least {least}, not {value}")
        if above is not None and not value > above:
            raise TextmillError(f"{f.name} must be more than {above}, not {value}")
        if most is not None and not value <= most:
            raise TextmillError(f"{f.name} must be at most {most}, not {value}")
