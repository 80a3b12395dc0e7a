"""The fused attention path (`model.attention_impl`): softmax(q k^T / sqrt(K)) v in one call
that never hands back the probabilities, so a backend with a kernel need not materialise them.

`xla` keeps Attention's einsum path, which sows the probabilities (the probes read them) and
can subtract the prefix average (`attention=centered`). The probe suite always runs that path
(nplace/probes/suite.py): it needs the probabilities, and forward-mode derivatives, which the
kernels (custom VJPs) do not have.
"""
import jax
import jax.numpy as jnp

from nplace import sharding

SPLASH_BLOCK = 128  # splash attention's default block: the sequence must be a multiple of it


def enabled(cfg) -> bool:
  """`dot_product`; or `auto` when compiling for a GPU or TPU (where a fused kernel exists) and
  nothing needs the probabilities (softmax attention). On a CPU `auto` keeps the einsum path:
  XLA's dot_product_attention measured ~10% slower there (benchmarks, BUILD_NOTES)."""
  return cfg.attention_impl == "dot_product" or (
      cfg.attention_impl == "auto" and cfg.attention == "softmax" and sharding.platform() in ("gpu", "tpu"))


def attend(q_BTHK, k_BSHK, v_BSHK, logical_axes: tuple):
  """Causal attention output [B, T, H, K], laid out as `logical_axes` say.

  TPU (under the mesh, sequence whole on each chip, T a multiple of SPLASH_BLOCK): Pallas
  splash attention. GPU in 16-bit: cuDNN's flash attention (the installed jax's
  `implementation=None` means XLA's, not a choice between them). Elsewhere XLA's, which like
  the einsum path takes the softmax in float32."""
  platform, layout = sharding.platform(), sharding.activation_sharding(q_BTHK.shape, logical_axes)
  if platform == "tpu" and layout is not None and layout.spec[1] is None and q_BTHK.shape[1] % SPLASH_BLOCK == 0:
    return splash(q_BTHK, k_BSHK, v_BSHK, layout)
  half = q_BTHK.dtype in (jnp.bfloat16, jnp.float16)
  implementation = "cudnn" if platform == "gpu" and half else None
  return jax.nn.dot_product_attention(q_BTHK, k_BSHK, v_BSHK, is_causal=True, implementation=implementation)


def splash(q_BTHK, k_BSHK, v_BSHK, layout, interpret=False):
  """Pallas splash attention, one kernel per device on its block of sequences and heads
  (shard_map over `layout`); `interpret` runs the kernel on any backend (for tests)."""
  from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as kernels
  from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as masks

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
