"""The clean stage: ftfy, seeded language identification, token counts."""

import random

from hypothesis import given, settings
from hypothesis import strategies as st

import pyarrow.parquet as pq

from support.files import MERGES, VOCAB, write_jsonl
from textmill.demo import synthweb
from textmill.pipeline.clean import CleanConfig, approx_token_count, clean_shard, token_counter
from textmill.tokenizers.gpt2 import GPT2Tokenizer


def test_clean_fixes_mojibake_and_rejects_with_reasons(tmp_path):
    rng = random.Random(1)
    english = " ".join(synthweb.prose(rng, 4))
    mojibake = "The café’s owner said " + english
    garbled = mojibake.encode("utf-8").decode("cp1252", "replace")
    rows = [
        {"id": "en", "text": english},
        {"id": "moji", "text": garbled},
        {"id": "fr", "text": synthweb.foreign_paragraph(rng, "fr", 120)},
        {"id": "de", "text": synthweb.foreign_paragraph(rng, "de", 120)},
        {"id": "short", "text": synthweb.sentence(rng)},
        {"id": "empty", "text": "   "},
        {"id": "digits", "text": "1234 5678 " * 30},
    ]
    write_jsonl(tmp_path / "in" / "docs.jsonl", rows)
    m = clean_shard(tmp_path / "in" / "docs.jsonl", tmp_path / "out" / "docs.parquet", CleanConfig())
    kept = {r["id"]: r for r in pq.read_table(tmp_path / "out" / "docs.parquet").to_pylist()}
    rejects = {r["id"]: r["reason"] for r in pq.read_table(tmp_path / "out" / ".rejects" / "docs.parquet").to_pylist()}
    assert set(kept) == {"en", "moji"}
    assert kept["moji"]["text"] == mojibake.replace("’", "'")  # ftfy defaults also uncurl quotes
    assert rejects == {
        "fr": "language=fr",
        "de": "language=de",
        "short": "too_short",
        "empty": "empty",
        "digits": "language_undetectable",
    }
    assert m["ftfy_changed"] >= 1


def test_langdetect_is_deterministic(tmp_path):
    rng = random.Random(2)
    # short, borderline texts are where unseeded langdetect flips between runs
    rows = [{"id": str(i), "text": " ".join(synthweb.sentence(rng).split()[:4]) + " " + "x " * 200} for i in range(40)]
    write_jsonl(tmp_path / "in" / "d.jsonl", rows)
    clean_shard(tmp_path / "in" / "d.jsonl", tmp_path / "o1" / "d.parquet", CleanConfig(min_tokens=1))
    clean_shard(tmp_path / "in" / "d.jsonl", tmp_path / "o2" / "d.parquet", CleanConfig(min_tokens=1))
    for name in ("d.parquet", ".rejects/d.parquet"):
        assert (tmp_path / "o1" / name).read_bytes() == (tmp_path / "o2" / name).read_bytes()


def test_approx_token_count_is_a_lower_bound_shape():
    assert approx_token_count("") == 1
    assert approx_token_count("Hello world, it's   me") == 8  # Hello| world|,| it|'s|  | me + EOD


