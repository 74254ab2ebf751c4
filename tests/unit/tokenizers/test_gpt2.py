"""GPT-2 byte-level BPE: ids equal transformers' and the reference's, mismatched files refused, trained
vocabularies every loader agrees on."""

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support.files import MERGES, TEST_DATA, VOCAB
from support.hf_models import gpt2_tokenizer
from textmill.demo import synthweb
from textmill.errors import TextmillError
from textmill.tokenizers.gpt2 import GPT2Tokenizer, ReferenceBPE, load_vocab_merges, padded_vocab_size
from textmill.tokenizers.tokenize_config import TokenizeConfig
from textmill.tokenizers.train import sampled_texts, train_bpe, train_bpe_on_files, vocab_files

TEXTS = [
    "",
    "Hello world! It's a test, isn't it? We'll see; they've 123 apples and 4567.89 pears.",
    "   leading and trailing spaces   \n\n\n  newlines\t\ttabs  ",
    "Ünïcödé: 日本語のテキスト, 中文, 한국어, Ελληνικά, русский текст, עברית, العربية, हिन्दी",
    "emoji 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 and symbols ∑∫√ ™ © ½",
    "mojibake: cafÃ© Ã¢â‚¬â„¢ â€œquotedâ€\x9d",
    "<|endoftext|> is plain text here",
    "x" * 3000 + " " + "ab" * 500,
]


def test_tiktoken_engine_matches_reference_gpt2():
    vocab, merges = load_vocab_merges(VOCAB, MERGES)
    assert len(vocab) == 50257 and len(merges) == 50000
    ref, tok = ReferenceBPE(vocab, merges), GPT2Tokenizer(VOCAB, MERGES)
    assert tok.eod == 50256 and tok.vocab_size == 50257
    rng = random.Random(0)
    alphabet = [chr(c) for c in range(32, 0x2FF)] + list("\n\t  日本😀") + ["'s", "'ll", " 12", "..."]
    texts = TEXTS + ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 300))) for _ in range(200)]
    for text in texts:
        assert tok.encode(text) == ref.encode(text) == tok.encode_array(text).tolist(), text[:80]
        assert tok.decode(tok.encode(text)) == text
    assert tok.encode("Hello world") == [15496, 995]  # the well-known GPT-2 ids


def test_mismatched_files_are_refused(tmp_path):
    lines = MERGES.read_text().split("\n")
    (tmp_path / "merges.txt").write_text("\n".join([lines[0], lines[2], lines[1], *lines[3:]]))
    with pytest.raises(TextmillError, match="do not fit together"):
        GPT2Tokenizer(VOCAB, tmp_path / "merges.txt")


def varied_texts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    lambada = [json.loads(line)["text"] for line in (TEST_DATA / "lambada_test.jsonl").open()][:300]
    alphabet = [chr(c) for c in range(32, 0x2FF)] + list("\n\t  日本😀") + ["'s", "'ll", "'re", " 12", "...", "\r\n"]
    return TEXTS + lambada + ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 300))) for _ in range(n)]


def five_mb_document() -> str:
    """One 5 MB document of LAMBADA prose, Unicode, mojibake, digits and whitespace runs (without the
    text "<|endoftext|>", which Hugging Face reads as its special token)."""
    parts, size, rng = [], 0, random.Random(5)
    pool = [t for t in varied_texts(200, seed=5) if "<|endoftext|>" not in t]
    while size < 5_000_000:
        part = rng.choice(pool) + rng.choice([" ", "\n", "\n\n", "   ", "\t", ""])
        parts.append(part)
        size += len(part.encode("utf-8"))
    return "".join(parts)


def test_ids_match_hugging_face_gpt2_and_the_reference(tmp_path):
    hf = gpt2_tokenizer(tmp_path, VOCAB, MERGES)
    ours = GPT2Tokenizer(VOCAB, MERGES)
    for text in varied_texts(300):
        if "<|endoftext|>" in text:  # HF reads it as the special token; Megatron's tokenizer and ours as text
            continue
        assert ours.encode(text) == hf.encode(text), text[:80]
    big = five_mb_document()
    ids = ours.encode(big)
    assert ids == hf.encode(big)
    assert ids == ReferenceBPE(*load_vocab_merges(VOCAB, MERGES)).encode(big)
    assert ours.decode(ids) == big


