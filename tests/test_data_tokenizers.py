"""Tokenizers: byte and a GPT-2-shaped BPE round-trip; gpt2 offline fails in one line."""
import numpy as np
import pytest
import tiktoken

from nplace.data import tokenizers
from nplace.errors import DataError

TEXTS = ["hello world", "naïve café — 東京\n\ttabs  and  spaces", "", "the the the"]


def tiny_bpe():
  """A GPT-2-shaped encoding: byte ranks, a few merges, GPT-2's split pattern and EOS."""
  ranks = {bytes([i]): i for i in range(256)}
  for merge in (b"th", b"the", b" the", b"he", b"ll", b"llo"):
    ranks[merge] = len(ranks)
  gpt2_pattern = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
  encoding = tiktoken.Encoding("tiny", pat_str=gpt2_pattern, mergeable_ranks=ranks,
                               special_tokens={"<|endoftext|>": len(ranks)})
  return tokenizers.TiktokenTokenizer(encoding, "tiny")


@pytest.mark.parametrize("make", [tokenizers.ByteTokenizer, tiny_bpe])
def test_round_trip(make):
  tok = make()
  for text, ids in zip(TEXTS, tok.encode_batch(TEXTS)):
    assert ids.dtype == np.uint32 and (ids < tok.vocab_size).all() and tok.eos not in ids
    assert tok.decode(ids) == text
  assert tok.eos == tok.vocab_size - 1


def test_byte_ids_are_utf8_bytes():
  np.testing.assert_array_equal(tokenizers.ByteTokenizer().encode("aé"), [97, 0xC3, 0xA9])


def test_bpe_merges():
  assert tiny_bpe().encode("the").tolist() == [257]  # "the" is one token, as rank 257


def test_gpt2_offline_is_one_line_naming_the_cache(monkeypatch, tmp_path):
  """With an empty cache and no route out, the real gpt2 path fails in one line."""
  monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
  monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")  # refuses at once, even online
  monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})  # forget an encoding loaded earlier
  with pytest.raises(DataError) as e:
    tokenizers.make("gpt2")
  assert "\n" not in str(e.value) and str(tmp_path) in str(e.value)


def test_gpt2_round_trip_when_cached():
  try:
    tok = tokenizers.make("gpt2")
  except DataError:
    pytest.skip("GPT-2 BPE files not cached on this machine")
  assert (tok.vocab_size, tok.eos) == (50257, 50256)
  assert tok.encode("Hello world").tolist() == [15496, 995]
  assert all(tok.decode(ids) == text for text, ids in zip(TEXTS, tok.encode_batch(TEXTS)))


def test_unknown_tokenizer():
  with pytest.raises(DataError, match="sentencepiece"):
    tokenizers.make("sentencepiece")
