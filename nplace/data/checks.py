"""Validation of `config.data`: cheap, reads nothing but the config."""
import numpy as np

from nplace.data import sources, synthetic, tokenizers
from nplace.errors import ConfigError, DataError

TOKEN_DTYPES = ("uint16", "uint32")


def validate(config) -> None:
  """Raises ConfigError on the first bad `config.data` value."""
  d = config.data
  try:
    spec = sources.parse(d.source)
  except DataError as e:
    why = str(e).removeprefix(f"source {d.source!r}: ")
    raise ConfigError("data.source", d.source, why) from None
  if d.tokenizer not in tokenizers.VOCAB_SIZES:
    raise ConfigError("data.tokenizer", d.tokenizer,
                      f"must be one of {', '.join(tokenizers.VOCAB_SIZES)}")
  if not 0 < d.val_fraction < 1:
    raise ConfigError("data.val_fraction", d.val_fraction, "must be in (0, 1)")
  if d.token_dtype not in TOKEN_DTYPES:
    raise ConfigError("data.token_dtype", d.token_dtype,
                      f"must be one of {', '.join(TOKEN_DTYPES)}")
  synthetic_source = spec.scheme == "synthetic"
  key = "data.synthetic_vocab" if synthetic_source else "data.tokenizer"
  vocab = d.synthetic_vocab if synthetic_source else tokenizers.VOCAB_SIZES[d.tokenizer]
  ids = np.iinfo(d.token_dtype).max + 1
  if vocab > ids:
    raise ConfigError("data.token_dtype", d.token_dtype,
                      f"source {d.source}: vocab {vocab} exceeds its {ids} ids (use uint32)")
  if vocab > config.model.vocab_size:
    raise ConfigError(key, d[key.split(".")[1]],
                      f"its {vocab} tokens exceed model.vocab_size={config.model.vocab_size}")
  if synthetic_source:
    _validate_synthetic(d)


def _validate_synthetic(d) -> None:
  if not synthetic.BIGRAM_SUCCESSORS <= d.synthetic_vocab <= synthetic.MAX_VOCAB:
    raise ConfigError("data.synthetic_vocab", d.synthetic_vocab,
                      f"must be in [{synthetic.BIGRAM_SUCCESSORS}, {synthetic.MAX_VOCAB}]")
  if d.synthetic_order < 1:
    raise ConfigError("data.synthetic_order", d.synthetic_order, "must be at least 1")
  keys = synthetic.n_keys(d.synthetic_vocab, d.synthetic_order)
  if keys > synthetic.MAX_KEYS:
    raise ConfigError("data.synthetic_order", d.synthetic_order,
                      f"vocab * {synthetic.GROUPS}^(order-1) = {keys} contexts exceeds "
                      f"{synthetic.MAX_KEYS}")
  if d.synthetic_tokens < 1:
    raise ConfigError("data.synthetic_tokens", d.synthetic_tokens, "must be positive")
