"""Decontamination: evaluation passages cut out as Megatron's filter_ngrams.py cuts them, in per-shard steps."""

import json
import random
import re

import pyarrow.parquet as pq
import pytest

from support.files import TEST_DATA, write_jsonl
from textmill.demo import synthweb
from textmill.errors import TextmillError
from textmill.pipeline.decontaminate import (
    DecontaminateConfig,
    count_matches,
    decontaminate_shard,
    eval_ngrams,
    read_selected,
    select_from_counts,
    summary,
    words_of,
    write_counts,
)
from textmill.workflows.commands import run_stage

COMMON_PHRASE = "the old lighthouse keeper counted every ship that passed at night"


def decontaminate_shards(shards, output, cfg):
    """`textmill decontaminate` as its tasks run it: the output shards' manifests and its summary."""
    return run_stage("decontaminate", shards, output, {"decontaminate": cfg})


def decontaminated(tmp_path, eval_file):
    """The one input shard (in/d.jsonl) decontaminated against `eval_file` into out/."""
    return decontaminate_shards([tmp_path / "in" / "d.jsonl"], tmp_path / "out", DecontaminateConfig(eval_files=(eval_file,)))


def test_cuts_eval_passages_and_counts(tmp_path):
    rng = random.Random(4)
    evals = [synthweb.paragraph(rng, 4) for _ in range(11)] + [COMMON_PHRASE]
    write_jsonl(tmp_path / "eval.jsonl", [{"text": t} for t in evals])
    clean = lambda n: " ".join(synthweb.prose(rng, n))  # noqa: E731
    rows = [
        {"id": "untouched", "text": clean(4)},
        {"id": "middle", "text": clean(3) + " " + evals[0] + " " + clean(3)},
        {"id": "only", "text": evals[1]},
        {"id": "many", "text": " ".join(clean(2) + " " + e for e in evals[:12]) + " " + clean(2)},
    ]
    # an evaluation text of 8-12 words (one n-gram) found in 10 training documents is a common phrase
    # there: not used for cutting
    rows += [{"id": f"common{i}", "text": clean(2) + " " + evals[11] + " " + clean(2)} for i in range(10)]
    write_jsonl(tmp_path / "in" / "d.jsonl", rows)
    [m], info = decontaminated(tmp_path, tmp_path / "eval.jsonl")
    kept = pq.read_table(tmp_path / "out" / "d.parquet").to_pylist()
    rejects = {r["id"]: r["reason"] for r in pq.read_table(tmp_path / "out" / ".rejects" / "d.parquet").to_pylist()}
    assert rejects == {"only": "contaminated_no_clean_fragment", "many": "contaminated_too_many_pieces"}
    pieces = [r for r in kept if r["id"].startswith("middle-")]
    assert [p["id"] for p in pieces] == ["middle-0", "middle-1"]
    eval_words = " ".join(words_of(evals[0]))
    for p in pieces:
        assert len(p["text"]) > 200
        assert eval_words[:60] not in " ".join(words_of(p["text"]))
    assert {r["id"] for r in kept} >= {"untouched"} | {f"common{i}" for i in range(10)}
    assert m["counts"]["input"] == len(rows) and m["counts"]["kept"] + m["counts"]["rejected"] == len(rows)
    assert m["documents_touched"] == info["documents_touched"] == 3
    assert info["characters_removed"] > len(evals[0]) + len(evals[1])


def test_bad_eval_set_is_a_clear_error(tmp_path):
    write_jsonl(tmp_path / "in" / "d.jsonl", [{"id": "a", "text": "hello"}])
    (tmp_path / "eval.jsonl").write_text('{"text": "fine text here"}\n{oops\n')
    with pytest.raises(TextmillError, match="eval.jsonl:2: not valid JSON"):
        decontaminated(tmp_path, tmp_path / "eval.jsonl")


def test_real_lambada_passage_is_removed(tmp_path):
    import json

    lines = (TEST_DATA / "lambada_test.jsonl").read_text().splitlines()
    passage = json.loads(lines[17])["text"]
    rng = random.Random(8)
    filler = " ".join(synthweb.prose(rng, 3))
    write_jsonl(tmp_path / "in" / "d.jsonl", [{"id": "x", "text": filler + " " + passage + " " + filler}])
    [m], _ = decontaminated(tmp_path, TEST_DATA / "lambada_test.jsonl")
    assert m["documents_touched"] == 1
    text = " ".join(r["text"] for r in pq.read_table(tmp_path / "out" / "d.parquet").to_pylist())
    assert passage[:100] not in text


