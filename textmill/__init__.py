"""textmill: raw web URL lists in, a deduplicated, tokenized corpus and a trained, evaluated GPT out."""

__version__ = "0.2.0"