def training_texts() -> list[str]:
    rng = random.Random(3)
    return ["\n\n".join(synthweb.prose(rng, 4)) for _ in range(300)] + varied_texts(300, seed=3)


def test_trained_bpe_is_a_gpt2_vocabulary_that_every_loader_agrees_on(tmp_path):
    texts = training_texts()
    tok = train_bpe(iter(texts), 1200, tmp_path / "a" / "bpe")
    vocab_file, merge_file = vocab_files(tmp_path / "a" / "bpe")
    assert tok.vocab_size == 1200 and tok.eod == 1199
    vocab = json.loads(vocab_file.read_text())
    assert list(vocab.values()) == list(range(1200)) and list(vocab)[-1] == "<|endoftext|>"
    # Megatron's legacy loader: read().split('\n')[1:-1] -- the header and the empty tail are dropped.
    megatron_merges = [tuple(line.split()) for line in merge_file.read_text().split("\n")[1:-1]]
    assert megatron_merges == load_vocab_merges(vocab_file, merge_file)[1] and len(megatron_merges) == 1200 - 257
    ref, hf = ReferenceBPE(vocab, megatron_merges), gpt2_tokenizer(tmp_path, vocab_file, merge_file)
    for text in varied_texts(200, seed=9):
        if "<|endoftext|>" not in text:
            assert tok.encode(text) == ref.encode(text) == hf.encode(text), text[:80]
    # Same corpus, same files, byte for byte.
    train_bpe(iter(texts), 1200, tmp_path / "b" / "bpe")
    for a, b in zip(vocab_files(tmp_path / "a" / "bpe"), vocab_files(tmp_path / "b" / "bpe"), strict=True):
        assert a.read_bytes() == b.read_bytes()
    with pytest.raises(TextmillError, match="at least 257"):
        train_bpe(iter(texts), 100, tmp_path / "c")


def test_a_bpe_is_trained_on_a_seeded_bounded_sample_of_a_large_corpus(tmp_path):
    rng = random.Random(2)
    lines = [json.dumps({"text": f"doc {i}: " + " ".join(synthweb.prose(rng, 1))}) for i in range(1000)]
    for k in range(2):
        (tmp_path / f"part{k}.jsonl").write_text("\n".join(lines[k * 500 : (k + 1) * 500]) + "\n")
    files = sorted(tmp_path.glob("*.jsonl"))
    sample = list(sampled_texts(files, ("text",), 100, seed=0))
    assert 60 <= len(sample) <= 140 and sample == list(sampled_texts(files, ("text",), 100, seed=0))
    assert sample != list(sampled_texts(files, ("text",), 100, seed=1))
    assert set(sample) <= {json.loads(line)["text"] for line in lines}
    assert len(list(sampled_texts(files, ("text",), 1000, seed=0))) == 1000  # no more than asked: all of it

    small = train_bpe_on_files(files, tmp_path / "small", TokenizeConfig(vocab_size=400, bpe_sample_documents=100))
    again = train_bpe_on_files(files, tmp_path / "again", TokenizeConfig(vocab_size=400, bpe_sample_documents=100))
    assert [p.read_bytes() for p in small.files] == [p.read_bytes() for p in again.files]
    on_sample = train_bpe(iter(sample), 400, tmp_path / "direct")
    assert [p.read_bytes() for p in small.files] == [p.read_bytes() for p in on_sample.files]


def test_the_vocabulary_is_padded_as_megatron_pads_it():
    """The smallest multiple of --make-vocab-size-divisible-by x tensor-parallel size, never one more."""
    assert [padded_vocab_size(50257, 128, tp) for tp in (1, 2, 4, 8)] == [50304, 50432, 50688, 51200]
    assert padded_vocab_size(50304, 128) == 50304 and padded_vocab_size(512, 128, 2) == 512


