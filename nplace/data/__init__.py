"""Data: sources (synthetic, text, TFDS, OpenWebText), tokenizers, prepared token shards and
the grain loader over them. `sources` and `tokenizers` read documents and turn them into ids,
`synthetic` generates a language whose entropies are known, `prepare` writes the shards once,
`loader` batches them for training, `checks` validates `config.data` (cheap, no jax).

Rule: data owns tokens from documents to batches and imports nothing of nplace but `errors`:
the config, the model and training read it, never the other way round."""
