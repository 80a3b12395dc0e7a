"""The synthetic language: its exact entropies against sampling and brute force."""
import hashlib

import numpy as np
import pytest

from nplace.config import base_config
from nplace.data import synthetic


def dense_next_KV(chain):
  """p(next | key) as a dense table, from the chain's raw parameters."""
  K = len(chain.succ_KM)
  table_KV = np.tile(synthetic.RESTART * chain.zipf_V, (K, 1))
  np.add.at(table_KV, (np.arange(K)[:, None], chain.succ_KM),
            (1 - synthetic.RESTART) * chain.count_KM / synthetic.TABLE)
  return table_KV


def context_keys(chain, tokens_NT):
  """Key of each position t >= order: the last token plus the groups of the k-1 before."""
  V, G, k = chain.vocab, synthetic.GROUPS, chain.order
  key_NT = tokens_NT[:, k - 1:-1].astype(np.int64)
  for i in range(1, k):
    key_NT = key_NT + V * G ** (i - 1) * chain.group_V[tokens_NT[:, k - 1 - i:-1 - i]]
  return key_NT


@pytest.fixture(scope="module")
def sample():
  d = base_config().data
  chain = synthetic.build(d.synthetic_vocab, d.synthetic_order, seed=3)
  n = 1024 * synthetic.SEGMENT  # ~1M tokens, whole segments
  tokens = np.concatenate(list(chain.generate(n, seed=3)))
  return chain, tokens.reshape(-1, synthetic.SEGMENT)


def test_entropy_rate_matches_generated_tokens(sample):
  chain, tokens_NT = sample
  k = chain.order
  nll = -np.log(dense_next_KV(chain)[context_keys(chain, tokens_NT), tokens_NT[:, k:]])
  assert abs(nll.mean() - chain.entropy_rate) < 0.02


def test_unigram_entropy_matches_generated_tokens(sample):
  chain, tokens_NT = sample
  nll = -np.log(chain.unigram_V[tokens_NT])
  assert abs(nll.mean() - chain.unigram_entropy) < 0.02
  # each segment starts from the stationary law: its first tokens too (1024 of them, std of nll ~1.3)
  assert abs(nll[:, 0].mean() - chain.unigram_entropy) < 0.2


def test_bigram_entropy_matches_plug_in_estimate(sample):
  chain, tokens_NT = sample
  V = chain.vocab
  counts_VV = np.bincount((tokens_NT[:, :-1].astype(np.int64) * V + tokens_NT[:, 1:]).ravel(),
                          minlength=V * V).reshape(V, V).astype(float)
  p_VV = counts_VV / counts_VV.sum()
  p_V = p_VV.sum(1)
  nz = p_VV > 0
  plug_in = -(p_VV[nz] * np.log((p_VV / np.maximum(p_V, 1e-300)[:, None])[nz])).sum()
  assert abs(plug_in - chain.bigram_entropy) < 0.02


def test_default_language_needs_attention_and_has_a_gap():
  d = base_config().data
  chain = synthetic.build(d.synthetic_vocab, d.synthetic_order, d.synthetic_seed)
  assert chain.unigram_entropy - chain.entropy_rate >= 1.0
  assert chain.bigram_entropy - chain.entropy_rate >= 0.3  # the last token alone is not enough


@pytest.mark.parametrize("order", [1, 2, 3])
def test_stationary_law_matches_eigenvector(order):
  """Brute force: the dense key-to-key transition matrix's left eigenvector for 1."""
  chain = synthetic.build(vocab=16, order=order, seed=1)
  K, V = len(chain.succ_KM), chain.vocab
  next_KV = dense_next_KV(chain)
  P_KK = np.zeros((K, K))
  for key in range(K):
    for token in range(V):
      P_KK[key, chain.next_key(np.array([key]), np.array([token]))[0]] += next_KV[key, token]
  values, vectors = np.linalg.eig(P_KK.T)
  pi_K = np.real(vectors[:, np.argmin(abs(values - 1))])
  np.testing.assert_allclose(chain.stationary_K, pi_K / pi_K.sum(), atol=1e-10)
  h_K = -(next_KV * np.log(next_KV)).sum(1)
  assert chain.entropy_rate == pytest.approx(pi_K @ h_K / pi_K.sum(), abs=1e-10)


def test_same_seed_same_tokens():
  chain = synthetic.build(64, 2, seed=0)
  a, b, c = (np.concatenate(list(chain.generate(5000, seed=s))) for s in (7, 7, 8))
  assert len(a) == 5000 and a.dtype == np.uint16
  np.testing.assert_array_equal(a, b)
  assert (a != c).mean() > 0.5
  other = np.concatenate(list(synthetic.build(64, 2, seed=1).generate(5000, seed=7)))
  assert (a != other).mean() > 0.5


def test_the_default_language_is_the_one_prepared_caches_and_filed_trials_hold():
  """Its entropies and a seed's first tokens, pinned: a change to the generator (or to numpy's
  Generator streams, which NEP 19 does not freeze) changes every prepared cache's tokens, which
  are keyed by synthetic.VERSION alone. If this fails on purpose, bump VERSION and update it."""
  d = base_config().data
  chain = synthetic.build(d.synthetic_vocab, d.synthetic_order, d.synthetic_seed)
  assert (chain.entropy_rate, chain.unigram_entropy, chain.bigram_entropy) == pytest.approx(
      (1.4519257655277196, 4.480488292406674, 2.0870390304382953), rel=1e-9)
  tokens = np.concatenate(list(chain.generate(4096, seed=d.synthetic_seed)))
  assert hashlib.sha256(tokens.tobytes()).hexdigest()[:16] == "3ed1090f51eb0a5f"