def test_exact_bpe_count_with_a_vocabulary(tmp_path):
    tok = GPT2Tokenizer(VOCAB, MERGES)
    text = " ".join(synthweb.prose(random.Random(4), 1)) + " Antidisestablishmentarianism, photosynthesises."
    exact, approx = len(tok.encode(text)) + 1, approx_token_count(text)
    assert token_counter(tok)[0](text) == exact > approx
    write_jsonl(tmp_path / "in" / "d.jsonl", [{"id": "a", "text": text}])
    cfg = CleanConfig(min_tokens=(exact + approx + 1) // 2)  # between the two counts
    with_vocab = clean_shard(tmp_path / "in" / "d.jsonl", tmp_path / "exact" / "d.parquet", cfg, tok)
    without = clean_shard(tmp_path / "in" / "d.jsonl", tmp_path / "approx" / "d.parquet", cfg)
    assert (with_vocab["counts"]["kept"], without["counts"]["kept"]) == (1, 0)
    assert with_vocab["params"]["tokenizer"] != without["params"]["tokenizer"] == "approx"


def test_the_fasttext_detector_decides_as_langdetect_does(tmp_path):
    rng = random.Random(6)
    rows = [{"id": f"en{i}", "text": " ".join(synthweb.prose(rng, 3))} for i in range(20)]
    rows += [{"id": f"{lang}{i}", "text": synthweb.foreign_paragraph(rng, lang, 100)} for lang in ("fr", "de") for i in range(10)]
    rows += [{"id": "digits", "text": "1234 5678 " * 30}, {"id": "blank", "text": "  \n "}]
    write_jsonl(tmp_path / "in" / "d.jsonl", rows)
    outcomes = {}
    for detector in ("langdetect", "fasttext"):
        cfg = CleanConfig(min_tokens=1, language_detector=detector)
        manifest = clean_shard(tmp_path / "in" / "d.jsonl", tmp_path / detector / "d.parquet", cfg)
        rejects = {r["id"]: r["reason"] for r in pq.read_table(tmp_path / detector / ".rejects" / "d.parquet").to_pylist()}
        outcomes[detector] = (manifest["counts"], rejects)
    assert outcomes["fasttext"] == outcomes["langdetect"]
    assert outcomes["fasttext"][1]["digits"] == "language_undetectable" and outcomes["fasttext"][0]["kept"] == 20


def test_language_any_keeps_every_language_and_detects_none():
    """An ablation's "no cleanup" variant: [clean] language = "any" rejects no document for its language (the
    fixing by ftfy and the length rule stay)."""
    from textmill.pipeline.clean import clean_document
    from textmill.pipeline.stage_configs import CleanConfig

    german = {"text": "Ein ganz normaler deutscher Satz über das Wetter und die Stadt.", "title": None}
    digits = {"text": "1234 5678 9012 3456", "title": None}
    assert clean_document(german, CleanConfig(min_tokens=0), len)[1] == "language=de"
    assert clean_document(digits, CleanConfig(min_tokens=0), len)[1] == "language_undetectable"
    for row in (german, digits):
        assert clean_document(row, CleanConfig(min_tokens=0, language="any"), len)[1] is None
    assert clean_document(german, CleanConfig(min_tokens=500, language="any"), len)[1] == "too_short"


def test_a_kept_documents_email_and_public_ip_addresses_are_replaced_and_counted(tmp_path):
    """[clean] remove_pii (on by default): the kept text carries placeholders, the manifest the counts; a rejected
    document is kept in its rejects as it came; remove_pii = false keeps the addresses, as OpenWebText did."""
    rng = random.Random(2)
    english = " ".join(synthweb.prose(rng, 4))
    rows = [{"id": "mail", "text": english + " Write to jane.doe@uni.edu or call the server at 8.8.8.8."},
            {"id": "local", "text": english + " The router is 192.168.0.1, the changelog says version 1.2.3.4."},
            {"id": "de", "text": synthweb.foreign_paragraph(rng, "de", 120) + " kontakt@firma.de"}]
    write_jsonl(tmp_path / "in" / "docs.jsonl", rows)
    m = clean_shard(tmp_path / "in" / "docs.jsonl", tmp_path / "out" / "docs.parquet", CleanConfig())
    kept = {r["id"]: r["text"] for r in pq.read_table(tmp_path / "out" / "docs.parquet").to_pylist()}
    assert kept["mail"].endswith(" Write to email@example.com or call the server at 203.0.113.42.")
    assert kept["local"] == rows[1]["text"]
    assert (m["pii_emails"], m["pii_ips"]) == (1, 1) and m["params"]["remove_pii"] is True
    [reject] = pq.read_table(tmp_path / "out" / ".rejects" / "docs.parquet").to_pylist()
    assert reject["text"].endswith("kontakt@firma.de")
    kept_as_is = clean_shard(tmp_path / "in" / "docs.jsonl", tmp_path / "raw" / "docs.parquet", CleanConfig(remove_pii=False))
    assert "pii_emails" not in kept_as_is
    assert pq.read_table(tmp_path / "raw" / "docs.parquet").to_pylist()[0]["text"] == rows[0]["text"]


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=127), max_size=400))
def test_ascii_text_skipped_before_ftfy_is_what_ftfy_returns(text):
    """The fast path (fix_text skips ftfy for ASCII text with no `&`, carriage return, escape or control character) is
    ftfy's answer: drawn over every ASCII character, the skipped texts are those ftfy leaves as they are, and the
    others get ftfy's own answer."""
    import ftfy

    from textmill.pipeline.clean import fix_text

    assert fix_text(text) == ftfy.fix_text(text)


def test_the_fast_path_on_generated_and_real_texts_gives_ftfys_text():
    import gzip
    import json

    import ftfy

    from support.files import TEST_DATA
    from textmill.pipeline.clean import fix_text

    with gzip.open(TEST_DATA / "web-texts.jsonl.gz", "rt", encoding="utf-8") as f:
        real = [json.loads(line)["text"] for line in f]
    generated = [d["text"] for d in synthweb.corpus_documents(1, 1000)]
    assert all(fix_text(t) == ftfy.fix_text(t) for t in real + generated)
