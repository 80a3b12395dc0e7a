"""The pieces a block is made of: the norm, causal attention and the MLP.

Each parameter carries logical axis names (`embed`, `heads`, `kv`, `mlp`, `vocab`,
`norm`, `position`; the scan adds `layers`) so that a mesh plus rules shards it.
Activations are pinned to their own names (`batch`, `length`, `act_*`) with
`sharding.constrain`: a no-op unless traced under a mesh and its rules
(nplace.sharding.activation_layout), so a run without a mesh computes exactly the same.
"""
import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from nplace.sharding import constrain

_ZEROS = nn.initializers.zeros_init()
RESIDUAL = ("batch", "length", "act_embed")
HEADS = ("batch", "length", "act_heads", "act_kv")


def weight_std(cfg, fan_in: int, output: bool = False) -> float:
  """The init scheme as data: gpt2 | normal | variance_preserving (nplace.theory reads it too)."""
  if cfg.init == "variance_preserving":
    return fan_in ** -0.5
  if output and cfg.init == "gpt2":
    return cfg.init_std / math.sqrt(2 * cfg.n_layer)
  return cfg.init_std


def weight_init(cfg, fan_in: int, output: bool = False):
  return nn.initializers.normal(weight_std(cfg, fan_in, output))


def embed_std(cfg) -> float:
  # A one-hot input has fan-in 1, so a variance-preserving embedding has unit rms.
  return 1.0 if cfg.init == "variance_preserving" else cfg.init_std


def cesaro(T: int, dtype=jnp.float32) -> jax.Array:
  """C[i, j] = 1/(i+1) for j <= i: uniform causal attention, the prefix average."""
  causal_TT = jnp.tril(jnp.ones((T, T), dtype))
  return causal_TT / causal_TT.sum(-1, keepdims=True)


class Norm(nn.Module):
  """LayerNorm (centred, with bias) or RMSNorm (gain only), computed in float32.

  Written out rather than taken from flax so the probes can tap its input `z`,
  its output `y` and its per-token scale `r` (the norm's backward factor is g/r).
  """
  cfg: object

  @nn.compact
  def __call__(self, z_BTD):
    cfg = self.cfg
    z_BTD = self.perturb("z", z_BTD)
    z = z_BTD.astype(jnp.float32)
    if cfg.norm == "layernorm":
      z = z - z.mean(-1, keepdims=True)
    r_BT1 = jnp.sqrt(jnp.mean(z * z, -1, keepdims=True) + cfg.norm_eps)
    self.sow("intermediates", "r", r_BT1[..., 0])
    gain = nn.with_logical_partitioning(nn.initializers.ones_init(), ("norm",))
    y = z / r_BT1 * self.param("scale", gain, (cfg.d_model,))
    if cfg.norm == "layernorm":
      y = y + self.param("bias", nn.with_logical_partitioning(_ZEROS, ("norm",)), (cfg.d_model,))
    return self.perturb("y", y.astype(cfg.dtype))


class Attention(nn.Module):
  """Multi-head causal self-attention; `centered` subtracts the prefix average."""
  cfg: object

  @nn.compact
  def __call__(self, x_BTD):
    cfg = self.cfg
    H, K, D = cfg.n_head, cfg.d_model // cfg.n_head, cfg.d_model

    def project_in(name):
      return nn.DenseGeneral(
          (H, K), use_bias=cfg.use_bias, dtype=cfg.dtype, name=name,
          kernel_init=nn.with_logical_partitioning(weight_init(cfg, D), ("embed", "heads", "kv")),
          bias_init=nn.with_logical_partitioning(_ZEROS, ("heads", "kv")))

    q_BTHK, k_BSHK, v_BSHK = (constrain(project_in(n)(x_BTD), HEADS) for n in ("q", "k", "v"))
    T = x_BTD.shape[1]
    logits_BHTS = jnp.einsum("bthk,bshk->bhts", q_BTHK, k_BSHK) / math.sqrt(K)
    causal_TS = jnp.tril(jnp.ones((T, T), bool))
    logits_BHTS = jnp.where(causal_TS, logits_BHTS.astype(jnp.float32), -jnp.inf)
    with jax.softmax_custom_jvp(True):  # the backward keeps the probabilities, not exp(logits) too
      probs_BHTS = jax.nn.softmax(logits_BHTS, axis=-1)
    probs_BHTS = constrain(probs_BHTS, ("batch", "act_heads", "length", None))
    self.sow("intermediates", "probs", probs_BHTS)
    if cfg.attention == "centered":
      probs_BHTS = probs_BHTS - cesaro(T)
    out_BTHK = constrain(jnp.einsum("bhts,bshk->bthk", probs_BHTS.astype(cfg.dtype), v_BSHK), HEADS)
    out_BTD = nn.DenseGeneral(
        D, axis=(-2, -1), use_bias=cfg.use_bias, dtype=cfg.dtype, name="o",
        kernel_init=nn.with_logical_partitioning(weight_init(cfg, D, output=True),
                                                 ("heads", "kv", "embed")),
        bias_init=nn.with_logical_partitioning(_ZEROS, ("embed",)))(out_BTHK)
    return constrain(out_BTD, RESIDUAL)


class Mlp(nn.Module):
  """GELU (tanh approximation, as GPT-2) or SwiGLU feed-forward."""
  cfg: object

  @nn.compact
  def __call__(self, x_BTD):
    cfg = self.cfg
    D, F = cfg.d_model, cfg.d_ff or 4 * cfg.d_model

    def dense(name, width, fan_in, axes, output=False):
      return nn.Dense(
          width, use_bias=cfg.use_bias, dtype=cfg.dtype, name=name,
          kernel_init=nn.with_logical_partitioning(weight_init(cfg, fan_in, output), axes),
          bias_init=nn.with_logical_partitioning(_ZEROS, axes[-1:]))

    hidden = ("batch", "length", "act_mlp")
    up_BTF = constrain(dense("fc_in", F, D, ("embed", "mlp"))(x_BTD), hidden)
    # jax.checkpoint: the backward pass recomputes the elementwise activation from its input
    # instead of keeping its ~5 intermediates, each as large as the hidden layer.
    if cfg.mlp == "swiglu":
      gate_BTF = constrain(dense("fc_gate", F, D, ("embed", "mlp"))(x_BTD), hidden)
      hidden_BTF = jax.checkpoint(lambda gate, up: nn.silu(gate) * up)(gate_BTF, up_BTF)
    else:
      hidden_BTF = jax.checkpoint(lambda up: nn.gelu(up, approximate=True))(up_BTF)
    return constrain(dense("fc_out", D, F, ("mlp", "embed"), output=True)(hidden_BTF), RESIDUAL)
