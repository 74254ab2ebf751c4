"""Text from a trained model: generation with a key/value cache and sampling (`generate`), the HTTP server
with Megatron's and OpenAI's APIs (`server`, its requests checked by `requests`) and its client (`client`)."""
