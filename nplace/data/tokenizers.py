"""Tokenizers: `byte` (UTF-8 bytes + EOS, always offline) and `gpt2` (tiktoken's BPE).

Both map a document (str) to a uint32 array (`encode`, `encode_batch`) and have
`eos` (appended after every document), `vocab_size` and `decode`.
"""
import os
import tempfile

import numpy as np

from nplace.errors import DataError

VOCAB_SIZES = {"byte": 257, "gpt2": 50257}  # known without loading anything


class ByteTokenizer:
  """UTF-8 bytes are ids 0..255; EOS is 256."""
  name = "byte"
  vocab_size = 257
  eos = 256

  def encode(self, text: str) -> np.ndarray:
    # surrogatepass: lone surrogates (from JSON escapes) survive as their 3 UTF-8 bytes.
    return np.frombuffer(text.encode("utf-8", "surrogatepass"), np.uint8).astype(np.uint32)

  def encode_batch(self, texts) -> list[np.ndarray]:
    return [self.encode(text) for text in texts]

  def decode(self, ids) -> str:
    ids = np.asarray(ids)
    return bytes(ids[ids < 256].astype(np.uint8)).decode("utf-8", "replace")


class TiktokenTokenizer:
  """A tiktoken BPE; EOS is its `<|endoftext|>`. Ordinary text never yields EOS."""

  def __init__(self, encoding, name: str):
    self.encoding, self.name = encoding, name
    self.vocab_size = encoding.n_vocab
    self.eos = encoding.eot_token

  def encode(self, text: str) -> np.ndarray:
    return np.asarray(self.encoding.encode_ordinary(text), np.uint32)

  def encode_batch(self, texts) -> list[np.ndarray]:
    return [np.asarray(ids, np.uint32) for ids in self.encoding.encode_ordinary_batch(texts)]

  def decode(self, ids) -> str:
    return self.encoding.decode([int(i) for i in ids])


def _tiktoken_cache() -> str:
  """Where tiktoken looks for its files (its own lookup order)."""
  return (os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")
          or os.path.join(tempfile.gettempdir(), "data-gym-cache"))


def gpt2() -> TiktokenTokenizer:
  """GPT-2's BPE; its two files come from tiktoken's cache or are downloaded into it."""
  import tiktoken  # its BPE files may need a download: loaded for the gpt2 tokenizer alone
  try:
    encoding = tiktoken.get_encoding("gpt2")
  except (OSError, ValueError) as e:  # requests' ConnectionError is an OSError
    raise DataError(
        f"tokenizer gpt2: the GPT-2 BPE files are neither cached nor downloadable "
        f"({type(e).__name__}); on a machine with internet run `python -c \"import tiktoken; "
        f"tiktoken.get_encoding('gpt2')\"` and copy its cache directory to {_tiktoken_cache()} "
        f"(or point TIKTOKEN_CACHE_DIR at it)") from None
  return TiktokenTokenizer(encoding, "gpt2")


def make(name: str):
  """The tokenizer called `name` (see VOCAB_SIZES)."""
  if name == "byte":
    return ByteTokenizer()
  if name == "gpt2":
    return gpt2()
  raise DataError(f"unknown tokenizer {name!r}: expected one of {', '.join(VOCAB_SIZES)}")
