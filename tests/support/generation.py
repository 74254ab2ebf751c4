"""A checkpoint loaded in the test's own process, generating as the server does."""

PROMPTS = ["The old sailor", "In the morning the village was quiet and the", "A", "Seven small boats sailed past the"]


class Local:
    def __init__(self, ckpt):
        from textmill.inference.generate import TokenText
        from textmill.trainer.checkpoint import checkpoint_tokenizer, load_model

        self.model, meta = load_model(ckpt)
        self.tokenizer = checkpoint_tokenizer(ckpt, meta.meta)
        self.text = TokenText(self.tokenizer)

    def __call__(self, prompts, **settings):
        from textmill.inference.generate import SamplingParams, generate

        ids = [self.tokenizer.encode(p) for p in prompts]
        return generate(self.model, self.text, ids, SamplingParams(**settings), self.tokenizer.eod)
