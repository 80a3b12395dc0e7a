"""Jacobian probes: J_{l->L} = dh_L/dh_l through the taps, and each block's |J_l - I|.

Norms are per sequence (the batch Jacobian is block-diagonal over sequences), reported as
root-mean-square singular values: |J|_F / sqrt(T d), averaged over sequences in square.
"""
import jax
import jax.numpy as jnp

from nplace.model.block import Block
from nplace.model.layers import RESIDUAL
from nplace.probes import taps as taps_lib
from nplace.runtime import sharding


def _top_fn(cfg, params, tokens_BT):
  """taps -> h_L, the last block's output (sown after its tap)."""
  return lambda taps: taps_lib.hidden_LBTD(taps_lib.forward(cfg, params, tokens_BT, taps)[1])[-1]


def _seq_sq(x_XBTD):
  """Squared norm per sequence over (T, d)."""
  return jnp.sum(jnp.square(x_XBTD.astype(jnp.float32)), axis=(-2, -1))


def frobenius(cfg, params, tokens_BT, taps, key, n_probes):
  """Hutchinson |J_{l->L}|_F / sqrt(T d) for l = 0..L-1, all layers from each probe.

  E|J^T u|^2 = tr(J J^T) = |J|_F^2 for Gaussian u, the same estimator as E|J v|^2; the
  transposed form (one VJP per probe) gives every layer's J^T u at once, where the
  forward form needs one JVP per probe *and* layer.
  """
  h_L_BTD, f_vjp = jax.vjp(_top_fn(cfg, params, tokens_BT), taps)
  u_EBTD = sharding.spread(jax.random.normal(key, (n_probes, *h_L_BTD.shape), h_L_BTD.dtype), RESIDUAL)
  ct = jax.vmap(lambda u: f_vjp(u)[0])(u_EBTD)
  L = ct["blocks"]["h"].shape[1]
  Jt_u_ELBTD = jnp.concatenate([ct["h0"][:, None], ct["blocks"]["h"][:, :L - 1]], axis=1)
  T, D = h_L_BTD.shape[-2:]
  return jnp.sqrt(jnp.mean(_seq_sq(Jt_u_ELBTD), axis=(0, 2)) / (T * D))


def spectral(cfg, params, tokens_BT, taps, key, n_iters):
  """Largest singular value of J_{l->L} for l = 0..L-1 by power iteration v <- J^T J v,
  one independent iteration per (layer, sequence), averaged over sequences."""
  h_L_BTD, f_jvp = jax.linearize(_top_fn(cfg, params, tokens_BT), taps)
  f_vjp = jax.linear_transpose(f_jvp, taps)
  L = taps["blocks"]["h"].shape[0]
  layers_L = jnp.arange(L)
  dtype = taps["blocks"]["h"].dtype  # the compute dtype (the output h_L is float32)
  J = jax.vmap(lambda l, v: f_jvp(taps_lib.place(taps, l, v)))
  Jt = jax.vmap(lambda l, u: taps_lib.pick(f_vjp(u)[0], l))

  def normalized(v_LBTD):  # kept in the taps' dtype: the tangents of a bfloat16 model are bfloat16
    v_LBTD = (v_LBTD * jax.lax.rsqrt(_seq_sq(v_LBTD))[..., None, None]).astype(dtype)
    return sharding.spread(v_LBTD, RESIDUAL)  # each device iterates for its share of the layers

  def step(_, v_LBTD):
    return normalized(Jt(layers_L, J(layers_L, v_LBTD)))

  v_LBTD = normalized(jax.random.normal(key, (L, *h_L_BTD.shape), dtype))
  v_LBTD = jax.lax.fori_loop(0, n_iters, step, v_LBTD)
  return jnp.mean(jnp.sqrt(_seq_sq(J(layers_L, v_LBTD))), axis=-1)


def local_sensitivity(cfg, params, intermediates, key, n_probes):
  """Hutchinson |J_l - I|_F / sqrt(T d) for each block l = 1..L: the model's own Block,
  vmapped over the stacked layer params at its recorded inputs h_{l-1}."""
  h_LBTD = taps_lib.hidden_LBTD(intermediates)
  h0_BTD = taps_lib.sown(intermediates["h0"])
  inputs_LBTD = jnp.concatenate([h0_BTD[None], h_LBTD[:-1]])
  block = Block(cfg)

  def branch_jvp(p_layer, l, h_BTD, v_BTD):
    _, Jv_BTD = jax.jvp(lambda h: block.apply({"params": p_layer}, h, l)[0], (h_BTD,), (v_BTD,))
    return Jv_BTD - v_BTD

  v_ELBTD = jax.random.normal(key, (n_probes, *inputs_LBTD.shape), inputs_LBTD.dtype)
  v_ELBTD = sharding.spread(v_ELBTD, (None, *RESIDUAL))
  per_layer = jax.vmap(branch_jvp)
  layers_L = jnp.arange(1, inputs_LBTD.shape[0] + 1)
  w_ELBTD = jax.vmap(lambda v: per_layer(params["blocks"], layers_L, inputs_LBTD, v))(v_ELBTD)
  T, D = h0_BTD.shape[-2:]
  return jnp.sqrt(jnp.mean(_seq_sq(w_ELBTD), axis=(0, 2)) / (T * D))
