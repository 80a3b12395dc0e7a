"""Jacobian probes against full `jax.jacfwd` Jacobians of the plain-jnp reference."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nplace.probes import jacobians
from nplace.probes import taps as taps_lib
from nplace.runtime import compiler_fixes
from conftest import tiny_config
import probe_reference as ref

K = 64  # Hutchinson probes


@pytest.fixture(scope="module")
def setup():
  # Sharp attention and K x L x B x H x T^2 = 294,912 > 32,768 probability entries under the
  # probes: the size past which XLA:CPU (jaxlib 0.10.2) miscomputes vmapped JVPs (compiler_fixes)
  cfg = tiny_config(placement="peri", norm="rmsnorm", n_layer=2, d_model=16, n_head=4).model
  params = ref.random_params(cfg, 0, std=0.6)
  tokens = jnp.asarray(np.random.default_rng(1).integers(0, cfg.vocab_size, (4, 12)))
  return cfg, params, tokens, taps_lib.zero_taps(cfg, tokens)


@pytest.fixture(scope="module")
def exact(setup):
  """Per sequence: J_{l->L} for l = 0..L-1 and each block's J_l, as [L, B, Td, Td]; and h_0..h_L."""
  cfg, params, tokens, _ = setup

  def jacobians_(params):
    hs = ref.hidden(params, tokens, cfg)
    per_seq = lambda f: jax.vmap(lambda h: ref.seq_jacobian(lambda x: f(x[None])[0], h))
    to_top = [per_seq(lambda h, l=l: ref.blocks_from(params, h, l, cfg))(hs[l]) for l in range(cfg.n_layer)]
    local = [per_seq(lambda h, l=l: ref.blocks_from(params, h, l, cfg, stop=l + 1))(hs[l])
             for l in range(cfg.n_layer)]
    return jnp.stack(to_top), jnp.stack(local), hs

  to_top, local, hs = jax.jit(jacobians_)(params)
  return np.asarray(to_top, np.float64), np.asarray(local, np.float64), hs


def hutchinson_bounds(J_LBNN, k):
  """Exact |J|_F / sqrt(n) per layer and 4 standard errors of the squared estimate:
  Var |J^T u|^2 = 2 |J J^T|_F^2 for Gaussian u, averaged over k probes and B sequences."""
  B, n = J_LBNN.shape[1], J_LBNN.shape[-1]
  frob2_L = np.mean(np.sum(J_LBNN ** 2, (-2, -1)), -1) / n
  JJt = J_LBNN @ np.swapaxes(J_LBNN, -1, -2)
  sem_L = np.sqrt(2 * np.sum(np.sum(JJt ** 2, (-2, -1)), -1) / k) / (B * n)
  return frob2_L, 4 * sem_L


@pytest.fixture(scope="module")
def probes(setup, exact):
  """(frobenius, spectral, local sensitivity) from one compiled call."""
  cfg, params, tokens, taps = setup
  hs = exact[2]
  intermediates = {"h0": (hs[0],), "blocks": {"h": (jnp.stack(hs[1:]),)}}

  @functools.partial(jax.jit, compiler_options=compiler_fixes.forward_mode())  # as the suite
  def run(params, intermediates):
    return (jacobians.frobenius(cfg, params, tokens, taps, jax.random.key(2, impl="rbg"), K),
            jacobians.spectral(cfg, params, tokens, taps, jax.random.key(3, impl="rbg"), 100),
            jacobians.local_sensitivity(cfg, params, intermediates, jax.random.key(4, impl="rbg"), K))

  return [np.asarray(x, np.float64) for x in run(params, intermediates)]


# Not slow: the fixtures it reads are the other tests' (it was marked when, first in the file, it
# was charged their compile); without it nothing in the fast lane reads `frobenius`.
def test_frobenius_within_hutchinson_error(exact, probes):
  frob2_L, tol_L = hutchinson_bounds(exact[0], K)
  assert np.all(np.abs(probes[0] ** 2 - frob2_L) <= tol_L), (probes[0] ** 2, frob2_L, tol_L)
  assert np.all(tol_L < 0.5 * frob2_L)  # the error bar is informative


def test_spectral_within_one_percent(exact, probes):
  want_L = np.mean(np.linalg.norm(exact[0], ord=2, axis=(-2, -1)), -1)
  np.testing.assert_allclose(probes[1], want_L, rtol=0.01)


def test_local_sensitivity_within_hutchinson_error(exact, probes):
  frob2_L, tol_L = hutchinson_bounds(exact[1] - np.eye(exact[1].shape[-1]), K)
  assert np.all(np.abs(probes[2] ** 2 - frob2_L) <= tol_L), (probes[2] ** 2, frob2_L, tol_L)


def test_local_sensitivity_runs_each_block_at_its_own_layer():
  """LNS scales F's input by 1/sqrt(l), l = 1..L: each block's |J_l - I| must be its layer's
  (a block run at l - 1 is another function, at l = 0 an infinite one)."""
  cfg = tiny_config(placement="lns", norm="rmsnorm", n_layer=2, d_model=16, n_head=4).model
  params = ref.random_params(cfg, 5, std=0.6)
  tokens = jnp.asarray(np.random.default_rng(6).integers(0, cfg.vocab_size, (2, 6)))

  @jax.jit
  def run(params):
    hs = ref.hidden(params, tokens, cfg)
    per_seq = lambda f: jax.vmap(lambda h: ref.seq_jacobian(lambda x: f(x[None])[0], h))
    local = jnp.stack([per_seq(lambda h, l=l: ref.blocks_from(params, h, l, cfg, stop=l + 1))(hs[l])
                       for l in range(cfg.n_layer)])
    intermediates = {"h0": (hs[0],), "blocks": {"h": (jnp.stack(hs[1:]),)}}
    return local, jacobians.local_sensitivity(cfg, params, intermediates, jax.random.key(7, impl="rbg"), K)

  local, got = (np.asarray(x, np.float64) for x in run(params))
  frob2_L, tol_L = hutchinson_bounds(local - np.eye(local.shape[-1]), K)
  assert np.all(np.abs(got ** 2 - frob2_L) <= tol_L), (got ** 2, frob2_L, tol_L)