def test_per_shard_steps_give_what_one_pass_gives(tmp_path):
    # The "found in fewer than key_threshold documents" rule is over the whole corpus: a phrase common
    # across shards (5 + 5 copies, threshold 8) is not cut, though no single shard holds 8 of them.
    rng = random.Random(6)
    evals = [synthweb.paragraph(rng, 4) for _ in range(3)] + [COMMON_PHRASE]
    write_jsonl(tmp_path / "eval.jsonl", [{"text": t} for t in evals])
    clean = lambda n: " ".join(synthweb.prose(rng, n))  # noqa: E731
    for s in range(2):
        rows = [{"id": f"{s}-rare", "text": clean(3) + " " + evals[s] + " " + clean(3)}]
        rows += [{"id": f"{s}-common{i}", "text": clean(2) + " " + evals[3] + " " + clean(2)} for i in range(5)]
        write_jsonl(tmp_path / "in" / f"s{s}.jsonl", rows + [{"id": f"{s}-plain", "text": clean(4)}])
    shards = sorted((tmp_path / "in").iterdir())
    cfg = DecontaminateConfig(eval_files=(tmp_path / "eval.jsonl",), key_threshold=8)
    manifests, info = decontaminate_shards(shards, tmp_path / "whole", cfg)

    ngrams = eval_ngrams(cfg.eval_files, cfg)
    counts = [tmp_path / "steps" / f"{s.stem}.counts.json" for s in shards]
    for shard, path in reversed(list(zip(shards, counts, strict=True))):
        write_counts(count_matches(shard, ngrams, cfg.max_ngram), path)
    selected = select_from_counts(counts, cfg, tmp_path / "steps" / ".selected.json")
    chosen = read_selected(tmp_path / "steps" / ".selected.json", cfg)
    steps = [decontaminate_shard(s, tmp_path / "steps" / f"{s.stem}.parquet", chosen, cfg) for s in shards]
    for s in shards:
        for name in (f"{s.stem}.parquet", f".rejects/{s.stem}.parquet"):
            assert (tmp_path / "steps" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes()
    assert summary(selected, steps).items() <= info.items() and info["documents_touched"] == 2
    assert sum(m["counts"]["kept"] for m in manifests) == 14  # the 10 common ones untouched, the 2 rare ones cut


# -- fidelity to Megatron-LM's filter_ngrams.py ------------------------------------------------------------
def megatron_filter(texts: list[str], task_texts: list[str], key_threshold: int = 10) -> list[list[str]]:
    """filter_ngrams.py's two passes over `texts` (its defaults: 13-grams, whole texts of 8-12 words, 200
    characters cut either side, pieces over 200 characters, at most 10), written after its structure
    (a buffer of texts per document, get_words, split_text): each document's pieces, [] when dropped."""
    def get_words(text):
        words, positions = [], []
        for match in re.finditer(r"\w+", text.lower()):
            words.append(match.group(0))
            positions.append(match.start())
        return words, positions

    counts = {}
    for text in task_texts:
        words = get_words(text)[0]
        if len(words) >= 8:
            if len(words) < 13:
                counts.setdefault(" ".join(words), 0)
            for i in range(len(words) - 13 + 1):
                counts.setdefault(" ".join(words[i : i + 13]), 0)

    def first_hit(words, positions, ngrams, lengths):
        for i in range(len(words) - 13 + 1):
            for n in [13] + lengths:
                if " ".join(words[i : i + n]) in ngrams:
                    return " ".join(words[i : i + n]), positions[i]
        if len(words) - 13 > 0:
            base = len(words) - 13
            for n in lengths:
                if n != 13:
                    for i in range(13 - n + 1):
                        if " ".join(words[base + i : base + i + n]) in ngrams:
                            return " ".join(words[base + i : base + i + n]), positions[base + i]
        return None

    def split_text(text, start, seq):
        pos, first, second = start - 200, "", ""
        while pos > 0 and text[pos] not in ".!?":
            pos -= 1
        if pos > 0:
            first = text[0 : pos + 1]
        pos = start + len(seq) + 200
        while pos < len(text) and text[pos] not in ".!?":
            pos += 1
        if pos + 1 < len(text):
            second = text[pos + 1 :]
        return first, second

    def free_ngram(text, ngrams, freq_only):
        lengths = sorted({len(k.split()) for k in ngrams})
        buffer, free, local = [text], [], set()
        while buffer:
            current = buffer.pop(0)
            hit = first_hit(*get_words(current), ngrams, lengths)
            if hit is None:
                if not freq_only:
                    free.append(current)
                continue
            seq, start = hit
            if freq_only:
                local.add(seq)
                if start + len(seq) + 1 < len(current):
                    buffer.append(current[start + len(seq) + 1 :])
                continue
            first, second = split_text(current, start, seq)
            if len(first) > 200:
                free.append(first)
            if len(second) > 200:
                buffer.append(second)
        return free, local

    for text in texts:
        for seq in free_ngram(text, counts, True)[1]:
            counts[seq] += 1
    below = {k for k, v in counts.items() if v < key_threshold}
    pieces = [free_ngram(text, below, False)[0] for text in texts]
    return [p if len(p) <= 10 else [] for p in pieces]


def mixed_documents(rng) -> tuple[list[str], list[str]]:
    """Evaluation texts (LAMBADA passages and a common short phrase) and training documents that hold
    them at the start, the middle and the end, twice, copied into many documents, with irregular
    whitespace and punctuation at the cuts."""
    lambada = [json.loads(line)["text"] for line in (TEST_DATA / "lambada_test.jsonl").read_text().splitlines()[:40]]
    evals = lambada + [COMMON_PHRASE]
    prose = lambda n: " ".join(synthweb.prose(rng, n))  # noqa: E731
    docs = [prose(4) for _ in range(5)]
    docs += [lambada[0] + "  " + prose(3), prose(3) + "\n\n" + lambada[1], prose(2) + " " + lambada[2] + "!! " + prose(2)]
    docs += [prose(2) + " " + lambada[3] + " " + prose(1) + " " + lambada[3] + " " + prose(2)]
    docs += [" ".join(prose(2) + " " + t for t in lambada[6:18]) + " " + prose(2)]  # too many pieces
    docs += [lambada[4]]  # nothing left
    docs += [prose(2) + "\t" + lambada[5].replace(" ", "  ") + " ... " + prose(2)]
    docs += [prose(2) + " " + lambada[20] + " " + prose(2) for _ in range(12)]  # the planted passage
    docs += [prose(2) + " " + COMMON_PHRASE + ". " + prose(2) for _ in range(11)]  # a common phrase
    docs += [prose(1) + " " + lambada[21][: len(lambada[21]) // 2] + " " + prose(1)]  # part of a passage
    return evals, docs


def test_the_pieces_are_megatrons_and_a_planted_passage_goes(tmp_path):
    evals, docs = mixed_documents(random.Random(12))
    write_jsonl(tmp_path / "eval.jsonl", [{"text": t} for t in evals])
    write_jsonl(tmp_path / "in" / "d.jsonl", [{"id": f"d{i}", "text": t} for i, t in enumerate(docs)])
    decontaminated(tmp_path, tmp_path / "eval.jsonl")
    kept = pq.read_table(tmp_path / "out" / "d.parquet").to_pylist()
    rejected = {r["id"] for r in pq.read_table(tmp_path / "out" / ".rejects" / "d.parquet").to_pylist()}
    theirs = megatron_filter(docs, evals)
    for i, (text, pieces) in enumerate(zip(docs, theirs, strict=True)):
        ours = [r for r in kept if r["id"] == f"d{i}" or r["id"].startswith(f"d{i}-")]
        if pieces == [text]:  # untouched
            assert [r["id"] for r in ours] == [f"d{i}"] and ours[0]["text"] == text
        elif not pieces:
            assert f"d{i}" in rejected and not ours
        else:  # the same cuts; textmill strips the whitespace at each
            assert [r["text"] for r in ours] == [p.strip() for p in pieces], i
    assert any(p != p.strip() for pieces in theirs for p in pieces)  # the stripping is tested, not idle
    planted = [i for i, text in enumerate(docs) if evals[20] in text]
    assert len(planted) == 12 and all(evals[20][:100] not in r["text"] for r in kept)
    assert all(theirs[i] != [docs[i]] for i in planted)  # Megatron cuts it too
    common = [r for r in kept if COMMON_PHRASE in r["text"]]
    assert len(common) == 11  # found in 11 documents, over the threshold: left alone
