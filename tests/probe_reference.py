"""Brute-force references for the probe tests, built on tests/reference.py's plain-jnp model."""
import jax
import jax.numpy as jnp
import numpy as np

from nplace.model import decoder
import reference


def layer(params, l):
  return jax.tree.map(lambda x: x[l], params["blocks"])


embed = reference.embed


def blocks_from(params, h, l, m, stop=None):
  """h_l -> h_stop (default h_L) through reference blocks l+1..stop."""
  for j in range(l, m.n_layer if stop is None else stop):
    h = reference.block(layer(params, j), h, m, m.dt, l=j + 1)
  return h


def hidden(params, tokens, m):
  """[h_0, h_1, ..., h_L]."""
  hs = [embed(params, tokens, m)]
  for l in range(m.n_layer):
    hs.append(blocks_from(params, hs[-1], l, m, stop=l + 1))
  return hs


def tail_loss(params, h, l, targets, m):
  """Mean cross-entropy as a function of the residual stream h_l."""
  logits = reference.head(params, blocks_from(params, h, l, m), m)
  return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), targets[..., None], -1))


def seq_jacobian(f, h_TD):
  """Full Jacobian of f: [T, d] -> [T, d] as a (T d) x (T d) matrix."""
  n = h_TD.size
  return jax.jacfwd(f)(h_TD).reshape(n, n)


def random_params(cfg, seed, std=0.3):
  """test_model.random_params drawn with numpy: jax.random would compile a sampler per leaf shape."""
  rng = np.random.default_rng(seed)
  shapes = decoder.abstract_params(cfg)
  return jax.tree.map(lambda x: jnp.asarray(std * rng.standard_normal(x.shape), x.dtype), shapes)
