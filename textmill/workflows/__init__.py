"""Luigi tasks: thin wrappers that call textmill.pipeline, textmill.tokenizers and textmill.trainer."""
