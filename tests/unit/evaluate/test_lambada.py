"""LAMBADA: the cloze split Megatron makes, and scores that count exactly the greedy matches."""

import torch

from support.files import TEST_DATA
from textmill.evaluate.lambada import Cloze, make_cloze, score_clozes
from textmill.tokenizers.gpt2 import GPT2Tokenizer
from textmill.trainer.checkpoint import load_model


def test_cloze_split_follows_megatron():
    tok = GPT2Tokenizer(TEST_DATA / "gpt2-vocab.json", TEST_DATA / "gpt2-merges.txt")
    text = 'She looked at the stone in her palm.\n\n"Figured you might want it," said Harlin.'
    loose = make_cloze(text, tok, strict=False)
    assert loose.context + loose.target == tok.encode(text) and len(loose.target) == 1
    strict = make_cloze(text, tok, strict=True)
    # The last whitespace word keeps its punctuation, and is encoded with its leading space.
    assert tok.decode(strict.target) == " Harlin."
    assert tok.decode(strict.context) == 'She looked at the stone in her palm.\n\n"Figured you might want it," said'
    assert len(strict.target) > 1


def test_scores_count_exactly_the_greedy_matches(gpt2_ckpt):
    """Targets the model itself predicts greedily are right; changing one token of a target makes it wrong."""
    model, _ = load_model(gpt2_ckpt)
    vocab = 512
    gen = torch.Generator().manual_seed(0)
    clozes = []
    for i in range(24):
        context = torch.randint(0, vocab, (5 + 7 * i,), generator=gen).tolist()
        tokens = list(context)
        for _ in range(1 + i % 3):  # greedy continuation of 1-3 tokens
            with torch.no_grad():
                tokens.append(int(model(torch.tensor([tokens]))[0, -1, :vocab].argmax()))
        target = tokens[len(context):]
        if i % 2:  # spoil one token of every other target
            j = i % len(target)
            target[j] = (target[j] + 1) % vocab
        clozes.append(Cloze(context, target))
    for batch_size in (1, 5, 24):
        result = score_clozes(model, clozes, vocab, pad_id=vocab - 1, batch_size=batch_size)
        assert (result["correct"], result["total"]) == (12, 24)
