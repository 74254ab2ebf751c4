"""The parts of a corpus ([run] corpus_form = "parts"): the units a run adds to an earlier run's are shuffled and
tokenized as a part of their own, and training blends the parts' token files in proportion to their tokens.

Which unit is in which part is the corpus's history, not its content, so it is written down: WORK/.textmill/parts.json
lists each part's units by name, in the order the parts were made. A run reads it once per process: each unit it
lists stays in its part, and the units it does not list form one new part after them. The shuffle's plan
(shuffle_tasks.ShufflePlan) writes the list with the new part when it plans, so the processes of a run that start
before or after that cut the same parts. A unit gone from the input leaves its part (which is shuffled again); a part
left with no unit is gone.

In the single form (the default, and every stage command) the corpus is one part of every unit.
"""

from __future__ import annotations

from pathlib import Path

from textmill.io.files import read_json_record, write_json
from textmill.io.store import publish
from textmill.run_file import RunConfig
from textmill.workflows.framework import input_units, unit_name
from textmill.workflows.memos import CORPUS_PARTS


def in_parts(settings: RunConfig) -> bool:
    return settings.run.corpus_form == "parts" and settings.command is None


def ledger_path(settings: RunConfig) -> Path:
    return settings.run.work_dir / ".textmill" / "parts.json"


def corpus_parts(settings: RunConfig) -> tuple[tuple[int, ...], ...]:
    """The units (shard numbers, in order) of each part of the corpus, the earliest part first."""
    if settings not in CORPUS_PARTS:
        names = [unit_name(unit) for unit in input_units(settings)]
        if not in_parts(settings):
            CORPUS_PARTS[settings] = (tuple(range(len(names))),)
        else:
            listed = (read_json_record(ledger_path(settings), "every unit is taken as new") or {}).get("parts", [])
            part_of = {name: number for number, part in enumerate(listed) for name in part}
            parts: list[list[int]] = [[] for _ in range(len(listed) + 1)]  # the listed parts, then the new one
            for shard, name in enumerate(names):
                parts[part_of.get(name, len(listed))].append(shard)
            CORPUS_PARTS[settings] = tuple(tuple(part) for part in parts if part)
    return CORPUS_PARTS[settings]


def write_ledger(settings: RunConfig) -> None:
    """Write down this run's parts (by their units' names), once its shuffle is planned."""
    if in_parts(settings):
        units = input_units(settings)
        path = ledger_path(settings)
        write_json({"parts": [[unit_name(units[shard]) for shard in part] for part in corpus_parts(settings)]}, path)
        publish([path])


def part_of_bucket(plan: dict, bucket: int) -> tuple[int, int, int]:
    """Which part shuffled shard `bucket` belongs to, by the shuffle's plan: (part, its first bucket, its count)."""
    first = 0
    for number, count in enumerate(plan.get("part_shards", [plan["num_shards"]])):
        if bucket < first + count:
            return number, first, count
        first += count
    raise IndexError(f"shuffled shard {bucket} is past the plan's {first}")
