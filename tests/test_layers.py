"""Layers in isolation: the norm, attention (softmax and centered) and the Cesàro matrix."""
import contextlib
import io

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.ad_checkpoint import print_saved_residuals

from nplace.config import ModelConfig
from nplace.model import decoder, layers
from nplace.probes import theory
import reference


def test_cesaro_rows_are_prefix_averages():
  C = np.asarray(layers.cesaro(5))
  x = np.arange(5.0) ** 2
  np.testing.assert_allclose(C @ x, np.cumsum(x) / np.arange(1, 6))


@pytest.mark.parametrize("norm", ("layernorm", "rmsnorm"))
def test_norm_equals_formula(make_config, norm):
  cfg = ModelConfig.of(make_config(norm=norm).model)
  z = 3.0 * jax.random.normal(jax.random.key(0), (2, 5, cfg.d_model)) + 1.5
  p = {"scale": jax.random.normal(jax.random.key(1), (cfg.d_model,))}
  if norm == "layernorm":
    p["bias"] = jax.random.normal(jax.random.key(2), (cfg.d_model,))
  got = layers.Norm(cfg).apply({"params": p}, z)
  np.testing.assert_allclose(got, reference.norm(p, z, norm, cfg.norm_eps), rtol=1e-5, atol=1e-5)


def attention_params(cfg, key, zero_qk=False):
  p = layers.Attention(cfg).init(key, jnp.zeros((1, 4, cfg.d_model)))["params"]
  p = jax.tree.map(lambda x: jax.random.normal(key, x.shape), nn.unbox(p))
  if zero_qk:
    p["q"] = jax.tree.map(jnp.zeros_like, p["q"])
  return p


def test_uniform_softmax_attention_is_the_prefix_average(make_config):
  cfg = ModelConfig.of(make_config(attention="softmax", use_bias=False).model)
  p = attention_params(cfg, jax.random.key(3), zero_qk=True)
  x = jax.random.normal(jax.random.key(4), (2, 9, cfg.d_model))
  v = jnp.einsum("btd,dhk->bthk", x, p["v"]["kernel"])
  want = jnp.einsum("bthk,hkd->btd", jnp.einsum("ts,bshk->bthk", layers.cesaro(9), v), p["o"]["kernel"])
  np.testing.assert_allclose(layers.Attention(cfg).apply({"params": p}, x), want, rtol=1e-5, atol=1e-5)


def test_centered_attention_on_uniform_weights_outputs_zero(make_config):
  cfg = ModelConfig.of(make_config(attention="centered", use_bias=False).model)
  p = attention_params(cfg, jax.random.key(5), zero_qk=True)
  x = jax.random.normal(jax.random.key(6), (2, 9, cfg.d_model))
  out = layers.Attention(cfg).apply({"params": p}, x)
  np.testing.assert_allclose(out, 0.0, atol=1e-5)
  softmax = ModelConfig.of(make_config(attention="softmax", use_bias=False).model)
  assert np.abs(layers.Attention(softmax).apply({"params": p}, x)).mean() > 0.1


def test_attention_equals_formula(make_config):
  for attention in ("softmax", "centered"):
    cfg = ModelConfig.of(make_config(attention=attention).model)
    p = attention_params(cfg, jax.random.key(7))
    x = 0.3 * jax.random.normal(jax.random.key(8), (2, 6, cfg.d_model))
    np.testing.assert_allclose(layers.Attention(cfg).apply({"params": p}, x),
                               reference.attention(p, x, cfg.n_head, attention == "centered"),
                               rtol=1e-5, atol=1e-5)


def test_attn_out_scale_multiplies_the_o_init_and_nothing_else(make_config):
  """Study B's matched-magnitude control: from the same key, o's kernels scaled exactly, every
  other parameter as the default's; the theory's attention gain follows o's variance."""
  cfgs = [ModelConfig.of(make_config(placement="post", attn_out_scale=s).model) for s in (1.0, 0.25)]
  base, scaled = (jax.tree_util.tree_flatten_with_path(decoder.init(cfg, jax.random.key(0)))[0] for cfg in cfgs)
  assert [path for path, _ in base] == [path for path, _ in scaled]
  o_kernels = 0
  for (path, want), (_, got) in zip(base, scaled):
    names = [k.key for k in path]
    is_o_kernel = names[-2:] == ["o", "kernel"]
    o_kernels += is_o_kernel
    np.testing.assert_array_equal(got, 0.25 * want if is_o_kernel else want, err_msg=str(names))
  assert o_kernels == 1  # the blocks are scanned: one stacked kernel holds every layer's o
  gains = [theory.branch_gains(cfg) for cfg in cfgs]
  np.testing.assert_allclose(gains[1]["attn"], 0.25 ** 2 * gains[0]["attn"])
  assert gains[1]["mlp_out"] == gains[0]["mlp_out"]


@pytest.mark.parametrize("mlp", ("gelu", "swiglu"))
def test_backward_keeps_one_copy_of_each_large_activation(make_config, mlp):
  """What remat none stores per layer: the MLP's pre- and post-activation (swiglu: and the
  gate), the attention's masked logits and probabilities; not every intermediate of GELU
  or of the softmax (each as large as these)."""
  cfg = ModelConfig.of(make_config(mlp=mlp, d_model=32, d_ff=96, attention_impl="xla").model)  # einsum path
  B, T = 2, 7
  x = jax.random.normal(jax.random.key(0), (B, T, cfg.d_model))

  def large_residuals(module, shape):
    v = module.init(jax.random.key(1), x)
    with contextlib.redirect_stdout(io.StringIO()) as out:  # jax prints one line per residual
      print_saved_residuals(lambda v, x: module.apply(v, x).sum(), v, x)
    return out.getvalue().count(f"f32[{','.join(map(str, shape))}]")

  assert large_residuals(layers.Mlp(cfg), (B, T, 96)) == (3 if mlp == "swiglu" else 2)
  assert large_residuals(layers.Attention(cfg), (B, cfg.n_head, T, T)) == 2
