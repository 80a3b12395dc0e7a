"""The optimizer: schedule shape, weight-decay mask, clipping."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from nplace.config import base_config
from nplace.model import decoder
from nplace.train import optim
from conftest import tiny_config


def test_schedule_warmup_then_cosine_to_floor():
  o = base_config().optim
  o.lr, o.warmup_steps, o.min_lr_ratio = 1.0, 10, 0.1
  lr = optim.schedule(o, 100)
  np.testing.assert_allclose([lr(0), lr(4), lr(9)], [0.1, 0.5, 1.0], rtol=1e-6)
  np.testing.assert_allclose(lr(99), 0.1, rtol=1e-5)
  np.testing.assert_allclose(lr(54), 0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * 45 / 90)), rtol=1e-5)


def test_decay_mask_defaults_and_switches():
  params = decoder.abstract_params(tiny_config(placement="peri", embed_norm=True).model)
  o = base_config().optim
  mask = optim.decay_mask(o, params)
  assert mask["blocks"]["attn"]["q"]["kernel"] and mask["blocks"]["mlp"]["fc_out"]["kernel"]
  assert not mask["blocks"]["attn"]["q"]["bias"]
  assert not mask["blocks"]["attn_norm_in"]["scale"] and not mask["final_norm"]["bias"]
  assert not mask["embed_norm"]["scale"] and not mask["wte"]["embedding"] and not mask["wpe"]["embedding"]
  o.decay_norms = o.decay_biases = o.decay_embeddings = True
  assert all(jax.tree.leaves(optim.decay_mask(o, params)))


def test_decay_mask_spares_rezero_scalars_and_qk_norms():
  o = base_config().optim
  rezero = optim.decay_mask(o, decoder.abstract_params(tiny_config(placement="rezero", qk_norm=True).model))
  assert not rezero["blocks"]["attn_alpha"] and not rezero["blocks"]["mlp_alpha"]
  assert not rezero["blocks"]["attn"]["q_norm"]["scale"] and rezero["blocks"]["attn"]["q"]["kernel"]


@pytest.mark.slow
def test_weight_decay_touches_only_masked_params_and_clip_bounds_update():
  cfg = tiny_config().model
  params = decoder.init(cfg, jax.random.key(0))
  o = base_config().optim
  o.lr, o.warmup_steps, o.weight_decay, o.clip_norm = 0.5, 0, 0.1, 1.0
  tx = optim.make(o, 10)
  zero_grads = jax.tree.map(jnp.zeros_like, params)
  updates, _ = tx.update(zero_grads, tx.init(params), params)
  # Zero gradient: the update is pure decay, -lr * wd * p where masked, 0 elsewhere.
  q = params["blocks"]["attn"]["q"]["kernel"]
  lr0 = optim.schedule(o, 10)(0)
  np.testing.assert_allclose(updates["blocks"]["attn"]["q"]["kernel"], -lr0 * 0.1 * q, rtol=1e-5)
  assert not np.any(updates["wte"]["embedding"]) and not np.any(updates["blocks"]["attn_norm"]["scale"])
  huge = jax.tree.map(lambda p: 1e6 * jnp.ones_like(p), params)
  clip = optim.make(o, 10).init(params)[0]
  clipped, _ = optax.clip_by_global_norm(1.0).update(huge, clip)
  np.testing.assert_allclose(optax.tree.norm(clipped), 1.0, rtol=1e-5)
