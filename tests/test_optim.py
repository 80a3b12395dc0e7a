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
  # a run shorter than its warmup: the warmup ends a step early, so the last step is still at the floor
  np.testing.assert_allclose([optim.schedule(o, 5)(i) for i in range(5)], [0.25, 0.5, 0.75, 1.0, 0.1], rtol=1e-6)


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
def test_weight_decay_touches_only_masked_params():
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


def schedule_at(o, steps, count):
  """The schedule's formula (test_schedule_warmup_then_cosine_to_floor checks optim.schedule
  against it), one step ahead."""
  n = count + 1
  if n <= o.warmup_steps:
    return o.lr * n / o.warmup_steps
  done = (n - o.warmup_steps) / (steps - o.warmup_steps)
  return o.lr * (o.min_lr_ratio + (1 - o.min_lr_ratio) * 0.5 * (1 + np.cos(np.pi * done)))


@pytest.mark.parametrize("clip_norm", [0.0, 0.5])
def test_make_is_clipped_adamw_with_masked_decay_against_numpy(clip_norm):
  """optim.make over three steps against AdamW written out in numpy: global-norm clipping (the
  gradients' norms are ~1-10, above 0.5), distinct b1 and b2, an eps that matters beside
  gradients of ~0.1, and decoupled decay on the kernel alone (not the bias, norm gain or
  embedding). Each of those dropped or swapped moves the params by more than rtol."""
  o = base_config().optim
  o.lr, o.warmup_steps, o.min_lr_ratio, o.clip_norm = 0.1, 2, 0.1, clip_norm
  o.b1, o.b2, o.eps, o.weight_decay = 0.8, 0.9, 1e-2, 0.3
  rng = np.random.default_rng(0)
  shapes = {"blocks": {"fc": {"kernel": (3, 4), "bias": (4,)}, "attn_norm": {"scale": (4,)}},
            "wte": {"embedding": (5, 4)}}
  decays = {"blocks": {"fc": {"kernel": True, "bias": False}, "attn_norm": {"scale": False}},
            "wte": {"embedding": False}}
  is_shape = lambda x: isinstance(x, tuple)
  params = jax.tree.map(lambda s: jnp.asarray(rng.normal(size=s), jnp.float32), shapes, is_leaf=is_shape)
  grads = [jax.tree.map(lambda p: jnp.asarray(scale * rng.normal(size=p.shape), jnp.float32), params)
           for scale in (1.0, 2.0, 0.1)]
  tx = optim.make(o, 10)
  state, got = tx.init(params), params
  for g in grads:
    updates, state = tx.update(g, state, got)
    got = optax.apply_updates(got, updates)

  p_L = [np.asarray(x, np.float64) for x in jax.tree.leaves(params)]
  decay_L = jax.tree.leaves(decays)
  m_L, v_L = [np.zeros_like(p) for p in p_L], [np.zeros_like(p) for p in p_L]
  for t, g in enumerate(grads, 1):
    g_L = [np.asarray(x, np.float64) for x in jax.tree.leaves(g)]
    norm = np.sqrt(sum((x ** 2).sum() for x in g_L))
    if clip_norm and norm > clip_norm:
      g_L = [x * clip_norm / norm for x in g_L]
    lr = schedule_at(o, 10, t - 1)
    for i, x in enumerate(g_L):
      m_L[i] = o.b1 * m_L[i] + (1 - o.b1) * x
      v_L[i] = o.b2 * v_L[i] + (1 - o.b2) * x ** 2
      adam = m_L[i] / (1 - o.b1 ** t) / (np.sqrt(v_L[i] / (1 - o.b2 ** t)) + o.eps)
      p_L[i] = p_L[i] - lr * (adam + o.weight_decay * decay_L[i] * p_L[i])
  for want, have in zip(p_L, jax.tree.leaves(got)):
    np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-6)
