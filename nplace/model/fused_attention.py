"""How attention turns scores into outputs. `causal_probabilities` is the softmax both paths
share; the fused path (`model.attention_impl`) is softmax(q k^T / sqrt(K)) v in one call that
never hands back the probabilities, so a backend with a kernel need not materialise them.

`xla` keeps Attention's einsum path, which sows the probabilities (the probes read them) and
can subtract the prefix average (`attention=centered`). The probe suite always runs that path
(nplace/probes/suite.py): it needs the probabilities, and forward-mode derivatives, which the
kernels (custom VJPs) do not have.
"""
import math

import jax
import jax.numpy as jnp

from nplace.runtime import sharding

SPLASH_BLOCK = 128  # splash attention's default block: the sequence must be a multiple of it


def enabled(cfg) -> bool:
  """`dot_product`; or `auto` when nothing needs the probabilities (softmax attention)."""
  return cfg.attention_impl == "dot_product" or (cfg.attention_impl == "auto" and cfg.attention == "softmax")


def causal_probabilities(q_BTHK, k_BSHK, first_query: int = 0):
  """softmax(q k^T / sqrt(K)) [B, H, T, S] in float32, query t (at position first_query + t)
  seeing keys 0 .. first_query + t."""
  T, S, K = q_BTHK.shape[1], k_BSHK.shape[1], q_BTHK.shape[-1]
  logits_BHTS = jnp.einsum("bthk,bshk->bhts", q_BTHK, k_BSHK) / math.sqrt(K)
  causal_TS = jnp.arange(S) <= first_query + jnp.arange(T)[:, None]
  logits_BHTS = jnp.where(causal_TS, logits_BHTS.astype(jnp.float32), -jnp.inf)
  with jax.softmax_custom_jvp(True):  # the backward keeps the probabilities, not exp(logits) too
    return jax.nn.softmax(logits_BHTS, axis=-1)


def attend(q_BTHK, k_BSHK, v_BSHK, logical_axes: tuple):
  """Causal attention output [B, T, H, K], laid out as `logical_axes` say.

  TPU (under the mesh, sequence whole on each chip, T a multiple of SPLASH_BLOCK): Pallas
  splash attention. GPU in 16-bit: cuDNN's flash attention (the installed jax's
  `implementation=None` means XLA's, not a choice between them). CPU: `causal_halves`.
  Elsewhere XLA's, which like the einsum path takes the softmax in float32."""
  platform, layout = sharding.platform(), sharding.activation_sharding(q_BTHK.shape, logical_axes)
  if platform == "tpu" and layout is not None and layout.spec[1] is None and q_BTHK.shape[1] % SPLASH_BLOCK == 0:
    return splash(q_BTHK, k_BSHK, v_BSHK, layout)
  if platform == "cpu":
    return causal_halves(q_BTHK, k_BSHK, v_BSHK)
  half = q_BTHK.dtype in (jnp.bfloat16, jnp.float16)
  implementation = "cudnn" if platform == "gpu" and half else None
  return jax.nn.dot_product_attention(q_BTHK, k_BSHK, v_BSHK, is_causal=True, implementation=implementation)


def causal_halves(q_BTHK, k_BSHK, v_BSHK):
  """Causal attention in two parts: the first half of the queries against the first half of
  the keys, the second half against all. The fully masked quarter of the scores is never
  computed: XLA's CPU backend has no fused kernel that would skip it (its own
  dot_product_attention computes all of it), and there this is 1.02-1.11x faster per train
  step than the einsum path (BUILD_NOTES)."""
  half = q_BTHK.shape[1] // 2
  parts = ((q_BTHK[:, :half], k_BSHK[:, :half], v_BSHK[:, :half], 0), (q_BTHK[:, half:], k_BSHK, v_BSHK, half))
  return jnp.concatenate([jnp.einsum("bhts,bshk->bthk", causal_probabilities(q, k, first).astype(v.dtype), v)
                          for q, k, v, first in parts], axis=1)


def splash(q_BTHK, k_BSHK, v_BSHK, layout, interpret=False):
  """Pallas splash attention, one kernel per device on its block of sequences and heads
  (shard_map over `layout`); `interpret` runs the kernel on any backend (for tests)."""
  # Pallas' TPU kernels: imported when a TPU (or a test in interpret mode) runs them
  from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as kernels
  from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as masks  # as above

  def local(q_BTHK, k_BSHK, v_BSHK):
    _, T, H, K = q_BTHK.shape
    kernel = kernels.make_splash_mha(masks.MultiHeadMask([masks.CausalMask((T, T))] * H),
                                     head_shards=1, q_seq_shards=1, interpret=interpret)
    heads_first = lambda x_THK: x_THK.swapaxes(0, 1)
    one = lambda q, k, v: heads_first(kernel(heads_first(q), heads_first(k), heads_first(v)))
    return jax.vmap(one)(q_BTHK * K ** -0.5, k_BSHK, v_BSHK)  # the kernel does not scale

  spec = layout.spec
  return jax.shard_map(local, mesh=layout.mesh, in_specs=(spec,) * 3, out_specs=spec, check_vma=False)(
      q_BTHK, k_BSHK, v_BSHK)
