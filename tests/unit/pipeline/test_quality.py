"""The quality stage's rules on hand-made documents, and its word splitter against spaCy's on real pages."""

import re
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support.quality_pages import CASES, GOOD, GOOD_LINES, real_documents
from textmill.pipeline.quality import judge, lines_of, paragraphs_of
from textmill.pipeline.stage_configs import QualityConfig
from textmill.pipeline.words import SENTENCE_ENDS, count_sentences, is_punctuation, split_words


def verdict(text: str, preset: str = "fineweb", **settings) -> str | None:
    return judge(text, QualityConfig(preset=preset, **settings), Counter())[1]


def test_a_plain_page_passes_every_preset_and_none_applies_no_rule():
    for preset in ("gopher", "c4", "fineweb"):
        assert verdict(GOOD, preset) is None
    assert QualityConfig().rules == () and verdict("#", "none") is None
    assert verdict("  \n ", "gopher") == "empty"


@pytest.mark.parametrize("preset,text,settings,reason", CASES, ids=[c[3] + f"-{i}" for i, c in enumerate(CASES)])
def test_each_rule_rejects_with_its_own_reason_and_zero_turns_it_off(preset, text, settings, reason):
    assert verdict(text, preset, **settings) == reason
    # The rule's own setting at 0 lets the document past that rule.
    field = {"too_few_words": "min_words", "too_many_words": "max_words", "short_words": "min_mean_word_length",
             "long_words": "max_mean_word_length", "hash_symbols": "max_symbol_word_ratio",
             "ellipses": "max_symbol_word_ratio", "bullet_lines": "max_bullet_lines",
             "ellipsis_lines": "max_ellipsis_lines", "few_alphabetic_words": "min_alphabetic_words",
             "few_stop_words": "min_stop_words", "duplicate_lines": "max_duplicate_lines",
             "duplicate_paragraphs": "max_duplicate_paragraphs", "duplicate_line_chars": "max_duplicate_line_chars",
             "duplicate_paragraph_chars": "max_duplicate_paragraph_chars", "lorem_ipsum": "c4_lorem_ipsum",
             "curly_bracket": "c4_curly_bracket", "too_few_sentences": "c4_min_sentences",
             "line_punctuation": "min_line_punctuation", "short_lines": "max_short_lines",
             "repeated_line_chars": "max_duplicate_line_chars_fineweb", "list_like": "max_newlines_per_word"}.get(reason)
    if field:
        off = False if isinstance(getattr(QualityConfig(), field), bool) else 0
        assert verdict(text, preset, **{**settings, field: off}) != reason


def test_c4_drops_lines_by_rule_and_counts_them():
    page = "\n".join(GOOD_LINES[:6] + [
        "Menu", "Please enable JavaScript in your browser to see this.", "We use cookies to make the site better.",
        "Read more about the village in our guide", "A very " + "long" * 300 + " word sits in this line.",
        "The mill was built in 1802 by the miller's son.[3]"])
    dropped = Counter()
    text, reason = judge(page, QualityConfig(preset="c4"), dropped)
    assert reason is None
    assert text.splitlines() == GOOD_LINES[:6] + ["The mill was built in 1802 by the miller's son."]
    assert dropped == {"no_terminal_punctuation": 2, "javascript": 1, "policy": 1, "too_long_word": 1}
    # FineWeb keeps C4's rules but the one on terminal punctuation.
    page = "\n".join(line for line in page.splitlines() if "longlong" not in line)
    text, reason = judge(page, QualityConfig(preset="fineweb"), Counter())
    assert reason is None
    assert "Read more about the village in our guide" in text.splitlines() and "Menu" not in text


def test_words_and_sentences_are_split_as_english_tokenizers_split_them():
    text = ("Mr. Smith didn't pay $5.50 (about 5%) for the well-known book, e.g. at 10:30 on 2020-01-01... "
            "See https://example.com/a-b. Its U.S. price:)")
    assert split_words(text) == [
        "Mr.", "Smith", "did", "n't", "pay", "$", "5.50", "(", "about", "5", "%", ")", "for", "the", "well", "-",
        "known", "book", ",", "e.g.", "at", "10:30", "on", "2020", "-", "01", "-", "01", "...", "See",
        "https://example.com/a-b", ".", "Its", "U.S.", "price", ":)"]
    assert count_sentences("It rained. Mr. Smith stayed in! Did he? Yes... he did") == 4
    assert count_sentences("") == 0


def test_word_splits_match_spacys_english_tokenizer_on_nearly_every_real_document():
    import spacy

    nlp = spacy.blank("en")
    nlp.max_length = 10**8
    documents = real_documents()
    same = sum(split_words(d["text"]) == [t.text.strip() for t in nlp(d["text"]) if t.text.strip()] for d in documents)
    assert same >= 0.97 * len(documents)


def sentences_one_token_at_a_time(text: str) -> int:
    """The definition: a sentence begins at the first token and at each word after a sentence-ending mark."""
    sentences, ended = 0, False
    for token in split_words(text):
        sentences = sentences or 1
        if token in SENTENCE_ENDS:
            ended = True
        elif ended and not is_punctuation(token):
            sentences, ended = sentences + 1, False
    return sentences


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["It", "rained", ".", "!", "?", "...", ",", "(", ")", "Mr.", "e.g.", "\u3002", "-",
                                 "\u00bf", ":)", "5.5"]), max_size=30))
def test_sentences_counted_on_roles_are_the_token_loops(tokens):
    text = " ".join(tokens)
    assert count_sentences(text) == sentences_one_token_at_a_time(text)


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="a \n\r\t", max_size=40))
def test_paragraphs_and_lines_are_the_regular_expressions_splits(text):
    assert paragraphs_of(text) == re.split(r"\n{2,}", text.strip())
    assert lines_of(text) == re.split(r"\n+", text)


def test_paragraphs_and_lines_of_real_pages_are_the_regular_expressions_splits():
    for document in real_documents():
        text = document["text"]
        assert paragraphs_of(text) == re.split(r"\n{2,}", text.strip()), document["id"]
        assert lines_of(text) == re.split(r"\n+", text), document["id"]
