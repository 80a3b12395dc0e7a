"""Data: sources (synthetic, text, TFDS, OpenWebText), tokenizers, prepared token shards and
the grain loader over them. `sources` and `tokenizers` read documents and turn them into ids,
`synthetic` generates a language whose entropies are known, `prepare` writes the shards once,
`loader` batches them for training, `checks` validates `config.data` (cheap, no jax)."""
