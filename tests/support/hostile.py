"""Pathological documents, as a scraped junk page or a user's export can hold them (issue 33): each stage
must finish with every one kept or rejected with a reason, and its largest process within a stated bound.

`hostile_texts(scale)` gives (name, text) pairs; `scale` 1.0 is the full size of the attacks (a 30 MB line,
ten million repeats of one character, a million combining marks), smaller scales keep tests quick.
`hostile_lines(scale)` adds what only a JSON-lines file can hold: invalid UTF-8, invalid JSON, a lone
surrogate escape, a record without text.
"""

import json
import random

WHITESPACE_KINDS = {"spaces": " ", "newlines": "\n", "tabs": "\t", "crlf": "\r\n", "ideographic": "\u3000",
                    "no-break": "\xa0"}


def ordinary_text(rng: random.Random, words: int) -> str:
    vocabulary = ["the", "river", "bank", "opened", "a", "new", "branch", "near", "old", "mill", "and", "people",
                  "walked", "there", "every", "morning", "to", "see", "water", "rise"]
    return " ".join(rng.choice(vocabulary) for _ in range(words)) + "."


def hostile_texts(scale: float = 1.0, seed: int = 0) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    n = lambda count: max(int(count * scale), 1)  # noqa: E731
    texts = [(f"whitespace run of {name}", ordinary_text(rng, 20) + char * n(1_000_000) + ordinary_text(rng, 20))
             for name, char in WHITESPACE_KINDS.items()]
    texts += [
        ("one long line of words", ordinary_text(rng, n(5_000_000))),
        ("one character repeated", "a" * n(10_000_000)),
        ("one-letter words", " ".join(rng.choice("abcdefghij") for _ in range(n(5_000_000)))),
        ("combining marks", "e" + "\u0301" * n(1_000_000) + " " + ordinary_text(rng, 20)),
        ("NUL bytes", ordinary_text(rng, 50) + "\x00" * n(100_000) + ordinary_text(rng, 50)),
        ("right-to-left and zero-width", ("\u202e" + "שלום עולם" + "\u200b\u200c\u200d\ufeff") * n(100_000)),
        ("empty", ""),
        ("whitespace only", " \n\t\u3000" * n(10_000)),
    ]
    return texts


def hostile_lines(scale: float = 1.0, seed: int = 0, ordinary: int = 200) -> list[bytes]:
    """A JSON-lines file's lines: `ordinary` ordinary documents, the hostile texts among them, and lines
    that are not documents at all."""
    rng = random.Random(seed)
    lines = [json.dumps({"id": f"ordinary-{i}", "text": ordinary_text(rng, rng.randint(100, 600))}).encode()
             for i in range(ordinary)]
    for k, (name, text) in enumerate(hostile_texts(scale, seed)):
        lines.insert(rng.randrange(len(lines) + 1), json.dumps({"id": f"hostile-{k}", "name": name, "text": text}).encode())
    lines += [b'{"id": "bad-utf8", "text": "\xff\xfe"}', b'{"id": "bad-json", "text": ',
              b'{"id": "surrogate", "text": "\\ud800"}', b'{"id": "no-text"}', b'["not", "an", "object"]']
    return lines
