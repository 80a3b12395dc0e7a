"""The pieces a block is made of: the norm, causal attention and the MLP.

Each parameter carries logical axis names (`embed`, `heads`, `kv`, `mlp`, `vocab`,
`norm`, `position`; the scan adds `layers`) so that a mesh plus rules shards it.
Activations are pinned to their own names (`batch`, `length`, `act_*`) with
`sharding.constrain`: a no-op unless traced under a mesh and its rules
(nplace.runtime.sharding.activation_layout), so a run without a mesh computes exactly the same.
"""
import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from nplace.config import ModelConfig
from nplace.model import fused_attention
from nplace.runtime.sharding import constrain

_ZEROS = nn.initializers.zeros_init()
RESIDUAL = ("batch", "length", "act_embed")
HEADS = ("batch", "length", "act_heads", "act_kv")
QKV = ("q", "k", "v")  # the attention input projections, in the order the fused product stacks them


def weight_std(cfg, fan_in: int, output: bool = False) -> float:
  """The init scheme as data: gpt2 | normal | variance_preserving (nplace.probes.theory reads it too).
  `output`: an output projection, which gpt2 scales by 1/sqrt(2L)."""
  if cfg.init == "variance_preserving":
    return fan_in ** -0.5
  if output and cfg.init == "gpt2":
    return cfg.init_std / math.sqrt(2 * cfg.n_layer)
  return cfg.init_std


def weight_init(cfg, fan_in: int, output: bool = False, gain: float = 1.0):
  return nn.initializers.normal(gain * weight_std(cfg, fan_in, output))


def embed_std(cfg) -> float:
  # A one-hot input has fan-in 1, so a variance-preserving embedding has unit rms.
  return 1.0 if cfg.init == "variance_preserving" else cfg.init_std


def cesaro(T: int, dtype=jnp.float32) -> jax.Array:
  """C[i, j] = 1/(i+1) for j <= i: uniform causal attention, the prefix average."""
  causal_TT = jnp.tril(jnp.ones((T, T), dtype))
  return causal_TT / causal_TT.sum(-1, keepdims=True)


class Norm(nn.Module):
  """LayerNorm (centred, with bias), RMSNorm (gain only) or DyT (gamma tanh(alpha z) + beta,
  a scalar alpha, no statistics) over the last axis, computed in float32.

  Written out rather than taken from flax so the probes can tap its input `z`,
  its output `y` and its per-token scale `r` (the norm's backward factor is g/r; DyT has no r).
  """
  cfg: ModelConfig

  @nn.compact
  def __call__(self, z_BTD):
    cfg, D = self.cfg, z_BTD.shape[-1]
    z_BTD = self.perturb("z", z_BTD)
    z = z_BTD.astype(jnp.float32)
    if cfg.norm == "dyt":
      alpha = self.param("alpha", nn.with_logical_partitioning(nn.initializers.constant(0.5), ()), ())
      z = jnp.tanh(alpha * z)
    else:
      if cfg.norm == "layernorm":
        z = z - z.mean(-1, keepdims=True)
      r_BT = jnp.sqrt(jnp.mean(z * z, -1) + cfg.norm_eps)
      self.sow("intermediates", "r", r_BT)
      z = z / r_BT[..., None]
    y = z * self.param("scale", nn.with_logical_partitioning(nn.initializers.ones_init(), ("norm",)), (D,))
    if cfg.norm != "rmsnorm":
      y = y + self.param("bias", nn.with_logical_partitioning(_ZEROS, ("norm",)), (D,))
    return self.perturb("y", y.astype(cfg.dtype))


