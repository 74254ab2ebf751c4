"""An ablation's record (WORK/ablations/<date_time>/ablation.json), typed, and its answer: a table of the variants
and the lines that say which won on what, by how much, and whether the difference is more than seed noise.

Every variant's model is trained once per seed. A measure's value for a variant is the mean over its seeds, and
its spread the range (largest minus smallest). A difference from the baseline is called real only when the seeds
do not overlap: every seed of one variant is better than every seed of the other (with two seeds a difference
inside either variant's spread never is).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from textmill.report.record import Part, known


@dataclass(frozen=True)
class SeedResult(Part):
    """One variant's model trained with one seed: its corpus (the same for every seed), what it trained on, and
    its evaluations: bits per byte per held-out set (lower is better), LAMBADA accuracy per file (higher is)."""

    seed: int
    documents: int
    tokens: int
    train_tokens: int  # tokens of the corpus's training split
    trained_tokens: int  # tokens the model was trained on: iterations x batch x sequence
    bits_per_byte: dict[str, float]
    lambada_accuracy: dict[str, float] = field(default_factory=dict)

    @property
    def epochs(self) -> float:
        """How many times over its training split the model went (under 1: it stopped early)."""
        return self.trained_tokens / self.train_tokens if self.train_tokens else float("inf")


@dataclass(frozen=True)
class VariantResult(Part):
    name: str
    overrides: dict
    seeds: list[SeedResult]

    @classmethod
    def from_dict(cls, raw: dict) -> VariantResult:
        return cls(**known(cls, {**raw, "seeds": [SeedResult.from_dict(s) for s in raw["seeds"]]}))

    def values(self, measure: str, name: str) -> list[float]:
        return [getattr(seed, measure)[name] for seed in self.seeds if name in getattr(seed, measure)]


@dataclass
class AblationRecord(Part):
    config: str
    started: str
    seconds: float
    baseline: str
    variants: list[VariantResult]

    @classmethod
    def from_dict(cls, raw: dict) -> AblationRecord:
        return cls(**known(cls, {**raw, "variants": [VariantResult.from_dict(v) for v in raw["variants"]]}))

    def measures(self) -> list[tuple[str, str, bool]]:
        """(measure, held-out set or file, whether lower is better) of every evaluation any variant has, in the
        order shown (a variant whose own held-out split is empty has no figure for it)."""
        seeds = [seed for variant in self.variants for seed in variant.seeds]
        return ([("bits_per_byte", name, True) for name in dict.fromkeys(n for s in seeds for n in s.bits_per_byte)]
                + [("lambada_accuracy", name, False) for name in dict.fromkeys(n for s in seeds for n in s.lambada_accuracy)])

    def variant(self, name: str) -> VariantResult:
        return next(v for v in self.variants if v.name == name)


def mean_and_spread(values: list[float]) -> tuple[float, float]:
    return sum(values) / len(values), max(values) - min(values)


def beats(ours: list[float], theirs: list[float], lower_is_better: bool) -> bool:
    """Whether every seed of ours is better than every seed of theirs."""
    return max(ours) < min(theirs) if lower_is_better else min(ours) > max(theirs)


UNITS = {"bits_per_byte": "bits/byte", "lambada_accuracy": "LAMBADA accuracy"}


def ablation_rows(record: AblationRecord) -> tuple[list[str], list[list[str]]]:
    """The table's header and rows: corpus, training, and each evaluation's mean (spread) and difference to the
    baseline, marked * where the seeds do not overlap."""
    measures = record.measures()
    header = ["variant", "documents", "tokens", "epochs"] + [f"{name} {UNITS[m]}" for m, name, _ in measures]
    base, rows = record.variant(record.baseline), []
    for variant in record.variants:
        first = variant.seeds[0]
        cells = [variant.name + (" (baseline)" if variant.name == record.baseline else ""), f"{first.documents:,}",
                 f"{first.tokens:,}", f"{first.epochs:.2f}"]
        for measure, name, lower in measures:
            values, theirs = variant.values(measure, name), base.values(measure, name)
            if not values:
                cells.append("-")
                continue
            mean, spread = mean_and_spread(values)
            cell = f"{mean:.4f} ({spread:.4f})"
            if variant is not base and theirs:
                real = beats(values, theirs, lower) or beats(theirs, values, lower)
                cell += f" {mean - mean_and_spread(theirs)[0]:+.4f}{'*' if real else ''}"
            cells.append(cell)
        rows.append(cells)
    return header, rows


def ablation_table(record: AblationRecord) -> list[str]:
    """The variants as a Markdown table (ablation_rows)."""
    header, rows = ablation_rows(record)
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *("| " + " | ".join(r) + " |" for r in rows)]


def verdict_lines(record: AblationRecord) -> list[str]:
    """A line per variant and evaluation: better, worse, or within the seeds' spread of the baseline."""
    base, lines = record.variant(record.baseline), []
    for variant in record.variants:
        if variant is base:
            continue
        for measure, name, lower in record.measures():
            ours, theirs = variant.values(measure, name), base.values(measure, name)
            if not ours or not theirs:
                continue
            difference = mean_and_spread(ours)[0] - mean_and_spread(theirs)[0]
            if beats(ours, theirs, lower):
                said = "better than"
            elif beats(theirs, ours, lower):
                said = "worse than"
            else:
                said = "within the seeds' spread of"
            lines.append(f"{variant.name} is {said} {base.name} on {name} ({UNITS[measure]} {difference:+.4f}, "
                         f"{len(ours)} seeds each)")
    return lines


def winner_lines(record: AblationRecord) -> list[str]:
    """A line per evaluation: the variant with the best mean, and its margin over the next best, said real only
    where every seed of it beats every seed of that one; or the variants that tie for best, to the digits shown."""
    lines = []
    for measure, name, lower in record.measures():
        ranked = sorted(((mean_and_spread(v.values(measure, name))[0], v) for v in record.variants if v.values(measure, name)),
                        key=lambda pair: pair[0], reverse=not lower)
        if len(ranked) < 2:
            continue
        (best, winner), (second, runner_up) = ranked[:2]
        tied = [v.name for mean, v in ranked if round(mean, 4) == round(best, 4)]
        if len(tied) > 1:  # as printed: no variant is ahead
            lines.append(f"best on {name}: none, {' and '.join(tied)} tie ({UNITS[measure]} {best:.4f})")
            continue
        real = beats(winner.values(measure, name), runner_up.values(measure, name), lower)
        lines.append(f"best on {name}: {winner.name} ({UNITS[measure]} {best:.4f}), ahead of {runner_up.name} by "
                     f"{abs(best - second):.4f}" + ("" if real else ", within the seeds' spread"))
    return lines


def conclusions(record: AblationRecord) -> list[str]:
    """The verdicts against the baseline, then the best variant on each evaluation."""
    return verdict_lines(record) + winner_lines(record)


def answer_lines(record: AblationRecord) -> list[str]:
    """What `textmill ablate` and `textmill demo --ablate` print: the table, the verdicts, the best variants."""
    return [*ablation_table(record), "", *verdict_lines(record), "", *winner_lines(record)]