WHITESPACE = [" ", "\n", "\t", "\r\n", "\r", "\u3000", "\xa0", "\u2028", "\x0b"]


@settings(max_examples=150, deadline=None)
@given(parts=st.lists(st.one_of(st.sampled_from(["word", "x", "12", "'s", "!?", "日本", "é"]),
                                st.tuples(st.sampled_from(WHITESPACE), st.integers(1, 400)).map(lambda t: t[0] * t[1])),
                      max_size=12))
def test_the_split_by_the_regex_module_gives_tiktokens_and_the_references_ids(reference_and_tiktoken, parts):
    """The path for the texts tiktoken's regex gives up on (encode_by_pieces) gives the ids of tiktoken's own
    path and of GPT-2's reference BPE, on texts with long runs of each kind of whitespace."""
    ref, tok = reference_and_tiktoken
    text = "".join(parts)
    assert tok.encode_by_pieces(text) == tok._encoding.encode_ordinary(text) == ref.encode(text)


@pytest.mark.parametrize("text", ["hello" + " " * 1_000_000 + "world", "a b " + "\n" * 1_200_000 + " end",
                                  "x\t" + "\t \r\n" * 300_000 + "y"])
def test_a_whitespace_run_of_a_million_characters_is_encoded_as_gpt2_encodes_it(reference_and_tiktoken, text):
    """tiktoken's regex runs out of backtracking stack on these (a ValueError, or a Rust panic through
    encode_ordinary); textmill encodes them, with the reference's ids."""
    ref, tok = reference_and_tiktoken
    with pytest.raises(ValueError, match="Regex error"):
        tok._encoding.encode_to_numpy(text, disallowed_special=())
    assert tok.encode(text) == tok.encode_array(text).tolist() == ref.encode(text)


@pytest.fixture(scope="module")
def reference_and_tiktoken():
    return ReferenceBPE(*load_vocab_merges(VOCAB, MERGES)), GPT2Tokenizer(VOCAB, MERGES)


AWKWARD_EODS = ["<|endoftext|>", "a<|endoftext|>b", "before <|endoftext|> after", "<|endoftext|><|endoftext|>x",
                "ends with it <|endoftext|>", "<|endoftext", "endoftext|>", "<| endoftext |>", " <|endoftext|>\n\n",
                "Ünïcödé<|endoftext|>日本語", "x" * 50 + "<|endoftext|>" + " " * 20]


def test_endoftext_inside_a_document_as_each_megatron_encodes_it(tmp_path):
    """`endoftext = "text"`: the text <|endoftext|> is ordinary text, as Megatron-LM's legacy GPT-2 tokenizer (the
    pure-Python encoder, ReferenceBPE here) encodes it; "special": the end-of-document id, as Megatron-LM today
    does through transformers (its GPT2BPETokenizer), checked against transformers' own GPT-2 tokenizer. Both
    engine paths (tiktoken, and the piece-by-piece one for texts tiktoken's regex cannot take) agree."""
    reference, hf = ReferenceBPE(*load_vocab_merges(VOCAB, MERGES)), gpt2_tokenizer(tmp_path, VOCAB, MERGES)
    as_text, as_special = GPT2Tokenizer(VOCAB, MERGES), GPT2Tokenizer(VOCAB, MERGES, "special")
    texts = AWKWARD_EODS + varied_texts(100, seed=11)
    differ = 0
    for text in texts:
        assert as_text.encode(text) == as_text.encode_by_pieces(text) == reference.encode(text), text[:80]
        assert as_special.encode(text) == as_special.encode_by_pieces(text) == hf.encode(text), text[:80]
        differ += as_text.encode(text) != as_special.encode(text)
    assert differ == sum("<|endoftext|>" in t for t in texts) >= 8
    assert as_special.encode("a<|endoftext|>b") == [64, 50256, 65]
    assert TokenizeConfig(vocab_file=VOCAB, merge_file=MERGES, endoftext="special").given_tokenizer().endoftext == "special"
