"""Hand-made documents for the quality rules (each fails one rule) and the real pages they are checked on."""

import gzip
import json
import random

from support.files import TEST_DATA

# Lines of plain English, each a sentence ending in a full stop, none shorter than 30 characters.
GOOD_LINES = [
    "The river runs past the old mill and on towards the sea.",
    "Every morning the baker opens his shop before the sun is up.",
    "Children walk to the school that stands at the end of the lane.",
    "In winter the roads are covered with snow and ice for weeks.",
    "The farmers have to bring their sheep down from the hills.",
    "A small library holds books that people of the village lend.",
    "On market days the square is full of stalls and visitors.",
    "The church bells ring at noon and again in the evening.",
    "Fishermen mend their nets on the harbour wall with care.",
    "Travellers often stop at the inn to rest and have a meal.",
]
GOOD = "\n".join(GOOD_LINES)
WORDS = " ".join(GOOD_LINES).split()


def made_words(length: int, count: int, seed: int = 0) -> str:
    """`count` words of `length` letters, few repeated, with two stop words among them."""
    rng = random.Random(seed)
    letters = "bcdfghjklmnprstvw"
    return " ".join(["the", "and"] + ["".join(rng.choice(letters) + rng.choice("aeiou") for _ in range(length // 2))[:length]
                                      for _ in range(count)]) + "."


CASES = [  # (preset, document, settings, the rule it fails)
    ("gopher", " ".join(WORDS[:40]) + ".", {}, "too_few_words"),
    ("gopher", GOOD, {"max_words": 60}, "too_many_words"),
    ("gopher", made_words(2, 80), {}, "short_words"),
    ("gopher", made_words(12, 80), {}, "long_words"),
    ("gopher", GOOD.replace("the ", "the #"), {}, "hash_symbols"),
    ("gopher", GOOD.replace(" and ", " and ... ", 10).replace(" the ", " ... the ", 10), {}, "ellipses"),
    ("gopher", "\n".join("- " + line for line in GOOD_LINES), {}, "bullet_lines"),
    ("gopher", "\n".join(line[:-1] + "..." if i % 2 else line for i, line in enumerate(GOOD_LINES)), {}, "ellipsis_lines"),
    ("gopher", " ".join(w if i % 3 else "1,234" for i, w in enumerate(WORDS)) + " 2 3 4 5 6 7 8 9 10 11 12 13", {},
     "few_alphabetic_words"),
    ("gopher", " ".join(w for w in WORDS if w not in ("the", "and", "to", "of", "have", "with", "be", "that")), {},
     "few_stop_words"),
    ("gopher", "\n".join(GOOD_LINES + GOOD_LINES[:5]), {}, "duplicate_lines"),
    ("gopher", "\n\n".join(GOOD_LINES + GOOD_LINES[:5]), {}, "duplicate_paragraphs"),
    ("gopher", "\n".join(GOOD_LINES + GOOD_LINES[:3]), {}, "duplicate_line_chars"),
    ("gopher", "\n\n".join(GOOD_LINES + GOOD_LINES[:3]), {"max_duplicate_lines": 0, "max_duplicate_line_chars": 0},
     "duplicate_paragraph_chars"),
    ("gopher", GOOD + "\n" + " ".join(["the big dog"] * 30) + ".", {}, "top_2gram_chars"),
    ("gopher", GOOD + "\n" + " ".join(f"{w} walked to the house." for w in ["Ann", "Bob", "Cy", "Di", "Ed", "Flo"] * 4),
     {"max_top_ngram_chars": (0, 0, 0)}, "duplicate_5gram_chars"),
    ("c4", GOOD + "\nLorem ipsum dolor sit amet, consectetur.", {}, "lorem_ipsum"),
    ("c4", GOOD + "\nThe function returns {a: 1} to the caller.", {}, "curly_bracket"),
    ("c4", "\n".join(GOOD_LINES[:4]), {}, "too_few_sentences"),
    ("c4", "\n".join(line[:-1] for line in GOOD_LINES), {}, "too_few_sentences"),  # no line ends in punctuation
    ("fineweb", "\n".join(line[:-1] for line in GOOD_LINES), {"min_line_punctuation": 0.12}, "line_punctuation"),
    ("fineweb", GOOD + "\n" + "\n".join(f"We saw {w.strip('.')} there." for w in sorted(set(WORDS))[:25]),
     {"max_newlines_per_word": 0, "max_top_ngram_chars": (0, 0, 0)}, "short_lines"),
    ("fineweb", "\n".join(GOOD_LINES + GOOD_LINES[:1]), {"max_duplicate_lines": 0, "max_duplicate_line_chars": 0},
     "repeated_line_chars"),
    ("fineweb", "\n".join(f"{('The', 'And')[i % 2]} {w.strip('.')}." for i, w in enumerate(sorted(set(WORDS))[:60])),
     {"max_short_lines": 0, "c4_min_words_per_line": 2, "max_top_ngram_chars": (0, 0, 0), "min_alphabetic_words": 0},
     "list_like"),
]


def real_documents() -> list[dict]:
    with gzip.open(TEST_DATA / "web-texts.jsonl.gz", "rt") as f:
        pages = [json.loads(line) for line in f]
    with open(TEST_DATA / "lambada_test.jsonl") as f:
        passages = [{"id": f"lambada:{i}", "text": json.loads(line)["text"]} for i, line in zip(range(600), f, strict=False)]
    return pages + passages
