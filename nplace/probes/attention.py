"""Attention probes on the sown softmax probabilities [L, B, H, T, T] (before the
`centered` ablation's subtraction): distance from the prefix average, and entropy."""
import jax.numpy as jnp

from nplace.model.layers import cesaro


def prefix_average_tv(probs_LBHTS):
  """Mean total-variation distance of every attention row from the matching row of the
  Cesaro matrix C (uniform causal attention); row 0 is 0 by construction."""
  C_TS = cesaro(probs_LBHTS.shape[-1], jnp.float32)
  tv_LBHT = 0.5 * jnp.sum(jnp.abs(probs_LBHTS.astype(jnp.float32) - C_TS), -1)
  return jnp.mean(tv_LBHT, axis=(1, 2, 3))


def entropy(probs_LBHTS):
  """Mean entropy of the attention rows in nats (uniform row i: ln(i+1))."""
  p = probs_LBHTS.astype(jnp.float32)
  plogp = jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0)
  return jnp.mean(-jnp.sum(plogp, -1), axis=(1, 2, 3))
