"""The fused attention path (`model.attention_impl`): softmax(q k^T / sqrt(K)) v in one call
that never hands back the probabilities, so a backend with a kernel need not materialise them.

`xla` keeps Attention's einsum path, which sows the probabilities (the probes read them) and
can subtract the prefix average (`attention=centered`). The probe suite always runs that path
(nplace/probes/suite.py): it needs the probabilities, and forward-mode derivatives, which a
kernel with a custom VJP (cuDNN's) does not have.
"""
import jax
import jax.numpy as jnp



def enabled(cfg) -> bool:
  """`dot_product`, or `auto` wherever nothing needs the probabilities (softmax attention)."""
  return cfg.attention_impl == "dot_product" or (cfg.attention_impl == "auto" and cfg.attention == "softmax")


def attend(q_BTHK, k_BSHK, v_BSHK, platform: str):
  """Causal attention output [B, T, H, K]. On GPU in 16-bit, cuDNN's flash attention (the
  installed jax's `implementation=None` means XLA's, not a choice between them); elsewhere
  XLA's, which like the einsum path takes the softmax in float32."""
  half = q_BTHK.dtype in (jnp.bfloat16, jnp.float16)
  implementation = "cudnn" if platform == "gpu" and half else None
  return jax.nn.dot_product_attention(q_BTHK, k_BSHK, v_BSHK, is_causal=True, implementation=implementation)
