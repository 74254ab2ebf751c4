"""Variants of a run, for an ablation: the run file's [ablation] table names them as overrides of its own tables.

    [ablation]
    seeds = [1, 2]                 # each variant's model is trained once per seed
    baseline = "default"           # the variant the others are compared with (default: the first listed)
    [ablation.variants.default]    # no overrides: the run file as it is
    [ablation.variants.gopher]
    quality = { preset = "gopher" }

A variant is the run file with its tables deep-merged over the file's own (a value replaced, a table's other
keys kept) and `[train] seed` set to one of the seeds; it is checked as the run file is. It is named by a text
that travels as a run file's path does, through Luigi's parameters and to every worker: `PATH#VARIANT@SEED`
(variant_config), which the run file's reader takes apart (split_variant, with_variant). Nothing is written:
each machine derives the variant from the run file it reads.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from pathlib import Path

from textmill.errors import TextmillError

# What separates a run file's path from the variant it names; no run file's name holds it.
MARK = "#"
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
DEFAULT_SEEDS = (1, 2)
# The tables a variant cannot change, and why: what makes the comparison fair is the same for every variant.
SAME_FOR_EVERY_VARIANT = {
    "train": "every variant trains the same proxy model on the same number of tokens, the run file's [train] "
             "([ablation] seeds sets its seed)",
    "evaluate": "every variant is measured alike", "export": "an ablation exports no model",
    "schedule": "an ablation is not scheduled", "storage": "every variant shares the run's store",
    "ablation": "a variant has no variants",
}


@dataclass(frozen=True)
class Ablation:
    """The [ablation] table, read: its variants (name and overrides as JSON text, in the file's order, so that
    the settings stay hashable), the seeds, the baseline's name, and the held-out text files (besides each
    variant's own held-out split and LAMBADA's)."""

    variants: tuple[tuple[str, str], ...]
    seeds: tuple[int, ...]
    baseline: str
    held_out: tuple[Path, ...]

    @property
    def names(self) -> list[str]:
        """The variants' names, the baseline's first."""
        return [self.baseline, *(name for name, _ in self.variants if name != self.baseline)]

    def overrides(self, name: str) -> dict:
        return json.loads(dict(self.variants)[name])

    def configs(self, path: Path) -> list[str]:
        """Every variant of the run file at `path` with every seed, the baseline's first."""
        return [variant_config(path, name, seed) for name in self.names for seed in self.seeds]


def read_ablation(raw: object, where: Path) -> Ablation | None:
    """The [ablation] table of the run file at `where` (None without one); every fault is one error naming it."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise TextmillError(f"{where}: ablation must be an [ablation] table")
    unknown = sorted(set(raw) - {"variants", "seeds", "baseline", "held_out"})
    if unknown:
        raise TextmillError(f"{where}: [ablation] has no field {unknown[0]!r} (variants, seeds, baseline, held_out)")
    variants = raw.get("variants")
    if not isinstance(variants, dict) or not variants:
        raise TextmillError(f"{where}: [ablation] needs variants, each a table [ablation.variants.NAME] of the "
                            "run file's tables it changes (an empty one for the file as it is)")
    for name, overrides in variants.items():
        if not _NAME.fullmatch(name):
            raise TextmillError(f"{where}: [ablation.variants.{name}]: a variant's name is up to 64 letters, digits, "
                                "_ . or -")
        if not isinstance(overrides, dict) or not all(isinstance(t, dict) for t in overrides.values()):
            raise TextmillError(f"{where}: [ablation.variants.{name}] must hold tables of the run file, e.g. "
                                'quality = { preset = "gopher" }')
        fixed = sorted(set(overrides) & set(SAME_FOR_EVERY_VARIANT))
        if fixed:
            raise TextmillError(f"{where}: [ablation.variants.{name}] cannot change [{fixed[0]}]: "
                                f"{SAME_FOR_EVERY_VARIANT[fixed[0]]}")
    seeds = raw.get("seeds", list(DEFAULT_SEEDS))
    if (not isinstance(seeds, list) or not seeds or len(set(seeds)) != len(seeds)
            or not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s < 2**31 for s in seeds)):
        raise TextmillError(f"{where}: [ablation] seeds must be a list of different whole numbers (0 to 2^31 - 1)")
    baseline = raw.get("baseline", next(iter(variants)))
    if baseline not in variants:
        raise TextmillError(f"{where}: [ablation] baseline {baseline!r} is not one of its variants "
                            f"({', '.join(variants)})")
    held_out = raw.get("held_out", [])
    if not isinstance(held_out, list) or not all(isinstance(p, str) and p for p in held_out):
        raise TextmillError(f"{where}: [ablation] held_out must be a list of paths (text or JSON-lines files)")
    return Ablation(tuple((name, json.dumps(overrides, sort_keys=True, default=str)) for name, overrides in variants.items()),
                    tuple(seeds), baseline, tuple((where.parent / p).resolve() for p in held_out))


def variant_config(path: str | Path, variant: str, seed: int) -> str:
    """The name of a variant of the run file at `path`, trained with `seed`: what a task's `config` holds."""
    return f"{Path(path).resolve()}{MARK}{variant}@{seed}"


def split_variant(config: str) -> tuple[str, str | None, int | None]:
    """(the run file's path, the variant's name, its seed) of a variant's name; (config, None, None) otherwise."""
    path, mark, rest = str(config).rpartition(MARK)
    if not mark:
        return str(config), None, None
    variant, at, seed = rest.rpartition("@")
    if not at or not _NAME.fullmatch(variant) or not seed.isascii() or not seed.isdigit():
        raise TextmillError(f"{config}: not a variant of a run file (PATH#VARIANT@SEED)")
    return path, variant, int(seed)


def with_variant(raw: dict, ablation: Ablation | None, path: Path, variant: str, seed: int) -> dict:
    """The run file's tables `raw` with `variant`'s overrides merged in and [train] seed set to `seed`."""
    if ablation is None or variant not in ablation.names:
        known = ", ".join(ablation.names) if ablation else "it has no [ablation] table"
        raise TextmillError(f"{path}: no variant {variant!r} ({known})")
    if seed not in ablation.seeds:
        raise TextmillError(f"{path}: seed {seed} is not one of [ablation] seeds {list(ablation.seeds)}")
    merged = merged_tables(raw, ablation.overrides(variant))
    merged.setdefault("train", {})["seed"] = seed
    return merged


def merged_tables(base: dict, overrides: dict) -> dict:
    """`base` with `overrides` merged in: a table merged key by key, any other value replaced."""
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged_tables(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out
