"""Representation probes on the residual stream h_l [B, T, d]: token similarity, the
rank-collapse ratio and the hidden-state moments (all O(T d) per sequence)."""
import jax.numpy as jnp


def similarity(h_XBTD, centered: bool = False):
  """Mean off-diagonal cosine between positions, averaged over sequences:
  S = (|sum_i u_i|^2 - T) / (T (T-1)) with u_i = h_i / |h_i|. Uncentered it is what RMSNorm
  sees, and a direction every token shares (the unigram direction) counts as cloning;
  `centered` first subtracts the mean token over the batch (all B*T positions), so only
  resemblance beyond that shared direction counts."""
  h = h_XBTD.astype(jnp.float32)
  if centered:
    h = h - jnp.mean(h, axis=(-3, -2), keepdims=True)
  T = h.shape[-2]
  u = h / jnp.maximum(jnp.linalg.norm(h, axis=-1, keepdims=True), 1e-30)
  total_XB = jnp.sum(jnp.square(jnp.sum(u, axis=-2)), -1)
  return jnp.mean((total_XB - T) / (T * (T - 1)), -1)


def rank_ratio(h_XBTD):
  """r = |mean_i h_i|^2 / mean_i |h_i|^2 per sequence, averaged (Dong et al.'s residual is sqrt(1-r))."""
  h = h_XBTD.astype(jnp.float32)
  mean_sq_XB = jnp.sum(jnp.square(jnp.mean(h, axis=-2)), -1)
  return jnp.mean(mean_sq_XB / jnp.mean(jnp.sum(h * h, -1), -1), -1)


def moments(h_XBTD):
  """mean |h|; entry-wise variance (over features, mean over tokens); data-wise variance
  (over all B*T tokens, mean over features); rms; the largest |h| (a "massive activation":
  what overflows float16 first). Leading axes X are kept."""
  h = h_XBTD.astype(jnp.float32)
  tokens_XND = h.reshape(*h.shape[:-3], -1, h.shape[-1])
  return {
      "mean_abs": jnp.mean(jnp.abs(h), axis=(-3, -2, -1)),
      "var_entry": jnp.mean(jnp.var(h, axis=-1), axis=(-2, -1)),
      "var_data": jnp.mean(jnp.var(tokens_XND, axis=-2), axis=-1),
      "rms": jnp.sqrt(jnp.mean(h * h, axis=(-3, -2, -1))),
      "max_abs": jnp.max(jnp.abs(h), axis=(-3, -2, -1)),
  }
