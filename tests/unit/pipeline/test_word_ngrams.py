"""The repetition rules' n-gram counts on word ids (pipeline/word_ngrams.py) against their definitions on
strings, as Gopher states them and datatrove computes them: on generated documents, on pages built to repeat
themselves, and where different word tuples spell the same string."""

import random
import re
from collections import Counter

import pytest

from textmill.demo.synthweb import corpus_documents
from textmill.pipeline.word_ngrams import WordIds, word_runs
from textmill.pipeline.words import split_words


def top_ngram_chars(words: list[str], n: int) -> int:
    """The definition: the most frequent n-gram joined by spaces, its characters times its count."""
    grams = Counter(" ".join(words[i : i + n]) for i in range(len(words) - n + 1))
    if not grams:
        return 0
    gram, times = grams.most_common(1)[0]
    return len(gram) * times


def duplicate_ngram_chars(words: list[str], n: int) -> int:
    """The definition: characters of n-grams joined without spaces that repeat an earlier one, read left
    to right, the reading going on past each repeat."""
    seen, chars, i = set(), 0, 0
    while i <= len(words) - n:
        gram = "".join(words[i : i + n])
        if gram in seen:
            chars += len(gram)
            i += n
        else:
            seen.add(gram)
            i += 1
    return chars


def repetitive(rng: random.Random) -> list[str]:
    """Words drawn from a tiny vocabulary whose words spell each other's concatenations ("ab" = "a" "b"),
    with runs copied: repeats, overlapping repeats and spelled-alike tuples everywhere."""
    vocabulary = ["a", "b", "ab", "ba", "aba", "c", "bc", "abc"]
    words = [rng.choice(vocabulary) for _ in range(rng.randint(0, 60))]
    for _ in range(rng.randint(0, 3)):
        if words:
            start = rng.randrange(len(words))
            words[start:start] = words[start : start + rng.randint(1, 12)]
    return words


def test_the_counts_equal_their_definitions_on_generated_documents():
    for document in corpus_documents(3, 400):
        words = split_words(document["text"])
        ids = WordIds(words)
        for n in (2, 3, 4):
            assert ids.top_gram_chars(n) == top_ngram_chars(words, n), (document["id"], n)
        for n in range(5, 11):
            assert ids.duplicate_spelled_chars(n) == duplicate_ngram_chars(words, n), (document["id"], n)


@pytest.mark.parametrize("seed", range(20))
def test_the_counts_equal_their_definitions_where_tuples_spell_alike(seed):
    rng = random.Random(seed)
    for _ in range(200):
        words = repetitive(rng)
        ids = WordIds(words)
        for n in range(1, 11):
            assert ids.top_gram_chars(n) == top_ngram_chars(words, n), (words, n)
            assert ids.duplicate_spelled_chars(n) == duplicate_ngram_chars(words, n), (words, n)


def test_two_tuples_that_spell_one_string_are_a_repeat_and_equal_counts_keep_the_first():
    words = ["ab", "c", "x", "a", "bc"]  # "abc" twice, as different word pairs
    assert WordIds(words).duplicate_spelled_chars(2) == duplicate_ngram_chars(words, 2) == 3
    words = ["z", "y", "long", "words", "z", "y", "long", "words"]  # ties: the first 2-gram to occur wins
    assert WordIds(words).top_gram_chars(2) == top_ngram_chars(words, 2) == len("z y") * 2


def test_str_split_cuts_where_runs_of_non_space_end():
    """split_words cuts the text with str.split: the runs of \\S+ (re's), at every code point."""
    text = "".join(chr(c) + "a" for c in range(0x110000) if not 0xD800 <= c < 0xE000)
    assert text.split() == re.findall(r"\S+", text)
    assert split_words("Mr. Smith's dog\u00a0didn't cost $5km...\u2028\u3000end.") == [
        "Mr.", "Smith", "'s", "dog", "did", "n't", "cost", "$", "5", "km", "...", "end", "."]


def test_a_document_too_long_to_pack_four_ids_in_one_integer_counts_the_same():
    rng = random.Random(5)
    words = [rng.choice(["the", "river", "a", "mayor", "opened"]) + str(rng.randrange(40)) for _ in range(60_000)]
    assert len(words) ** 4 >= 1 << 63  # the 4-gram keys are renumbered before the last word is packed in
    assert WordIds(words).top_gram_chars(4) == top_ngram_chars(words, 4)


def test_word_runs_are_the_regex_runs():
    import re

    texts = [d["text"] for d in corpus_documents(4, 50)] + ["a_b c-d\te\x1cf\x7fg", "naïve café_au-lait 12.5", ""]
    texts += ["".join(map(chr, range(128))), "x" + "".join(map(chr, range(128, 400)))]
    for text in texts:
        assert word_runs(text) == re.findall(r"\w+", text)


def test_a_count_stopped_past_enough_decides_as_the_whole_count():
    rng = random.Random(9)
    for _ in range(300):
        words = repetitive(rng)
        for n in (2, 3, 5):
            whole = duplicate_ngram_chars(words, n)
            for enough in (0, 1, 3, 7, whole - 1, whole):
                assert (WordIds(words).duplicate_spelled_chars(n, enough) > enough) == (whole > enough), (words, n)