class Attention(nn.Module):
  """Multi-head causal self-attention; `centered` subtracts the prefix average. `qkv_norms`:
  per-head norms on those projections; `gain` multiplies the init of v and o, and
  model.attn_out_scale that of o; `depth_scaled`: o takes gpt2's 1/sqrt(2L). `attention_impl`
  picks the einsum path or the fused one (nplace/model/fused_attention.py).

  KV cache (decoding, the `cache` collection mutable): without `position`, a prefill, which
  stores the keys and values of all its S positions and attends as usual; with `position`,
  x holds the tokens from that position on, whose keys and values are written into the cache
  and whose queries attend to all S cached ones, later positions masked."""
  cfg: ModelConfig
  qkv_norms: tuple[str, ...] = ()
  gain: float = 1.0
  depth_scaled: bool = True

  @nn.compact
  def __call__(self, x_BTD, position=None):
    cfg = self.cfg
    H, K, D = cfg.n_head, cfg.d_model // cfg.n_head, cfg.d_model

    def project_in(name):
      gain = self.gain if name == "v" else 1.0
      return nn.DenseGeneral(
          (H, K), use_bias=cfg.use_bias, dtype=cfg.dtype, name=name,
          kernel_init=nn.with_logical_partitioning(weight_init(cfg, D, gain=gain), ("embed", "heads", "kv")),
          bias_init=nn.with_logical_partitioning(_ZEROS, ("heads", "kv")))

    if cfg.qkv_projection == "fused" and not self.is_initializing():  # init makes the three kernels
      projected = [constrain(x_BTHK, HEADS) for x_BTHK in self._fused_projections(x_BTD)]
    else:
      projected = [constrain(project_in(name)(x_BTD), HEADS) for name in QKV]
    q_BTHK, k_BSHK, v_BSHK = (Norm(cfg, name=f"{name}_norm")(x_BTHK) if name in self.qkv_norms else x_BTHK
                              for name, x_BTHK in zip(QKV, projected))
    if self.is_mutable_collection("cache") and not self.is_initializing():  # init makes params, not a cache
      k_BSHK, v_BSHK = self._cached(k_BSHK, v_BSHK, position)
    if position is not None:
      # the einsum path at any attention_impl: the kernels take no query offset. On the CPU the
      # fused path's causal halves give a query in the second half the same S keys and mask
      out_BTHK = self._probabilities_times_values(q_BTHK, k_BSHK, v_BSHK, position)
    elif fused_attention.enabled(cfg):
      out_BTHK = constrain(fused_attention.attend(q_BTHK, k_BSHK, v_BSHK, HEADS), HEADS)
    else:
      out_BTHK = self._probabilities_times_values(q_BTHK, k_BSHK, v_BSHK)
    out_BTD = nn.DenseGeneral(
        D, axis=(-2, -1), use_bias=cfg.use_bias, dtype=cfg.dtype, name="o",
        kernel_init=nn.with_logical_partitioning(
            weight_init(cfg, D, self.depth_scaled, self.gain * cfg.attn_out_scale), ("heads", "kv", "embed")),
        bias_init=nn.with_logical_partitioning(_ZEROS, ("embed",)))(out_BTHK)
    return constrain(out_BTD, RESIDUAL)

  def _fused_projections(self, x_BTD):
    """q, k and v as DenseGeneral computes each, from one product over their kernels stacked
    [D, I, H, K] (the parameters stay three: checkpoints and probes see no difference)."""
    params = self.variables["params"]
    kernel_DIHK = jnp.stack([params[name]["kernel"] for name in QKV], axis=1).astype(self.cfg.dtype)
    out_BTIHK = jnp.einsum("btd,dihk->btihk", x_BTD.astype(self.cfg.dtype), kernel_DIHK)
    if self.cfg.use_bias:
      out_BTIHK = out_BTIHK + jnp.stack([params[name]["bias"] for name in QKV]).astype(self.cfg.dtype)
    return [out_BTIHK[:, :, i] for i in range(len(QKV))]

  def _cached(self, k_BSHK, v_BSHK, position):
    """The cache's keys and values [B, S, H, K]: a prefill's own; a decode step's written at
    `position` (the prefill's rows from there on are overwritten before any query sees them)."""
    cached_k = self.variable("cache", "cached_k", lambda: k_BSHK)
    cached_v = self.variable("cache", "cached_v", lambda: v_BSHK)
    if position is not None:
      cached_k.value = jax.lax.dynamic_update_slice_in_dim(cached_k.value, k_BSHK, position, axis=1)
      cached_v.value = jax.lax.dynamic_update_slice_in_dim(cached_v.value, v_BSHK, position, axis=1)
    return cached_k.value, cached_v.value

  def _probabilities_times_values(self, q_BTHK, k_BSHK, v_BSHK, position=None):
    """The einsum path: the probabilities are materialised and sown (the probes read them).
    `position`: the queries' first position (decoding), else 0 with S = T."""
    first = 0 if position is None else position
    probs_BHTS = constrain(fused_attention.causal_probabilities(q_BTHK, k_BSHK, first),
                           ("batch", "act_heads", "length", None))
    self.sow("intermediates", "probs", probs_BHTS)
    if self.cfg.attention == "centered":
      C_TS = cesaro(k_BSHK.shape[1])
      probs_BHTS = probs_BHTS - (C_TS if position is None else
                                 jax.lax.dynamic_slice_in_dim(C_TS, position, q_BTHK.shape[1]))
    return constrain(jnp.einsum("bhts,bshk->bthk", probs_BHTS.astype(self.cfg.dtype), v_BSHK), HEADS)


class Mlp(nn.Module):
  """GELU (tanh approximation, as GPT-2) or SwiGLU feed-forward; `gain` multiplies the init of
  every matrix; `depth_scaled`: fc_out takes gpt2's 1/sqrt(2L)."""
  cfg: ModelConfig
  gain: float = 1.0
  depth_scaled: bool = True

  @nn.compact
  def __call__(self, x_BTD):
    cfg = self.cfg
    D, F = cfg.d_model, cfg.d_ff or 4 * cfg.d_model

    def dense(name, width, fan_in, axes, output=False):
      return nn.Dense(
          width, use_bias=cfg.use_bias, dtype=cfg.dtype, name=name,
          kernel_init=nn.with_logical_partitioning(weight_init(cfg, fan_in, output, self.gain), axes),
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
    return constrain(dense("fc_out", D, F, ("mlp", "embed"), output=self.depth_scaled)(hidden_BTF), RESIDUAL)
