"""Representation and attention probes against naive loops."""
import itertools

import numpy as np
import pytest

from nplace.probes import attention, representations


def naive_similarity(h_BTD):
  B, T, _ = h_BTD.shape
  per_seq = []
  for b in range(B):
    cos = [h_BTD[b, i] @ h_BTD[b, j] / np.linalg.norm(h_BTD[b, i]) / np.linalg.norm(h_BTD[b, j])
           for i, j in itertools.product(range(T), repeat=2) if i != j]
    per_seq.append(np.mean(cos))
  return np.mean(per_seq)


def test_similarity_and_rank_ratio_match_naive():
  rng = np.random.default_rng(0)
  # A shared direction makes the similarity far from 0; layer axis in front.
  h_LBTD = rng.normal(size=(3, 2, 9, 16)) + np.array([0.0, 0.5, 2.0])[:, None, None, None] * rng.normal(size=16)
  np.testing.assert_allclose(representations.similarity(h_LBTD), [naive_similarity(h) for h in h_LBTD],
                             rtol=1e-5, atol=1e-6)
  # centered: the batch's mean token removed first, so the shared direction no longer counts
  centered = [naive_similarity(h - h.reshape(-1, 16).mean(0)) for h in h_LBTD]
  np.testing.assert_allclose(representations.similarity(h_LBTD, centered=True), centered, rtol=1e-4, atol=1e-5)
  assert abs(centered[2]) < 0.2 < naive_similarity(h_LBTD[2])
  want = [np.mean([np.sum(h[b].mean(0) ** 2) / np.mean(np.sum(h[b] ** 2, -1)) for b in range(2)])
          for h in h_LBTD]
  np.testing.assert_allclose(representations.rank_ratio(h_LBTD), want, rtol=1e-5)


def test_moments_match_definitions():
  rng = np.random.default_rng(1)
  h_LBTD = rng.normal(size=(2, 3, 5, 8)) * 3 + 1
  m = representations.moments(h_LBTD)
  for l, h in enumerate(h_LBTD):
    tokens = h.reshape(-1, 8)
    np.testing.assert_allclose(m["mean_abs"][l], np.abs(h).mean(), rtol=1e-5)
    np.testing.assert_allclose(m["var_entry"][l], np.mean([t.var() for t in tokens]), rtol=1e-5)
    np.testing.assert_allclose(m["var_data"][l], np.mean([tokens[:, j].var() for j in range(8)]), rtol=1e-5)
    np.testing.assert_allclose(m["rms"][l], np.sqrt((h ** 2).mean()), rtol=1e-5)
    assert m["max_abs"][l] == pytest.approx(max(abs(x) for x in h.ravel()), rel=1e-6)


def test_attention_probes_match_naive():
  rng = np.random.default_rng(2)
  T = 6
  logits = np.where(np.tril(np.ones((T, T), bool)), rng.normal(size=(2, 3, 2, T, T)), -np.inf)
  probs = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
  tv, ent = [], []
  for l in range(2):
    rows = [(p[i, :i + 1], np.full(i + 1, 1 / (i + 1))) for p in probs[l].reshape(-1, T, T) for i in range(T)]
    tv.append(np.mean([0.5 * np.abs(a - c).sum() for a, c in rows]))
    ent.append(np.mean([-(a * np.log(a)).sum() for a, _ in rows]))
  np.testing.assert_allclose(attention.prefix_average_tv(probs), tv, rtol=1e-5)
  np.testing.assert_allclose(attention.entropy(probs), ent, rtol=1e-5)
  uniform = np.broadcast_to(np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None], (1, 1, 1, T, T))
  np.testing.assert_allclose(attention.prefix_average_tv(uniform), [0.0], atol=1e-7)
  np.testing.assert_allclose(attention.entropy(uniform), [np.mean(np.log(np.arange(1, T + 1)))], rtol=1e-6)
