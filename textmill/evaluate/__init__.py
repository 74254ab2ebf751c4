"""Scoring a trained model: LAMBADA last-word accuracy and perplexity as Megatron's tasks/zeroshot_gpt
scores them (`lambada`)."""
